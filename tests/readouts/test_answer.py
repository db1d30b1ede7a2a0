import math

import pytest

from openjev_batch.readouts.label_logprobs.answer import confidence, label_mass, read_out, softmax
from openjev_batch.readouts.label_logprobs.questions import QuestionSpec


def q(type_, k):
    names = ("true", "false") if type_ == "noul" else tuple(str(i) for i in range(k))
    return QuestionSpec("q", type_, "?", names, (None,) * len(names))


def test_confidence_hand_computed():
    # H = -(0.9 ln 0.9 + 2 * 0.05 ln 0.05) = 0.39440; ln 3 = 1.09861; 1 - H/ln3 = 0.64099
    assert confidence([0.9, 0.05, 0.05]) == pytest.approx(0.64099, abs=1e-4)
    assert confidence([1.0, 0.0]) == 1.0
    assert confidence([0.25] * 4) == pytest.approx(0.0, abs=1e-12)


def test_softmax_is_stable_and_renormalises():
    p = softmax([-1000.0, -1001.0])
    assert p[0] == pytest.approx(1 / (1 + math.exp(-1)))
    assert sum(p) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        softmax([0.0, float("nan")])
    with pytest.raises(ValueError):
        softmax([0.0, float("-inf")])


def test_label_mass_is_prob_on_valid_labels():
    assert label_mass([math.log(0.3), math.log(0.2)]) == pytest.approx(0.5)
    assert label_mass([-1000.0, -1000.0]) == pytest.approx(2 * math.exp(-1000.0), rel=1e-9)


def test_read_out_noul_choice_score():
    a = read_out(q("noul", 2), [math.log(0.6), math.log(0.2)])
    assert a.p_true == pytest.approx(0.75) and a.answer == "true" and a.score is None
    assert a.label_mass == pytest.approx(0.8)
    s = read_out(q("score", 3), [math.log(0.2), math.log(0.3), math.log(0.5)])
    assert s.score == pytest.approx(0 * 0.2 + 1 * 0.3 + 2 * 0.5) and s.answer == "2" and s.p_true is None
    c = read_out(q("choice", 3), [math.log(0.1), math.log(0.7), math.log(0.2)])
    assert c.answer == "1" and c.probs == pytest.approx((0.1, 0.7, 0.2))
    with pytest.raises(ValueError, match="3 options"):
        read_out(q("choice", 3), [0.0, 0.0])
