"""Issue 32.2: order-debiased choice and score answers: `debias: K` / `--debias-order K` show the options in
K cyclic orders, each one more suffix on the same prefix; probs averaged by option; `order_spread`."""

import json
import math
import re

import pytest
from conftest import EXAMPLES, cli, write_jsonl

from openjev_batch.errors import ConfigError
from openjev_batch.readouts.label_logprobs.items import combine, items
from openjev_batch.readouts.label_logprobs.questions import QuestionError, parse_question

CHOICE = {"type": "choice", "instructions": "Which team?",
          "criteria": {"billing": "Money.", "tech": None, "sales": "Buying more.", "other": None}}  # fmt: skip
TEXTS = ["I was charged twice", "The app crashes on start"]


def test_a_model_that_always_answers_a_learns_nothing_after_debiasing():
    q = parse_question("t", {**CHOICE, "debias": 4})
    assert [it.shift for it in items(q)] == [0, 1, 2, 3]
    assert [it.shown.options[0] for it in items(q)] == ["billing", "tech", "sales", "other"]
    first = [math.log(0.7)] + [math.log(0.1)] * 3  # letter A, whatever it shows
    c = combine(q, [first] * 4)
    assert c.answer.probs == pytest.approx([0.25] * 4) and c.order_spread == pytest.approx(0.6)
    # two orders of four options: shifted by half, so every option moves two letters
    assert [it.shift for it in items(parse_question("t", {**CHOICE, "debias": 2}))] == [0, 2]
    s = parse_question(
        "s", {"type": "score", "instructions": "?", "criteria": ["lo", "mid", "hi"], "debias": 3}
    )
    c = combine(s, [[math.log(0.6), math.log(0.3), math.log(0.1)]] * 3)
    assert c.answer.options == ("0", "1", "2") and c.answer.score == pytest.approx(
        1.0
    )  # levels keep their order
    bad = parse_question("t", {**CHOICE, "debias": 5})
    assert isinstance(bad, QuestionError) and bad.error == (
        "questions.t.debias: 5 orders of 4 options; at most one order per option"
    )
    assert isinstance(parse_question("n", {"type": "noul", "instructions": "?", "debias": 2}), QuestionError)


def test_debiased_probs_are_the_mean_of_the_orders_asked_alone(tiny_model):
    """`--debias-order 2` equals asking the question twice, the second time with the options shifted, and
    averaging by option: the extra order is a real branch on the same prefix."""
    from openjev_batch import Classifier

    shifted = {
        **CHOICE,
        "criteria": dict(list(CHOICE["criteria"].items())[2:] + list(CHOICE["criteria"].items())[:2]),
    }
    with Classifier(tiny_model, "hf", device="cpu", debias_order=2) as clf:
        got = clf.run(TEXTS, {"t": CHOICE}, output="polars").to_dicts()
    with Classifier(tiny_model, "hf", device="cpu") as clf:
        plain = clf.run(TEXTS, {"a": CHOICE, "b": shifted}, output="polars").to_dicts()
        assert plain[0]["order_spread"] is None
    names = list(CHOICE["criteria"])
    for i, r in enumerate(got):
        a, b = plain[2 * i], plain[2 * i + 1]
        by_b = dict(zip(b["options"], b["probs"], strict=True))
        want = [(p + by_b[o]) / 2 for o, p in zip(a["options"], a["probs"], strict=True)]
        assert r["options"] == names and r["probs"] == pytest.approx(want, abs=1e-6)
        spread = max(abs(p - by_b[o]) for o, p in zip(a["options"], a["probs"], strict=True))
        assert r["order_spread"] == pytest.approx(spread, abs=1e-6)
        assert r["answer"] == names[max(range(4), key=want.__getitem__)]
        assert r["branch_tokens"] == a["branch_tokens"] + b["branch_tokens"]
    with pytest.raises(ConfigError, match=r"--debias-order 5 is larger than its 4 options"):
        Classifier(tiny_model, "hf", device="cpu", debias_order=5).run(TEXTS, {"t": CHOICE})


