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

What `run` reads of an entry is its type, options, temperature and abstain_below (multi: threshold); the rest
says what the fit promises (evaluation/calibration_fit.py): a missed target has `"target_met": false`,
abstain_below 1 and a `note`; `calibrate --holdout` adds `holdout`, the same figures on rows left out of the
fit. `debias_order` is the `--debias-order` of the run whose answers were fitted (read from that output's
manifest; absent when the labelled file carries none, a hand-made one): debiased probabilities are averages
over option orders, flatter than one order's, so a temperature fitted on one K means nothing at another, and
`run --calibration` refuses a job whose `--debias-order` differs. A key given twice (a question written
twice) is refused: JSON would keep the last one silently.

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

from ...errors import ConfigError, OptionWarning, one_line
from .answer import Answer, confidence
from .questions import QuestionSpec

FORMAT = "openjev-calibration/1"
UNFITTED = ("error", "raw")
CURVE_POINTS = 10  # the selective-accuracy/coverage curve at 10 %, 20 %, … 100 % coverage
# `calibrate --min-kept`'s default: a target counts as met only on this many kept answers at least (below it
# the Wilson bound is too wide to promise anything; 30, the usual rule of thumb for a normal approximation)
MIN_KEPT = 30


@dataclass(frozen=True)
class Entry:
    qtype: str
    options: tuple[str, ...] | int  # an int: any options of that many (a benchmark's per-row option texts)
    temperature: float
    abstain_below: float
    threshold: float = 0.5  # multi: the P(yes) a label is chosen at


@dataclass(frozen=True)
class Calibration:
    entries: dict[str, Entry]
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

    def entry(self, qid: str, qtype: str, options: tuple[str, ...]) -> Entry | None:
        """The entry of question `qid` asked with `options`; None when the file lets it go unfitted. Raises
        ValueError (the question's error) when it has none, or was fitted on other options."""
        e = self.entries.get(qid)
        if e is None:
            if self.unfitted == "raw":
                return None
            raise ValueError(f"the calibration file has no entry for this question (fitted: {self._names()}; "
                             'a file written by `calibrate --unfitted raw`, or with "unfitted": "raw", answers it '
                             "uncalibrated)")
        fits = len(options) == e.options if isinstance(e.options, int) else e.options == tuple(options)
        if not fits or e.qtype != qtype:
            fitted = f"{e.options} options" if isinstance(e.options, int) else f"options {list(e.options)}"
            raise ValueError(
                f"the calibration file's entry was fitted on a {e.qtype} question with {fitted}, "
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


def apply(e: Entry, a: Answer) -> tuple[Answer, bool]:
    """The calibrated answer and whether to abstain."""
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


class DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique: json keeps the last of a repeated key, so a question written
    twice was calibrated by its second entry without a word (issue 42.7)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(f"the key {k!r} is given twice (a question written twice?): keep one")
        out[k] = v
    return out


def load_calibration(path: Path) -> Calibration:
    """Read and check a calibration file. Raises ConfigError naming the file and the field."""
    path = Path(path)
    try:
        # a FIFO or device would block the read (or never end): a calibration file is a regular file
        if not path.is_file():
            what = "no such file" if not path.exists() else "not a regular file"
            raise ConfigError(f"--calibration {path}: {what}")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(f"--calibration {path}: over {MAX_FILE_BYTES >> 20} MiB: not a calibration file")
        raw = path.read_bytes()
        doc = json.loads(raw, object_pairs_hook=_unique_keys)
    except OSError as e:
        raise ConfigError(f"--calibration {path}: cannot read ({e.strerror})") from None
    except DuplicateKey as e:
        raise ConfigError(f"--calibration {path}: {e}") from None
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"--calibration {path}: not JSON ({e})") from None
    where = f"--calibration {path}"
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(
            f"{where}: not a calibration file (format must be {FORMAT!r}; `calibrate` writes one)"
        )
    unfitted = doc.get("unfitted", "error")
    if unfitted not in UNFITTED:
        raise ConfigError(f"{where}: unfitted: expected one of {', '.join(UNFITTED)}, got {unfitted!r}")
    qs = doc.get("questions")
    if not isinstance(qs, dict) or not qs:
        raise ConfigError(f"{where}: questions: expected a non-empty object of question id → entry")
    debias = doc.get("debias_order")
    if debias is not None and (type(debias) is not int or not 1 <= debias <= 64):
        raise ConfigError(f"{where}: debias_order: expected an integer 1–64 (the fitted run's --debias-order), "
                          f"got {str(debias)[:40]}")  # fmt: skip
    entries = {}
    for qid, v in qs.items():
        try:
            entries[str(qid)] = _entry(v)
        except ValueError as e:  # the question id is the file's text: escaped, never a forged line
            raise ConfigError(f"{where}: questions.{one_line(str(qid))}: {e}") from None
    return Calibration(entries, unfitted, hashlib.sha256(raw).hexdigest(), str(path), debias)


def _entry(v: Any) -> Entry:
    """One question's entry of the file. Raises ValueError naming the field, in words (issue 48.8: a missing
    temperature read `(…) ('temperature')`)."""
    if not isinstance(v, dict):
        raise ValueError("expected an object with type, options, temperature and abstain_below (multi: threshold)")
    needs = ("type", "options" if "n_options" not in v else "n_options")
    needs += ("threshold",) if v.get("type") == "multi" else ("temperature", "abstain_below")
    if missing := [k for k in needs if k not in v]:
        raise ValueError(f"{', '.join(missing)} missing (an entry needs type, options, temperature and "
                         "abstain_below; multi: type, options and threshold)")  # fmt: skip
    qtype = str(v["type"])
    n = v.get("n_options") if v.get("options") is None else None
    if n is not None and (type(n) is not int or not 2 <= n <= 64):
        raise ValueError("n_options must be an integer 2–64")
    if n is None and not isinstance(v["options"], list):
        raise ValueError("options must be a list of the option names (or null with n_options)")
    options = n if n is not None else tuple(str(o) for o in v["options"])
    if qtype == "multi":  # per-label P(yes), set by hand: only the threshold labels are chosen at
        # [0, 1], as a question's own threshold (questions.py)
        return Entry(qtype, options, 1.0, 0.0, _number(v, "threshold", 0.0, 1.0))
    return Entry(qtype, options, _number(v, "temperature", *T_RANGE), _number(v, "abstain_below", 0.0, 1.0))


# A temperature outside this is no calibration: at T = 1e-320 (a subnormal a hand-edited file held) every
# ln P / T was -inf and the output NaN with exit 0 (hostile trial); `calibrate` fits within [0.05, 20].
T_RANGE = (1e-3, 1e3)


def _number(entry: dict, name: str, lo: float, hi: float) -> float:
    """A JSON number (not a bool, not a string holding one) in [lo, hi]. Raises ValueError naming it."""
    v = entry[name]
    if type(v) not in (int, float) or not lo <= v <= hi:  # NaN fails the comparison; a huge int compares fine
        raise ValueError(f"{name} must be in [{lo:g}, {hi:g}] (a JSON number), got {str(v)[:40]}")
    return float(v)
