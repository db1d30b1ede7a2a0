"""Job options, each declared once in JOB_OPTIONS, beside the engine options (options.ENGINE_OPTIONS), as
lm-evaluation-harness declares its evaluate config: that one line makes the CLI flag of every command that
takes it (cli/job_options.py generates them, with this help and default) and, for a `config` option, the
field of `JobOptions`, which RunConfig (config.py) and EvalConfig (evaluation/run.py) embed: the CLI, the
Python API and eval read one default. `chunk_rows` has none of its own: when not given it is the readout's
(`Readout.chunk_rows`, one per readout), filled in by RunConfig. Adding a job option is adding a `JobOption`
here (and reading it where the job uses it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, create_model

from .options import _Frozen
from .threads import MAX_THREADS

JOB_COMMANDS = ("run", "classify", "eval")  # the commands that run a job


@dataclass(frozen=True)
class JobOption:
    """One job option. `type`/`default`/`constraints`: the config field (pydantic Field bounds, refused
    with exit 4 when the config is built); `config`: whether it is a field of `JobOptions` (False: the
    command's own, `--dry-run`, `--ray…`, `--threads`, or RunConfig's with another type, `--keep`);
    `commands`: the commands that offer it; `per_readout`: its default is the readout's (`Readout.<name>`,
    `default` None), the flag's that of the command's readout; `flag`: its CLI name (default `--name-with-dashes`; a bool's
    `--x/--no-x` pair); `cli_type`: the flag's type when not the field's; `cli`: typer's own checks
    (a usage error, exit 2); `helps`: a command's own help where it says more."""

    name: str
    type: Any
    default: Any
    help: str
    config: bool = True
    per_readout: bool = False
    commands: tuple[str, ...] = JOB_COMMANDS
    flag: str = ""
    cli_type: Any = None
    constraints: dict[str, Any] = field(default_factory=dict)
    cli: dict[str, Any] = field(default_factory=dict)
    helps: dict[str, str] = field(default_factory=dict)

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def help_for(self, command: str) -> str:
        return self.helps.get(command, self.help)


JOB_OPTIONS: tuple[JobOption, ...] = (
    JobOption("keep", tuple[str, ...], "",
              "Comma-separated input columns copied to the output; `all`: every input column.",
              config=False, commands=("run", "classify", "validate"), cli_type=str,
              helps={"validate": "Columns `run --keep` would copy (their values are checked too); `all`: every input column."}),
    # the readout's when not given (Readout.chunk_rows): 2048 for label-logprobs (measured, docs/benchmarks.md),
    # 20,000 for classifier-head
    JobOption("chunk_rows", int | None, None,
              "Rows read, planned and written per chunk (bounds memory; the unit of --resume).",
              per_readout=True, constraints={"gt": 0}),
    JobOption("max_branches", int, 4096, "Most branches per window.", constraints={"gt": 0},
              helps={"classify": "Most branches (rows: one each) per window."}),
    JobOption("progress", bool, True, "Show a live progress bar: done of the total, %, tok/s, cache hit rate, ETA.",
              flag="--progress/--no-progress", helps={"eval": "Show a progress bar."}),
    JobOption("resume", bool, False, "Continue from OUT.partial, skipping finished chunks.",
              helps={"eval": "Continue the unfinished job in the output folder (or re-score a finished one)."}),
    JobOption("dry_run", bool, False,
              "Plan only (tokenizer, no model, no -o): rows, questions, branches, logical/unique tokens, "
              "expected cache hit rate, peak RSS.", config=False),
    JobOption("ray", bool, False,
              "Run on Ray Data: engine actors score prefix-grouped buckets (extra `[ray]`).", config=False),
    JobOption("ray_address", str | None, None, "--ray: cluster address (default: start a local cluster).",
              config=False),
    JobOption("workers", int | None, None, "--ray: engine actors, one backend each [1].", config=False),
    JobOption("gpus_per_worker", float | None, None,
              "--ray: GPUs per actor [tp×dp (sglang) or 1 (hf) with GPUs, else 0].", config=False),
    # its range is the config's to check (exit 4, as --chunk-rows 0), not a usage error
    JobOption("limit", int | None, None, "Only the first N input rows, in file order (a quick look).",
              constraints={"gt": 0},  # run's help spoke of eval (issue 48.15): each command its own words
              helps={"eval": "Only the first N questions, after --sample (lm-eval's --limit; a quick look)."}),
    # nightly jobs (issue 50; README "Nightly jobs"): pipeline/reuse.py, cli/compare.py
    JobOption("reuse", tuple[Path, ...], (),
              "An earlier output of this job (repeatable): a row whose answer key it holds (same row content, "
              "questions, model and options) is copied, not computed; one made with another model or options "
              "gives nothing, and one line says why.", commands=("run", "classify"), cli_type=list[Path]),
    JobOption("baseline", Path | None, None,
              "An earlier output to compare this run's answers with: the summary shows what moved, per "
              "question (as `compare BASELINE OUT`).", config=False, commands=("run", "classify")),
    JobOption("threads", int | None, None,
              "CPU threads for torch/OpenMP (default: the idle cores, cores minus the load average, ≥ 1).",
              config=False, cli={"min": 1, "max": MAX_THREADS}),
)  # fmt: skip

BY_NAME = {o.name: o for o in JOB_OPTIONS}


if TYPE_CHECKING:  # generated from JOB_OPTIONS at import: mypy reads a field as Any

    class JobOptions(_Frozen):
        def __getattr__(self, name: str) -> Any: ...

else:
    JobOptions = create_model(
        "JobOptions",
        __base__=_Frozen,
        __doc__="The job options RunConfig and EvalConfig share (JOB_OPTIONS' fields), with their one default.",
        **{o.name: (o.type, Field(o.default, **o.constraints)) for o in JOB_OPTIONS if o.config},
    )
