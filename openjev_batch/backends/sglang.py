"""`sglang`: `sglang.Engine` in-process, prefill only, each prefix computed once through the radix cache.

Per window: one `generate` call with the first branch of each distinct prefix (it puts the prefix in the
radix cache and is answered too), then one call with every other branch, which computes only its suffix.
Every request — warm-ups included — carries `token_ids_logprob`: a batch that mixes requests with and
without it crashes the scheduler (sgl-project/sglang#34719, open). No token is decoded:
`max_new_tokens=0` on sglang ≥ 0.5.17 (measured 25 % faster than 1 on an H200), else 1. Logprobs are
read from `meta_info["output_token_ids_logprobs"][0]` entries `(logprob, token_id, _)` by token id.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

from ..errors import BackendError
from ..plan import Window
from .base import Backend, BackendOptions, BranchResult


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


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


def import_sglang():
    """Import sglang or raise BackendError saying how to get it."""
    try:
        import sglang
    except ImportError as e:
        raise BackendError(
            f"the sglang backend needs sglang installed ({e}); use --backend hf, or run scripts/install.sh"
        ) from e
    return sglang


def engine_kwargs(opts: BackendOptions, **extra: Any) -> dict[str, Any]:
    """`sglang.Engine` keyword arguments from the user's options: prefill-only defaults, sglang's CPU path
    when there is no GPU, the named options, `extra` (e.g. is_embedding), then `--engine-arg`s, which win.
    Raises BackendError for an engine arg that `ServerArgs` does not have (never silently ignored)."""
    from sglang.srt.server_args import ServerArgs

    fields = {f.name for f in dataclasses.fields(ServerArgs)}
    if unknown := sorted(set(opts.engine_args) - fields):
        raise BackendError(f"unknown sglang engine arg(s): {', '.join(unknown)}")
    device = opts.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    kw: dict[str, Any] = dict(
        model_path=opts.model,
        device=device,
        tp_size=opts.tp_size,
        dp_size=opts.dp_size,
        log_level="warning",
        random_seed=0,
        skip_tokenizer_init=True,
    )
    if device == "cpu":
        # sglang's CPU path: native attention, no CUDA graphs, float32, a fixed KV pool (else sized from RAM).
        os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
        kw.update(
            attention_backend="torch_native",
            disable_cuda_graph=True,
            dtype="float32",
            mem_fraction_static=0.05,
            max_total_tokens=65_536,
        )
    for k in ("attention_backend", "mem_fraction_static", "context_length"):
        if getattr(opts, k) is not None:
            kw[k] = getattr(opts, k)
    if opts.dtype != "auto":
        kw["dtype"] = opts.dtype
    kw.update(extra)
    kw.update(opts.engine_args)
    return kw


class SGLangBackend(Backend):
    name = "sglang"

    def __init__(self, opts: BackendOptions):
        sglang = import_sglang()
        from transformers import AutoTokenizer

        kw = engine_kwargs(opts)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(opts.model)
        except Exception as e:
            raise BackendError(f"cannot load the tokenizer of {opts.model!r}: {e}") from e
        try:
            self.engine = sglang.Engine(**kw)
        except BaseException as e:  # the scheduler subprocess dies → SystemExit/RuntimeError here
            raise BackendError(
                f"sglang.Engine could not start with {opts.model!r}: {type(e).__name__}: {e}"
            ) from e
        self.max_new_tokens = 0 if _version_tuple(sglang.__version__) >= (0, 5, 17) else 1
        info = self.engine.get_server_info()
        self._capacity = int(info.get("max_total_num_tokens") or 0) or None

    def kv_budget_tokens(self) -> int:
        # Leave room for the running batch's own activations and fragmentation of the radix tree.
        return int(self._capacity * 0.8) if self._capacity else 1 << 17

    def _generate(self, ids: list[list[int]], label_ids: list[list[int]]) -> list[dict]:
        try:
            outs = self.engine.generate(
                input_ids=ids,
                return_logprob=True,
                logprob_start_len=-1,
                token_ids_logprob=label_ids,
                sampling_params={"max_new_tokens": self.max_new_tokens, "temperature": 0},
            )
        except Exception as e:
            raise BackendError(f"sglang engine failed: {type(e).__name__}: {e}") from e
        return outs if isinstance(outs, list) else [outs]

    def prefill(self, window: Window) -> list[list[BranchResult]]:
        """Two `generate` calls per window. Call 1 carries, for each distinct prefix, the first branch
        that uses it (its answer is read too, so a row with N questions costs N requests, not N+1: the
        prefix is still prefilled once); call 2 carries every other branch, whose prefix is then in the
        radix cache. Every request carries `token_ids_logprob` (#34719)."""
        ids = [[list(r.prefix + b.suffix) for b in r.branches] for r in window.rows]
        first, rest, last = [], [], None
        for i, r in enumerate(window.rows):
            for j in range(len(r.branches)):
                (first if j == 0 and r.prefix != last else rest).append((i, j))
            last = r.prefix
        results: list[list[BranchResult | None]] = [[None] * len(r.branches) for r in window.rows]
        for keys in (first, rest):
            if not keys:
                continue
            outs = self._generate(
                [ids[i][j] for i, j in keys], [list(window.rows[i].branches[j].label_ids) for i, j in keys]
            )
            for (i, j), o in zip(keys, outs, strict=True):
                meta = o.get("meta_info", {})
                vals, err = read_label_logprobs(meta, window.rows[i].branches[j].label_ids)
                n = len(ids[i][j])
                results[i][j] = BranchResult(
                    vals, int(meta.get("prompt_tokens", n)), int(meta.get("cached_tokens", 0)), err
                )
        return results  # type: ignore[return-value]

    def check_alive(self) -> None:
        """A one-token request; raises BackendError when the engine no longer answers."""
        self._generate([[self.tokenizer.eos_token_id or 0]], [[0]])

    def close(self) -> None:
        eng, self.engine = getattr(self, "engine", None), None
        if eng is not None:
            eng.shutdown()
