"""Multi-item scoring (`multi-item`; sglang `enable_mis`, flashinfer attention): for models where it is exact
(`mis.exactness`) one request per prefix carries all of its branches' suffixes (`mis.pack_window`), so a
W2-shaped job sends ~80 requests instead of 12,000. Such an engine has no radix cache and no chunked prefill,
and every request it gets must carry delimiter indices (the liveness check too)."""

from __future__ import annotations

import asyncio
from typing import Any

from ....core import BranchResult, Window
from ....errors import BackendError
from .. import mis, requests


def describe(backend: Any) -> str:
    return f"multi-item scoring: one request per prefix with its suffixes (≤ {backend.pack_tokens} tokens)"


async def generate(engine: Any, packs: list[mis.Pack]) -> list[dict]:
    """One batch of multi-item requests. `Engine.async_generate` has no `multi_item_delimiter_indices`
    argument (0.5.17–0.5.19), so the request object goes to the tokenizer manager, as `Engine.async_generate`
    and `Engine.score` do themselves."""
    from sglang.srt.managers.io_struct import GenerateReqInput

    obj = GenerateReqInput(
        input_ids=[list(p.input_ids) for p in packs],
        multi_item_delimiter_indices=[list(p.delimiters) for p in packs],
        token_ids_logprob=[list(p.label_ids) for p in packs],
        return_logprob=True,
        logprob_start_len=0,  # as Engine.score: the logprobs at every delimiter
        sampling_params={"max_new_tokens": 0, "temperature": 0},
        stream=False,
    )
    return requests.as_list(await engine.tokenizer_manager.generate_request(obj, None).__anext__())


def prefill(backend: Any, window: Window) -> list[list[BranchResult]]:
    """The window's branches as multi-item packs (one prefix, many suffixes each), sent in `depth` × 2
    batches so the engine's loop turns results into records while later packs run. Per branch: prompt
    tokens = prefix + suffix (its logical length); cached = the prefix for all but a pack's first item
    (computed once per pack); the delimiters are counted in `warm_tokens`. Raises BackendError."""
    rows = window.rows
    packs = mis.pack_window(window, backend.pack_tokens, backend.delimiter_id)
    results: list[list[BranchResult | None]] = [[None] * len(r.branches) for r in rows]
    n_batches = max(1, min(len(packs), 2 * max(1, backend.depth)))
    step = -(-len(packs) // n_batches)
    batches = [packs[k : k + step] for k in range(0, len(packs), step)]

    async def run_batch(batch: list[mis.Pack]) -> None:
        outs = await generate(backend.engine, batch)
        for pk, o in zip(batch, outs, strict=True):
            labels = [rows[i].branches[j].label_ids for i, j in pk.items]
            read = mis.read_pack(o.get("meta_info", {}), pk, labels)
            for k, ((i, j), (vals, err)) in enumerate(zip(pk.items, read, strict=True)):
                n = len(rows[i].prefix) + len(rows[i].branches[j].suffix)
                results[i][j] = BranchResult(vals, n, 0 if k == 0 else len(rows[i].prefix), err)
            backend.report([(rows[i], j, results[i][j]) for i, j in pk.items])

    async def run_all() -> list:
        return await asyncio.gather(*(run_batch(b) for b in batches), return_exceptions=True)

    requests.raise_first(requests.wait(backend.engine, run_all()))
    backend.warm_tokens += sum(len(p.delimiters) for p in packs)
    return results  # type: ignore[return-value]


def check_alive(backend: Any) -> None:
    """A one-item pack: every request to a multi-item engine needs delimiter indices. Raises BackendError."""
    t = backend.tokenizer.eos_token_id or 0
    ids, delims = mis.build([t], [[t]], backend.delimiter_id)
    try:
        requests.wait(backend.engine, generate(backend.engine, [mis.Pack(ids, delims, (0,), ((0, 0),), 1)]))
    except BackendError:
        raise
    except Exception as e:
        raise requests.failed(e) from e
