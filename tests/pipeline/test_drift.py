"""pipeline/drift.py: the drift statistics equal an independent scipy computation (no model)."""

import math

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon
from scipy.stats import chi2_contingency, entropy

from openjev_batch.pipeline.drift import EPS, PSI_ALERT, chi2, drift, js_divergence, psi

CASES = [
    ([50, 30, 20], [45, 35, 20]),
    ([900, 80, 20], [600, 300, 100]),
    ([10, 0, 5, 5], [3, 7, 0, 10]),
    ([1, 1], [1000, 1]),
]


def _floored(counts):
    p = np.asarray(counts, float) / sum(counts)
    return np.maximum(p, EPS)


@pytest.mark.parametrize(("old", "new"), CASES)
def test_psi_is_the_symmetric_kl_divergence_scipy_computes(old, new):
    p, q = _floored(old), _floored(new)
    # PSI = KL(q‖p) + KL(p‖q) of the floored shares; scipy's entropy renormalises, so give it the raw sums
    want = float(np.sum(q * np.log(q / p)) + np.sum(p * np.log(p / q)))
    assert psi(old, new) == pytest.approx(want, rel=1e-12)
    # and against scipy where the floors leave the shares summing to 1 (no option at zero)
    if 0 not in old and 0 not in new:
        assert psi(old, new) == pytest.approx(entropy(q, p) + entropy(p, q), rel=1e-9)


@pytest.mark.parametrize(("old", "new"), CASES)
def test_jensen_shannon_equals_scipy(old, new):
    assert js_divergence(old, new) == pytest.approx(jensenshannon(old, new, base=2) ** 2, abs=1e-12)


@pytest.mark.parametrize(("old", "new"), CASES)
def test_chi2_equals_scipys_contingency_test(old, new):
    table = np.array([old, new])
    table = table[:, table.sum(axis=0) > 0]
    want = chi2_contingency(table, correction=False)
    stat, dof, p = chi2(old, new)
    assert (stat, dof) == (pytest.approx(want.statistic, rel=1e-12), want.dof)
    assert p == pytest.approx(want.pvalue, rel=1e-9)


def test_identical_shares_do_not_drift_and_a_big_shift_passes_the_threshold():
    same = drift(["a", "b"], [40, 60], [400, 600])
    assert same.psi == pytest.approx(0.0, abs=1e-15) and same.js == pytest.approx(0.0, abs=1e-15)
    assert same.p_value == pytest.approx(1.0) and not same.over(PSI_ALERT)
    moved = drift(["a", "b"], [90, 10], [40, 60])
    assert moved.psi > PSI_ALERT and moved.over(PSI_ALERT) and moved.p_value < 1e-9
    assert (moved.options, moved.old, moved.new) == (("a", "b"), (90, 10), (40, 60))


def test_a_side_without_rows_has_no_statistic():
    d = drift(["a", "b"], [0, 0], [3, 4])
    assert math.isnan(d.psi) and math.isnan(d.js) and not d.over(0.0)
    assert (d.chi2, d.dof, d.p_value) == (0.0, 0, 1.0)
    one_option = chi2([5], [7])
    assert one_option == (0.0, 0, 1.0)
