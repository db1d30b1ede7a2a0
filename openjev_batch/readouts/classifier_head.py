"""The `classifier-head` readout (`classify`): each row's raw class logits from a `*ForSequenceClassification`
checkpoint (e.g. a Qwen3 NLI cross-encoder: contradiction / entailment / neutral), softmaxed over its
`id2label` labels. Same reading, planning, prefill fault isolation, output store and resume as `run`.

    read ──▶ ClsRow ──template + tokenize──▶ RowPrompt(prefix=premise part, one branch=hypothesis part)
         ──plan──▶ Window ──prefill (classifier backend)──▶ logits ──softmax / id2label──▶ Parquet

- **Rows.** `text`, or `premise` + `hypothesis` rendered through a template (default
  ``Premise: {premise}\\nHypothesis: {hypothesis}``); `id` as in `run`; `--keep` columns pass through.
- **Prefix sharing.** The prompt is tokenized whole (those ids are what the model sees). The shared part
  is the template up to ``{hypothesis}``, cut *before* the whitespace that precedes the variable part
  (``…Hypothesis:`` + `` {h}``): a prefix ending in ``": "`` tokenizes differently from the full prompt
  (3 of 4 test rows). The prefix ids are the longest common prefix of the whole prompt's ids and the
  prefix text's ids, so they are always an exact prefix of what runs. Rows are sorted by them, so many
  hypotheses against one premise are adjacent and reuse its KV (sglang: radix cache, warmed once).
- **Labels.** From the checkpoint's `config.json` `id2label` (backends/checkpoint.py).
- **Output.** `id`, `logits`, `probs` (stable softmax), `label` (argmax → id2label), one `p_<label>` per
  label, `prompt_tokens`, `error`, then the kept columns; input order.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..core import BranchSpec, RowPrompt, lcp
from ..errors import ConfigError
from ..schema import (
    MAX_STATE_BYTES,
    RowError,
    checked_row_id,
    kept_values,
    option_text_problem,
    text_bytes,
    text_field,
    unidentified_row_error,
)
from .base import Readout, RowFailures, RowResults
from .label_logprobs.answer import softmax

DEFAULT_TEMPLATE = "Premise: {premise}\nHypothesis: {hypothesis}"
TEMPLATE_FIELDS = ("premise", "hypothesis")
BASE_COLUMNS = ("id", "logits", "probs", "label", "prompt_tokens", "error")
INPUT_COLUMNS = ("id", "text", "premise", "hypothesis")
TEXT_COLUMN = "text"  # the Python API takes a Series or a list of strings as this column


def build(cfg: Any, labels: tuple[str, ...] | None = None, questions: Any = None) -> ClassifierHead:
    """The readout of a job (the registry's factory, readouts/__init__.py): `labels` from a started
    backend, else read from the checkpoint's config.json (no weights; a checkpoint that is no classifier is
    refused here, before any model loads); without a model (`validate`) a placeholder label, as a row's
    checks do not need them. Raises ConfigError / BackendError."""
    if questions is not None:
        raise ConfigError("questions are for the label-logprobs readout, not for a classifier head")
    if labels is None and getattr(cfg, "model", None):
        from ..backends.checkpoint import read_checkpoint

        labels = read_checkpoint(cfg.model).labels
    return ClassifierHead(tuple(labels or ("?",)), cfg.template or DEFAULT_TEMPLATE, tuple(cfg.keep))


class Template:
    """A prompt template over ``{premise}`` and ``{hypothesis}`` (``{{``/``}}`` for literal braces).

    `render(premise, hypothesis)` → (full prompt, shared prefix text). The prefix is everything before
    the ``{hypothesis}`` value with trailing whitespace moved to the variable part. Raises ConfigError for
    an unknown field, a format spec, or a template without exactly one ``{hypothesis}``."""

    def __init__(self, text: str):
        if (problem := option_text_problem(text)) is not None:  # the tokenizer raises on a surrogate
            raise ConfigError(f"--template: {problem}")
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as e:
            raise ConfigError(f"--template: {e}") from None
        self.text = text
        self.pieces: list[tuple[str, str | None]] = []
        for literal, fld, spec, conv in parsed:
            if fld is not None and (fld not in TEMPLATE_FIELDS or spec or conv):
                raise ConfigError(
                    f"--template: unknown field {{{fld}{'!' + conv if conv else ''}{':' + spec if spec else ''}}}; "
                    "use {premise} and {hypothesis} ({{ and }} for literal braces)"
                )
            self.pieces.append((literal, fld))
        n_h = sum(f == "hypothesis" for _, f in self.pieces)
        if n_h != 1:
            raise ConfigError(f"--template: needs {{hypothesis}} exactly once, found it {n_h} times")
        self.fields = tuple(sorted({f for _, f in self.pieces if f}))

    def render(self, premise: str, hypothesis: str) -> tuple[str, str]:
        out: list[str] = []
        prefix = None
        for literal, fld in self.pieces:
            out.append(literal)
            if fld == "hypothesis":
                prefix = "".join(out)
                out.append(hypothesis)
            elif fld == "premise":
                out.append(premise)
        assert prefix is not None
        return "".join(out), prefix.rstrip()


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
class ClsRow:
    """A readable row: its prompt `text` and, for premise/hypothesis rows, the shared `prefix_text`."""

    pos: int
    id: str
    text: str
    prefix_text: str | None
    kept: dict[str, Any]


def _str_field(rec: dict[str, Any], name: str, rid: str) -> str:
    try:
        return text_field(rec, name)
    except ValueError as e:
        raise ValueError(f"row {rid}: {e}") from None


def parse_cls_row(
    pos: int, rec: dict[str, Any], template: Template, keep: tuple[str, ...] = ()
) -> ClsRow | RowError:
    """One input record → ClsRow or RowError (never raises). A row has `text`, or the template's
    fields (`premise` + `hypothesis`), not both. The values get `run`'s checks (schema.py): a lone
    surrogate or an undecodable cell in the id, a text field or a kept column is the row's error."""
    kept, kept_problem = kept_values(rec, keep)
    rid, id_problem = checked_row_id(rec.get("id"), pos)
    if id_problem:
        return unidentified_row_error(pos, f"id: {id_problem}", kept=kept)
    try:
        has_pair = any(rec.get(f) is not None for f in TEMPLATE_FIELDS)
        if rec.get("text") is not None:
            if has_pair:
                raise ValueError(f"row {rid}: text: give either text or premise + hypothesis, not both")
            text, prefix = _str_field(rec, "text", rid), None
        elif not has_pair:
            raise ValueError(f"row {rid}: text: missing (give text, or premise + hypothesis)")
        else:
            vals = {f: (_str_field(rec, f, rid) if f in template.fields else "") for f in TEMPLATE_FIELDS}
            text, prefix = template.render(vals["premise"], vals["hypothesis"])
            if (n := text_bytes(text)) > MAX_STATE_BYTES:  # each field is within it, the prompt is not
                raise ValueError(
                    f"row {rid}: premise + hypothesis: {n:,} bytes of text, limit {MAX_STATE_BYTES:,}"
                )
        if kept_problem:  # after the text's own problems, in the order `run` names them
            raise ValueError(f"row {rid}: {kept_problem}")
        return ClsRow(pos, rid, text, prefix, kept)
    except ValueError as e:
        return RowError(pos, rid, str(e), kept=kept)
    except Exception as e:  # a bad row never sinks the job
        return RowError(pos, rid, f"row {rid}: {type(e).__name__}: {e}", kept=kept)


