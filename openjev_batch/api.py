"""The Python API: DataFrames (polars or pandas), Arrow tables or iterables of dicts in, a DataFrame out,
with the CLI's validation, planning, backends and output columns, for either readout.

    import openjev_batch as ob

    with ob.Classifier("smollm2-135m", backend="hf") as clf:      # loads the model once
        out = clf.run(df, {"refund": {"type": "noul", "instructions": "Asks for a refund?"}})
        out2 = clf.run(other_df, "questions.yaml")                 # same engine, no reload
    with ob.Classifier("path/to/nli", backend="hf", readout="classifier-head") as nli:
        labels = nli.run(pairs_df)                                 # premise + hypothesis → label

A run is the CLI's job loop (`pipeline.loop.run`) over the data (`FrameSource`), the Classifier's held-open
backend (`LocalRunner`: the host stage of chunk k+1 under chunk k) and an in-memory table (`MemorySink`):
the same count check, one broken-backend tracker per run, and the options validated by the CLI's
`build_config`. The data conversions are frames.py. Heavy imports (torch, transformers, the backend) happen
when a Classifier is created, not when the package is imported.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import readouts
from .backends import default_backend, load_backend
from .config import RunConfig, build_config
from .core import ANSWER_KEY
from .errors import ConfigError
from .packaged_models import resolve_model
from .pipeline import loop
from .pipeline.input.frames import as_frame, columns_of, convert, input_index, kind_of, restore_ids
from .pipeline.input.source import FrameSource
from .pipeline.output.sink import MemorySink, NullSink
from .pipeline.runners.local import LocalRunner
from .pipeline.runners.plan_only import PlanOnlyRunner
from .pipeline.summary import Summary, abstain_warnings
from .readouts import DEFAULT
from .threads import apply_threads


@dataclass(frozen=True)
class Held:
    """A Classifier's parts a server holds open (`Classifier.held`)."""

    cfg: RunConfig
    readout: Any  # readouts.base.Readout
    prompter: Any  # the readout's prompter, over the backend's tokenizer
    backend: Any  # backends.base.Backend


