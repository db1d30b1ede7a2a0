"""The `classify` mode: sequence-classification checkpoints (a linear score head on the last token).

Same product, second reading: instead of label logprobs of a chat model, each row's raw class logits
from a `*ForSequenceClassification` checkpoint (e.g. a Qwen3 NLI cross-encoder: contradiction /
entailment / neutral). Same input reading (JSONL/Parquet, bad rows → row errors), planning (rows sorted
by their shared prefix, KV-budget windows: `plan.plan`), atomic Parquet writing and error conventions.

    read ──▶ ClsRow ──template + tokenize──▶ RowPrompt(prefix=premise part, suffix=hypothesis part)
         ──plan──▶ Window ──classify (backend)──▶ logits ──softmax / id2label──▶ Parquet

- **Rows.** `text`, or `premise` + `hypothesis` rendered through a template (default
  ``Premise: {premise}\\nHypothesis: {hypothesis}``); `id` as in `run`; `--keep` columns pass through.
- **Prefix sharing.** The prompt is tokenized whole (those ids are what the model sees). The shared part
  is the template up to ``{hypothesis}``, cut *before* the whitespace that precedes the variable part
  (``…Hypothesis:`` + `` {h}``): a prefix ending in ``": "`` tokenizes differently from the full prompt
  (3 of 4 test rows). The prefix ids are the longest common prefix of the whole prompt's ids and the
  prefix text's ids, so they are always an exact prefix of what runs. Rows are sorted by them, so many
  hypotheses against one premise are adjacent and reuse its KV (sglang: radix cache, warmed once).
- **Labels.** From the checkpoint's `config.json` `id2label`; a checkpoint without one, or whose
  architecture is not a sequence classifier, is refused before any model loads.
- **Output.** `id`, `logits`, `probs` (stable softmax), `label` (argmax → id2label), one `p_<label>` per
  label, `prompt_tokens`, `error`, then the kept columns; input order.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import string
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, ValidationError, field_validator, model_validator

from .backends.base import BackendOptions
from .config import EngineOptions, check_not_input, check_output_path, validation_message
from .errors import BackendError, ConfigError, InputFileError
from .io import _records, check_input
from .plan import BranchSpec, RowPrompt, Window, lcp, plan
from .prompt import quiet_length_warning
from .schema import RowError, duplicate_id_error, row_id, unidentified_row_error

DEFAULT_TEMPLATE = "Premise: {premise}\nHypothesis: {hypothesis}"
TEMPLATE_FIELDS = ("premise", "hypothesis")
BASE_COLUMNS = ("id", "logits", "probs", "label", "prompt_tokens", "error")

_CLASSIFIERS = {
    "hf": "openjev_batch.backends.classify_hf:HFClassifier",
    "sglang": "openjev_batch.backends.classify_sglang:SGLangClassifier",
}


# --------------------------------------------------------------------------- template


class Template:
    """A prompt template over ``{premise}`` and ``{hypothesis}`` (``{{``/``}}`` for literal braces).

    `render(premise, hypothesis)` → (full prompt, shared prefix text). The prefix is everything before
    the ``{hypothesis}`` value with trailing whitespace moved to the variable part. Raises ConfigError for
    an unknown field, a format spec, or a template without exactly one ``{hypothesis}``."""

    def __init__(self, text: str):
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as e:
            raise ConfigError(f"--template: {e}") from None
        self.text = text
        self.pieces: list[tuple[str, str | None]] = []
        for literal, field, spec, conv in parsed:
            if field is not None and (field not in TEMPLATE_FIELDS or spec or conv):
                raise ConfigError(
                    f"--template: unknown field {{{field}{'!' + conv if conv else ''}{':' + spec if spec else ''}}}; "
                    "use {premise} and {hypothesis} ({{ and }} for literal braces)"
                )
            self.pieces.append((literal, field))
        n_h = sum(f == "hypothesis" for _, f in self.pieces)
        if n_h != 1:
            raise ConfigError(f"--template: needs {{hypothesis}} exactly once, found it {n_h} times")
        self.fields = tuple(sorted({f for _, f in self.pieces if f}))

    def render(self, premise: str, hypothesis: str) -> tuple[str, str]:
        out: list[str] = []
        prefix = None
        for literal, field in self.pieces:
            out.append(literal)
            if field == "hypothesis":
                prefix = "".join(out)
                out.append(hypothesis)
            elif field == "premise":
                out.append(premise)
        assert prefix is not None
        return "".join(out), prefix.rstrip()


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class ClsRow:
    """A readable row: its prompt `text` and, for premise/hypothesis rows, the shared `prefix_text`."""

    pos: int
    id: str
    text: str
    prefix_text: str | None
    kept: dict[str, Any]


def _str_field(rec: dict[str, Any], name: str, rid: str) -> str:
    v = rec.get(name)
    if v is None:
        raise ValueError(f"row {rid}: {name}: missing")
    if not isinstance(v, str):
        raise ValueError(f"row {rid}: {name}: expected a string, got {type(v).__name__}")
    if not v.strip():
        raise ValueError(f"row {rid}: {name}: empty")
    return v


def parse_cls_row(
    pos: int, rec: dict[str, Any], template: Template, keep: tuple[str, ...] = ()
) -> ClsRow | RowError:
    """One input record → ClsRow or RowError (never raises). A row has `text`, or the template's
    fields (`premise` + `hypothesis`), not both."""
    kept = {k: rec.get(k) for k in keep}
    rid, id_problem = row_id(rec.get("id"), pos)
    if id_problem:
        return unidentified_row_error(pos, f"id: {id_problem}", kept=kept)
    try:
        has_pair = any(rec.get(f) is not None for f in TEMPLATE_FIELDS)
        if rec.get("text") is not None:
            if has_pair:
                raise ValueError(f"row {rid}: text: give either text or premise + hypothesis, not both")
            return ClsRow(pos, rid, _str_field(rec, "text", rid), None, kept)
        if not has_pair:
            raise ValueError(f"row {rid}: text: missing (give text, or premise + hypothesis)")
        vals = {f: (_str_field(rec, f, rid) if f in template.fields else "") for f in TEMPLATE_FIELDS}
        text, prefix = template.render(vals["premise"], vals["hypothesis"])
        return ClsRow(pos, rid, text, prefix, kept)
    except ValueError as e:
        return RowError(pos, rid, str(e), kept=kept)
    except Exception as e:  # a bad row never sinks the job
        return RowError(pos, rid, f"row {rid}: {type(e).__name__}: {e}", kept=kept)


def build_prompts(rows: list[ClsRow], tokenizer) -> list[RowPrompt]:
    """Tokenize each row's whole prompt (batched; each distinct prefix text once) and split the ids into
    the shared prefix (an exact prefix of the ids) and the rest. Text rows are all prefix."""
    if not rows:
        return []
    tokenizer = quiet_length_warning(tokenizer)  # too-long rows become row errors (backend)
    full = tokenizer([r.text for r in rows])["input_ids"]
    distinct = sorted({r.prefix_text for r in rows if r.prefix_text})
    pre = {
        t: tuple(x)
        for t, x in zip(distinct, tokenizer(distinct)["input_ids"] if distinct else [], strict=True)
    }
    out = []
    for r, ids in zip(rows, full, strict=True):
        ids = tuple(ids)
        k = lcp(ids, pre[r.prefix_text]) if r.prefix_text else len(ids)  # both tuples (lcp compares slices)
        out.append(RowPrompt(r.pos, r.id, ids[:k], (BranchSpec("", ids[k:], ()),)))
    return out


def prompt_ids(rp: RowPrompt) -> tuple[int, ...]:
    return rp.prefix + rp.branches[0].suffix


# --------------------------------------------------------------------------- checkpoint


@dataclass(frozen=True)
class Checkpoint:
    """What classify needs from a checkpoint's config.json, read without loading weights."""

    model: str
    labels: tuple[str, ...]
    architecture: str
    config: dict[str, Any]


