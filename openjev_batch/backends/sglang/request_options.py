"""The sglang backend's request options (declared in `options.ENGINE_OPTIONS`), applied to a started backend:
`request_pattern` picks the prefill path, `groups_per_window` / `pipeline_depth` shape the first-branch
pipeline (and the multi-item batches in flight).

    auto          what the backend picks from the model and the engine: multi-item where the engine was
                  started with it (kwargs.choose_multi_item), prefix-first for recurrent-state (hybrid)
                  models (model_info), else first-branch
    prefix-first  one prefix-only request per distinct prefix, then its branches, groups sized by the
                  engine's recurrent-state slots (for a dense model: its running-request slots)
    first-branch  the first branch of each prefix as its warm-up, then the rest (the dense pattern)
    multi-item    one request per prefix carrying all of its suffixes (an engine started for it)

Multi-item is a property of the engine (no radix cache; every request carries delimiters), so it is fixed at
start-up: a job may not switch a started engine into or out of it. The others are per job: `run_job` applies
a config's options to a backend passed in, so a benchmark compares patterns on one engine.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from .state import StateBudget, state_budget_from_info

FALLBACK_SLOTS = 48  # sglang reported no state or running-request budget: a small, safe guess


def apply(backend: Any, opts: Any) -> None:
    """Set a started SGLangBackend's request pattern and pipeline shape from `opts` (an EngineOptions), and
    its read-only facts (`request_pattern`, `pattern`, `kv_capacity_tokens`). Raises ConfigError when the
    started engine cannot serve the pattern asked for."""
    if not hasattr(backend, "auto_state_budget"):  # first call, at start-up: what auto means here
        backend.auto_state_budget = backend.state_budget
    asked = opts.request_pattern
    if backend.multi_item and asked not in ("auto", "multi-item"):
        raise ConfigError(
            f"--request-pattern {asked}: this engine was started for multi-item scoring (every request "
            "carries item delimiters); start one with --request-pattern first-branch or prefix-first"
        )
    if not backend.multi_item and asked == "multi-item":
        raise ConfigError(
            "--request-pattern multi-item: this engine was started without multi-item scoring "
            f"({backend.multi_item_off_reason or 'off'}); it is chosen when the engine starts"
        )
    if backend.multi_item:
        name = "multi-item"
    elif asked == "first-branch" or (asked == "auto" and backend.auto_state_budget is None):
        name, backend.state_budget = "first-branch", None
    else:
        name = "prefix-first"
        backend.state_budget = (
            backend.auto_state_budget
            or state_budget_from_info(backend.engine.get_server_info())
            or StateBudget(slots=FALLBACK_SLOTS)
        )
    backend.request_pattern = name
    backend.groups_per_window = opts.groups_per_window
    backend.depth = opts.pipeline_depth
    backend.hybrid_lead = opts.pipeline_depth  # prefix-first: steps in flight (engine.py, `hybrid_lead`)
    backend.kv_capacity_tokens = backend._capacity
    backend.pattern = backend._describe_pattern()
