"""Readouts: what a row asks and how its answer is read (base.py has the protocol). The registry below is the
one place that names them; each readout is a `Readout` class registered by name (`@register(name)`), that
owns its options type (`Options`), columns, command and defaults, and builds itself from a job's config
(`from_config(cfg, labels)`).

- `label-logprobs` (label_logprobs/): questions answered from option-label next-token logprobs (`run`).
- `classifier-head` (classifier_head/): a sequence-classification head's logits (`classify`).

Adding a readout: its module (a `Readout` subclass decorated `@register(name)`, with its `Options`), and one
`READOUTS.lazy` line here (so it loads only when used), and a backend class per backend for its
`backend_kind` (each backend's spec, backends/<name>/spec.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic.fields import FieldInfo

from ..errors import ConfigError
from ..registry import Registry
from .flags import Flag

if TYPE_CHECKING:
    from ..config import RunConfig
    from .base import Readout

# the readouts' names: everything else refers to them through these two constants
LABEL_LOGPROBS, CLASSIFIER_HEAD = "label-logprobs", "classifier-head"
# where each readout's class lives (imported when the readout is first used, then checked to be a Readout)
READOUTS: Registry[type[Readout]] = Registry("readout", base="openjev_batch.readouts.base:Readout")
READOUTS.lazy(LABEL_LOGPROBS, "openjev_batch.readouts.label_logprobs:LabelLogprobs")
READOUTS.lazy(CLASSIFIER_HEAD, "openjev_batch.readouts.classifier_head:ClassifierHead")

NAMES = READOUTS.names()
DEFAULT = LABEL_LOGPROBS  # a job's readout when none is named (`run`'s, and the Python API's)


def register(name: str):
    """Class decorator: `@register("label-logprobs")` makes the class readout `name` (its `name` attribute)."""

    def add(cls):
        cls.name = name
        return READOUTS.register(name)(cls)  # fills its lazy entry when its module is imported

    return add


def readout_class(name: str) -> type[Readout]:
    """The class of readout `name` (its module imported on first use). Raises ConfigError for an unknown one."""
    if name not in READOUTS:
        raise ConfigError(f"unknown readout {name!r}; expected one of {', '.join(READOUTS)}")
    return READOUTS[name]


def build(name: str, cfg: RunConfig, labels: tuple[str, ...] | None = None) -> Readout:
    """Readout `name` for a job. `cfg`: the job's options (a RunConfig: keep, model, `readout_options` of
    that readout's `Options` type); `labels`: a started backend's (classifier-head; else read from the
    checkpoint when `cfg.model` is set). Raises ConfigError / BackendError (a checkpoint that is no
    classifier)."""
    return readout_class(name).from_config(cfg, labels)


def default_readout(keep: tuple[str, ...] = (), questions: Any = None) -> Readout:
    """The default readout over parsed shared `questions` (None: each row's own) and `keep`, built without a
    job's config: what the reading and writing functions parse and write when not given one."""
    cls: Any = readout_class(DEFAULT)  # its own fields: the base Readout declares only `keep`
    return cls(questions, tuple(keep))


def base_columns(name: str) -> tuple[str, ...]:
    """The output columns a readout always writes (a kept input column must not reuse one)."""
    return tuple(readout_class(name).base_columns)


def input_columns(name: str) -> tuple[str, ...]:
    """The input columns a readout reads (the Python API's keep="all" keeps the others)."""
    return tuple(readout_class(name).input_columns)


def text_column(name: str) -> str:
    """The column a bare list of texts fills (the Python API: a Series or a list of strings)."""
    return readout_class(name).text_column


def foreign_option(name: str, field: str) -> str | None:
    """Why job option `field` (set) is refused for readout `name`: it is another readout's (each declares
    the options it reads in its `Options` type, and the command that runs it in `command`). None when
    `name` reads it, or no readout declares it."""
    mine = readout_class(name)
    if field in mine.Options.model_fields:
        return None
    for other in NAMES:
        cls = readout_class(other)
        if field in cls.Options.model_fields:
            flag = "--" + field.replace("_", "-")
            return f"{flag} is for {cls.command} ({other}), not for {mine.command} ({name})"
    return None


def command_options(command: str) -> dict[str, tuple[FieldInfo, Flag]]:
    """The readout options `command` takes, by field name, each with its `Options` field (default, bounds)
    and its `Flag`: every option of the readout that `command` runs (`Readout.command`), and each other
    readout's whose `Flag.also` names `command` (eval: the system prompt, validate: the questions)."""
    out: dict[str, tuple[FieldInfo, Flag]] = {}
    for n in NAMES:
        cls = readout_class(n)
        for name, field in cls.Options.model_fields.items():
            flag = next((m for m in field.metadata if isinstance(m, Flag)), None)
            if flag is not None and (cls.command == command or command in flag.also):
                out.setdefault(name, (field, flag))
    return out


def per_run_options() -> tuple[str, ...]:
    """The readout options the Python API takes per run (`Classifier.run`; `Flag.per_run`), not per Classifier."""
    return tuple(
        name
        for n in NAMES
        for name, field in readout_class(n).Options.model_fields.items()
        if any(isinstance(m, Flag) and m.per_run for m in field.metadata)
    )


def option_names() -> set[str]:
    """Every option some readout declares (a RunConfig keyword that goes to a readout's `Options`)."""
    return {f for n in NAMES for f in readout_class(n).Options.model_fields}
