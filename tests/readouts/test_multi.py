"""Issue 32.3: `type: multi`: K labels, each a yes/no item on the row's one prefix; the output has each
label's P(yes) and the chosen set at the question's threshold (default 0.5; a calibration file may set it)."""

import json
import math
import re

import pytest

from openjev_batch.errors import ConfigError
from openjev_batch.readouts.label_logprobs.items import combine, items
from openjev_batch.readouts.label_logprobs.questions import QuestionError, parse_question

LABELS = {"billing": "Money, invoices, refunds.", "outage": None, "login": "Signing in."}
MULTI = {"type": "multi", "instructions": "Which topics does the ticket raise?", "criteria": LABELS}
TEXTS = ["I was charged twice and now I cannot log in", "The whole site is down"]


@pytest.mark.parametrize(
    "raw,match",
    [
        ({**MULTI, "criteria": {}}, r"questions.m.criteria: multi needs 1–64 labels, got 0"),
        ({**MULTI, "criteria": {f"l{i}": None for i in range(65)}}, "multi needs 1–64 labels, got 65"),
        ({**MULTI, "criteria": ["a", "b"]}, "multi needs an object mapping label name"),
        ({**MULTI, "threshold": 1.5}, r"questions.m.threshold"),
        ({**MULTI, "threshold": -0.1}, r"questions.m.threshold: Input should be greater than or equal to 0"),
        # NaN and infinity once said "less than or equal to 1" (hostile trial)
        ({**MULTI, "threshold": float("nan")}, r"questions.m.threshold: Input should be a finite number"),
        ({**MULTI, "threshold": float("inf")}, r"questions.m.threshold: Input should be a finite number"),
        ({**MULTI, "threshold": True}, r"questions.m.threshold: expected a P\(yes\) in \[0, 1\], not true"),
        ({"type": "choice", "instructions": "x", "criteria": {"a": None, "b": None}, "threshold": 0.3},
         r"questions.m.threshold: only multi questions"),
    ],
)  # fmt: skip
def test_bad_multi_questions_name_the_field(raw, match):
    q = parse_question("m", raw)
    assert isinstance(q, QuestionError)
    assert re.search(match, q.error), q.error


def test_each_label_is_one_yes_no_item_and_the_chosen_set_uses_the_threshold():
    q = parse_question("m", {**MULTI, "threshold": 0.3})
    its = items(q)
    assert [it.bid for it in its] == ["m", "m\x1f1", "m\x1f2"]
    assert [it.shown.type for it in its] == ["noul"] * 3 and "Label: billing: Money" in its[
        0
    ].shown.instructions
    c = combine(
        q, [[math.log(0.8), math.log(0.2)], [math.log(0.1), math.log(0.9)], [math.log(0.35), math.log(0.65)]]
    )
    assert c.answer.probs == pytest.approx((0.8, 0.1, 0.35)) and c.chosen == ["billing", "login"]
    assert c.answer.answer is None and c.order_spread is None
    assert combine(parse_question("m", MULTI), [[0.0, -1.0]] * 3).chosen == list(LABELS)  # default 0.5


def test_a_one_label_multi_question_is_its_yes_no_item():
    """1–64 labels: one label failed every row ("got 2 label logprobs for 1 options", hostile trial) since a
    one-item question was read out as the multi question itself."""
    q = parse_question("m", {**MULTI, "criteria": {"spam": None}})
    (it,) = items(q)
    assert it.shown.type == "noul"
    c = combine(q, [[math.log(0.7), math.log(0.3)]])
    assert c.answer.probs == pytest.approx((0.7,)) and c.chosen == ["spam"] and c.answer.answer is None


def test_threshold_bounds_are_closed_as_a_calibration_files_are(tmp_path):
    """A question's threshold and a calibration file's are both in [0, 1]: the question refused 0 and 1 (open
    bounds) while the file took them, and a threshold of 0 was read as unset (0.5)."""
    from openjev_batch.readouts.label_logprobs.calibration import load_calibration

    low = [[math.log(0.01), math.log(0.99)]] * 3
    assert combine(parse_question("m", {**MULTI, "threshold": 0}), low).chosen == list(LABELS)
    assert combine(parse_question("m", {**MULTI, "threshold": 1}), low).chosen == []
    f = tmp_path / "c.json"
    for th, ok in ((0, True), (1, True), (1.01, False), (-0.01, False), (True, False)):
        doc = {"format": "openjev-calibration/1",
               "questions": {"m": {"type": "multi", "options": list(LABELS), "threshold": th}}}  # fmt: skip
        f.write_text(json.dumps(doc))
        if ok:
            assert load_calibration(f).entries["m"].threshold == th
        else:
            with pytest.raises(ConfigError, match=r"threshold must be in \[0, 1\]"):
                load_calibration(f)


