"""Prompt control: a per-question answer lead and worked examples (in the shared part of the prompt)."""

from __future__ import annotations

import json

import polars as pl
from conftest import EXAMPLES, cli

LEAD_Q = {
    "refund": {
        "type": "noul",
        "instructions": "Does the customer ask for money back?",
        "answer_lead": "Verdict:",
        "examples": [{"text": "Please refund my last order.", "answer": True},
                     {"text": "Love the new dashboard!", "answer": "false"}],
    },
    "kind": {"type": "choice", "instructions": "Kind?", "criteria": {"billing": None, "bug": "a defect"}},
}  # fmt: skip


def test_answer_lead_and_examples_in_the_shared_prefix(qwen3_tok, tiny_model, tmp_path):
    from openjev_batch.core import lcp
    from openjev_batch.readouts.label_logprobs.prompt import Prompter
    from openjev_batch.schema import parse_row

    p = Prompter(qwen3_tok)
    rows = [parse_row(i, {"id": f"r{i}", "state": s, "questions": LEAD_Q}) for i, s in
            enumerate(["I was charged twice", "The app crashes"])]  # fmt: skip
    (a, fa), (b, fb) = p.build_many(rows)
    assert not fa and not fb and [x.qid for x in a.branches] == ["refund", "kind"]
    # the worked examples sit in the system message, before the row's text: both rows share them
    system_end = qwen3_tok.decode(list(a.prefix)).index("<|im_start|>user")
    assert lcp(a.prefix, b.prefix) >= len(
        qwen3_tok(qwen3_tok.decode(list(a.prefix))[:system_end])["input_ids"]
    )
    text = qwen3_tok.decode(list(a.prefix))
    assert 'Worked examples for question "refund"' in text and "Verdict: A" in text and "Verdict: B" in text
    # the lead ends the refund branch; the other question keeps "Answer:"; labels verified after each
    assert qwen3_tok.decode(list(a.branches[0].suffix)).endswith("Verdict:")
    assert qwen3_tok.decode(list(a.branches[1].suffix)).endswith("Answer:")
    # the whole branch is the model's own tokenization of its text (no seam at the cut or the lead)
    whole = qwen3_tok.decode(list(a.prefix + a.branches[0].suffix))
    assert tuple(qwen3_tok(whole, add_special_tokens=False)["input_ids"]) == a.prefix + a.branches[0].suffix
    # through the CLI: a questions file with both, answered
    qf = tmp_path / "q.json"
    qf.write_text(json.dumps(LEAD_Q))
    out = tmp_path / "o.parquet"
    r = cli("run", EXAMPLES / "tickets.jsonl", "-q", qf, "-m", tiny_model, "-b", "hf", "--limit", "3",
            "-o", out, "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert pl.read_parquet(out)["error"].null_count() == 6
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"x": {**LEAD_Q["refund"], "examples": [{"text": "t", "answer": "maybe"}]}}))
    r = cli("validate", EXAMPLES / "tickets.jsonl", "-q", bad)
    assert (
        r.returncode == 4
        and "questions.x.examples[0].answer: 'maybe' is not an option (true, false)" in r.stderr
    )