def read_checkpoint(model: str) -> Checkpoint:
    """Read `config.json` (local folder or hub id). Raises BackendError when it cannot be read, when its
    architecture is not a `*ForSequenceClassification`, or when it has no usable `id2label`."""
    try:
        from transformers import PretrainedConfig

        cfg, _ = PretrainedConfig.get_config_dict(model)
    except Exception as e:
        raise BackendError(f"cannot read the config of {model!r}: {e}") from e
    archs = list(cfg.get("architectures") or [])
    cls_archs = [a for a in archs if a.endswith("ForSequenceClassification")]
    if not cls_archs:
        raise BackendError(
            f"{model}: not a sequence classifier (architectures {archs or 'missing'}); classify needs a "
            "*ForSequenceClassification checkpoint with a trained score head (use `run` for chat models)"
        )
    raw = cfg.get("id2label")
    if not raw:
        raise BackendError(
            f"{model}: config.json has no id2label, so the labels of the score head are unknown; "
            "add id2label (index → label name) to config.json"
        )
    try:
        by_idx = {int(k): v for k, v in raw.items()}
    except (TypeError, ValueError):
        raise BackendError(f"{model}: id2label keys must be integers, got {list(raw)}") from None
    if sorted(by_idx) != list(range(len(by_idx))):
        raise BackendError(f"{model}: id2label indices must be 0…{len(by_idx) - 1}, got {sorted(by_idx)}")
    labels = tuple(by_idx[i] for i in range(len(by_idx)))
    if not all(isinstance(x, str) and x for x in labels) or len(set(labels)) != len(labels):
        raise BackendError(f"{model}: id2label names must be distinct non-empty strings, got {list(labels)}")
    if len(labels) < 2:
        raise BackendError(f"{model}: id2label has {len(labels)} label; classify needs at least 2")
    return Checkpoint(model, labels, cls_archs[0], cfg)