def test_multi_p_yes_equals_the_same_yes_no_question_asked_alone(tiny_model, tmp_path):
    """Each label's P(yes) is exactly the p_true of the item's yes/no question asked on its own (the same
    suffix on the same prefix): the items are real branches, not an approximation."""
    from openjev_batch import Classifier

    q = parse_question("m", MULTI)
    alone = {f"l{k}": {"type": "noul", "instructions": it.shown.instructions, "criteria": {"true": "Yes", "false": "No"}}
             for k, it in enumerate(items(q))}  # fmt: skip
    with Classifier(tiny_model, "hf", device="cpu") as clf:
        multi = clf.run(TEXTS, {"m": MULTI}, output="polars").to_dicts()
        single = clf.run(TEXTS, alone, output="polars").to_dicts()
    assert [r["question_id"] for r in multi] == ["m", "m"] and all(r["error"] is None for r in multi)
    for i, r in enumerate(multi):
        p_yes = [single[i * 3 + k]["p_true"] for k in range(3)]
        assert r["probs"] == pytest.approx(p_yes, abs=1e-6)
        assert r["chosen"] == [lb for lb, p in zip(LABELS, p_yes, strict=True) if p >= 0.5]
        assert r["options"] == list(LABELS) and r["answer"] is None
        assert r["branch_tokens"] == sum(single[i * 3 + k]["branch_tokens"] for k in range(3))
    # a calibration file may set the threshold
    cal = tmp_path / "c.json"
    doc = {
        "format": "openjev-calibration/1",
        "questions": {"m": {"type": "multi", "options": list(LABELS), "threshold": 0.01}},
    }
    cal.write_text(json.dumps(doc))
    with Classifier(tiny_model, "hf", device="cpu", calibration=cal) as clf:
        got = clf.run(TEXTS, {"m": MULTI}, output="polars").to_dicts()
    assert [r["chosen"] for r in got] == [list(LABELS)] * 2
    doc["questions"]["m"]["threshold"] = 2
    cal.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="questions.m: .*threshold must be in"):
        Classifier(tiny_model, "hf", device="cpu", calibration=cal)


def test_show_prompt_shows_each_item(tmp_path):
    from conftest import cli, write_jsonl

    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": TEXTS[0], "questions": {"m": MULTI}}])
    r = cli("run", src, "-m", "qwen3-tokenizer", "--show-prompt", "1")
    assert r.returncode == 0, r.stderr
    assert (
        "─── m item 3/3 (multi)" in r.stdout
        and "Label: login: Signing in.\nDoes this label apply?" in r.stdout
    )


def test_the_answers_table_counts_the_rows_that_chose_each_label():
    """A multi question has no single `answer`: the end-of-run answers table counted 0 rows for every label
    (new-user trial, 2026-12-05). Each chosen label is counted, with its mean P(yes) as the confidence."""
    import pyarrow as pa

    from openjev_batch.pipeline.summary import AnswerCounts
    from openjev_batch.readouts.label_logprobs import LabelLogprobs
    from openjev_batch.readouts.label_logprobs.questions import shared_questions

    readout = LabelLogprobs(shared_questions({"m": MULTI}, "test"))
    opts = list(LABELS)
    part = pa.table({
        "question_id": ["m", "m", "m", "m"], "type": ["multi"] * 4, "options": [opts] * 4,
        "answer": pa.array([None] * 4, pa.string()), "confidence": pa.array([None] * 4, pa.float64()),
        "probs": [[0.9, 0.2, 0.7], [0.6, 0.1, 0.2], [0.1, 0.1, 0.1], [0.99, 0.99, 0.99]],
        "chosen": [["billing", "login"], ["billing"], [], None],
        "error": [None, None, None, "row r3: state: missing"],
    })  # fmt: skip
    counts = AnswerCounts()
    counts.add(readout, part)
    (dist,) = counts.distribution().values()
    assert [(o, n) for o, n, _ in dist] == [("billing", 2), ("outage", 0), ("login", 1)]
    assert math.isclose(dist[0][2], 0.75) and math.isclose(dist[2][2], 0.7) and dist[1][2] is None
    # issue 42.3: the table's share is of rows (the 3 answered, the one that chose none too), not of the 3
    # chosen labels, and the question is known as multi (its table says "mean P(yes) when chosen")
    assert counts.answered_rows() == {"m": 3} and counts.multi() == ("m",) and counts.abstained() == {}
    counts.add(readout, part)  # a second part (a resumed chunk) adds
    assert counts.answered_rows() == {"m": 6}
