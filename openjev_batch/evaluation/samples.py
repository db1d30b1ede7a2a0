"""Per-sample log of an eval, as lm-eval's `--log_samples`: the exact prompt of each question, decoded from
the very ids a job sends (the prompt stage rebuilt over the job's input: same tokenizer, same template, same
cut, so the same ids), with the prediction and its correctness beside the product's own columns. A
classifier-head job's rows have one branch each (question id ``""``) and no `question_id` column."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..pipeline import loop
from ..pipeline.input.source import FileSource
from ..pipeline.output.sink import NullSink
from ..pipeline.runners.plan_only import PlanOnlyRunner
from ..readouts import CLASSIFIER_HEAD


def prompt_texts(job, tokenizer=None) -> tuple[dict[tuple[str, str], str], str]:
    """{(row id, question id): the prompt text} for the questions of `job` (a RunConfig) that can be asked,
    and the tokenization's name with the cut its tokenizer chose: the job's own loop over its input with the
    plan-only runner (no weights; `tokenizer`: the one the job's backend holds, else the model's is loaded)."""
    quiet = job.model_copy(update={"progress": False, "output": None, "resume": False})
    s, _ = loop.run(quiet, FileSource(quiet), NullSink(), PlanOnlyRunner(tokenizer, texts=True))
    if job.readout == CLASSIFIER_HEAD:  # no cut to name: the template's text is tokenized whole
        return s.counted.texts, f"classifier-head: template {job.readout_options.template!r} tokenized whole as text"
    return s.counted.texts, s.counted.tokenization


def log_samples(predictions: Path, prompts: dict[tuple[str, str], str] | None = None) -> None:
    """Add per-sample columns to predictions.parquet: `prompt` (from `prompts`; kept as it is when None, for
    a re-score), `prediction` (the index of the most probable option, the same indexing as `gold`) and
    `correct` (null for a question with an error)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(predictions)
    cols: dict[str, Any] = {}
    if prompts is not None:
        ids = t.column("id").to_pylist()
        # a classifier-head output has no question_id: each row is its one branch, ""
        qids = t.column("question_id").to_pylist() if "question_id" in t.column_names else [""] * len(ids)
        cols["prompt"] = pa.array([prompts.get(k) for k in zip(ids, qids, strict=True)], pa.string())
    elif "prompt" in t.column_names:
        cols["prompt"] = t.column("prompt")
    pred = [None if p is None else int(np.argmax(p)) for p in t.column("probs").to_pylist()]
    gold = t.column("gold").to_pylist()
    cols["prediction"] = pa.array(pred, pa.int64())
    cols["correct"] = pa.array(
        [None if p is None else p == int(g) for p, g in zip(pred, gold, strict=True)], pa.bool_()
    )
    t = t.drop_columns([c for c in cols if c in t.column_names])
    for name, col in cols.items():
        t = t.append_column(name, col)
    tmp = predictions.with_name(predictions.name + ".tmp")
    pq.write_table(t, tmp)
    os.replace(tmp, predictions)
