"""The Python API: DataFrames (polars or pandas), Arrow tables or iterables of dicts in, a DataFrame out,
with the CLI's validation, planning, backends and output columns.

    import openjev_batch as ob

    with ob.Classifier("smollm2-135m", backend="hf") as clf:      # loads the model once
        out = clf.run(df, {"refund": {"type": "noul", "instructions": "Asks for a refund?"}})
        out2 = clf.run(other_df, "questions.yaml")                 # same engine, no reload

It is a thin facade over the job loop's stage functions (`pipeline.prompt_chunk` and `pipeline.score_chunk`:
prompt → plan → prefill → read out, in input order) and the readers' row parsing (`io.parse_records`); the CLI's `run` goes through the same loop
with files, parts and `--resume` around it. Heavy imports (torch, transformers, the backend) happen when a
Classifier is created, not when the package is imported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import ConfigError

CHUNK_ROWS = 20_000


def _questions(questions: Any):
    """None (use each row's `questions`), a mapping question_id → question, or a JSON/YAML file path;
    every question of a shared map must be valid. Raises ConfigError."""
    from .config import load_questions, shared_questions

    if questions is None:
        return None
    if isinstance(questions, str | Path):
        return load_questions(Path(questions))
    return shared_questions(questions, "questions")


def _kind(data: Any) -> str:
    mod = type(data).__module__.split(".")[0]
    if mod == "polars" and type(data).__name__ == "DataFrame":
        return "polars"
    if mod == "pandas" and type(data).__name__ == "DataFrame":
        return "pandas"
    if mod == "pyarrow" and type(data).__name__ == "Table":
        return "arrow"
    return "records"


def _columns(data: Any, kind: str) -> list[str] | None:
    if kind == "pandas":
        return [str(c) for c in data.columns]
    if kind in ("polars", "arrow"):
        return list(data.column_names if kind == "arrow" else data.columns)
    return None


def _records_of(data: Any, kind: str, chunk_rows: int) -> Iterator[list[tuple[int, Any]]]:
    """Chunks of (position, record dict) with plain Python values (through Arrow for DataFrames, as the
    Parquet reader gives them: numpy scalars and pandas NaN would otherwise reach the row checks)."""
    import pyarrow as pa

    if kind == "polars":
        data = data.to_arrow()
    elif kind == "pandas":
        try:
            data = pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed object column (str and list states)
            data = [{str(k): _py(v) for k, v in rec.items()} for rec in data.to_dict("records")]
            kind = "records"
    if kind in ("polars", "pandas", "arrow"):
        pos = 0
        for batch in data.to_batches(max_chunksize=chunk_rows):
            recs = batch.to_pylist()
            yield list(enumerate(recs, pos))
            pos += len(recs)
        return
    chunk: list[tuple[int, Any]] = []
    for pos, rec in enumerate(data):
        chunk.append(
            (pos, rec if isinstance(rec, dict) else f"item {pos}: expected a dict, got {type(rec).__name__}")
        )
        if len(chunk) >= chunk_rows:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _py(v: Any) -> Any:
    """A pandas cell as a plain Python value: numpy scalars → Python, NaN → None."""
    if hasattr(v, "item") and type(v).__module__ == "numpy":
        v = v.item()
    if isinstance(v, float) and v != v:
        return None
    return v


class Classifier:
    """A model loaded once, answering questions for many DataFrames. A context manager (closes the
    engine); `close()` does the same.

    `model`: a hub id, a local folder or a packaged name (`openjev-batch models list`). `backend`: hf |
    sglang (default: sglang where installed and a GPU is present). `threads`: CPU threads (set before torch
    loads, when it has not been imported yet). The other keywords are the CLI's engine options (device,
    dtype, tp_size, dp_size, mem_fraction_static, attention_backend, context_length, engine_args) and
    `max_branches` (most branches per window).

    Raises ConfigError for bad options, BackendError when the model cannot load, LabelError when its
    tokenizer cannot give the labels.
    """

    def __init__(
        self,
        model: str,
        backend: str | None = None,
        *,
        threads: int | None = None,
        max_branches: int = 4096,
        **engine_options: Any,
    ):
        from .config import apply_threads, validation_message
        from .options import EngineOptions

        if threads:
            apply_threads(threads)
        from pydantic import ValidationError

        from .backends import NAMES, default_backend, load_backend
        from .backends.base import refuse_engine_options
        from .models import resolve_model
        from .readouts.label_logprobs import LabelLogprobs

        self.backend_name = backend or default_backend()
        if self.backend_name not in NAMES:
            raise ConfigError(f"unknown backend {self.backend_name!r}; expected one of {', '.join(NAMES)}")
        if max_branches <= 0:
            raise ConfigError("max_branches must be positive")
        try:
            self.options = EngineOptions(**engine_options)
        except ValidationError as e:
            raise ConfigError("invalid options: " + validation_message(e)) from None
        self.model = resolve_model(model)
        opts = self.options.backend_options(self.model)
        if self.backend_name == "hf":
            refuse_engine_options(opts, "hf")
        self.backend = load_backend(self.backend_name, opts)
        try:
            self.prompter = LabelLogprobs().prompter(self.backend.tokenizer, self.backend.context_length)
        except BaseException:
            self.backend.close()
            raise
        self.max_branches = max_branches
        self.last_summary = None

    def run(
        self,
        data: Any,
        questions: Any = None,
        *,
        keep: Iterable[str] | str | None = (),
        limit: int | None = None,
        output: str = "auto",
        on_progress: Callable[[int, int], None] | None = None,
    ):
        """Answer every question of every row of `data`; returns one row per input row × question, in
        input order, with the CLI's output columns (id, question_id, type, options, probs, answer, p_true,
        score, confidence, label_mass, token counts, error) and the `keep` columns (a name, names, or
        "all": every input column that is not an output column).

        `data`: a polars or pandas DataFrame, a pyarrow Table, or an iterable of dicts, with `state` and
        optional `id` / `questions` as in the input files. `questions`: a mapping question_id → question
        (or a JSON/YAML path) for every row, or None to read each row's `questions`. `output`: "auto" (the
        input's kind; polars for an iterable), "polars", "pandas" or "arrow". Bad rows become `error`
        cells, never exceptions; `last_summary` holds the run's counts (a pipeline.Summary).
        Raises ConfigError for bad arguments or invalid shared questions.
        """
        import pyarrow as pa

        from .pipeline.read import parse_records
        from .pipeline.stages import prompt_chunk, score_chunk
        from .pipeline.summary import summarize
        from .pipeline.write import records_table
        from .readouts.label_logprobs import OUTPUT_SCHEMA, LabelLogprobs

        t0 = time.perf_counter()
        kind = _kind(data)
        if output == "auto":
            output = kind if kind in ("polars", "pandas", "arrow") else "polars"
        if output not in ("polars", "pandas", "arrow"):
            raise ConfigError(f"output must be auto, polars, pandas or arrow, got {output!r}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ConfigError(f"limit must be an integer, got {type(limit).__name__}")
        if limit is not None and limit <= 0:
            raise ConfigError("limit must be positive")
        if kind == "records" and (isinstance(data, (str, bytes, dict)) or not isinstance(data, Iterable)):
            # a path or a dict of columns would otherwise be iterated: one row error per character or key
            raise ConfigError(
                "data must be a DataFrame, a pyarrow Table or an iterable of row dicts, got "
                f"{type(data).__name__} (a file: use the CLI, or read it into a DataFrame)"
            )
        cols = _columns(data, kind)
        keep_t = self._keep(keep, cols)
        readout = LabelLogprobs(_questions(questions), keep_t)
        budget = self.backend.kv_budget_tokens()
        warm0 = self.backend.warm_tokens
        records: list[dict[str, Any]] = []
        n_rows = 0
        for chunk in parse_records(_records_of(data, kind, CHUNK_ROWS), limit=limit, readout=readout):
            n_rows += len(chunk)
            prompted = prompt_chunk(chunk, self.prompter)
            records += score_chunk(
                prompted, readout, self.backend, budget, self.max_branches, on_progress
            ).records
        table = records_table(records, keep_t) if records else OUTPUT_SCHEMA.empty_table()
        self.last_summary = summarize(
            table, n_rows, self.backend.warm_tokens - warm0, time.perf_counter() - t0, "", self.model,
            readout=readout,
        )  # fmt: skip
        if output == "arrow":
            return table
        if output == "pandas":
            return table.to_pandas()
        import polars as pl

        return pl.from_arrow(table) if isinstance(table, pa.Table) else table

    def _keep(self, keep: Iterable[str] | str | None, cols: list[str] | None) -> tuple[str, ...]:
        from .config import check_keep
        from .readouts.label_logprobs import OUTPUT_SCHEMA

        if keep is None:
            keep = ()
        if keep == "all":
            if cols is None:
                raise ConfigError('keep="all" needs a DataFrame or Table (their columns are known)')
            keep = [c for c in cols if c not in {"id", "state", "questions", *OUTPUT_SCHEMA.names}]
        elif isinstance(keep, str):
            keep = [k.strip() for k in keep.split(",") if k.strip()]
        keep = tuple(keep) if isinstance(keep, Iterable) else (keep,)
        if not all(isinstance(k, str) for k in keep):
            raise ConfigError(f"keep must be a column name, names or 'all', got {keep!r}")
        try:
            check_keep(keep)
        except ValueError as e:
            raise ConfigError(f"keep: {e}") from None
        if cols is not None and (missing := [k for k in keep if k not in cols]):
            raise ConfigError(f"keep column(s) not in the data: {', '.join(missing)}")
        return keep

    def close(self) -> None:
        if getattr(self, "backend", None) is not None:
            self.backend.close()
            self.backend = None

    def __enter__(self) -> Classifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run(data: Any, questions: Any = None, *, model: str, backend: str | None = None, **kw: Any):
    """One-shot `Classifier(model, backend, ...).run(data, questions, ...)`; the model is closed after.
    Keywords of `Classifier.run` (keep, limit, output, on_progress) go to the run, the rest to the
    Classifier."""
    run_kw = {k: kw.pop(k) for k in ("keep", "limit", "output", "on_progress") if k in kw}
    with Classifier(model, backend, **kw) as clf:
        return clf.run(data, questions, **run_kw)
