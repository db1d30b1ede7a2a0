"""The Python API: DataFrames (polars or pandas), Arrow tables or iterables of dicts in, a DataFrame out,
with the CLI's validation, planning, backends and output columns, for either readout.

    import openjev_batch as ob

    with ob.Classifier("smollm2-135m", backend="hf") as clf:      # loads the model once
        out = clf.run(df, {"refund": {"type": "noul", "instructions": "Asks for a refund?"}})
        out2 = clf.run(other_df, "questions.yaml")                 # same engine, no reload
    with ob.Classifier("path/to/nli", backend="hf", readout="classifier-head") as nli:
        labels = nli.run(pairs_df)                                 # premise + hypothesis → label

It is a thin facade over the job loop's stage functions (`pipeline.stages.prompt_chunk` and `score_chunk`:
prompt → plan → prefill → read out, in input order) and the readers' row parsing
(`pipeline.read.parse_records`); the CLI's `run` / `classify` go through the same loop with files, parts
and `--resume` around it. The data conversions are frames.py. Heavy imports (torch, transformers, the
backend) happen when a Classifier is created, not when the package is imported.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
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


# the input columns each readout reads (keep="all" keeps every other column)
_INPUT_COLUMNS = {"label-logprobs": ("id", "state", "questions"), "classifier-head": ("id", "text", "premise", "hypothesis")}  # fmt: skip


class Classifier:
    """A model loaded once, answering many DataFrames. A context manager (closes the engine); `close()` does
    the same.

    `model`: a hub id, a local folder or a packaged name (`openjev-batch models list`). `backend`: hf |
    sglang (default: sglang where installed and a GPU is present). `readout`: "label-logprobs" (`run`:
    questions answered from a causal LM's label logprobs) or "classifier-head" (`classify`: a
    *ForSequenceClassification checkpoint's logits over its id2label). `threads`: CPU threads (set before
    torch loads, when it has not been imported yet). `system_prompt` (label-logprobs): the system message
    instead of the default instructions, as `run --system-prompt` (tokenized as text). The other keywords are the CLI's engine options
    (device, dtype, tp_size, dp_size, mem_fraction_static, attention_backend, context_length, engine_args,
    batch_tokens, …) and `max_branches` (most branches — classifier-head: rows — per window).

    Raises ConfigError for bad options, BackendError when the model cannot load (or, classifier-head, is no
    classifier), LabelError when a causal LM's tokenizer cannot give the labels.
    """

    # Length (over ~60 lines): the engine and readout options as keyword arguments, validated once.
    def __init__(
        self,
        model: str | os.PathLike,
        backend: str | None = None,
        *,
        readout: str = "label-logprobs",
        threads: int | None = None,
        max_branches: int = 4096,
        system_prompt: str | None = None,
        **engine_options: Any,
    ):
        from .config import apply_threads, validation_message
        from .options import EngineOptions

        if threads is not None:
            apply_threads(threads)
        from pydantic import ValidationError

        from .backends import NAMES, default_backend, load_backend
        from .backends.base import refuse_engine_options
        from .packaged_models import resolve_model
        from .readouts import NAMES as READOUTS
        from .readouts.label_logprobs import LabelLogprobs
        from .values import option_text_problem

        if isinstance(model, os.PathLike):
            model = os.fspath(model)
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(f"model must be a hub id, a folder or a packaged name, got {model!r}")
        self.backend_name = backend or default_backend()
        if self.backend_name not in NAMES:
            raise ConfigError(f"unknown backend {self.backend_name!r}; expected one of {', '.join(NAMES)}")
        if readout not in READOUTS:
            raise ConfigError(f"unknown readout {readout!r}; expected one of {', '.join(READOUTS)}")
        if max_branches <= 0:
            raise ConfigError("max_branches must be positive")
        if system_prompt is not None:
            if not isinstance(system_prompt, str) or not system_prompt.strip():
                raise ConfigError("system_prompt must be a non-empty string")
            if (problem := option_text_problem(system_prompt)) is not None:  # the tokenizer would raise
                raise ConfigError(f"system_prompt: {problem}")
            if readout != "label-logprobs":
                raise ConfigError(
                    "system_prompt is for the label-logprobs readout, not for a classifier head"
                )
        self.system_prompt = system_prompt
        try:
            self.options = EngineOptions(**engine_options)
        except ValidationError as e:
            raise ConfigError("invalid options: " + validation_message(e)) from None
        self.readout = readout
        self.model = resolve_model(model)
        opts = self.options.backend_options(self.model)
        if self.backend_name == "hf":
            refuse_engine_options(opts, "hf")
        self.backend = load_backend(self.backend_name, opts, readout)
        try:
            # label-logprobs: the labels are verified in the tokenizer's answer context once, at start-up
            self.prompter = (
                LabelLogprobs(system_prompt=system_prompt).prompter(
                    self.backend.tokenizer, self.backend.context_length
                )
                if readout == "label-logprobs"
                else None
            )
        except BaseException:
            self.backend.close()
            raise
        self.max_branches = max_branches
        self.last_summary = None

    # Length (over ~60 lines): the argument checks a notebook user needs named,
    # then the same stages as `run_job` over an in-memory frame.
    def run(
        self,
        data: Any,
        questions: Any = None,
        *,
        template: str | None = None,
        keep: Iterable[str] | str | None = (),
        limit: int | None = None,
        output: str = "auto",
        on_progress: Callable[[int, int], None] | None = None,
        progress: Any = None,
    ):
        """Read out every row of `data`; returns the CLI's output rows in input order, with its columns and
        the `keep` columns (a name, names, or "all": every input column that is not an output column).
        label-logprobs (`run`): one row per input row × question (id, question_id, type, options, probs,
        answer, p_true, score, confidence, label_mass, token counts, error). classifier-head (`classify`):
        one row per input row (id, logits, probs, label, p_<label> per label, prompt_tokens, error).

        `data`: a polars or pandas DataFrame, a pyarrow Table, or an iterable of dicts, with the columns of
        the input files (label-logprobs: `state`, optional `id` / `questions`; classifier-head: `text`, or
        `premise` + `hypothesis`, optional `id`). `questions` (label-logprobs): a mapping question_id →
        question (or a JSON/YAML path) for every row, or None to read each row's `questions`. `template`
        (classifier-head): the prompt over {premise} and {hypothesis} (default: the NLI template, as
        `classify --template`). `output`: "auto" (the input's kind; polars for an iterable), "polars",
        "pandas" or "arrow". `on_progress(branches, tokens)` is called after each window; `progress` (a
        `pipeline.progress.Progress`) is updated as branches finish, for a live display (its `text()`:
        done of the total, tok/s, cache hit rate, ETA). Bad rows become `error` cells, never exceptions; `last_summary` holds the run's
        counts (a pipeline.Summary). Raises ConfigError for bad arguments or invalid shared questions.
        """
        import pyarrow as pa

        from .frames import columns_of, convert, kind_of, records_of
        from .pipeline.read import parse_records
        from .pipeline.stages import prompt_chunk, score_chunk
        from .pipeline.summary import summarize
        from .pipeline.write import records_table

        t0 = time.perf_counter()
        self._open()  # a closed Classifier says so (not an AttributeError on its backend)
        kind = kind_of(data)
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
        cols = columns_of(data, kind)
        if kind != "records" and cols and (dup := sorted({c for c in cols if cols.count(c) > 1})):
            raise ConfigError(f"data has column(s) {', '.join(map(repr, dup))} twice")  # which one to read?
        readout = self._readout(questions, template, self._keep(keep, cols))
        prompter = self.prompter or readout.prompter(self.backend.tokenizer, self.backend.context_length)
        budget = self.backend.kv_budget_tokens()
        warm0 = self.backend.warm_tokens
        records: list[dict[str, Any]] = []
        n_rows = 0
        if progress is not None and progress.total_rows is None and kind != "records":
            progress.total_rows = min(len(data), limit or len(data))
        for chunk in parse_records(records_of(data, kind, CHUNK_ROWS), limit=limit, readout=readout):
            n_rows += len(chunk)
            if progress is not None:
                progress.chunk_read(len(chunk), sum(readout.n_records(r) for r in chunk))
            prompted = prompt_chunk(chunk, prompter)
            records += score_chunk(
                prompted, readout, self.backend, budget, self.max_branches, on_progress, None, progress
            ).records
        schema = readout.schema
        table = records_table(records, readout.keep, schema) if records else schema.empty_table()
        self.last_summary = summarize(
            table, n_rows, self.backend.warm_tokens - warm0, time.perf_counter() - t0, "", self.model,
            readout=readout,
        )  # fmt: skip
        return convert(table, output) if isinstance(table, pa.Table) else table

    def _readout(self, questions: Any, template: str | None, keep: tuple[str, ...]):
        """This run's readout, validated as the CLI validates `run` / `classify`. Raises ConfigError."""
        if self.readout == "classifier-head":
            from .readouts.classifier_head import DEFAULT_TEMPLATE, ClassifierHead

            if questions is not None:
                raise ConfigError("questions are for the label-logprobs readout, not for a classifier head")
            if template is not None and not isinstance(template, str):
                raise ConfigError(f"template must be a string, got {type(template).__name__}")
            return ClassifierHead(tuple(self.backend.labels), template or DEFAULT_TEMPLATE, keep)
        from .readouts.label_logprobs import LabelLogprobs

        if template is not None:
            raise ConfigError("template is for the classifier-head readout (classify)")
        return LabelLogprobs(_questions(questions), keep, system_prompt=self.system_prompt)

    def show_prompt(self, data: Any, questions: Any = None, n: int = 1) -> str:
        """What the model gets for the first `n` rows of `data`, as `run --show-prompt` prints it: the
        decoded prefix and each question's suffix, the cut, the control tokens and the label tokens.
        label-logprobs only. Raises ConfigError for bad arguments."""
        from .frames import kind_of, records_of
        from .pipeline.read import parse_records
        from .readouts.label_logprobs.show import render_rows

        if self.prompter is None:
            raise ConfigError("show_prompt is for the label-logprobs readout")
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ConfigError(f"n must be a positive integer, got {n!r}")
        readout = self._readout(questions, None, ())
        chunks = parse_records(records_of(data, kind_of(data), n), limit=n, readout=readout)
        return render_rows([r for c in chunks for r in c], self.prompter)

    def _keep(self, keep: Iterable[str] | str | None, cols: list[str] | None) -> tuple[str, ...]:
        from .config import check_keep
        from .readouts import base_columns

        if keep is None:
            keep = ()
        if keep == "all":
            if cols is None:
                raise ConfigError('keep="all" needs a DataFrame or Table (their columns are known)')
            skip = {*_INPUT_COLUMNS[self.readout], *base_columns(self.readout)}
            keep = [c for c in cols if c not in skip and not self._label_column(c)]
        elif isinstance(keep, str):
            keep = [k.strip() for k in keep.split(",") if k.strip()]
        keep = tuple(keep) if isinstance(keep, Iterable) else (keep,)
        if not all(isinstance(k, str) for k in keep):
            raise ConfigError(f"keep must be a column name, names or 'all', got {keep!r}")
        try:
            check_keep(keep, self.readout)
        except ValueError as e:
            raise ConfigError(f"keep: {e}") from None
        if cols is not None and (missing := [k for k in keep if k not in cols]):
            raise ConfigError(f"keep column(s) not in the data: {', '.join(missing)}")
        return keep

    def _label_column(self, name: str) -> bool:
        if self.readout != "classifier-head":
            return False
        from .readouts.classifier_head import label_column

        return name in {label_column(x) for x in self.backend.labels}

    def _open(self) -> None:
        if getattr(self, "backend", None) is None:
            raise ConfigError("this Classifier is closed: make a new one")

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
    Keywords of `Classifier.run` (template, keep, limit, output, on_progress, progress) go to the run, the
    rest to the Classifier."""
    names = ("template", "keep", "limit", "output", "on_progress", "progress")
    run_kw = {k: kw.pop(k) for k in names if k in kw}
    with Classifier(model, backend, **kw) as clf:
        return clf.run(data, questions, **run_kw)
