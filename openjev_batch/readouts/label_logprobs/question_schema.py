"""The schema a question is validated against (`type`, `instructions`, `criteria` and the optional keys),
before questions.py turns it into a `QuestionSpec`. Its messages name the field; questions.py adds the
question id (``questions.<id>.<field>: why``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...options import one_of
from .leads import lead_problem

MIN_OPTIONS, MAX_OPTIONS = 2, 64
QUESTION_TYPES = ("noul", "choice", "score", "multi")
MIN_LABELS = 1  # multi: one yes/no item per label, so one label is a question too (1–64)
MAX_DEBIAS = MAX_OPTIONS  # `debias: K`: K cyclic option orders, at most one per option
# a description: text, or a JSON object or array (shown as compact JSON, as the seed shows it)
DESCRIPTION = (str, dict, list)
DESCRIPTION_WANTED = "description must be a string, a JSON object or array, or null"
_WANT = {
    "debias": "the number of option orders K (1 up to the option count)",
    "threshold": "a P(yes) in [0, 1]",
}


class _Question(BaseModel):
    """The systemone question schema (`type`, `instructions`, `criteria`); unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: str
    # text, or a JSON object or array (shown as compact JSON); absent or null: the seed's default instructions
    instructions: Any = None
    criteria: Any = None
    answer_lead: str | None = None
    examples: list[Any] | None = None
    # closed, as a calibration file's threshold and abstain_below are (calibration.py): 0 chooses every
    # label, 1 only a certain one; both are answers a fitted file may give
    threshold: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)  # NaN said "<= 1" (hostile trial)
    debias: int | None = Field(None, ge=1, le=MAX_DEBIAS)

    @field_validator("threshold", "debias", mode="before")
    @classmethod
    def _not_bool(cls, v: Any, info: Any) -> Any:
        # a bool is an int to pydantic: `debias: true` was read as K = 1 (no debiasing, silently) and
        # `threshold: true` as 1.0; the issue defines `debias: K`, a count of orders, with no yes/no form
        if isinstance(v, bool):
            raise ValueError(f"expected {_WANT[info.field_name]}, not {str(v).lower()}")
        return v

    @field_validator("answer_lead")
    @classmethod
    def _lead(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or len(v) > 200):
            raise ValueError("must be 1–200 characters, not only whitespace")
        if v is not None and (why := lead_problem(v)):
            raise ValueError(why)
        return v

    @field_validator("type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        return one_of("question type", v, QUESTION_TYPES)

    @field_validator("instructions")
    @classmethod
    def _nonempty(cls, v: Any) -> Any:
        if v is not None and not isinstance(v, str | dict | list):
            raise ValueError("expected text, or a JSON object or array (shown as compact JSON)")
        if isinstance(v, str) and not v.strip():
            raise ValueError("must not be empty")
        return v

    @model_validator(mode="after")
    def _criteria(self) -> _Question:
        c, t = self.criteria, self.type
        if self.threshold is not None and t != "multi":
            raise ValueError("threshold: only multi questions have one (the P(yes) a label is chosen at)")
        if self.debias is not None and t not in ("choice", "score"):
            raise ValueError("debias: only choice and score questions are shown in several option orders")
        if self.debias is not None and isinstance(c, dict | list) and self.debias > len(c):
            raise ValueError(
                f"debias: {self.debias} orders of {len(c)} options; at most one order per option"
            )
        if t == "multi":
            if self.examples:
                raise ValueError("examples: not for multi questions")
            if not isinstance(c, dict):
                raise ValueError("criteria: multi needs an object mapping label name → description")
            if not MIN_LABELS <= len(c) <= MAX_OPTIONS:
                raise ValueError(f"criteria: multi needs 1–64 labels, got {len(c)}")
            for k, v in c.items():
                if not str(k).strip():
                    raise ValueError("criteria: label names must not be empty")
                if v is not None and not isinstance(v, DESCRIPTION):
                    raise ValueError(f"criteria.{k}: {DESCRIPTION_WANTED}")
        elif t == "noul":
            if c is not None and (not isinstance(c, dict) or set(c) - {"true", "false"}):
                got = f" (got keys {', '.join(map(repr, c))})" if isinstance(c, dict) else ""
                raise ValueError(
                    f"criteria: noul criteria must be an object with keys 'true' and/or 'false'{got}"
                )
            for k, v in (c or {}).items():  # a number or list was read as the option's text (issue 34.18)
                if v is not None and not isinstance(v, DESCRIPTION):
                    raise ValueError(f"criteria.{k}: {DESCRIPTION_WANTED}")
        elif t == "choice":
            if not isinstance(c, dict):
                raise ValueError("criteria: choice needs an object mapping option name → description")
            if not MIN_OPTIONS <= len(c) <= MAX_OPTIONS:
                raise ValueError(f"criteria: choice needs 2–64 options, got {len(c)}")
            for k, v in c.items():
                if not str(k).strip():
                    raise ValueError("criteria: option names must not be empty")
                if v is not None and not isinstance(v, DESCRIPTION):
                    raise ValueError(f"criteria.{k}: {DESCRIPTION_WANTED}")
        else:
            if not isinstance(c, list):
                raise ValueError("criteria: score needs a list of level descriptions, lowest first")
            if not MIN_OPTIONS <= len(c) <= MAX_OPTIONS:
                raise ValueError(f"criteria: score needs 2–64 levels, got {len(c)}")
            if not all(isinstance(x, DESCRIPTION) for x in c):
                raise ValueError("criteria: score levels must be strings (or JSON objects or arrays)")
        return self
