"""The sglang backend's facts (backends/base.BackendSpec), asked without importing sglang or starting an
engine: its classes per readout kind, what its radix cache shares and what multi-item scoring computes, the
request pattern a run would use, the choice `--request-pattern auto` makes before the engine starts, the GPUs
one Ray worker takes."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ...checkpoint.info import model_info
from ...errors import ConfigError
from ..base import BackendPlan, BackendSpec
from .mis import needs_fork
from .patterns import MAX_MULTI_ITEM_RECOMPUTE, advice, multi_item_recompute, planned

if TYPE_CHECKING:
    from ...checkpoint.info import ModelInfo
    from ...config import RunConfig

MULTI_ITEM = "tokens multi-item scoring computes (sglang, GPU)"  # no radix cache: patterns.advice


class SGLangSpec(BackendSpec):
    name = "sglang"
    kinds = {
        "label-logprobs": "openjev_batch.backends.sglang.engine:SGLangBackend",
        "classifier-head": "openjev_batch.backends.sglang.classifier:SGLangClassifier",
    }
    cache = "radix cache: any shared token prefix"
    # a vision-language model's engine starts multimodal or text only, fixed at start (issue 41: images.py)
    images_at_start = True

    def count(self, plan: BackendPlan, windows: Iterable[Any]) -> None:
        windows = list(windows)
        super().count(plan, windows)  # the planner's LCP count: a radix cache shares any common token prefix
        plan.more[MULTI_ITEM] = plan.more.get(MULTI_ITEM, 0) + multi_item_recompute(windows)[0]

    def planned(self, cfg: RunConfig, info: ModelInfo) -> str:
        return planned(cfg, info) if info.known else ""  # the backend's own resolver

    def prepare(self, cfg: RunConfig, first_plan: Callable[[RunConfig], Any]) -> tuple[RunConfig, str]:
        """`--request-pattern auto` for a job on a Qwen3.5/3.6 hybrid, where multi-item scoring (one request per
        ticket, the state fork) and prefix-first are both exact: chosen from the planner's own counts over the
        job's first chunk, before the engine starts (multi-item is fixed when it starts). Multi-item runs
        without the radix cache, so a long block shared by different rows (a few-shot prefix) is computed in
        every pack: prefix-first when that makes multi-item compute more than `MAX_MULTI_ITEM_RECOMPUTE` × the
        unique tokens. A job with images (`cfg.images`, chosen before: pipeline/job_images.choose_images) runs no
        multi-item, and neither does `--connect`'s server, so nothing is chosen. Returns the config (with the pattern set when prefix-first is chosen)
        and the choice in words ('' when the job is not such a job)."""
        # with images the engine runs no multi-item, nor does a server driven over HTTP (--connect: remote.py)
        if cfg.images or cfg.sglang.connect or cfg.sglang.request_pattern != "auto":
            return cfg, ""
        if not needs_fork({"architectures": [model_info(cfg.model).architecture]}):
            return cfg, ""
        p = first_plan(cfg)
        mine = p.by_backend[self.name]
        mis, unique = mine.more.get(MULTI_ITEM, 0), mine.unique_tokens
        if unique and mis / unique > MAX_MULTI_ITEM_RECOMPUTE:
            why = (
                f"request pattern auto → prefix-first: on the first {p.rows:,} rows "
                + advice(mis, unique).split(":")[0]
            )
            return cfg.model_copy(update={"request_pattern": "prefix-first"}), why
        return (
            cfg,
            f"request pattern auto → multi-item where the engine runs it: on the first {p.rows:,} rows "
            + advice(mis, unique),
        )

    def gpus_per_worker(self, cfg: RunConfig) -> float:
        return cfg.tp_size * cfg.dp_size

    def check_gpus(self, cfg: RunConfig, gpus: float) -> None:
        if cfg.tp_size * cfg.dp_size > gpus:
            raise ConfigError(
                f"sglang with tp_size {cfg.tp_size} × dp_size {cfg.dp_size} needs "
                f"{cfg.tp_size * cfg.dp_size} GPUs per worker; --gpus-per-worker is {gpus:g}"
            )

    def device(self, cfg: RunConfig) -> str:
        return (
            cfg.device if cfg.device != "auto" else "cuda"
        )  # sglang runs on a GPU (its CPU build is a test kit)


SPEC = SGLangSpec()
