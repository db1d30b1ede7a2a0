"""The sglang backend's options: `SGLangOptions` (tensor / data parallel sizes, memory fraction, attention
backend, `--engine-arg`s, scheduler patches, request pattern and pipeline shape; declared in the one table,
`options.ENGINE_OPTIONS`, as owned by sglang, and nested in every config as `opts.sglang`), and the
`sglang.Engine` arguments the declared options make."""

from __future__ import annotations

from typing import Any

from ...options import ENGINE_OPTIONS, SGLangOptions

__all__ = ["SGLangOptions", "engine_arguments"]


def engine_arguments(opts: Any) -> dict[str, Any]:
    """The declared options (shared or sglang's own) that are `sglang.Engine` arguments and set (not None,
    not "auto"), from `opts` (an EngineOptions)."""
    return {
        o.name: v
        for o in ENGINE_OPTIONS
        if o.sglang and (v := getattr(opts, o.name)) is not None and v != "auto"
    }
