"""The run configuration: frozen and validated once, at the CLI edge. Unknown keys are errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ConfigError
from .schema import QuestionError, QuestionSpec, parse_questions


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input: Path
    output: Path
    model: str
    backend: str
    questions_file: Path | None = None
    keep: tuple[str, ...] = ()
    chunk_rows: int = Field(20_000, gt=0)
    max_branches_per_window: int = Field(4096, gt=0)
    kv_budget_tokens: int | None = Field(None, gt=0)
    device: str = "auto"
    dtype: str = "auto"
    tp_size: int = Field(1, gt=0)
    dp_size: int = Field(1, gt=0)
    mem_fraction_static: float | None = Field(None, gt=0, lt=1)
    attention_backend: str | None = None
    context_length: int | None = Field(None, gt=0)
    engine_args: dict[str, Any] = Field(default_factory=dict)
    progress: bool = True
    resume: bool = False

    @field_validator("output")
    @classmethod
    def _parquet(cls, v: Path) -> Path:
        if v.suffix.lower() != ".parquet":
            raise ValueError(f"output must be a .parquet file, got {v}")
        if v.is_dir():
            raise ValueError(f"{v} is a directory")
        if not v.resolve().parent.is_dir():
            raise ValueError(f"folder {v.resolve().parent} does not exist")
        if not os.access(v.resolve().parent, os.W_OK):
            raise ValueError(f"folder {v.resolve().parent} is not writable")
        return v

    @field_validator("keep")
    @classmethod
    def _keep(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        from .io import OUTPUT_SCHEMA

        if clash := [k for k in v if k in OUTPUT_SCHEMA.names]:
            raise ValueError(f"{', '.join(clash)} already output column(s); rename the input column")
        if len(set(v)) != len(v):
            raise ValueError(f"a column is named twice in {', '.join(v)}")
        return v

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        from .backends import NAMES

        if v not in NAMES:
            raise ValueError(f"unknown backend {v!r}; expected one of {', '.join(NAMES)}")
        return v


def build_config(**kw: Any) -> RunConfig:
    """Validate options into a RunConfig. Raises ConfigError naming each bad field."""
    try:
        return RunConfig(**kw)
    except ValidationError as e:
        msgs = [
            f"{'.'.join(map(str, err['loc']))}: {err['msg'].removeprefix('Value error, ')}"
            for err in e.errors()
        ]
        raise ConfigError("invalid options: " + "; ".join(msgs)) from None


def parse_engine_args(pairs: list[str]) -> dict[str, Any]:
    """`key=value` strings → dict; values parsed as YAML scalars (numbers, booleans, null, strings)."""
    out: dict[str, Any] = {}
    for p in pairs:
        key, sep, val = p.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--engine-arg expects key=value, got {p!r}")
        out[key.strip().replace("-", "_")] = yaml.safe_load(val) if val else ""
    return out


def load_questions(path: Path) -> tuple[QuestionSpec, ...]:
    """Read a `--questions` file (JSON or YAML mapping question_id → question); every question must be
    valid. Raises ConfigError with each question's problem."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--questions: no such file {path}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"--questions {path}: cannot parse: {e}") from None
    try:
        qs = parse_questions(raw)
    except ValueError as e:
        raise ConfigError(f"--questions {path}: {e}") from None
    bad = [q.error for q in qs if isinstance(q, QuestionError)]
    if bad:
        raise ConfigError(f"--questions {path}: " + "; ".join(bad))
    return qs  # type: ignore[return-value]
