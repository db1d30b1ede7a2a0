"""Calibration that travels (issue 32.1): `calibrate` fits, per question, a temperature and an abstain
threshold on labelled rows and writes them to a JSON file; `run --calibration FILE` applies them every night.

File (``format: openjev-calibration/1``)::

    {"format": "openjev-calibration/1", "unfitted": "error", "debias_order": 1,
     "target": {"precision": 0.9, "min_kept": 30},
     "questions": {"<question id>": {"type": "choice", "options": [...], "temperature": 1.7,
                   "abstain_below": 0.62, "n": 400, "kept": 284, "coverage": 0.71, "selective_accuracy": 0.93,
                   "ci95": [0.90, 0.95], "target_met": true, "accuracy": 0.8, "ece": 0.03, "brier": 0.3,
                   "raw": {"ece": 0.1, "brier": 0.35},
                   "curve": [{"coverage": 0.1, "accuracy": 1.0, "threshold": 0.97}, ...]}}}

One pydantic model, `CalibrationFile`, is the format: the writer (evaluation/calibration_fit.py) constructs it,
`load_calibration` validates it. What `run` applies of an entry (`CalibrationEntry`) is its type, options,
temperature and abstain_below (multi: threshold); the rest, written beside them, is its `report`: what the fit
promises (evaluation/calibration_fit.py): a missed target has `"target_met": false`,
abstain_below 1 and a `note`; `calibrate --holdout` adds `holdout`, the same figures on rows left out of the
fit. `debias_order`: the fitted run's `--debias-order` (its output's manifest); `run --calibration` refuses
another (averaged orders are flatter: a T fitted at one K means nothing at another). A key given twice (a
question written twice) is refused: JSON would keep the last one silently. A field at the top level that
this reader does not know is kept, not refused (a later writer's addition).

Applied to one answer: probs ← softmax(ln probs / T) (Guo et al. 2017, the fit of `eval --calibrate`), the
answer, confidence, p_true and score from those; `abstain` = max(probs) < abstain_below. The raw distribution
stays in `raw_probs`. A question of the data without an entry is an error (at start for `--questions`, the
question's error for per-row questions) unless the file says `"unfitted": "raw"` (answered uncalibrated,
`abstain` null). An entry fitted on other options is an error too: its temperature means nothing there.
An entry fitted on rows whose options differ row to row (a benchmark's question `answer` in an eval folder)
has `"options": null, "n_options": K` and applies to any K options.
A multi question's entry (`calibrate` fits it on rows whose gold is a set of labels,
evaluation/calibration_multi.py; or by hand) is `{"type": "multi", "options": [labels], "threshold": 0.7}`:
the P(yes) its labels are chosen at, in [0, 1] as a question's own `threshold`.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ...errors import ConfigError, OptionWarning, one_line
from ...values import no_duplicate_keys
from .answer import Answer, confidence
from .questions import QuestionSpec

FORMAT = "openjev-calibration/1"
UNFITTED = ("error", "raw")
CURVE_POINTS = 10  # the selective-accuracy/coverage curve at 10 %, 20 %, … 100 % coverage
# `calibrate --min-kept`'s default: a target counts as met only on this many kept answers at least (below it
# the Wilson bound is too wide to promise anything; 30, the usual rule of thumb for a normal approximation)
MIN_KEPT = 30


# A temperature outside this is no calibration: at T = 1e-320 (a subnormal a hand-edited file held) every
# ln P / T was -inf and the output NaN with exit 0 (hostile trial); `calibrate` fits within [0.05, 20].
T_RANGE = (1e-3, 1e3)
APPLIED = ("type", "options", "n_options", "temperature", "abstain_below", "threshold")
NEEDS = "an entry needs type, options, temperature and abstain_below (multi: threshold)"


class CalibrationEntry(BaseModel):
    """One question's entry: the fields `run` applies, and `report`, what the fit says of them (n, kept,
    coverage, the curve, holdout, a note…), free-form. In the file the report's keys stand beside the applied
    ones (`flat`), as `calibrate` has always written them."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: str
    options: tuple[str, ...] | None  # None: any options of n_options (a benchmark's per-row option texts)
    n_options: Any = None
    temperature: float | None = None
    abstain_below: float | None = None
    threshold: float | None = None  # multi: the P(yes) a label is chosen at
    report: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        """The file's flat entry: the keys that are not applied fields are the report."""
        if not isinstance(v, dict):
            raise ValueError(f"expected an object, got {str(v)[:40]}")
        if "report" in v:  # built in code: already split
            return v
        return {**{k: x for k, x in v.items() if k in APPLIED}, "report": {k: x for k, x in v.items() if k not in APPLIED}}

    @field_validator("options", mode="before")
    @classmethod
    def _names(cls, v: Any) -> Any:
        if v is None or isinstance(v, str) or not isinstance(v, list | tuple):
            return None if v is None else _refuse(f"options must be a list of option names, got {str(v)[:40]}")
        return tuple(str(o) for o in v)

    @field_validator("temperature", "abstain_below", "threshold", mode="before")
    @classmethod
    def _number(cls, v: Any, info: Any) -> Any:
        """A JSON number (not a bool, not a string holding one) in its range."""
        lo, hi = T_RANGE if info.field_name == "temperature" else (0.0, 1.0)
        if v is not None and (type(v) not in (int, float) or not lo <= v <= hi):  # NaN fails the comparison
            _refuse(f"{info.field_name} must be in [{lo:g}, {hi:g}] (a JSON number), got {str(v)[:40]}")
        return None if v is None else float(v)

    @model_validator(mode="after")
    def _complete(self) -> CalibrationEntry:
        n = self.n_options
        if self.options is None and (type(n) is not int or not 2 <= n <= 64):
            _refuse("n_options must be an integer 2–64 (options null: any options of that many)")
        need = ("threshold",) if self.type == "multi" else ("temperature", "abstain_below")
        if missing := [k for k in need if getattr(self, k) is None]:
            _refuse(f"{', '.join(missing)}: missing ({NEEDS})")
        return self

    @property
    def size(self) -> tuple[str, ...] | int:
        """Its options, or their count for an entry fitted on per-row options."""
        return self.options if self.options is not None else int(self.n_options)

    def flat(self) -> dict[str, Any]:
        """The entry as the file holds it: applied fields first, then the report."""
        out: dict[str, Any] = {"type": self.type, "options": None if self.options is None else list(self.options)}
        if self.options is None:
            out["n_options"] = self.n_options
        for k in ("temperature", "abstain_below", "threshold"):
            if (v := getattr(self, k)) is not None:
                out[k] = v
        return {**out, **self.report}