class Classifier:
    """A model loaded once, answering many DataFrames. A context manager (closes the engine); `close()` does
    the same.

    `model`: a hub id, a local folder or a packaged name (`openjev-batch models list`). `backend`: hf |
    sglang (default: sglang where installed and a GPU is present). `readout`: "label-logprobs" (`run`:
    questions answered from a causal LM's label logprobs) or "classifier-head" (`classify`: a
    *ForSequenceClassification checkpoint's logits over its id2label). `threads`: CPU threads (set before
    torch loads, when it has not been imported yet). `images` (sglang): the rule of a held-open engine, decided
    here, at construction, since the engine starts once: True starts it multimodal, so image rows are answered
    (a Qwen3.5/3.6 hybrid then runs without its multi-item fork); False starts it text only (image rows are then
    row errors saying so); None (default): a dense vision-language model starts multimodal, a Qwen3.5/3.6 hybrid
    text only. The command line decides the same from its input file (an image column or part starts it
    multimodal). The other keywords are the readout's options (its `Options`, the flags of its command:
    label-logprobs `system_prompt` as `run --system-prompt`, tokenized as text with the same limits;
    `calibration`, a file `openjev-batch calibrate` wrote, applied as `run --calibration`; `debias_order`, as
    `run --debias-order`: choice/score options shown in K cyclic orders, averaged), the CLI's engine options (device, dtype, tp_size, dp_size, mem_fraction_static,
    attention_backend, context_length, engine_args, batch_tokens, …) and the job options `max_branches`
    (most branches — classifier-head: rows — per window) and `chunk_rows` (rows per chunk), whose defaults
    (None: not given) are the CLI's (job_options.JOB_OPTIONS; `chunk_rows`: the readout's). Every option
    goes through the CLI's `build_config`.

    Raises ConfigError for bad options, BackendError when the model cannot load (or, classifier-head, is no
    classifier), LabelError when a causal LM's tokenizer cannot give the labels.
    """

    def __init__(
        self,
        model: str | os.PathLike,
        backend: str | None = None,
        *,
        readout: str = DEFAULT,
        threads: int | None = None,
        max_branches: int | None = None,
        images: bool | None = None,
        **options: Any,
    ):
        if threads is not None:
            apply_threads(threads)

        if isinstance(model, os.PathLike):
            model = os.fspath(model)
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(f"model must be a hub id, a folder or a packaged name, got {model!r}")
        # the CLI's door: the same checks (the 256 KiB system prompt, engine options the backend lacks, …)
        self._options = dict(
            input=Path("<data>"), model=model, backend=backend or default_backend(), readout=readout,
            progress=False, images=images, **{k: _path(v) for k, v in options.items()},
        )  # fmt: skip
        if max_branches is not None:  # else the config's default, the CLI's
            self._options["max_branches"] = max_branches
        cfg = build_config(**self._options)  # chunk_rows: the readout's default, as the CLI's
        self.backend_name, self.readout = cfg.backend, readout
        self._class = readouts.readout_class(readout)
        self.system_prompt = self._options.get("system_prompt")
        self.model = self._options["model"] = resolve_model(model)
        self.backend = load_backend(cfg.backend, cfg.backend_options(self.model), self._class.backend_kind)
        try:
            # label-logprobs: the labels are verified in the tokenizer's answer context once, at start-up
            r = readouts.build(readout, cfg, self.backend.labels)
            prompter = r.prompter(self.backend.tokenizer, self.backend.context_length)
        except BaseException:
            self.backend.close()
            raise
        self.runner = LocalRunner(self.backend, prompter)
        self.last_summary: Summary | None = None

    def run(
        self,
        data: Any,
        questions: Any = None,
        *,
        keep: Iterable[str] | str | None = (),
        limit: int | None = None,
        output: str = "auto",
        on_progress: Callable[[int, int], None] | None = None,
        progress: Any = None,
        reuse: Any = None,
        **options: Any,
    ):
        """Read out every row of `data`; returns the CLI's output rows in input order, with its columns and
        the `keep` columns (a name, names, or "all": every input column that is not an output column).
        label-logprobs (`run`): one row per input row × question (id, question_id, type, options, probs,
        answer, p_true, score, confidence, label_mass, token counts, error). classifier-head (`classify`):
        one row per input row (id, logits, probs, label, p_<label> per label, prompt_tokens, error).

        `data`: a polars or pandas DataFrame, a pyarrow Table, or an iterable of dicts, with the columns of
        the input files (label-logprobs: `state`, optional `id` / `questions`; classifier-head: `text`, or
        `premise` + `hypothesis`, optional `id`); a pandas Series or a list of strings is taken as the
        texts (`state`; classifier-head: `text`). Ids join back to the input: an integer `id` column comes
        back with its type; without one, the id is the row's position. A pandas output keeps the input's
        index, whatever the ids: each output row has the index label of its input row (polars has no
        index: join by `id`, or by the position in `id`). `questions` (label-logprobs): a mapping question_id → question (or a
        JSON/YAML path) for every row, or None to read each row's `questions`. `options`: the readout's
        options given per run (`Flag.per_run`): classifier-head `template`, the prompt over {premise} and
        {hypothesis} (default: the NLI template, as `classify --template`). `output`: "auto" (the input's kind; polars for an iterable), "polars",
        "pandas" or "arrow". `on_progress(branches, tokens)` is called after each window; `progress` (a
        `pipeline.progress.Progress`) is updated as branches finish, for a live display (its `text()`:
        done of the total, tok/s, cache hit rate, ETA). Bad rows become `error` cells, never exceptions;
        `last_summary` holds the run's counts (a pipeline.Summary). `reuse`: earlier runs' tables (as returned,
        with `answer_key`) or output files: a row of the same answer key is copied, not computed. Raises ConfigError for bad arguments or
        invalid shared questions, OutputCheckError when a row lacks records (the count check).
        """
        self._open()  # a closed Classifier says so (not an AttributeError on its backend)
        data = as_frame(data, self._text_column())
        kind = kind_of(data)
        output, cols = _checked(data, kind, output, limit)
        cfg, readout = self._job(questions, options, keep, cols, limit)
        source = FrameSource(data, kind, cfg.chunk_rows, limit)
        earlier = [] if reuse is None else list(reuse) if isinstance(reuse, (list, tuple)) else [reuse]
        summary, table = loop.run(cfg, source, MemorySink(), self.runner, readout=readout, progress=progress,
                                  on_progress=on_progress, reuse=earlier)  # fmt: skip
        self.last_summary = summary
        # the CLI's `warning:` lines, for a notebook or a nightly script: a missed calibration target abstains
        # on every row, and the table alone shows it only in its `abstain` column
        for line in abstain_warnings(summary, readout):
            warnings.warn(line, UserWarning, stacklevel=2)
        table = restore_ids(table, data, kind)
        index = input_index(source.positions(), data, kind) if output == "pandas" else None
        return convert(table, output, index)

    def _job(self, questions: Any, options: dict, keep: Any, cols: list[str] | None, limit: int | None):
        """This run's config (through `build_config`, as the CLI's: the questions and the per-run options go
        through the readout's options, the CLI's door) and readout. Raises ConfigError, naming a keyword that
        is no per-run option (a Classifier's options are given when it is made)."""
        per_run = readouts.per_run_options()
        if bad := [k for k in options if k not in per_run]:
            raise ConfigError(f"unknown keyword(s) of run(): {', '.join(bad)} (per run: {', '.join(per_run)})")
        opts = {**self._options, "questions": _path(questions), "limit": limit}
        opts.update((k, _path(v)) for k, v in options.items())
        if keep == "all":  # every input column the readout neither reads nor writes (p_<label> too)
            written = readouts.build(self.readout, build_config(**opts), self.backend.labels).schema.names
            keep = self._keep(keep, cols, {*self._class.input_columns, *written, ANSWER_KEY})
        cfg = build_config(**opts, keep=self._keep(keep, cols, set()))
        return cfg, readouts.build(self.readout, cfg, self.backend.labels)

    def _text_column(self) -> str:
        return self._class.text_column

    def show_prompt(self, data: Any, questions: Any = None, n: int = 1) -> str:
        """What the model gets for the first `n` rows of `data`, as `run --show-prompt` prints it: the
        decoded prefix and each question's suffix, the cut, the control tokens and the label tokens.
        label-logprobs only. Raises ConfigError for bad arguments."""
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ConfigError(f"n must be a positive integer, got {n!r}")
        self._open()
        cfg = build_config(**{**self._options, "questions": _path(questions)})
        readout = readouts.build(self.readout, cfg, self.backend.labels)
        data = as_frame(data, self._text_column())
        # the job's own loop with the plan-only runner over the first n rows, the held prompter reused
        runner = PlanOnlyRunner(self.backend.tokenizer, show=True, prompter=self.runner.held_prompter)
        s, _ = loop.run(cfg, FrameSource(data, kind_of(data), n, n), NullSink(), runner, readout=readout)
        return "".join(s.counted.shown)

    def held(self, questions: Any = None) -> Held:
        """What a server built on this Classifier holds open (`openjev-batch serve`): the job config with
        `questions` (a mapping or a JSON/YAML path: the questions a request may ask by id; None: each request
        its own), the readout built from it, the prompter built and label-checked at start-up, and the
        backend. Raises ConfigError for bad questions."""
        self._open()
        cfg = build_config(**{**self._options, "questions": _path(questions)})
        readout = readouts.build(self.readout, cfg, self.backend.labels)
        return Held(cfg, readout, self.runner.held_prompter, self.backend)

    def _keep(
        self, keep: Iterable[str] | str | None, cols: list[str] | None, skip: set[str]
    ) -> tuple[str, ...]:
        if keep is None:
            keep = ()
        if keep == "all":
            if cols is None:
                raise ConfigError('keep="all" needs a DataFrame or Table (their columns are known)')
            keep = [c for c in cols if c not in skip]
        elif isinstance(keep, str):
            keep = [k.strip() for k in keep.split(",") if k.strip()]
        keep = tuple(keep) if isinstance(keep, Iterable) else (keep,)
        if not all(isinstance(k, str) for k in keep):
            raise ConfigError(f"keep must be a column name, names or 'all', got {keep!r}")
        if cols is not None and (missing := [k for k in keep if k not in cols]):
            raise ConfigError(f"keep column(s) not in the data: {', '.join(missing)}")
        return keep

    def _open(self) -> None:
        if getattr(self, "backend", None) is None:
            raise ConfigError("this Classifier is closed: make a new one")

    def close(self) -> None:
        if getattr(self, "backend", None) is not None:
            self.backend.close()
            self.backend = None  # type: ignore[assignment]  # closed: _open() refuses every later use

    def __enter__(self) -> Classifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run(data: Any, questions: Any = None, *, model: str, backend: str | None = None, **kw: Any):
    """One-shot `Classifier(model, backend, ...).run(data, questions, ...)`; the model is closed after.
    Keywords of `Classifier.run` (keep, limit, output, on_progress, progress, the readouts' per-run options:
    template) go to the run, the rest to the Classifier."""
    names = ("keep", "limit", "output", "on_progress", "progress", "reuse", *readouts.per_run_options())
    run_kw = {k: kw.pop(k) for k in names if k in kw}
    with Classifier(model, backend, **kw) as clf:
        return clf.run(data, questions, **run_kw)


def _path(questions: Any) -> Any:
    """`questions` as the readout's options take it: a str or os.PathLike is a file path; a mapping (or
    None) as it is. The options type validates either (readouts/label_logprobs/options.py)."""
    return Path(os.fspath(questions)) if isinstance(questions, os.PathLike) else questions


def _checked(data: Any, kind: str, output: str, limit: Any) -> tuple[str, list[str] | None]:
    """`Classifier.run`'s arguments checked before anything runs: the output kind ("auto" resolved), the
    limit, data that would be iterated wrongly, a column named twice. Returns the output kind and the
    data's columns. Raises ConfigError."""
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
    return output, cols
