"""What every request pattern shares (patterns/): a prefill-only request with the label token ids, waiting on
the engine's event loop so that an engine process that dies meanwhile becomes a BackendError, and the label
logprobs read back by token id.

Every request — warm-ups included — carries `token_ids_logprob`: a batch that mixes requests with and without
it crashes the scheduler (sgl-project/sglang#34719, open). Logprobs are read from
`meta_info["output_token_ids_logprobs"][0]` entries `(logprob, token_id, _)` by token id, never by position.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import Any

from ...core import BranchResult
from ...errors import BackendError, EngineDied
from . import signals as sglang_signals
from .images import image_data


def read_label_logprobs(
    meta: dict[str, Any], label_ids: tuple[int, ...]
) -> tuple[tuple[float, ...], str | None]:
    """Label logprobs from one request's meta_info, by token id (never by position).

    Returns (logprobs aligned with label_ids, NaN where missing; error text or None).
    """
    entries = meta.get("output_token_ids_logprobs") or []
    first = entries[0] if entries else None
    if not first:
        return (math.nan,) * len(label_ids), "engine returned no label logprobs"
    by_id = {int(e[1]): e[0] for e in first}
    vals = tuple(float(by_id[t]) if by_id.get(t) is not None else math.nan for t in label_ids)
    missing = [t for t, v in zip(label_ids, vals, strict=True) if not math.isfinite(v)]
    return vals, (f"missing or non-finite logprob for label token(s) {missing}" if missing else None)


def request(
    ids: list[list[int]], label_ids: list[list[int]], max_new_tokens: int, images: list | None = None
) -> dict[str, Any]:
    """`Engine.generate` / `async_generate` keywords: prefill only, the label ids' logprobs at the end;
    `images`: per request, its images' processor output or None (sglang/images.py)."""
    kw = dict(
        input_ids=ids,
        return_logprob=True,
        logprob_start_len=-1,
        token_ids_logprob=label_ids,  # on every request, warm-ups included: sglang #34719
        sampling_params={"max_new_tokens": max_new_tokens, "temperature": 0},
    )
    if images is not None and (data := image_data(images)) is not None:
        kw["image_data"] = data
    return kw


def as_list(outs: Any) -> list[dict]:
    """sglang answers one request with a dict, a batch with a list."""
    return outs if isinstance(outs, list) else [outs]


def result(row, j: int, out: dict) -> BranchResult:
    """Branch `j` of `row` from its request's output: the label logprobs and the engine's token counts."""
    meta = out.get("meta_info", {})
    vals, err = read_label_logprobs(meta, row.branches[j].label_ids)
    n = len(row.prefix) + len(row.branches[j].suffix)
    return BranchResult(vals, int(meta.get("prompt_tokens", n)), int(meta.get("cached_tokens", 0)), err)


def failed(e: BaseException) -> BackendError:
    """The job's error for a failed request; one the engine raised as the job's error already (a
    RemoteEngine's, naming its URL) is kept as it is."""
    if isinstance(e, BackendError):
        return e
    return BackendError(f"sglang engine failed: {type(e).__name__}: {e}")


def raise_first(outcomes: Sequence[Any]) -> None:
    """Raise the first exception among `outcomes` (asyncio.gather's, return_exceptions=True) as a
    BackendError; every request has finished or failed by then, so none of the window is still pending in
    the engine's loop when the caller retries a half."""
    errs = [e for e in outcomes if isinstance(e, BaseException)]
    if errs:
        raise failed(errs[0]) from (None if isinstance(errs[0], BackendError) else errs[0])


def wait(engine: Any, coro) -> Any:
    """Run `coro` on the engine's loop. Raises BackendError when an engine process fails meanwhile: the
    SIGQUIT handler (sglang_signals) raises EngineDied here, the only place it may land."""
    if why := sglang_signals.cause():
        coro.close()  # never started
        raise BackendError(f"the sglang engine died: {why}")
    try:
        with sglang_signals.waiting_on_engine():
            return engine.loop.run_until_complete(coro)
    except EngineDied as e:
        raise BackendError(f"the sglang engine died: {e}") from None


def generate(
    engine: Any, ids: list[list[int]], label_ids: list[list[int]], max_new_tokens: int
) -> list[dict]:
    """One blocking request batch (the warm-up, the liveness check). Raises BackendError."""
    try:
        with sglang_signals.waiting_on_engine():
            outs = engine.generate(**request(ids, label_ids, max_new_tokens))
    except EngineDied as e:
        raise BackendError(f"the sglang engine died: {e}") from None
    except BackendError:
        raise
    except Exception as e:
        raise failed(e) from e
    return as_list(outs)


def run_groups(engine: Any, groups: list[Callable[[], Any]], depth: int) -> None:
    """Run coroutine factories `groups` with `depth` in flight on the engine's loop; raises BackendError for
    the first failure once every group has finished or failed."""

    async def run_all() -> list:
        sem = asyncio.Semaphore(max(1, depth))

        async def one(g):
            async with sem:
                await g()

        return await asyncio.gather(*(one(g) for g in groups), return_exceptions=True)

    raise_first(wait(engine, run_all()))
