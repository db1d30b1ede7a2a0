"""The classifier-head readout's own options (`classify`): the premise/hypothesis template, declared once here
with its default."""

from __future__ import annotations

from typing import Annotated

from pydantic import field_validator

from ...errors import ConfigError
from ..base import ReadoutOptions
from ..flags import Flag
from .template import DEFAULT_TEMPLATE, Template


class ClassifierHeadOptions(ReadoutOptions):
    """`template`: the prompt over {premise} and {hypothesis} (default: the NLI template)."""

    template: Annotated[
        str,
        Flag(r"Prompt over {premise} and {hypothesis}; \n is a newline", also=("validate",), shown="NLI template",
             escapes=True, per_run=True),
    ] = DEFAULT_TEMPLATE  # fmt: skip

    @field_validator("template", mode="before")
    @classmethod
    def _template(cls, v: str | None) -> str:
        if v is None:  # not given (the CLI's and the API's None): the default
            return DEFAULT_TEMPLATE
        if not isinstance(v, str):  # the Python API's keyword
            raise ValueError(f"template must be a string, got {type(v).__name__}")
        try:
            Template(v)
        except ConfigError as e:
            raise ValueError(str(e)) from None
        return v