# --------------------------------------------------------------------------- backends


@dataclass(frozen=True)
class ClsResult:
    """Raw logits of one row (aligned with the checkpoint's labels) and its prompt length."""

    logits: tuple[float, ...] | None
    prompt_tokens: int
    error: str | None = None


class ClassifierBackend(ABC):
    """Contract: `classify(window)` returns one ClsResult per `window.rows[i]`, whose prompt ids are
    ``prefix + branches[0].suffix``. A row that cannot run (too long, non-finite output) gets an `error`;
    it never raises for one row. Raises BackendError when the model cannot load or the engine dies.
    `max_input_tokens` is the longest prompt the model takes; `warm_tokens` counts prefix warm-up tokens."""

    name = "?"
    tokenizer: Any
    labels: tuple[str, ...]
    max_input_tokens: int | None = None
    warm_tokens: int = 0

    @abstractmethod
    def kv_budget_tokens(self) -> int: ...

    @abstractmethod
    def classify(self, window: Window) -> list[ClsResult]: ...

    def too_long(self, n: int) -> str | None:
        if self.max_input_tokens and n > self.max_input_tokens:
            return f"prompt has {n} tokens, the model takes at most {self.max_input_tokens}"
        return None

    def check_logits(self, vals: list[float] | tuple[float, ...], n: int) -> ClsResult:
        vals = tuple(float(v) for v in vals)
        if len(vals) != len(self.labels):
            return ClsResult(None, n, f"model returned {len(vals)} values for {len(self.labels)} labels")
        if not all(math.isfinite(v) for v in vals):
            return ClsResult(None, n, "non-finite logit")
        return ClsResult(vals, n)

    def close(self) -> None:  # noqa: B027 - optional hook
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def load_classifier(
    name: str, opts: BackendOptions, ckpt: Checkpoint | None = None, batch_tokens: int = 16_384
) -> ClassifierBackend:
    """Import (lazily: the hf path never imports sglang) and start classifier backend `name`.
    `batch_tokens` bounds the padded tokens of one hf forward pass (sglang batches by itself)."""
    if name not in _CLASSIFIERS:
        raise BackendError(f"unknown backend {name!r}; expected one of {', '.join(_CLASSIFIERS)}")
    from .models import check_model_trust

    check_model_trust(opts)  # before any engine or loader sees the checkpoint
    ckpt = ckpt or read_checkpoint(opts.model)
    module, cls = _CLASSIFIERS[name].split(":")
    return getattr(importlib.import_module(module), cls)(opts, ckpt, batch_tokens=batch_tokens)


# --------------------------------------------------------------------------- readout


def softmax(logits: tuple[float, ...]) -> tuple[float, ...]:
    m = max(logits)
    e = [math.exp(x - m) for x in logits]
    s = sum(e)
    return tuple(x / s for x in e)


def read_out(logits: tuple[float, ...], labels: tuple[str, ...]) -> tuple[tuple[float, ...], str]:
    """(probs, argmax label); ties go to the lowest index."""
    probs = softmax(logits)
    return probs, labels[max(range(len(logits)), key=lambda i: (logits[i], -i))]


def label_column(label: str) -> str:
    return f"p_{label}"


# --------------------------------------------------------------------------- writer


