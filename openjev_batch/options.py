"""Engine options, each declared once in ENGINE_OPTIONS: that one line makes the field of EngineOptions (and so
of RunConfig, EvalConfig and BackendOptions), the CLI option of every command that takes it
(cli/options.py), the sglang.Engine argument (backends/sglang/options.py), the `--resume` key
(pipeline.loop.job_manifest) and, by its `owner`, which backend reads it: a backend's options are their own
type (`SGLangOptions`, `HFOptions`, `extra="forbid"`, nested in EngineOptions as `sglang` / `hf`), so an option
given to a backend that does not read it is refused (`EngineOptions.check_backend`), never ignored. Adding an
engine option is adding an `EngineOption` here. Also the names of the backends and of the output formats,
which config validates."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    model_validator,
)

from .errors import ConfigError

if TYPE_CHECKING:
    from typing_extensions import Self  # typing's own from Python 3.11

BACKENDS = ("hf", "sglang")  # the --backend choices (backends/__init__.py maps each to its classes)


# output format by extension; parts are always Parquet, the joined file is written in this format (write.py)
OUTPUT_FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".jsonl.gz": "jsonl.gz",
    ".ndjson.gz": "jsonl.gz",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
}


def output_format(path: str | Path) -> str:
    """parquet | jsonl | jsonl.gz | json | csv | tsv, from the output's extension (the last two suffixes
    for .jsonl.gz). Raises ValueError for another one."""
    suffixes = [x.lower() for x in Path(path).suffixes[-2:]]
    fmt = OUTPUT_FORMATS.get("".join(suffixes)) or OUTPUT_FORMATS.get(suffixes[-1] if suffixes else "")
    if fmt is None:
        raise ValueError(
            f"output must be a .parquet, .jsonl, .jsonl.gz, .json, .csv or .tsv file (or - for standard "
            f"output, as JSONL), got {path}"
        )
    return fmt


def one_of(what: str, v: Any, known: Any) -> Any:
    """`v` when it is one of `known`, else the ValueError "unknown WHAT 'v'; expected one of a, b" (a validator's)."""
    if v not in known:
        raise ValueError(f"unknown {what} {v!r}; expected one of {', '.join(known)}")
    return v


@dataclass(frozen=True)
class EngineOption:
    """One engine option. `sglang`: an `sglang.Engine` argument of the same name, passed when set (not None,
    not "auto"); `resume_key`: it changes the numbers, so it is part of the `--resume` manifest;
    `owner`: the one backend that reads it (a field of that backend's options type; None: every backend's),
    refused (when not its default) for any other backend; `commands`: the CLI commands that offer it; `flag`: its CLI name (default `--name-with-dashes`);
    `constraints`: pydantic Field bounds; `choices`: the values it takes (`cuda:N`: cuda, a colon and a
    device number), refused otherwise when the config is built — by `--dry-run` and `validate` too, not
    only by a loading backend."""

    name: str
    type: Any
    default: Any
    help: str
    sglang: bool = False
    resume_key: bool = False
    owner: str | None = None
    commands: tuple[str, ...] = ("run", "classify", "eval")
    flag: str = ""
    constraints: dict[str, Any] = field(default_factory=dict)
    choices: tuple[str, ...] = ()

    def check_choice(self, v: Any) -> Any:
        """`v` when it is one of `choices` (or there are none). Raises ValueError naming them."""
        if not self.choices or v is None or v in self.choices:
            return v
        numbered = [c.removesuffix(":N") for c in self.choices if c.endswith(":N")]
        if isinstance(v, str) and any(re.fullmatch(re.escape(c) + r":\d+", v) for c in numbered):
            return v
        return one_of(self.name, v, self.choices)

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")


ENGINE_OPTIONS: tuple[EngineOption, ...] = (
    EngineOption("device", str, "auto", "auto | cpu | cuda | cuda:N.", resume_key=True,
                 choices=("auto", "cpu", "cuda", "cuda:N")),
    EngineOption(
        "dtype", str, "auto", "auto (float32 on CPU, bfloat16 on GPU) | float32 | bfloat16 | float16.",
        sglang=True, resume_key=True, choices=("auto", "float32", "bfloat16", "float16"),
    ),
    # tensor parallelism changes the bf16 reduction order, so it is part of the resume key
    EngineOption("tp_size", int, 1, "sglang tensor parallel size.", sglang=True, resume_key=True,
                 owner="sglang", constraints={"gt": 0}),
    EngineOption("dp_size", int, 1, "sglang data parallel size.", sglang=True, owner="sglang",
                 constraints={"gt": 0}),
    EngineOption("mem_fraction_static", float | None, None, "sglang: GPU memory fraction for weights + KV pool.",
                 sglang=True, owner="sglang", constraints={"gt": 0, "lt": 1}),
    EngineOption("attention_backend", str | None, None, "sglang attention backend (e.g. triton, torch_native).",
                 sglang=True, resume_key=True, owner="sglang"),
    EngineOption("context_length", int | None, None, "Model context length override.", sglang=True,
                 resume_key=True, constraints={"gt": 0}),
    EngineOption("engine_args", dict[str, Any], {},
                 "Extra sglang.Engine argument key=value (repeatable; unknown keys are errors).",
                 resume_key=True, owner="sglang", flag="--engine-arg"),
    # Checkpoints are data too: pickle weights and a model's own Python code run only when asked for.
    EngineOption("allow_pickle", bool, False,
                 "Load pickle-format weights (.bin/.pt), which can run code [refused]."),
    EngineOption("trust_remote_code", bool, False,
                 "Run the checkpoint's own Python code (auto_map) [refused]."),
    # Benchmarks switch the product's scheduler workarounds off to measure them (scheduler_patch.PATCH_SETS).
    EngineOption("sglang_patches", str, "all",
                 "sglang: the scheduler workarounds installed: all | gather (label gather, sglang#39642) | "
                 "readback (multi-item logprobs) | with-alloc (all and the state-slot allocation patch, unmeasured) | none.",
                 owner="sglang", commands=("run", "eval"),
                 constraints={"pattern": "^(all|with-alloc|gather|readback|none)$"}),
    EngineOption("batch_tokens", int | None, None,
                 "hf: most padded tokens per forward pass [default: 256 on a CPU, 16384 on a GPU].",
                 owner="hf", commands=("classify",), constraints={"gt": 0}),
    # How the sglang backend sends a window's requests (backends/sglang/patterns/). Scheduling only,
    # not the math of a branch, so not resume keys (like dp_size); applied at start-up and again to a
    # backend handed to `run_job`, so a benchmark compares patterns on one started engine.
    EngineOption("request_pattern", str, "auto",
                 "sglang requests: auto (multi-item where exact and on, prefix-first for recurrent-state "
                 "models, else first-branch) | prefix-first | first-branch | multi-item.",
                 owner="sglang", commands=("run", "eval"),
                 choices=("auto", "prefix-first", "first-branch", "multi-item")),
    EngineOption("groups_per_window", int, 8, "sglang first-branch pattern: groups a window is cut into.",
                 owner="sglang", commands=("run", "eval"), constraints={"gt": 0}),
    EngineOption("pipeline_depth", int, 2, "sglang: groups in flight at once (first-branch, multi-item; prefix-first: request steps in flight).",
                 owner="sglang", commands=("run", "eval"), constraints={"gt": 0}),
    # An sglang server already running (`python -m sglang.launch_server`), driven over HTTP with the same request
    # patterns (backends/sglang/remote.py); `-m` still names the model, for its tokenizer and the resume key.
    EngineOption("connect", str | None, None,
                 "sglang: drive the sglang server already running at this URL over HTTP instead of starting an "
                 "engine (it must serve -m's model).", owner="sglang", commands=("run", "eval")),
    # The seed's backend timeout is 120 s. httpx's read timeout restarts on every byte (a trickling server held
    # a request for ever: issue 48), so this is a wall-clock deadline per request, its retries included.
    EngineOption("connect_timeout", float, 120.0,
                 "sglang --connect: the longest one request to the server may take, start to end, in seconds "
                 "(also the longest wait for a starting server); past it the job ends naming the URL.",
                 owner="sglang", commands=("run", "eval"), constraints={"gt": 0, "allow_inf_nan": False}),
    EngineOption("skip_prefix_warmup", bool, False,
                 "sglang classify: no warm-up request per shared prefix (a benchmark baseline).",
                 owner="sglang", commands=("classify",)),
)  # fmt: skip


def _field(o: EngineOption):
    typ = Annotated[o.type, AfterValidator(o.check_choice)] if o.choices else o.type
    if isinstance(o.default, dict):  # a fresh dict per config
        return (typ, Field(default_factory=dict, **o.constraints))
    return (typ, Field(o.default, **o.constraints))


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


BY_NAME = {o.name: o for o in ENGINE_OPTIONS}


def _options_type(name: str, owner: str | None, doc: str) -> type[_Frozen]:
    fields = {o.name: _field(o) for o in ENGINE_OPTIONS if o.owner == owner}
    return create_model(name, __base__=_Frozen, __doc__=doc, **fields)  # type: ignore[call-overload]


if TYPE_CHECKING:  # the types below are generated from ENGINE_OPTIONS at import: mypy reads a field as Any

    class _Generated(_Frozen):
        def __getattr__(self, name: str) -> Any: ...

    SGLangOptions = _Generated
    HFOptions = _Generated
    _Shared = _Generated
else:
    SGLangOptions = _options_type("SGLangOptions", "sglang", "The options only the sglang backend reads.")
    HFOptions = _options_type("HFOptions", "hf", "The options only the hf (transformers) backend reads.")
    _Shared = _options_type("_Shared", None, "The options every backend reads.")
OWNED: dict[str, type[_Frozen]] = {"sglang": SGLangOptions, "hf": HFOptions}  # backend → its options type


def _owned_keywords(kw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Take the flat keywords of each backend's own options out of `kw`: {backend: {name: value}}."""
    out: dict[str, dict[str, Any]] = {}
    for k in [k for k in kw if k in BY_NAME and BY_NAME[k].owner is not None]:
        out.setdefault(str(BY_NAME[k].owner), {})[k] = kw.pop(k)
    return out


class EngineOptions(_Shared):
    """The engine options (ENGINE_OPTIONS) that `run`, `classify` and `eval` share: every backend's options
    here, each backend's own nested (`sglang`, `hf`). The flat keywords of the CLI and the API
    (`tp_size=2`) are accepted and read as before (`opts.tp_size` is `opts.sglang.tp_size`)."""

    sglang: SGLangOptions = Field(default_factory=SGLangOptions)
    hf: HFOptions = Field(default_factory=HFOptions)

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        """Flat keywords into the options type of the backend that owns them."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for owner, flat in _owned_keywords(data).items():
            nested = data.get(owner)
            base = nested.model_dump() if isinstance(nested, BaseModel) else dict(nested or {})
            data[owner] = {**base, **flat}
        return data

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with `update`, whose flat keywords of a backend's options go to its nested options (pydantic
        would set them beside the field, where `opts.tp_size` never reads)."""
        update = dict(update or {})
        for owner, flat in _owned_keywords(update).items():
            update[owner] = getattr(self, owner).model_copy(update=flat)
        return super().model_copy(update=update, deep=deep)

    def engine_values(self) -> dict[str, Any]:
        return {o.name: getattr(self, o.name) for o in ENGINE_OPTIONS}

    def backend_options(self, model: str) -> BackendOptions:
        """The options the backend is started with (single machine, Ray actors, classify and eval alike)."""
        return BackendOptions(model=model, images=getattr(self, "images", None), **self.engine_values())

    def resume_key(self) -> dict[str, Any]:
        """The options that change the numbers, as the `--resume` manifest holds them."""
        out = {}
        for o in ENGINE_OPTIONS:
            if o.resume_key:
                v = getattr(self, o.name)
                out[o.name] = {k: repr(x) for k, x in sorted(v.items())} if isinstance(v, dict) else v
        return out

    def check_backend(self, backend: str) -> None:
        """Raise ConfigError naming each option set (not at its default) that `backend` does not read, as
        `backend`'s own options type (which forbids every other key) finds them: a user who asked for
        `--tp-size 2` from hf, or `--batch-tokens` from sglang, must not silently get what they did not ask."""
        given = {
            o.name: v
            for o in ENGINE_OPTIONS
            if o.owner is not None and (v := getattr(self, o.name)) != o.default
        }
        try:
            OWNED[backend].model_validate(given)
        except ValidationError as e:
            bad = [BY_NAME[str(err["loc"][0])] for err in e.errors() if err["type"] == "extra_forbidden"]
            if not bad:
                raise
            flags = [
                o.cli_flag + (" " + ", ".join(sorted(v)) if isinstance(v := given[o.name], dict) else "")
                for o in bad
            ]
            owners = " / ".join(sorted({str(o.owner) for o in bad}))
            raise ConfigError(
                f"the {backend} backend does not read {', '.join(flags)} ({owners} only); drop "
                + ("it" if len(bad) == 1 else "them")
            ) from None


def _read_owned(o: EngineOption) -> property:
    return property(lambda self: getattr(getattr(self, str(o.owner)), o.name), doc=o.help)


for _o in ENGINE_OPTIONS:  # `opts.tp_size`: read through to `opts.sglang.tp_size`
    if _o.owner is not None:
        setattr(EngineOptions, _o.name, _read_owned(_o))


class BackendOptions(EngineOptions):
    """What a backend needs to start: the model and the engine options; `images`: whether the job's input has
    image rows, read before the engine starts (pipeline.job.choose_images; None: not known). The sglang backend
    starts its engine multimodal for them (backends/sglang/images.py `starts_multimodal`)."""

    model: str
    images: bool | None = None