class CalibrationFile(BaseModel):
    """The file (``format: openjev-calibration/1``). Open: a top-level field this reader does not know is kept."""

    model_config = ConfigDict(frozen=True, extra="allow")
    format: str
    unfitted: str = "error"  # "error" or "raw"
    target: dict[str, Any] | None = None
    questions: dict[str, CalibrationEntry]
    holdout: dict[str, Any] | None = None
    # the fitted run's --debias-order (issue 48.4); None: not recorded (a hand-made or older file)
    debias_order: int | None = Field(default=None, ge=1, le=64, strict=True)

    @field_validator("unfitted")
    @classmethod
    def _unfitted(cls, v: str) -> str:
        return v if v in UNFITTED else _refuse(f"expected one of {', '.join(UNFITTED)}, got {v!r}")

    @field_validator("questions", mode="before")
    @classmethod
    def _some(cls, v: Any) -> Any:
        return v if isinstance(v, dict) and v else _refuse("expected a non-empty object of question id → entry")

    def document(self) -> dict[str, Any]:
        """The file's JSON object, in the order `calibrate` writes it."""
        out: dict[str, Any] = {"format": self.format, "unfitted": self.unfitted}
        if self.debias_order is not None:
            out["debias_order"] = self.debias_order
        if self.target is not None:
            out["target"] = self.target
        out["questions"] = {q: e.flat() for q, e in self.questions.items()}
        if self.holdout is not None:
            out["holdout"] = self.holdout
        return {**out, **(self.model_extra or {})}


def _refuse(why: str) -> Any:
    raise ValueError(why)