def build_prompts(rows: list[ClsRow], tokenizer) -> list[RowPrompt]:
    """Tokenize each row's whole prompt (batched; each distinct prefix text once) and split the ids into
    the shared prefix (an exact prefix of the ids) and the rest, the row's one branch. Text rows are all
    prefix. The row's text is data: a control string in it (`<|endoftext|>`, `<|im_end|>`) stays text
    (`TextTokenizer`); only the model's own wrapping (BOS, [CLS] … [SEP]) is added, as its tokenizer does."""
    if not rows:
        return []
    from .label_logprobs.prompt import TextTokenizer

    text = tokenizer if isinstance(tokenizer, TextTokenizer) else TextTokenizer(tokenizer)
    full = text.encode([r.text for r in rows], specials=True)
    distinct = sorted({r.prefix_text for r in rows if r.prefix_text})
    pre = dict(zip(distinct, text.encode(distinct, specials=True) if distinct else [], strict=True))
    out = []
    for r, ids in zip(rows, full, strict=True):
        ids = tuple(ids)
        k = lcp(ids, pre[r.prefix_text]) if r.prefix_text else len(ids)  # both tuples (lcp compares slices)
        out.append(RowPrompt(r.pos, r.id, ids[:k], (BranchSpec("", ids[k:], ()),)))
    return out


def prompt_ids(rp: RowPrompt) -> tuple[int, ...]:
    """The ids a classifier row runs: its prefix and its one branch."""
    return rp.prefix + rp.branches[0].suffix


class ClassifierPrompter:
    """The prompt stage of this readout: one branch per row, nothing fails here (too-long rows are the
    backend's row errors, against the model's real input limit)."""

    def __init__(self, tokenizer):
        from .label_logprobs.prompt import TextTokenizer

        self.tokenizer = TextTokenizer(tokenizer)  # built once: content never becomes markup

    def build_many(self, rows: list[ClsRow]) -> list[tuple[RowPrompt, tuple]]:
        return [(rp, ()) for rp in build_prompts(rows, self.tokenizer)]


def read_out(logits: tuple[float, ...], labels: tuple[str, ...]) -> tuple[tuple[float, ...], str]:
    """(probs, argmax label); ties go to the lowest index."""
    probs = tuple(softmax(logits))
    return probs, labels[max(range(len(logits)), key=lambda i: (logits[i], -i))]