def test_debias_order_in_the_plan_the_resume_key_and_row_errors(tiny_model, tmp_path):
    q = tmp_path / "q.json"
    q.write_text(json.dumps({"t": CHOICE, "r": {"type": "noul", "instructions": "Refund?"}}))
    args = ["run", EXAMPLES / "tickets.jsonl", "-q", q, "-m", tiny_model, "--dry-run"]
    one, two = cli(*args), cli(*args, "--debias-order", "2")
    assert one.returncode == two.returncode == 0, two.stderr
    branches = [int(re.search(r"│ branches\s+│ ([\d,]+)", r.stdout)[1].replace(",", "")) for r in (one, two)]
    assert branches[1] == branches[0] * 3 // 2  # the choice question's branches doubled, the noul's not
    # a row's own question with fewer options than the orders: that question's error, the others answered
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": "hi", "questions": {
        "two": {"type": "choice", "instructions": "?", "criteria": {"x": None, "y": None}},
        "four": CHOICE}}])  # fmt: skip
    out = tmp_path / "o.jsonl"
    r = cli("run", src, "-m", tiny_model, "-b", "hf", "-o", out, "--debias-order", "3", "--no-progress")
    assert r.returncode == 3, r.stderr
    rows = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert (
        rows[0]["error"]
        == "row a: questions.two: --debias-order 3 is larger than its 2 options (at most one order per option; "
        "a question's own `debias: 2` overrides the job's)"
    )
    assert rows[1]["error"] is None and rows[1]["order_spread"] is not None
    manifest = json.loads(out.with_name("o.jsonl.manifest.json").read_text())
    assert '"debias_order": 3' in json.dumps(manifest)


def test_eval_passes_debias_order_to_its_job(tmp_path):
    """`eval --debias-order K` (the before/after table in evals/) runs the eval's choice questions debiased."""
    from openjev_batch.evaluation.run import build_eval_config

    cfg = build_eval_config(input=EXAMPLES / "boolq_sample.jsonl", output_dir=tmp_path, model="m", backend="hf",
                            debias_order=2)  # fmt: skip
    assert cfg.job(tmp_path / "q.jsonl", tmp_path / "p.parquet").readout_options.debias_order == 2
    with pytest.raises(ConfigError, match="debias_order"):
        build_eval_config(input=EXAMPLES / "boolq_sample.jsonl", output_dir=tmp_path, model="m", backend="hf",
                          debias_order=0)  # fmt: skip


def test_debias_true_is_refused_not_read_as_one_order(tmp_path):
    """A bool is an int to pydantic: `debias: true` was K = 1 (no debiasing, silently). The issue defines
    `debias: K`, a count of orders: true/false are refused with what to give instead."""
    from openjev_batch.config import build_config

    for v in (True, False):
        bad = parse_question("t", {**CHOICE, "debias": v})
        assert isinstance(bad, QuestionError)
        assert bad.error == (
            f"questions.t.debias: expected the number of option orders K (1 up to the option count), "
            f"not {str(v).lower()}"
        )
    assert parse_question("t", {**CHOICE, "debias": 1}).debias == 1  # one order: plain, on purpose
    with pytest.raises(ConfigError, match="debias_order: expected the number of option orders"):
        build_config(input=EXAMPLES / "tickets.jsonl", model="m", backend="hf", debias_order=True)
    q = tmp_path / "q.yaml"
    q.write_text("t: {type: choice, instructions: pick one, criteria: {a: null, b: null}, debias: true}\n")
    r = cli("run", EXAMPLES / "tickets.jsonl", "-q", q, "-m", "qwen3-tokenizer", "--dry-run")
    assert r.returncode == 4, r.stderr
    assert "questions.t.debias: expected the number of option orders" in r.stderr


def test_debias_order_below_the_option_count_warns_once(tmp_path):
    """Issue 42.4: `--debias-order 2` on MMLU's 4 options left the letter preference in place (answers piled on
    A and C, −6 points), and only evals/README.md said so. K below a question's option count is one `warning:`
    line naming K = n; shared questions and per-row ones (once, however many rows ask it) alike."""
    q = tmp_path / "q.json"
    q.write_text(json.dumps({"t": CHOICE, "r": {"type": "noul", "instructions": "Refund?"}}))
    args = ["run", EXAMPLES / "tickets.jsonl", "-q", q, "-m", "qwen3-tokenizer", "--dry-run"]
    want = ("warning: --debias-order 2 is below the 4 options of question 't': each option is shown at only 2 of "
            "the 4 letters, so a letter preference stays; use --debias-order 4 (the option count), or the "
            "question's own `debias: 4` where the questions' option counts differ, to cancel it")  # fmt: skip
    r = cli(*args, "--debias-order", "2")
    assert r.returncode == 0 and " ".join(r.stderr.split()).count(want) == 1, r.stderr
    for k in ("1", "4"):  # no orders, or one per option: nothing to say
        r = cli(*args, "--debias-order", k)
        assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    rows = [{"id": f"r{i}", "state": "hi", "questions": {"t": CHOICE}} for i in range(5)]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    r = cli("run", src, "-m", "qwen3-tokenizer", "--dry-run", "--debias-order", "3")
    assert r.returncode == 0, r.stderr
    assert " ".join(r.stderr.split()).count("warning: --debias-order 3 is below the 4 options of question 't':") == 1
