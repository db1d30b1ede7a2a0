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
- **Images.** An `image` / `images` column is the premise's image(s) (rows.py; `run`'s rules and limits),
  in the prefix as the checkpoint's processor makes them (prompt.py); a model that takes none is refused at
  start when the input has an image column.
- **Labels.** From the checkpoint's `config.json` `id2label` (checkpoint/classifier.py).
- **Output.** `id`, `logits`, `probs` (stable softmax), `label` (argmax → id2label), `confidence` (1 − H/ln K
  over `probs`, as `run`'s), one `p_<label>` per label, `prompt_tokens`, `error`, then the kept columns;
  input order.

template.py holds the template, rows.py the input rows, prompt.py the tokenization and the prefix split; this
file the readout: output columns, the read-out, the resume key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from ...core import RowError, unidentified_row_error
from ...errors import ConfigError
from .. import CLASSIFIER_HEAD, register
from ..answer import confidence, softmax
from ..base import Readout, RowFailures, RowResults
from ..image_prompt import check_model_takes_images
from ..rows_images import input_has_image_column
from .options import ClassifierHeadOptions
from .prompt import ClassifierPrompter
from .rows import ClsRow, parse_cls_row
from .template import DEFAULT_TEMPLATE, Template

if TYPE_CHECKING:
    from ...config import RunConfig


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


@register(CLASSIFIER_HEAD)
@dataclass(frozen=True)
class ClassifierHead(Readout):
    """`labels`: the checkpoint's id2label names in index order; `template`: the premise/hypothesis prompt."""

    labels: tuple[str, ...]
    template: str = DEFAULT_TEMPLATE
    keep: tuple[str, ...] = ()
    image_root: str | None = None  # the input file's folder (relative image paths); None: absolute only
    image_input: bool = False  # the input has an image column: a model that takes no images is refused
    _template: Template = field(init=False, repr=False, compare=False)

    backend_kind = "classifier-head"
    unit = "rows"
    noun = "row"
    command = "classify"
    Options = ClassifierHeadOptions
    input_columns = ("id", "text", "premise", "hypothesis", "image", "images")
    base_columns = ("id", "logits", "probs", "label", "confidence", "prompt_tokens", "error")
    text_column = "text"  # the Python API takes a Series or a list of strings as this column
    chunk_rows = 20_000

    @classmethod
    def from_config(cls, cfg: RunConfig, labels: tuple[str, ...] | None = None) -> ClassifierHead:
        """`labels` from a started backend, else read from the checkpoint's config.json (no weights; a
        checkpoint that is no classifier is refused here, before any model loads); without a model
        (`validate`) a placeholder label, as a row's checks do not need them. Raises ConfigError /
        BackendError."""
        if labels is None and getattr(cfg, "model", None):
            # lazy: keeps --help fast (the readouts load at --help)
            from ...checkpoint.classifier import read_checkpoint

            labels = read_checkpoint(cfg.model).labels
        # relative image paths resolve against the input file's folder, and only inside it (images.py)
        root, image_input = None, False
        if getattr(cfg, "input", None) and Path(cfg.input).is_file():
            root, image_input = str(Path(cfg.input).absolute().parent), input_has_image_column(Path(cfg.input))
        if image_input and getattr(cfg, "model", None):  # before any weights load: tokenizer and processor
            check_model_takes_images(cfg.model, getattr(cfg, "trust_remote_code", False))
        template = cast(ClassifierHeadOptions, cfg.readout_options).template  # a job of this readout
        return cls(tuple(labels or ("?",)), template, tuple(cfg.keep), root, image_input)

    def __post_init__(self):
        check_keep(self.keep, self.labels)
        object.__setattr__(self, "_template", Template(self.template))

    @property
    def schema(self) -> pa.Schema:
        return pa.schema(
            [("id", pa.string()), ("logits", pa.list_(pa.float64())), ("probs", pa.list_(pa.float64())),
             ("label", pa.string()), ("confidence", pa.float64())]
            + [(label_column(x), pa.float64()) for x in self.labels]
            + [("prompt_tokens", pa.int64()), ("error", pa.string())]
        )  # fmt: skip

    def parse_row(self, pos: int, rec: dict[str, Any]) -> ClsRow | RowError:
        return parse_cls_row(pos, rec, self._template, self.keep, self.image_root)

    def unreadable(self, pos: int, why: str) -> RowError:
        return unidentified_row_error(pos, why, kept=dict.fromkeys(self.keep))

    def with_error(self, row: ClsRow | RowError, error: str) -> RowError:
        return RowError(row.pos, row.id, error, kept=row.kept)

    def n_records(self, row: ClsRow | RowError) -> int:
        return 1

    def prefix_key(self, row: ClsRow | RowError) -> str:
        if isinstance(row, RowError):
            return ""
        if row.images:  # with the images' content hashes: other images are another prefix
            return "".join(p if isinstance(p, str) else f"\x1e{p.sha256}\x1e" for p in row.prefix_pieces)
        return row.prefix_text if row.prefix_text is not None else row.text

    def problems(self, row: ClsRow) -> list[str]:
        return []

    def prompter(self, tokenizer, max_branch_tokens: int | None = None) -> ClassifierPrompter:
        return ClassifierPrompter(tokenizer, self.image_input)

    def _values_error(self, values) -> str | None:
        if len(values) != len(self.labels):
            return f"model returned {len(values)} values for {len(self.labels)} labels"
        if not all(math.isfinite(v) for v in values):
            return "non-finite logit"
        return None

    def records(self, row: ClsRow, results: RowResults, failed: RowFailures) -> list[dict[str, Any]]:
        if "" in failed:  # an image the model cannot take (prompt.py)
            return [self.blank(row.id, row.kept, error=failed[""])]
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
                confidence=confidence(probs) if len(probs) > 1 else 1.0, prompt_tokens=res.prompt_tokens, **cols,
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
        # the `confidence` column, as run's (1 − H/ln K): "mean confidence" was the mean top probability
        # here and the mean concentration in `run` (issue 34.7)
        t = pa.table(
            {
                "question": pa.array(["label"] * ok.num_rows, pa.string()),
                "answer": ok.column("label"),
                "confidence": ok.column("confidence"),
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
