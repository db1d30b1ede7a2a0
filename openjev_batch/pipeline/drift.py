"""How far one question's answers moved between two runs (pure math: counts in, numbers out; no model, no
files). `compare OLD NEW` and `run --baseline` report these per question (pipeline/compare.py).

- **PSI** (population stability index), the drift statistic `--max-drift` gates on:
  Σᵢ (newᵢ − oldᵢ) · ln(newᵢ / oldᵢ) over the options' shares, each share floored at `EPS` so an option
  one run never chose stays finite. The threshold in use since credit scoring: below 0.1 stable, 0.1–0.25
  a moderate shift, above `PSI_ALERT` = 0.25 a major one (Yurdakul 2018, "Statistical properties of the
  population stability index"). PSI is the symmetric Kullback–Leibler divergence of the two shares.
- **Jensen–Shannon divergence**, base 2 (0: the same shares, 1: no option in common), unfloored: a bounded
  second view for shares with options one side never chose.
- **χ² test of homogeneity** on the 2 × K table of counts (options neither run chose left out): its p-value
  is how likely shares this far apart are by chance when both runs draw from one distribution. With many
  rows a tiny shift is "significant"; the PSI says whether it is large.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

EPS = 1e-4  # the floor of a share in the PSI (1 in 10,000 rows)
PSI_ALERT = 0.25  # `--max-drift`'s default: a major shift


def shares(counts: Sequence[float]) -> np.ndarray:
    """Counts as shares of their total (all zero: zeros)."""
    c = np.asarray(counts, dtype=float)
    total = c.sum()
    return c / total if total > 0 else np.zeros_like(c)


def psi(old: Sequence[float], new: Sequence[float], eps: float = EPS) -> float:
    """The PSI of two count vectors over the same options (the module docstring)."""
    p, q = np.maximum(shares(old), eps), np.maximum(shares(new), eps)
    return float(np.sum((q - p) * np.log(q / p)))


def js_divergence(old: Sequence[float], new: Sequence[float]) -> float:
    """The Jensen–Shannon divergence (base 2) of two count vectors' shares."""
    p, q = shares(old), shares(new)
    m = (p + q) / 2

    def kl(a: np.ndarray) -> float:
        nz = a > 0
        return float(np.sum(a[nz] * np.log2(a[nz] / m[nz])))

    return max(0.0, (kl(p) + kl(q)) / 2)


def chi2(old: Sequence[float], new: Sequence[float]) -> tuple[float, int, float]:
    """(statistic, degrees of freedom, p-value) of the χ² test of homogeneity of two count vectors, the
    options neither has left out; (0, 0, 1) when fewer than two options or either run has no rows."""
    table = np.array([old, new], dtype=float)
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2 or (table.sum(axis=1) == 0).any():
        return 0.0, 0, 1.0
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / table.sum()
    stat = float(np.sum((table - expected) ** 2 / expected))
    dof = table.shape[1] - 1
    from scipy.stats import chi2 as dist  # lazy: scipy loads only where a comparison is made

    return stat, dof, float(dist.sf(stat, dof))


@dataclass(frozen=True)
class Drift:
    """One question's drift between two runs: its options, their counts in each, and the statistics."""

    options: tuple[str, ...]
    old: tuple[int, ...]
    new: tuple[int, ...]
    psi: float
    js: float
    chi2: float
    dof: int
    p_value: float

    def over(self, max_psi: float) -> bool:
        """Whether this question moved more than `max_psi` (PSI)."""
        return not math.isnan(self.psi) and self.psi > max_psi


def drift(options: Sequence[str], old: Sequence[int], new: Sequence[int]) -> Drift:
    """The drift of one question's answer counts, old and new, aligned with `options`."""
    stat, dof, p = chi2(old, new)
    empty = not sum(old) or not sum(new)  # nothing to compare against: no statistic
    return Drift(
        tuple(options), tuple(int(x) for x in old), tuple(int(x) for x in new),
        math.nan if empty else psi(old, new), math.nan if empty else js_divergence(old, new), stat, dof, p,
    )  # fmt: skip
