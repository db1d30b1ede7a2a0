"""How the sglang backend sends a window's requests, and THE resolver of `--request-pattern`, asked by a started
backend (`SGLangBackend.configure`) and by `--dry-run` (`planned`, without starting sglang):

    auto          what the backend picks from the model and the engine: multi-item where the engine was
                  started with it (kwargs.choose_multi_item: on a CUDA GPU for models where it is exact, the
                  Qwen3.5/3.6 hybrids through the state fork included), else prefix-first for recurrent-state
                  (hybrid) models (model_info), else first-branch. The planner's counts say when a job's long
                  repeated prefix makes prefix-first compute fewer tokens (`advice`, in --dry-run).
    prefix-first  one prefix-only request per distinct prefix, then its branches, groups sized by the
                  engine's recurrent-state slots (for a dense model: its running-request slots)
    first-branch  the first branch of each prefix as its warm-up, then the rest (the dense pattern)
    multi-item    one request per prefix carrying all of its suffixes (an engine started for it)

Multi-item is a property of the engine (no radix cache; every request carries delimiters), so it is fixed at
start-up: a job may not switch a started engine into or out of it. The others are per job: the runner applies
a config's options to a backend passed in, so a benchmark compares patterns on one engine.

The patterns themselves: first_branch.py, prefix_first.py, multi_item.py (each `prefill(backend, window)`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ....checkpoint.info import load_config
from ....errors import BackendError, ConfigError
from .. import installed, mis
from ..fork_releases import fork_release
from ..kwargs import choose_multi_item
from ..remote import MULTI_ITEM_OFF

if TYPE_CHECKING:
    from ....checkpoint.info import ModelInfo
    from ....config import RunConfig

PATTERNS = ("prefix-first", "first-branch", "multi-item")


def resolve(asked: str, *, multi_item: bool, hybrid: bool, multi_item_off: str | None = None) -> str:
    """The pattern a job asking for `asked` (auto or one of PATTERNS) runs on an engine started with or
    without multi-item scoring (`multi_item`; `multi_item_off`: why not), for a recurrent-state model or not
    (`hybrid`). Raises ConfigError when that engine cannot serve the pattern asked for."""
    if multi_item and asked not in ("auto", "multi-item"):
        raise ConfigError(
            f"--request-pattern {asked}: this engine was started for multi-item scoring (every request "
            "carries item delimiters); start one with --request-pattern first-branch or prefix-first"
        )
    if not multi_item and asked == "multi-item":
        raise ConfigError(
            "--request-pattern multi-item: this engine was started without multi-item scoring "
            f"({multi_item_off or 'off'}); it is chosen when the engine starts"
        )
    if multi_item:
        return "multi-item"
    if asked == "first-branch" or (asked == "auto" and not hybrid):
        return "first-branch"
    return "prefix-first"


# Multi-item scoring runs without the radix cache: a prefix shared by *different* row prefixes (a long system
# prompt or few-shot block) is computed again in every pack, where prefix-first computes it once. Measured on the
# H200 (W3, released 35B-A3B architecture, docs/benchmarks.md run 10): multi-item computed 1.11x the planner's
# unique tokens and ran 1.41x faster than prefix-first. Beyond this ratio prefix-first is the better choice.
MAX_MULTI_ITEM_RECOMPUTE = 1.5


def multi_item_recompute(windows: Any) -> tuple[int, int]:
    """(tokens multi-item scoring computes, tokens prefix-first computes at best: the planner's unique tokens)
    for planned windows. Multi-item computes each run of rows with the same prefix once (its pack), plus every
    suffix; prefix-first with the radix cache computes only what no earlier row shares. Pure."""
    mis = unique = 0
    for w in windows:
        unique += w.unique_tokens
        prev = None
        for r in w.rows:
            if r.prefix != prev:
                mis += len(r.prefix)
                prev = r.prefix
            mis += sum(len(b.suffix) for b in r.branches)
    return mis, unique


def advice(mis_tokens: int, unique_tokens: int) -> str:
    """The planner's counts in words for the run summary and --dry-run: which hybrid pattern computes fewer
    tokens for this job, and the option that picks the other."""
    ratio = mis_tokens / unique_tokens if unique_tokens else 1.0
    if ratio > MAX_MULTI_ITEM_RECOMPUTE:
        return (
            f"multi-item scoring computes {ratio:.2f}x the job's unique tokens (a long prefix repeats across rows): "
            "--request-pattern prefix-first computes it once"
        )
    return f"multi-item scoring computes {ratio:.2f}x the job's unique tokens (prefix-first: 1.00x, more requests)"


def words(name: str, info: Any = None) -> str:
    """Pattern `name` in words, before an engine has started (`--dry-run`); `info`: the model's ModelInfo
    (a recurrent state's size is named beside prefix-first)."""
    if name == "multi-item":
        text = "multi-item scoring: one request per prefix with its suffixes (GPU, flashinfer)"
        if getattr(info, "recurrent", False):
            text += "; the recurrent state forked at each prefix end (exact: backends/sglang/hybrid)"
        return text
    if name == "first-branch":
        return "first branch of each prefix as the warm-up, then the other branches"
    text = "prefix-only request per prefix, then its branches; rows in flight sized by state slots"
    if getattr(info, "state_bytes", None):  # the slots are the engine's, known once it starts (run summary)
        text += (
            f"; {info.state_bytes / 2**20:.0f} MiB of recurrent state a sequence (slots and the running "
            "cap: the run summary; a GPU gets the batch-job memory split, e.g. 807 slots, ≤ 269 running "
            "for the 35B-A3B shape on an H200)"
        )
    return text


def engine_multi_item(opts: Any) -> tuple[bool, str | None]:
    """Whether an sglang engine started with `opts` would run multi-item scoring, decided as the backend
    decides it at start-up (kwargs.choose_multi_item) but without starting one: (on, why not). Raises
    BackendError where the start would refuse it (asked for where it cannot run)."""
    import importlib.metadata

    if opts.sglang.connect:  # the server's own engine, driven over HTTP: no multi-item there
        return False, MULTI_ITEM_OFF
    if not installed():
        return False, "sglang is not installed"

    device = opts.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    kw = {"device": device, **opts.sglang.engine_args}  # as engine_kwargs has it: `cuda:1` runs no multi-item
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:  # importable without its metadata: the start decides
        return False, "sglang's version is unknown before the engine starts"
    why = choose_multi_item(opts, kw, version)
    if why is None and getattr(opts, "images", None) and takes_images_off_multi_item(opts):
        return False, "off: the engine takes images (the input has image rows)"
    return why is None, why


def takes_images_off_multi_item(opts: Any) -> bool:
    """Whether an engine for a job with images turns multi-item scoring off as the backend does at start-up
    (engine.py): a vision-language checkpoint, `--request-pattern auto`, and multi-item not asked for by
    `--engine-arg enable_mis` (a Qwen3.5/3.6 hybrid turns it off even then: its fork is shown exact text only)."""
    cfg = load_config(opts.model) or {}
    if "vision_config" not in cfg or opts.sglang.request_pattern != "auto":
        return False
    arch = (cfg.get("architectures") or [""])[0]
    return arch in mis.FORK_ARCHITECTURES or "enable_mis" not in opts.sglang.engine_args


def planned(cfg: RunConfig, info: ModelInfo) -> str:
    """The pattern a run of `cfg` (a RunConfig) would use for the model `info` describes, in words: the
    same resolver a started backend asks, with multi-item scoring predicted from the options. A pattern
    the engine would refuse is named with the refusal."""
    multi, why = False, None
    try:
        if cfg.backend == "sglang":
            multi, why = engine_multi_item(cfg)
        name = resolve(
            cfg.sglang.request_pattern, multi_item=multi, hybrid=info.recurrent, multi_item_off=why
        )
    except (BackendError, ConfigError) as e:
        return with_release(f"refused when the engine starts: {e}", info)
    return with_release(words(name, info), info)


def with_release(text: str, info: Any, version: str | None = "") -> str:
    """`text` (a pattern in words) and, for a Qwen3.5/3.6 hybrid (`mis.needs_fork`), which sglang release is
    installed and whether the exact multi-item fork serves it (`fork_releases.fork_release`): `--dry-run` and the run
    summary say the same as the package's extra and the README (issue 38.4). `version` '' reads the installed
    release (None: not installed)."""
    if not mis.needs_fork({"architectures": [getattr(info, "architecture", "") or ""]}):
        return text
    if version == "":
        import importlib.metadata

        try:
            version = importlib.metadata.version("sglang")
        except importlib.metadata.PackageNotFoundError:
            version = None
    return f"{text}; {fork_release(version)}"