class ClassifyWriter:
    """Streams records to ``<path>.partial``; `close()` renames it into place (as io.ResultWriter).
    Kept columns take the Arrow type of the first chunk; a later value that does not fit a string column
    is written as its JSON text, else ValueError."""

    def __init__(self, path: str | Path, labels: tuple[str, ...], keep: tuple[str, ...] = ()):
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.keep = keep
        self.base = pa.schema(
            [("id", pa.string()), ("logits", pa.list_(pa.float64())), ("probs", pa.list_(pa.float64())),
             ("label", pa.string())]
            + [(label_column(x), pa.float64()) for x in labels]
            + [("prompt_tokens", pa.int64()), ("error", pa.string())]
        )  # fmt: skip
        self.schema: pa.Schema | None = None
        self._writer: pq.ParquetWriter | None = None
        self.rows_written = 0

    def _open(self, fields: list[pa.Field]) -> None:
        self.schema = pa.schema(fields)
        self.partial.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(self.partial, self.schema)

    def write(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        cols = {f.name: pa.array([r[f.name] for r in records], type=f.type) for f in self.base}
        if self.schema is None:
            fields = list(self.base)
            for k in self.keep:
                arr = pa.array([r[k] for r in records])
                fields.append(pa.field(k, pa.string() if pa.types.is_null(arr.type) else arr.type))
            self._open(fields)
        for k in self.keep:
            t = self.schema.field(k).type
            vals = [r[k] for r in records]
            try:
                cols[k] = pa.array(vals, type=t)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                if not pa.types.is_string(t):
                    raise ValueError(f"kept column {k!r} changes type after the first chunk") from None
                cols[k] = pa.array(
                    [v if v is None or isinstance(v, str) else json.dumps(v) for v in vals], type=t
                )
        self._writer.write_table(pa.table(cols, schema=self.schema))
        self.rows_written += len(records)

    def close(self) -> Path:
        if self._writer is None:  # nothing written: still a valid (empty) file
            self._open(list(self.base) + [pa.field(k, pa.string()) for k in self.keep])
        self._writer.close()
        os.replace(self.partial, self.path)
        return self.path


# --------------------------------------------------------------------------- config + job


class ClassifyConfig(EngineOptions):
    """The frozen options of one classify job (unknown keys are errors)."""

    input: Path
    output: Path
    model: str
    backend: str
    template: str = DEFAULT_TEMPLATE
    keep: tuple[str, ...] = ()
    chunk_rows: int = Field(100_000, gt=0)
    max_rows_per_window: int = Field(4096, gt=0)
    kv_budget_tokens: int | None = Field(None, gt=0)
    batch_tokens: int = Field(16_384, gt=0)
    progress: bool = True

    @field_validator("output")
    @classmethod
    def _parquet(cls, v: Path) -> Path:
        return check_output_path(v)

    @model_validator(mode="after")
    def _not_the_input(self) -> ClassifyConfig:
        check_not_input(self.output, self.input)
        return self

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        if v not in _CLASSIFIERS:
            raise ValueError(f"unknown backend {v!r}; expected one of {', '.join(_CLASSIFIERS)}")
        return v

    @field_validator("template")
    @classmethod
    def _template(cls, v: str) -> str:
        try:
            Template(v)
        except ConfigError as e:
            raise ValueError(str(e)) from None
        return v

    @field_validator("keep")
    @classmethod
    def _keep(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if clash := [k for k in v if k in BASE_COLUMNS]:
            raise ValueError(f"--keep column(s) {', '.join(clash)} clash with output columns; rename them")
        return v


def build_classify_config(**kw: Any) -> ClassifyConfig:
    """Validate options into a ClassifyConfig. Raises ConfigError naming each bad field."""
    try:
        return ClassifyConfig(**kw)
    except ValidationError as e:
        raise ConfigError("invalid options: " + validation_message(e)) from None


def unescape_template(text: str) -> str:
    """`\\n`, `\\t` and `\\\\` in a command-line template → newline, tab, backslash."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in "nt\\":
            out.append({"n": "\n", "t": "\t", "\\": "\\"}[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class ClassifySummary:
    """Counts for one classify job. logical = Σ prompt tokens of the rows run; unique = what a radix
    tree over each window's prompts holds (tokens shared with the previous row in prefix order counted once)."""

    rows: int
    answered: int
    errors: int
    logical_tokens: int
    unique_tokens: int
    warm_tokens: int
    wall_s: float
    output: str

    @property
    def shared_rate(self) -> float:
        return 1 - self.unique_tokens / self.logical_tokens if self.logical_tokens else 0.0

    def table(self) -> list[tuple[str, str]]:
        return [
            ("rows", f"{self.rows:,}"),
            ("answered", f"{self.answered:,}"),
            ("errors", f"{self.errors:,}"),
            ("prompt (logical) tokens", f"{self.logical_tokens:,}"),
            ("unique tokens (planned)", f"{self.unique_tokens:,}"),
            ("prefix warm-up tokens", f"{self.warm_tokens:,}"),
            ("shared-prefix rate", f"{self.shared_rate:.1%}"),
            ("wall time", f"{self.wall_s:.1f} s"),
            ("output", self.output),
        ]


def _record(
    rid: str, kept: dict, keep: tuple[str, ...], labels: tuple[str, ...], **kw: Any
) -> dict[str, Any]:
    rec: dict[str, Any] = dict(id=rid, logits=None, probs=None, label=None, prompt_tokens=None, error=None)
    rec.update({label_column(x): None for x in labels})
    rec.update(kw)
    rec.update({k: kept.get(k) for k in keep})  # an unreadable line has no kept values
    return rec


def run_classify(
    cfg: ClassifyConfig,
    backend: ClassifierBackend | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> ClassifySummary:
    """Run one classify job end to end. `backend` may be passed in (tests) and is then not closed here.
    `on_progress(rows_done, tokens_done)` is called after each window. Raises OpenjevError subclasses for
    job-level failures (input unreadable, checkpoint refused, model not loadable, engine died)."""
    t0 = time.perf_counter()
    path = check_input(cfg.input, cfg.keep)
    template = Template(cfg.template)
    own = backend is None
    if own:
        ckpt = read_checkpoint(cfg.model)  # refuse a checkpoint before any weights load
        backend = load_classifier(
            cfg.backend,
            cfg.backend_options(cfg.model),
            ckpt,
            batch_tokens=cfg.batch_tokens,
        )
    warm0 = backend.warm_tokens
    labels = backend.labels
    if clash := [k for k in cfg.keep if k in {label_column(x) for x in labels}]:
        if own:
            backend.close()
        raise ConfigError(f"--keep column(s) {', '.join(clash)} clash with the label columns; rename them")
    try:
        budget = cfg.kv_budget_tokens or backend.kv_budget_tokens()
        writer = ClassifyWriter(cfg.output, labels, cfg.keep)
        seen: dict[str, int] = {}
        n_rows = n_ok = n_err = logical = unique = 0
        for chunk in _records(path, cfg.chunk_rows):
            parsed: list[ClsRow | RowError] = []
            for pos, rec in chunk:
                if isinstance(rec, str):
                    parsed.append(unidentified_row_error(pos, rec))
                    continue
                row = parse_cls_row(pos, rec, template, cfg.keep)
                if row.id is None:  # no usable id (already a RowError)
                    pass
                elif row.id in seen:
                    row = RowError(
                        pos,
                        row.id,
                        duplicate_id_error(row.id, seen[row.id], pos),
                        kept=row.kept,
                    )
                else:
                    seen[row.id] = pos
                parsed.append(row)
            good = [r for r in parsed if isinstance(r, ClsRow)]
            results: dict[int, ClsResult] = {}
            for window in plan(build_prompts(good, backend.tokenizer), budget, cfg.max_rows_per_window):
                for rp, res in zip(window.rows, backend.classify(window), strict=True):
                    results[rp.pos] = res
                    if res.error is None:
                        logical += res.prompt_tokens
                unique += sum(
                    n + len(rp.branches[0].suffix)
                    for rp, n in zip(window.rows, window.new_prefix_tokens, strict=True)
                    if results[rp.pos].error is None
                )
                if on_progress:
                    on_progress(len(window.rows), window.logical_tokens)
            records = []
            for row in parsed:
                n_rows += 1
                if isinstance(row, RowError):
                    records.append(_record(row.id, row.kept, cfg.keep, labels, error=row.error))
                    continue
                res = results[row.pos]
                if res.error is not None:
                    records.append(
                        _record(
                            row.id,
                            row.kept,
                            cfg.keep,
                            labels,
                            prompt_tokens=res.prompt_tokens,
                            error=f"row {row.id}: {res.error}",
                        )
                    )
                    continue
                probs, label = read_out(res.logits, labels)
                records.append(
                    _record(
                        row.id,
                        row.kept,
                        cfg.keep,
                        labels,
                        logits=list(res.logits),
                        probs=list(probs),
                        label=label,
                        prompt_tokens=res.prompt_tokens,
                        **{label_column(x): p for x, p in zip(labels, probs, strict=True)},
                    )
                )
            for r in records:
                n_ok += r["error"] is None
                n_err += r["error"] is not None
            writer.write(records)
        if n_rows == 0:
            raise InputFileError(f"{path}: no rows")
        out = writer.close()
    finally:
        if own:
            backend.close()
    return ClassifySummary(
        n_rows, n_ok, n_err, logical, unique, backend.warm_tokens - warm0, time.perf_counter() - t0, str(out)
    )