@dataclass(frozen=True)
class Calibration:
    entries: dict[str, CalibrationEntry]
    unfitted: str  # "error" or "raw"
    sha256: str  # the file's content: the resume key
    path: str = ""  # where it was read (the summary and the manifest name it; not part of the resume key)
    debias_order: int | None = None  # the --debias-order of the fitted answers; None: not recorded

    def check_debias_order(self, k: int) -> None:
        """Refuse a job's `--debias-order k` other than the one the file was fitted on. Raises ConfigError."""
        if self.debias_order is not None and self.debias_order != k:
            raise ConfigError(
                f"--calibration {self.path}: fitted on answers of --debias-order {self.debias_order}, this job "
                f"asks --debias-order {k}: averaging option orders changes the probabilities its temperatures "
                f"and thresholds were fitted on; run with --debias-order {self.debias_order}, or calibrate "
                f"the output of a run with --debias-order {k}"
            )

    def entry(self, qid: str, qtype: str, options: tuple[str, ...]) -> CalibrationEntry | None:
        """The entry of question `qid` asked with `options`; None when the file lets it go unfitted. Raises
        ValueError (the question's error) when it has none, or was fitted on other options."""
        e = self.entries.get(qid)
        if e is None:
            if self.unfitted == "raw":
                return None
            raise ValueError(f"the calibration file has no entry for this question (fitted: {self._names()}; "
                             'a file written by `calibrate --unfitted raw`, or with "unfitted": "raw", answers it '
                             "uncalibrated)")
        size = e.size
        fits = len(options) == size if isinstance(size, int) else size == tuple(options)
        if not fits or e.type != qtype:
            fitted = f"{size} options" if isinstance(size, int) else f"options {list(size)}"
            raise ValueError(
                f"the calibration file's entry was fitted on a {e.type} question with {fitted}, "
                f"this one is {qtype} with {list(options)}"
            )
        return e

    def _names(self) -> str:
        names = sorted(self.entries)
        return ", ".join(map(one_line, names[:8])) + (f", … ({len(names)})" if len(names) > 8 else "")

    def check_questions(self, questions: Any) -> None:
        """Refuse, at start, shared questions the file cannot calibrate. Raises ConfigError. A file with
        `unfitted: raw` that calibrates none of them is an OptionWarning now, before any model loads (issue
        48.8: `--dry-run` said nothing; the run's summary says it again at its end)."""
        asked = [q for q in questions if isinstance(q, QuestionSpec)]
        for q in asked:
            try:
                self.entry(q.qid, q.type, q.options)
            except ValueError as e:
                raise ConfigError(f"--calibration: question {q.qid!r}: {e}") from None
        if asked and not any(q.qid in self.entries for q in asked):
            names = ", ".join(q.qid for q in asked[:5]) + (f", … ({len(asked)})" if len(asked) > 5 else "")
            warnings.warn(OptionWarning(
                f"--calibration {self.path}: no entry for any of the {len(asked)} questions ({names}): every "
                "answer will be uncalibrated, as its `unfitted: raw` allows"), stacklevel=2)  # fmt: skip


def scaled(probs: tuple[float, ...], t: float) -> list[float]:
    """softmax(ln p / T); a zero probability stays zero."""
    z = [math.log(p) / t if p > 0 else -math.inf for p in probs]
    m = max(z)
    e = [math.exp(x - m) for x in z]
    s = sum(e)
    return [x / s for x in e]


def apply(e: CalibrationEntry, a: Answer) -> tuple[Answer, bool]:
    """The calibrated answer and whether to abstain (`e`: not a multi entry, which has no temperature)."""
    assert e.temperature is not None and e.abstain_below is not None
    p = scaled(a.probs, e.temperature)
    best = max(range(len(p)), key=p.__getitem__)
    cal = replace(
        a,
        probs=tuple(p),
        answer=a.options[best],
        p_true=p[0] if a.type == "noul" else None,
        score=sum(i * x for i, x in enumerate(p)) if a.type == "score" else None,
        confidence=confidence(p),
    )
    return cal, p[best] < e.abstain_below


MAX_FILE_BYTES = 64 << 20  # far above a file for 64 questions a row and thousands of question ids


def load_calibration(path: Path) -> Calibration:
    """Read and validate a calibration file (`CalibrationFile`). Raises ConfigError naming the file and the
    field."""
    path = Path(path)
    where = f"--calibration {path}"
    try:
        # a FIFO or device would block the read (or never end): a calibration file is a regular file
        if not path.is_file():
            what = "no such file" if not path.exists() else "not a regular file"
            raise ConfigError(f"{where}: {what}")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{where}: over {MAX_FILE_BYTES >> 20} MiB: not a calibration file")
        raw = path.read_bytes()
        doc = json.loads(raw, object_pairs_hook=no_duplicate_keys)
    except OSError as e:
        raise ConfigError(f"{where}: cannot read ({e.strerror})") from None
    except (ValueError, RecursionError) as e:
        # JSON keeps the last of a repeated key: a question written twice was calibrated by its second entry
        # without a word (issue 42.7)
        if str(e).startswith("duplicate key") and not isinstance(e, json.JSONDecodeError):
            raise ConfigError(f"{where}: {e} (a question written twice?): keep one") from None
        raise ConfigError(f"{where}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(f"{where}: not a calibration file (format must be {FORMAT!r}; `calibrate` writes one)")
    try:
        f = CalibrationFile.model_validate(doc)
    except ValidationError as e:
        raise ConfigError(f"{where}: {_first_problem(e)}") from None
    return Calibration(dict(f.questions), f.unfitted, hashlib.sha256(raw).hexdigest(), str(path), f.debias_order)


def _first_problem(e: ValidationError) -> str:
    """pydantic's first error as one line: where in the file, and what (our own checks name their field)."""
    err = e.errors(include_url=False)[0]
    loc = [one_line(str(x)) for x in err["loc"]]  # a question id is the file's text: never a forged line
    if err["type"] == "value_error":  # ours: the message names the field
        return f"{'.'.join(loc[:2]) or 'the file'}: {str(err['msg']).removeprefix('Value error, ')}"
    if err["type"] == "missing":
        return f"{'.'.join(loc)}: missing" + (f" ({NEEDS})" if loc[0] == "questions" else "")
    return f"{'.'.join(loc)}: {err['msg']}"