def label_column(label: str) -> str:
    return f"p_{label}"


def check_keep(keep: tuple[str, ...], labels: tuple[str, ...]) -> None:
    """Raises ConfigError when a kept column has the name of a label column."""
    if clash := [k for k in keep if k in {label_column(x) for x in labels}]:
        raise ConfigError(f"--keep column(s) {', '.join(clash)} clash with the label columns; rename them")


@dataclass(frozen=True)
class ClassifierHead(Readout):
    """`labels`: the checkpoint's id2label names in index order; `template`: the premise/hypothesis prompt."""

    labels: tuple[str, ...]
    template: str = DEFAULT_TEMPLATE
    keep: tuple[str, ...] = ()
    _template: Template = field(init=False, repr=False, compare=False)

    name = "classifier-head"
    backend_kind = "classifier-head"
    unit = "rows"
    noun = "row"

    def __post_init__(self):
        check_keep(self.keep, self.labels)
        object.__setattr__(self, "_template", Template(self.template))

    @property
    def schema(self) -> pa.Schema:
        return pa.schema(
            [("id", pa.string()), ("logits", pa.list_(pa.float64())), ("probs", pa.list_(pa.float64())),
             ("label", pa.string())]
            + [(label_column(x), pa.float64()) for x in self.labels]
            + [("prompt_tokens", pa.int64()), ("error", pa.string())]
        )  # fmt: skip

    def parse_row(self, pos: int, rec: dict[str, Any]) -> ClsRow | RowError:
        return parse_cls_row(pos, rec, self._template, self.keep)

    def unreadable(self, pos: int, why: str) -> RowError:
        return unidentified_row_error(pos, why, kept=dict.fromkeys(self.keep))

    def with_error(self, row: ClsRow | RowError, error: str) -> RowError:
        return RowError(row.pos, row.id, error, kept=row.kept)

    def n_records(self, row: ClsRow | RowError) -> int:
        return 1

    def prefix_key(self, row: ClsRow | RowError) -> str:
        if isinstance(row, RowError):
            return ""
        return row.prefix_text if row.prefix_text is not None else row.text

    def problems(self, row: ClsRow) -> list[str]:
        return []

    def prompter(self, tokenizer, max_branch_tokens: int | None = None) -> ClassifierPrompter:
        return ClassifierPrompter(tokenizer)

    def _values_error(self, values) -> str | None:
        if len(values) != len(self.labels):
            return f"model returned {len(values)} values for {len(self.labels)} labels"
        if not all(math.isfinite(v) for v in values):
            return "non-finite logit"
        return None

    def records(self, row: ClsRow, results: RowResults, failed: RowFailures) -> list[dict[str, Any]]:
        _, res = results[""]
        err = res.error or self._values_error(res.values)
        if err is not None:
            return [
                self.blank(row.id, row.kept, prompt_tokens=res.prompt_tokens, error=f"row {row.id}: {err}")
            ]
        logits = tuple(float(v) for v in res.values)
        probs, label = read_out(logits, self.labels)
        cols = {label_column(x): p for x, p in zip(self.labels, probs, strict=True)}
        return [
            self.blank(
                row.id, row.kept, logits=list(logits), probs=list(probs), label=label,
                prompt_tokens=res.prompt_tokens, **cols,
            )
        ]  # fmt: skip

    def error_records(self, row: RowError) -> list[dict[str, Any]]:
        return [self.blank(row.id, row.kept, error=row.error)]

    def manifest(self) -> dict[str, Any]:
        return {"readout": self.name, "template": self.template, "labels": list(self.labels)}

    def tokens(self, table: pa.Table) -> dict[str, int]:
        ok = table.filter(pc.is_null(table.column("error")))
        return {"prefix": 0, "branch": int(pc.sum(ok.column("prompt_tokens")).as_py() or 0), "cached": 0}

    def answers(self, table: pa.Table) -> tuple[pa.Table, dict[str, list[str]]]:
        ok = table.filter(pc.is_valid(table.column("label")))
        conf = [max(p) if p else None for p in ok.column("probs").to_pylist()]
        t = pa.table(
            {
                "question": pa.array(["label"] * ok.num_rows, pa.string()),
                "answer": ok.column("label"),
                "confidence": pa.array(conf, pa.float64()),
            }
        )
        return t, {"label": list(self.labels)}

    def summary_rows(self, s) -> list[tuple[str, str]]:
        return [
            ("rows", f"{s.rows:,}"),
            ("answered", f"{s.answered:,}"),
            ("errors", f"{s.errors:,}"),
            ("prompt (logical) tokens", f"{s.branch_tokens:,}"),
            ("unique tokens (planned)", f"{s.unique_tokens:,}"),
            ("prefix warm-up tokens", f"{s.warm_tokens:,}"),
            ("shared-prefix rate", f"{s.shared_rate:.1%}"),
            ("wall time", f"{s.wall_s:.1f} s"),
            ("output", s.output),
        ]
