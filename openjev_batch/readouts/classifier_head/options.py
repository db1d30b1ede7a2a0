"""The classifier-head readout's own options (`classify`): the premise/hypothesis template, declared once here
with its default."""

from __future__ import annotations

from pydantic import field_validator

from ...errors import ConfigError
from ..base import ReadoutOptions
from .template import DEFAULT_TEMPLATE, Template


class ClassifierHeadOptions(ReadoutOptions):
    """`template`: the prompt over {premise} and {hypothesis} (default: the NLI template)."""

    template: str = DEFAULT_TEMPLATE

    @field_validator("template", mode="before")
    @classmethod
    def _template(cls, v: str | None) -> str:
        if v is None:  # not given (the CLI's and the API's None): the default
            return DEFAULT_TEMPLATE
        try:
            Template(v)
        except ConfigError as e:
            raise ValueError(str(e)) from None
        return v
