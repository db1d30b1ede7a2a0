"""`sglang`: `sglang.Engine` in-process, prefill only, each prefix computed once through the radix cache.

Per group of rows: one request batch with the first branch of each distinct prefix (it puts the prefix in
the radix cache and is answered too), then one with every other branch, which computes only its suffix.
A window is cut into a few groups that run as a two-deep pipeline (asyncio on the engine's own loop), so
the scheduler batches the compute-heavy warm-ups of group g+1 with the light, request-heavy branches of
group g instead of leaving the GPU idle while it retires thousands of short requests.
Every request — warm-ups included — carries `token_ids_logprob`: a batch that mixes requests with and
without it crashes the scheduler (sgl-project/sglang#34719, open). No token is decoded:
`max_new_tokens=0` on sglang ≥ 0.5.17 (measured 25 % faster than 1 on an H200), else 1. Logprobs are
read from `meta_info["output_token_ids_logprobs"][0]` entries `(logprob, token_id, _)` by token id.
The scheduler processes gather those logprobs without a GPU synchronisation (`sglang_patches`,
sgl-project/sglang#39642), so sglang's overlap scheduler builds batch k+1 while batch k runs.

Hybrid models (a recurrent state per sequence: Qwen3.5 / 3.6, Qwen3-Next; `model_info`) use another
pattern, measured on the H200 (`../shared/research/hybrid-models.md`): sglang caches such a prefix's state
only where a finished request left it, and a finished branch leaves it inside its suffix, so a first branch
as the warm-up caches nothing its siblings can use (1.8 % radix hit). Per group of rows: one **prefix-only**
request per distinct prefix (`max_new_tokens=0`, still carrying `token_ids_logprob`: #34719), then the
group's branches; groups are sized by the engine's recurrent-state slots (`state.state_groups`), so a cached
prefix state is not evicted before its branches run.

Multi-item scoring (`scoring == "multi-item"`, sglang `enable_mis`, flashinfer attention): for models where it
is exact (`mis.exactness`) one request per prefix carries all of its branches' suffixes (`mis.pack_window`),
so a W2-shaped job sends ~80 requests instead of 12,000. Such an engine has no radix cache and no chunked
prefill, and every request it gets must carry delimiter indices (the liveness check too).

Size (over the house's ~300 lines): one class whose three request patterns share the engine's event loop,
its group scheduler and the readout by token id; the engine arguments are kwargs.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from typing import Any

from ...core import Window
from ...errors import BackendError, EngineDied
from ...model_info import ModelInfo, model_info
from ..base import Backend, BackendOptions, BranchResult, load_tokenizer
from . import mis, request_options
from . import signals as sglang_signals
from .kwargs import (
    _version_tuple,
    choose_multi_item,
    engine_kwargs,
    hybrid_batch_memory,
    import_sglang,
)
from .scheduler_patch import engine_class
from .state import StateBudget, state_budget_from_info, state_groups


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


class SGLangBackend(Backend):
    name = "sglang"

    def __init__(self, opts: BackendOptions):
        sglang = import_sglang()
        kw = engine_kwargs(opts)
        self.multi_item_off_reason = choose_multi_item(opts, kw, sglang.__version__)
        self.model_info: ModelInfo = model_info(opts.model)
        from sglang.srt.server_args import ServerArgs

        self.batch_memory = hybrid_batch_memory(
            kw, self.model_info.recurrent, {f.name for f in dataclasses.fields(ServerArgs)}
        )
        self.moe_config_dir = None
        if self.model_info.moe and kw.get("device") != "cpu":
            from . import moe_configs

            # tuned fused-MoE kernel configs sglang 0.5.17 lacks (E=256, N=512 on the H200); see moe_configs
            self.moe_config_dir = moe_configs.use_for_engine()
        self.tokenizer = load_tokenizer(opts.model, opts.trust_remote_code)  # BackendError naming the option
        self.engine = None
        t_start = time.perf_counter()
        # sglang's SIGQUIT handlers SIGKILL this process when an engine process fails: the product handles
        # it instead (sglang_signals), at start-up through sglang's own `custom_sigquit_handler` hook.
        # `engine_class` imports sglang's Engine (and sgl_kernel): inside start_engine's `try`, so a missing
        # kernel is its one-line message, not a traceback raised while the call's arguments are evaluated
        self.engine, self._error_file = sglang_signals.start_engine(
            lambda **kw: engine_class(opts.sglang_patches)(**kw), kw, opts
        )
        self.max_new_tokens = 0 if _version_tuple(sglang.__version__) >= (0, 5, 17) else 1
        info = self.engine.get_server_info()
        self._capacity = int(info.get("max_total_num_tokens") or 0) or None
        # Hybrid models: prefix-only requests, rows in flight bounded by the engine's state slots.
        self.state_budget = state_budget_from_info(info) if self.model_info.recurrent else None
        if self.model_info.recurrent and self.state_budget is None:
            self.state_budget = StateBudget(slots=48)  # sglang said nothing: a small, safe guess
        self.multi_item = bool(info.get("enable_mis", kw.get("enable_mis")))
        self.scoring = "multi-item" if self.multi_item else "branches"
        # A packed request is one forward (chunked prefill is off on such an engine): keep it within the
        # prefill budget and below the context (sglang refuses input_ids of ≥ context_len tokens).
        ctx = getattr(getattr(self.engine, "tokenizer_manager", None), "context_len", None)
        budget = int(info.get("max_prefill_tokens") or 16_384)
        self.pack_tokens = min(budget, int(ctx) - 16) if ctx else budget
        vocab = len(self.tokenizer)
        self.delimiter_id = mis.DELIMITER_ID if vocab > mis.DELIMITER_ID else 0  # any valid id (never read)
        # The engine's own limit on a request's input (sglang refuses len >= max_req_input_len, and
        # len + reserved >= context_len): branches above it become row errors in the prompt stage, before
        # any request (a refused request used to end the whole job).
        tm = getattr(self.engine, "tokenizer_manager", None)
        limits = [
            int(info.get("max_req_input_len") or 0) - 1,
            int(getattr(tm, "context_len", 0) or 0) - 1 - int(getattr(tm, "num_reserved_tokens", 0) or 0),
        ]
        self.context_length = min((n for n in limits if n > 0), default=None)
        self.pattern = self._describe_pattern()
        self.start_s = round(time.perf_counter() - t_start, 1)
        warm = kw.get("device") == "cuda" and not self.multi_item  # the CPU engine compiles nothing
        self.warmup_s = self._warm_up() if warm else 0.0
        self.startup = (
            f"engine {self.start_s:.1f} s"
            + (f", kernel warm-up {self.warmup_s:.1f} s" if warm else "")
            + (
                f"; batch-job memory {', '.join(f'{k}={v}' for k, v in self.batch_memory.items())}"
                if self.batch_memory
                else ""
            )
        )

    # Warm-up forwards (requests × tokens): Triton compiles a kernel per config, and fused-MoE and the
    # linear-attention kernels pick their config by the batch's token count. Measured on the H200 (35B-A3B
    # shape, docs/benchmarks.md run 5): a cold Triton cache costs ~60 s of compile on the first job's batches;
    # sizes up to the 32k prefill budget cover a job's shapes, so the compile happens here, before the
    # user's job, and is reported apart (`startup`). Triton keeps what it compiled on disk
    # (~/.triton/cache, TRITON_CACHE_DIR), so a second night's engine warms up in seconds.
    WARMUP_SHAPES = ((4, 64), (64, 128), (32, 500), (16, 2048), (1, 8192), (64, 400))

    def _warm_up(self) -> float:
        t = time.perf_counter()
        tok = int(self.tokenizer.eos_token_id or 0)
        budget = int(self.pack_tokens or 16_384)
        try:
            for n, length in self.WARMUP_SHAPES:
                length = min(length, max(1, (self.context_length or length) - 1))
                n = max(1, min(n, budget // max(1, length)))
                self._generate([[tok] * length for _ in range(n)], [[0] for _ in range(n)])
            self.engine.flush_cache()
        except BackendError:
            self.close()  # the engine died during its warm-up: no engine process is left behind
            raise
        except Exception:  # noqa: BLE001 - a warm-up is an optimisation: the job then compiles as it goes
            pass
        return round(time.perf_counter() - t, 1)

    def _describe_pattern(self) -> str:
        if self.multi_item:
            return (
                f"multi-item scoring: one request per prefix with its suffixes (≤ {self.pack_tokens} tokens)"
            )
        if self.state_budget is None:
            return f"first branch per prefix as the warm-up, {self.groups_per_window} groups, {self.depth} in flight"
        b = self.state_budget
        return (
            f"prefix-only request per prefix, groups sized by {b.slots} state slots "
            f"({b.per_request} per running request, ≤ {b.max_running or '?'} running), "
            + (
                f"{self.hybrid_lead} steps in flight (group k's branches beside group k+{self.hybrid_lead}'s "
                "prefixes)"
                if self.hybrid_overlap
                else "one group at a time"
            )
        )

    def configure(self, opts) -> None:
        """--request-pattern, --groups-per-window, --pipeline-depth (request_options.py)."""
        request_options.apply(self, opts)

    def kv_budget_tokens(self) -> int:
        # Leave room for the running batch's own activations and fragmentation of the radix tree.
        return int(self._capacity * 0.8) if self._capacity else 1 << 17

    def _request(self, ids: list[list[int]], label_ids: list[list[int]]) -> dict[str, Any]:
        return dict(
            input_ids=ids,
            return_logprob=True,
            logprob_start_len=-1,
            token_ids_logprob=label_ids,  # on every request, warm-ups included: sglang #34719
            sampling_params={"max_new_tokens": self.max_new_tokens, "temperature": 0},
        )

    def _wait(self, coro):
        """Run `coro` on the engine's loop. Raises BackendError when an engine process fails meanwhile: the
        SIGQUIT handler (sglang_signals) raises EngineDied here, the only place it may land."""
        if why := sglang_signals.cause():
            coro.close()  # never started
            raise BackendError(f"the sglang engine died: {why}")
        try:
            with sglang_signals.waiting_on_engine():
                return self.engine.loop.run_until_complete(coro)
        except EngineDied as e:
            raise BackendError(f"the sglang engine died: {e}") from None

    def _generate(self, ids: list[list[int]], label_ids: list[list[int]]) -> list[dict]:
        try:
            with sglang_signals.waiting_on_engine():
                outs = self.engine.generate(**self._request(ids, label_ids))
        except EngineDied as e:
            raise BackendError(f"the sglang engine died: {e}") from None
        except Exception as e:
            raise BackendError(f"sglang engine failed: {type(e).__name__}: {e}") from e
        return outs if isinstance(outs, list) else [outs]

    # Pipeline shape (measured on the H200, docs/benchmarks.md): groups per window and groups in flight.
    groups_per_window = 8
    depth = 2
    # Hybrid models: one state-budgeted group at a time, each as large as the state slots allow. Measured on
    # the H200 (35B-A3B shape, 207 slots, W1 64 rows, benchmarks/results/2026-12-01-h200-hybrid.json): two
    # groups in flight halve each group (3 rows) and took 6.84 s; prefix-first chunks of 8 rows one after
    # another (8 × 25 = 200 slots) took 3.14 s, both with every prefix token served from the cache.
    hybrid_depth = 1
    # The next group's prefix-only requests beside a group's branches (one forward pass per group, not two).
    # Measured: see docs/benchmarks.md (issue 17, run 4).
    hybrid_overlap = True
    # Steps of the overlapped schedule in flight (state_groups' `lead`): 2 keeps the scheduler's queue
    # non-empty; 1 is the one-step-at-a-time schedule of run 4.
    hybrid_lead = 2

    def _groups(self, window: Window) -> list[tuple[list, list]]:
        """Cut the window's rows into ≤ `groups_per_window` runs of about equal branch count, never splitting
        rows that share a prefix; per group, (warm-up keys, rest keys) as (row, branch) index pairs."""
        target = max(1, -(-window.n_branches // max(1, self.groups_per_window)))
        groups: list[tuple[list, list]] = []
        first: list = []
        rest: list = []
        last, size = None, 0
        for i, r in enumerate(window.rows):
            if r.prefix != last and size >= target:
                groups.append((first, rest))
                first, rest, size = [], [], 0
            for j in range(len(r.branches)):
                (first if j == 0 and r.prefix != last else rest).append((i, j))
            size += len(r.branches)
            last = r.prefix
        if first or rest:
            groups.append((first, rest))
        return groups

    def prefill(self, window: Window) -> list[list[BranchResult]]:
        """Label logprobs for every branch of the window: the hybrid pattern for recurrent-state models,
        else the first-branch warm-up pattern. Raises BackendError if the engine fails."""
        if self.multi_item:
            return self._prefill_multi_item(window)
        if self.state_budget is not None:
            return self._prefill_prefix_first(window)
        return self._prefill_first_branch(window)

    async def _generate_mis(self, packs: list[mis.Pack]) -> list[dict]:
        """One batch of multi-item requests. `Engine.async_generate` has no `multi_item_delimiter_indices`
        argument (0.5.17–0.5.19), so the request object goes to the tokenizer manager, as
        `Engine.async_generate` and `Engine.score` do themselves."""
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
        outs = await self.engine.tokenizer_manager.generate_request(obj, None).__anext__()
        return outs if isinstance(outs, list) else [outs]

    def _prefill_multi_item(self, window: Window) -> list[list[BranchResult]]:
        """The window's branches as multi-item packs (one prefix, many suffixes each), sent in `depth` × 2
        batches so the engine's loop turns results into records while later packs run. Per branch:
        prompt tokens = prefix + suffix (its logical length); cached = the prefix for all but a pack's first
        item (computed once per pack); the delimiters are counted in `warm_tokens`."""
        rows = window.rows
        packs = mis.pack_window(window, self.pack_tokens, self.delimiter_id)
        results: list[list[BranchResult | None]] = [[None] * len(r.branches) for r in rows]
        n_batches = max(1, min(len(packs), 2 * max(1, self.depth)))
        step = -(-len(packs) // n_batches)
        batches = [packs[k : k + step] for k in range(0, len(packs), step)]

        async def run_batch(batch: list[mis.Pack]) -> None:
            outs = await self._generate_mis(batch)
            for pk, o in zip(batch, outs, strict=True):
                labels = [rows[i].branches[j].label_ids for i, j in pk.items]
                for k, ((i, j), (vals, err)) in enumerate(
                    zip(pk.items, mis.read_pack(o.get("meta_info", {}), pk, labels), strict=True)
                ):
                    n = len(rows[i].prefix) + len(rows[i].branches[j].suffix)
                    results[i][j] = BranchResult(vals, n, 0 if k == 0 else len(rows[i].prefix), err)
                self.report([(rows[i], j, results[i][j]) for i, j in pk.items])

        async def run_all() -> list:
            return await asyncio.gather(*(run_batch(b) for b in batches), return_exceptions=True)

        errs = [e for e in self._wait(run_all()) if isinstance(e, BaseException)]
        if errs:
            e = errs[0]
            raise BackendError(f"sglang engine failed: {type(e).__name__}: {e}") from e
        self.warm_tokens += sum(len(p.delimiters) for p in packs)
        return results  # type: ignore[return-value]

    def _run_groups(self, groups: list, depth: int) -> None:
        """Run coroutine factories `groups` with `depth` in flight on the engine's loop; raises BackendError
        for the first failure once every group has finished or failed (no request of the window is left
        pending in the engine's loop when the caller retries a half)."""

        async def run_all() -> list:
            sem = asyncio.Semaphore(max(1, depth))

            async def one(g):
                async with sem:
                    await g()

            return await asyncio.gather(*(one(g) for g in groups), return_exceptions=True)

        errs = [e for e in self._wait(run_all()) if isinstance(e, BaseException)]
        if errs:
            e = errs[0]
            raise BackendError(f"sglang engine failed: {type(e).__name__}: {e}") from e

    def _prefill_prefix_first(self, window: Window) -> list[list[BranchResult]]:
        """Hybrid models. Per state-budgeted group (`state.state_groups`): a prefix-only request for each
        distinct prefix (its state is cached at the prefix's end — sglang: at ⌊P/64⌋·64 with the default
        `extra_buffer` strategy), then every branch of the group, which reuses it. With `hybrid_overlap`
        the next group's prefix-only requests are sent with a group's branches (after them, so the
        scheduler admits the branches first), and the groups are sized so both fit the state slots at once:
        one forward pass per group instead of two. Prefix-only requests count as warm-up tokens."""
        rows = window.rows
        results: list[list[BranchResult | None]] = [[None] * len(r.branches) for r in rows]

        def step(g: tuple[int, int] | None, nxt: tuple[int, int] | None):
            return self._hybrid_step(rows, results, g, nxt)

        if not self.hybrid_overlap:
            d = self.hybrid_depth

            def make(a: int, b: int):
                async def run() -> None:
                    await step(None, (a, b))  # its prefixes, then its branches
                    await step((a, b), None)

                return run

            self._run_groups([make(a, b) for a, b in state_groups(rows, self.state_budget, d)], d)
            return results  # type: ignore[return-value]

        lead = max(1, self.hybrid_lead)
        groups = state_groups(rows, self.state_budget, 1, overlap=True, lead=lead)
        # step k: group k-lead's branches with group k's prefix-only requests (the first `lead`: prefixes
        # only, the last `lead`: branches only). Step k is sent once step k-lead has finished, so its
        # branches' prefix states are in the radix cache (sglang inserts a finished request before it
        # answers), and `lead` steps are in flight: the scheduler has the next batch queued while a forward
        # runs, instead of idling through each round trip (measured on the H200 with lead 1, W3: the GPU
        # busy 52 % of the traced span, docs/benchmarks.md run 5). A failure stops the steps after it; the
        # steps in flight finish (or fail) before the window's BackendError is raised.
        n = len(groups)
        steps = [
            (groups[k - lead] if k >= lead else None, groups[k] if k < n else None) for k in range(n + lead)
        ]

        async def pipeline() -> list:
            tasks: list[asyncio.Future] = []
            try:
                for k, (g, nxt) in enumerate(steps):
                    if k >= lead:
                        await tasks[k - lead]
                    tasks.append(asyncio.ensure_future(step(g, nxt)))
                await asyncio.gather(*tasks)
            except Exception as e:  # noqa: BLE001 — reported as the window's BackendError below
                await asyncio.gather(*tasks, return_exceptions=True)
                return [e]
            return []

        errs = self._wait(pipeline())
        if errs:
            e = errs[0]
            raise BackendError(f"sglang engine failed: {type(e).__name__}: {e}") from e
        return results  # type: ignore[return-value]

    async def _hybrid_step(
        self, rows, results, g: tuple[int, int] | None, nxt: tuple[int, int] | None
    ) -> None:
        """Group g's branches and group nxt's prefix-only requests (one per distinct prefix; either may be
        None) as ONE request batch, branches first: one batch reaches the scheduler as one message, so both
        go into the same forward pass (two `async_generate` calls can land in different scheduler
        iterations). Fills `results` for g's branches; the prefix-only requests count as warm-up tokens."""
        if g is None and nxt is None:  # a window of fewer groups than steps in flight: nothing to send
            return
        keys = [(i, j) for i in range(*g) for j in range(len(rows[i].branches))] if g else []
        ids = [list(rows[i].prefix + rows[i].branches[j].suffix) for i, j in keys]
        labels = [list(rows[i].branches[j].label_ids) for i, j in keys]
        if nxt is not None:
            firsts = [i for i in range(*nxt) if i == nxt[0] or rows[i].prefix != rows[i - 1].prefix]
            ids += [list(rows[i].prefix) for i in firsts]
            labels += [
                list(rows[i].branches[0].label_ids) for i in firsts
            ]  # every request carries them: #34719
        outs = await self.engine.async_generate(**self._request(ids, labels))
        outs = outs if isinstance(outs, list) else [outs]
        for (i, j), o in zip(keys, outs[: len(keys)], strict=True):
            results[i][j] = self._result(rows[i], j, o)
        for o in outs[len(keys) :]:
            meta = o.get("meta_info", {})
            self.warm_tokens += int(meta.get("prompt_tokens", 0)) - int(meta.get("cached_tokens", 0))
        self.report([(rows[i], j, results[i][j]) for i, j in keys])

    @staticmethod
    def _result(row, j: int, out: dict) -> BranchResult:
        meta = out.get("meta_info", {})
        vals, err = read_label_logprobs(meta, row.branches[j].label_ids)
        n = len(row.prefix) + len(row.branches[j].suffix)
        return BranchResult(vals, int(meta.get("prompt_tokens", n)), int(meta.get("cached_tokens", 0)), err)

    def _prefill_first_branch(self, window: Window) -> list[list[BranchResult]]:
        """Dense models. Per group: the first branch of each distinct prefix (its answer is read too, so a row with N
        questions costs N requests, not N+1: the prefix is still prefilled once), then every other branch,
        whose prefix is by then in the radix cache. `depth` groups are in flight at once. Every request
        carries `token_ids_logprob` (#34719). Raises BackendError if the engine fails."""
        rows = window.rows
        ids = [[list(r.prefix + b.suffix) for b in r.branches] for r in rows]
        results: list[list[BranchResult | None]] = [[None] * len(r.branches) for r in rows]

        def store(keys: list, outs: list[dict]) -> None:
            for (i, j), o in zip(keys, outs, strict=True):
                meta = o.get("meta_info", {})
                vals, err = read_label_logprobs(meta, rows[i].branches[j].label_ids)
                n = len(ids[i][j])
                results[i][j] = BranchResult(
                    vals, int(meta.get("prompt_tokens", n)), int(meta.get("cached_tokens", 0)), err
                )
            self.report([(rows[i], j, results[i][j]) for i, j in keys])

        async def run_group(sem: asyncio.Semaphore, first: list, rest: list) -> None:
            async with sem:
                for keys in (first, rest):  # rest only once its prefixes are cached
                    if keys:
                        req = self._request(
                            [ids[i][j] for i, j in keys],
                            [list(rows[i].branches[j].label_ids) for i, j in keys],
                        )
                        outs = await self.engine.async_generate(**req)
                        store(keys, outs if isinstance(outs, list) else [outs])

        async def run_all() -> list:
            sem = asyncio.Semaphore(max(1, self.depth))
            return await asyncio.gather(
                *(run_group(sem, f, r) for f, r in self._groups(window)), return_exceptions=True
            )

        # gather(return_exceptions=True): every group has finished or failed before we raise, so no request
        # of this window is still pending in the engine's loop when the caller retries a half.
        errs = [e for e in self._wait(run_all()) if isinstance(e, BaseException)]
        if errs:
            e = errs[0]
            raise BackendError(f"sglang engine failed: {type(e).__name__}: {e}") from e
        return results  # type: ignore[return-value]

    def check_alive(self) -> None:
        """A one-token request (a one-item pack on a multi-item engine: every request there needs delimiter
        indices); raises BackendError when an engine process has failed (SIGQUIT seen) or the engine no
        longer answers."""
        if why := sglang_signals.cause():
            raise BackendError(f"the sglang engine died: {why}")
        t = self.tokenizer.eos_token_id or 0
        if not self.multi_item:
            self._generate([[t]], [[0]])
            return
        ids, delims = mis.build([t], [[t]], self.delimiter_id)
        try:
            self._wait(self._generate_mis([mis.Pack(ids, delims, (0,), ((0, 0),), 1)]))
        except BackendError:
            raise
        except Exception as e:
            raise BackendError(f"sglang engine failed: {type(e).__name__}: {e}") from e

    def close(self) -> None:
        eng, self.engine = getattr(self, "engine", None), None
        sglang_signals.stop_engine(eng, getattr(self, "_error_file", None))
