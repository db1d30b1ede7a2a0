"""The plan-only runner (pipeline/runners/plan_only.py) in the one loop, over the real Qwen3 tokenizer and no
model: `--dry-run`'s counts, `--show-prompt`'s text, the loop's count check over its stand-in records, and
nothing written."""

from __future__ import annotations

import pytest
from conftest import write_jsonl

from openjev_batch import readouts
from openjev_batch.config import build_config
from openjev_batch.core import RowError
from openjev_batch.errors import OutputCheckError
from openjev_batch.pipeline import loop
from openjev_batch.pipeline.dry_run import dry_run, show_prompt
from openjev_batch.pipeline.input.read import job_rows
from openjev_batch.pipeline.input.source import FileSource
from openjev_batch.pipeline.output.sink import NullSink
from openjev_batch.pipeline.runners.plan_only import PlanOnlyRunner

Q = {
    "urgent": {"type": "noul", "instructions": "Urgent?"},
    "kind": {
        "type": "choice",
        "instructions": "Which?",
        "criteria": {"bill": "billing", "tech": "technical"},
    },
}


def rows() -> list:
    good = [{"id": f"r{i}", "state": f"ticket {i}: my invoice is wrong", "questions": Q} for i in range(5)]
    bad_q = {
        "id": "q",
        "state": "x",
        "questions": {"ok": Q["urgent"], "k": {"type": "rank", "instructions": "?"}},
    }
    # 8 rows: 5 good (2 questions each), an unreadable line (1 record), a duplicate id (its 2 questions),
    # a row whose second question is invalid (2 records, 1 error)
    return [*good[:3], "{broken", *good[3:], {**good[0], "state": "again"}, bad_q]


def config(tmp_path, model, **kw):
    src = write_jsonl(tmp_path / "in.jsonl", rows())
    return build_config(input=src, model=str(model), backend="hf", chunk_rows=3, progress=False, **kw)


def test_plans_each_chunk_and_counts_through_the_loop(tmp_path, qwen3_tok, qwen3_tok_dir):
    cfg = config(tmp_path, qwen3_tok_dir)
    s, result = loop.run(cfg, FileSource(cfg), NullSink(), PlanOnlyRunner(qwen3_tok))
    p = s.counted
    assert (s.rows, s.questions, s.errors) == (8, 15, 4)
    assert s.answered == 11 and p.branches == 11  # every question that can be asked is one branch
    assert p.windows == 3  # one window per chunk of 3 rows: no engine budget to cut them further
    # logical tokens: Σ branch lengths; hf: each row's prefix once (no two neighbours share one), then suffixes
    readout = readouts.build(cfg.readout, cfg)
    prompter = readout.prompter(qwen3_tok)
    good = [r for chunk in job_rows(cfg, readout)[0] for r in chunk if not isinstance(r, RowError)]
    built = [rp for rp, _ in prompter.build_many(good) if rp is not None]
    assert p.logical_tokens == sum(len(rp.prefix) + len(b.suffix) for rp in built for b in rp.branches)
    hf = p.by_backend["hf"].unique_tokens  # each spec counts its own cache, the run's backend first
    assert list(p.by_backend) == ["hf", "sglang"] and p.by_backend["sglang"].unique_tokens == p.unique_tokens
    assert hf == sum(len(rp.prefix) + sum(len(b.suffix) for b in rp.branches) for rp in built)
    assert 0 < p.unique_tokens < hf  # the radix count shares the template's common start
    assert result is None and sorted(x.name for x in tmp_path.iterdir()) == ["in.jsonl"]  # nothing written


def test_dry_run_reports_the_loops_counts_and_writes_no_output(tmp_path, qwen3_tok, qwen3_tok_dir):
    out = tmp_path / "o.parquet"
    p = dry_run(config(tmp_path, qwen3_tok_dir, output=out), qwen3_tok)
    assert (p.rows, p.questions, p.errors, p.branches, p.windows) == (8, 15, 4, 11, 3)
    # a tokenizer folder: no config.json to describe, so no backend names a pattern
    assert p.model == "" and all(b.pattern == "" for b in p.by_backend.values())
    assert p.backend == "hf" and 0 < p.hit_rate("hf") < p.hit_rate("sglang") == p.expected_hit_rate < 1
    assert sorted(x.name for x in tmp_path.iterdir()) == ["in.jsonl"]  # no OUT, OUT.partial or OUT.lock


def test_show_prompt_renders_only_the_first_rows(tmp_path, qwen3_tok, qwen3_tok_dir):
    text = show_prompt(config(tmp_path, qwen3_tok_dir), 2, qwen3_tok)
    assert text.count("═══ row") == 2 and "═══ row r0 · prefix" in text and "═══ row r1 · prefix" in text
    assert "ticket 0: my invoice" in text and "r2" not in text
    assert text.count("─── urgent (noul)") == 2 and text.count("─── kind (choice)") == 2
    bad = show_prompt(config(tmp_path, qwen3_tok_dir), 4, qwen3_tok)  # the 4th row is the unreadable line
    assert bad.count("═══ row") == 4 and "═══ row at index 3:" in bad


class Dropping(PlanOnlyRunner):
    """A plan-only runner that loses the last stand-in record of chunk 1 (a bug the count check catches)."""

    def score(self, todo, tracker=None, progress=None, on_progress=None):
        for i, records, info in super().score(todo, tracker, progress, on_progress):
            yield i, records[:-1] if i == 1 else records, info


def test_the_count_check_covers_a_dry_run(tmp_path, qwen3_tok, qwen3_tok_dir):
    cfg = config(tmp_path, qwen3_tok_dir)
    with pytest.raises(OutputCheckError, match="8 input rows need 15 output rows, the partial output has 14"):
        loop.run(cfg, FileSource(cfg), NullSink(), Dropping(qwen3_tok))


def test_dry_run_holds_rows_to_the_models_context_like_the_job(tmp_path, qwen3_tok, qwen3_tok_dir):
    """--dry-run checked branches against 32,768 tokens whatever the model took: a 10k-token row passed the
    dry run of an 8,192-token model and the job then made it a row error (the hostile trial). It reads the
    model's max_position_embeddings (config.json, no weights) or --context-length, as the backends do."""
    import json
    import shutil

    model = tmp_path / "m"
    shutil.copytree(qwen3_tok_dir, model)
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"],
                                                   "model_type": "qwen3", "max_position_embeddings": 512}))  # fmt: skip
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "short", "state": "hello", "questions": Q},
                                             {"id": "long", "state": "word " * 700, "questions": Q}])  # fmt: skip
    p = dry_run(build_config(input=src, model=str(model), backend="hf", progress=False), qwen3_tok)
    assert (p.rows, p.questions, p.errors) == (2, 4, 2)  # the long row's two questions
    wide = build_config(input=src, model=str(model), backend="hf", progress=False, context_length=4096)
    assert dry_run(wide, qwen3_tok).errors == 0
