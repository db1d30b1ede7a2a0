"""The label-logprobs readout's own options (`run`): the shared questions, the system prompt, the calibration
file and the order debiasing. Declared
once here; the CLI and the Python API pass the same keywords (one door), validated when a RunConfig is built."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator

from ...errors import ConfigError
from ...options import one_of
from ...values import no_symlink_loop, option_text_problem, text_bytes
from ..base import ReadoutOptions
from ..flags import Flag
from .questions import MAX_QUESTION_BYTES, QuestionSpec, shared_questions

# the prompt layouts (--layout): prompt.py's (run's and the API's default) and prompt_systemone.py's (serve's)
TRANSCRIPT, SYSTEMONE = "transcript", "systemone"
LAYOUTS = (TRANSCRIPT, SYSTEMONE)


class LabelLogprobsOptions(ReadoutOptions):
    """`questions`: the questions every row is asked: a JSON/YAML file (`run -q`, or the API's path; read when
    the readout is built, its content the resume key) or a mapping question_id → question (the API's,
    parsed here: every question must be valid); None: each row's own `questions` column.
    `system_prompt`: the system message instead of the default annotator instructions
    (prompt.INSTRUCTIONS); content, so tokenized as text (a control string in it never becomes a turn);
    part of the resume key.
    `calibration`: a file `calibrate` wrote (per-question temperatures and abstain thresholds; read when the
    readout is built, its sha256 part of the resume key).
    `debias_order`: choice/score options also shown in K − 1 more cyclic orders, averaged (items.py); part
    of the resume key when > 1.
    `layout`: the prompt, `transcript` (prompt.py) or `systemone` (prompt_systemone.py, the seed's); part of
    the resume key when not `transcript`. `serve` defaults to `systemone` (cli/serve.py)."""

    questions: Annotated[
        Path | tuple[QuestionSpec, ...] | None,
        Flag("JSON/YAML question map applied to every row.", also=("validate", "serve"), short="-q", cli_type=Path,
             per_run=True, helps=(("serve", "JSON/YAML question map: a request may ask these by id (or, without "
                                            "`questions`, all of them)."),)),
    ] = None  # fmt: skip
    system_prompt: Annotated[
        str | None,
        Flag("The system message, replacing the default instructions; @FILE reads it from a file; @@TEXT is the "
             "literal text @TEXT.", also=("eval", "serve"), at_file=True),
    ] = None  # fmt: skip
    calibration: Annotated[
        Path | None,
        Flag("A file `calibrate` wrote: calibrated probs, raw_probs and an abstain column.", also=("serve",)),
    ] = None
    debias_order: Annotated[
        int,
        Flag("Show choice/score options in K cyclic orders (one more suffix each), average by option; order_spread.",
             also=("eval", "serve")),
    ] = Field(1, ge=1, le=64)  # fmt: skip

    layout: Annotated[
        str,
        Flag("The prompt: `transcript` (the conversation quoted in one user turn, option names shown) or `systemone` "
             "(the seed's: the state's messages in their own roles, then one evaluation turn; descriptions only).",
             also=("serve",), shown="transcript; serve: systemone"),
    ] = TRANSCRIPT  # fmt: skip

    @field_validator("questions", mode="before")
    @classmethod
    def _questions(cls, v: Any) -> Any:
        if v is None or isinstance(v, tuple):
            return v
        if isinstance(v, str | Path):
            return no_symlink_loop(Path(v))  # resolve() on a loop raised RuntimeError (issue 34.17)
        if isinstance(v, Mapping):
            try:
                return shared_questions(v, "questions")
            except ConfigError as e:  # the field's name leads the message already
                raise ValueError(str(e).removeprefix("questions: ")) from None
        raise ValueError(f"questions must be a mapping question_id → question or a file path, got {v!r}")

    @field_validator("debias_order", mode="before")
    @classmethod
    def _debias_order(cls, v: Any) -> Any:
        if isinstance(v, bool):  # an int to pydantic: debias_order=True was K = 1, no debiasing, silently
            raise ValueError(f"expected the number of option orders K (1–64), not {v}")
        return v

    @field_validator("system_prompt")
    @classmethod
    def _system_prompt(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("--system-prompt is empty")
        if v is not None and (problem := option_text_problem(v)) is not None:  # the tokenizer would raise
            raise ValueError(f"--system-prompt: {problem}")
        # part of every row's prefix: one too long would fail every row, slowly (hostile trial: 1 MB took
        # 0.5 s a row to turn into row errors), so it is refused at once, at the question text's limit
        if v is not None and (n := text_bytes(v)) > MAX_QUESTION_BYTES:
            raise ValueError(f"--system-prompt is {n:,} bytes, limit {MAX_QUESTION_BYTES:,}")
        return v

    @field_validator("layout")
    @classmethod
    def _layout(cls, v: str) -> str:
        return one_of("layout", v, LAYOUTS)

    def files(self) -> list[tuple[Path, str]]:
        out = [(self.questions, "the questions file (-q)")] if isinstance(self.questions, Path) else []
        return out + ([(self.calibration, "the --calibration file")] if self.calibration is not None else [])
