"""`sglang`: `sglang.Engine` in-process, prefill only, each prefix computed once through the radix cache; or
an engine started elsewhere, handed in (`remote.RemoteEngine`: `--connect URL`), driven the same way.

This module is the engine's lifecycle: start (kwargs.py has the arguments), the facts read from the started
engine (capacity, limits, the recurrent-state budget), the kernel warm-up, liveness, stop. How a window's
requests are sent is a request pattern (patterns/: first-branch for dense models, prefix-first for hybrid
ones, multi-item scoring), chosen per job by `configure` through the one resolver (`patterns.resolve`).
No token is decoded: `max_new_tokens=0` on sglang ≥ 0.5.17 (measured 25 % faster than 1 on an H200), else 1.
The scheduler processes gather the label logprobs without a GPU synchronisation (`sglang_patches`,
sgl-project/sglang#39642), so sglang's overlap scheduler builds batch k+1 while batch k runs.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ...checkpoint.info import ModelInfo, model_info
from ...core import Window
from ...errors import BackendError
from ..base import Backend, BackendOptions, BranchResult, load_tokenizer
from . import hybrid, images, mis, moe_configs, patterns, remote, requests, warmup
from . import signals as sglang_signals
from .fork_releases import at_least
from .kwargs import choose_multi_item, engine_kwargs, import_sglang, text_only
from .patterns import first_branch, multi_item, prefix_first
from .scheduler_patch import engine_class
from .state import StateBudget, state_budget_from_info

log = logging.getLogger(__name__)

FALLBACK_SLOTS = 48  # sglang reported no state or running-request budget: a small, safe guess


class SGLangBackend(Backend):
    name = "sglang"
    request_pattern: str = ""  # prefix-first | first-branch | multi-item (configure sets it)
    kv_capacity_tokens: int | None = None  # the engine's KV pool (max_total_num_tokens)

    model_info: ModelInfo
    engine: Any  # an in-process sglang.Engine, or a remote.RemoteEngine (its own process's: not ours to stop)
    _error_file: Any
    batch_memory: dict[str, Any]
    moe_config_dir: str | None
    multi_item_off_reason: str | None
    release_line = ""  # a Qwen3.5/3.6 hybrid: the installed release and the fork (patterns.with_release)

    def __init__(self, opts: BackendOptions, engine: Any = None):
        """Start an `sglang.Engine` in this process from `opts`, or drive `engine`, one started elsewhere: an
        in-process `sglang.Engine` or a `remote.RemoteEngine` (`--connect URL` makes one, ready:
        `remote.connect`). One request path either way (datatrove's local/remote inference servers)."""
        opts.check_backend("sglang")  # ConfigError naming an hf option given here
        t_start, here = time.perf_counter(), engine is None and not opts.sglang.connect
        if here:
            kw, release, t_start = self._start_here(opts)
            info = self.engine.get_server_info()
        else:
            self.model_info = model_info(opts.model)
            self.tokenizer = load_tokenizer(opts.model, opts.trust_remote_code)
            if engine is None:  # a server already running, driven over HTTP (remote.py)
                engine = remote.connect(opts.sglang.connect, opts.sglang.connect_timeout)
            kw, info = {}, self._adopt(engine)
            release = str(info.get("version") or "0.5.17")
        self.max_new_tokens = 0 if at_least(release, "0.5.17") else 1
        self._read_engine(info, kw)
        self._pattern_words = self._pattern().describe(self)
        self.job_tokens = [0, 0]  # this job's planner counts for `patterns.advice`: multi-item's, unique
        self.start_s = round(time.perf_counter() - t_start, 1)
        warm = kw.get("device") == "cuda"  # the CPU engine compiles nothing; an engine handed in is warm
        self.warmup_s = (warmup.multi_item_kernels if self.multi_item else warmup.kernels)(self) if warm else 0.0
        where = f"connected to {engine.url}" if isinstance(engine, remote.RemoteEngine) else "engine handed in"
        self.startup = self._startup_words(warm) if here else (
            f"{where} (sglang {release}, serving {info.get('model_path') or '?'}) in {self.start_s:.1f} s")  # fmt: skip

    def _start_here(self, opts: BackendOptions) -> tuple[Any, str, float]:
        """Start the engine in this process. Returns its arguments, the sglang release and when it started."""
        sglang = import_sglang()
        self.model_info = model_info(opts.model)
        kw, vision = self._engine_kwargs(opts, sglang.__version__)
        self.release_line = patterns.with_release("", self.model_info, sglang.__version__).removeprefix("; ")
        self.tokenizer = load_tokenizer(opts.model, opts.trust_remote_code)  # BackendError naming the option
        self.engine = None
        t_start = time.perf_counter()
        self._start(opts, kw)
        self.images, self.no_images = images.for_engine(opts, kw, vision)
        return kw, sglang.__version__, t_start

    def _adopt(self, engine: Any) -> dict[str, Any]:
        """Drive `engine`, started elsewhere with its own arguments: no fork (it registers as an engine starts),
        no images (a RemoteEngine sends none; an in-process one's processor is not known here), no batch-job
        memory or MoE configs of ours. Returns its facts (`get_server_info`)."""
        self.engine, self._error_file = engine, None
        info = engine.get_server_info()
        self.fork, self.batch_memory, self.moe_config_dir, self.attention, self.vision_attention = (
            False, {}, None, "", "")  # fmt: skip
        http = isinstance(engine, remote.RemoteEngine)
        self.multi_item_off_reason = remote.MULTI_ITEM_OFF if http else None
        self.images, self.no_images = None, (
            "--connect sends no images (their processor output is tensors)" if http else "an engine handed in takes none")  # fmt: skip
        if info.get("enable_mis") and mis.needs_fork({"architectures": [self.model_info.architecture]}):
            raise BackendError(f"the engine handed in runs sglang's own multi-item scoring on "
                               f"{self.model_info.architecture}, which is not exact there (hybrid/)")  # fmt: skip
        return info

    def _engine_kwargs(self, opts: BackendOptions, version: str) -> tuple[Any, bool]:
        """The engine's arguments (kwargs.engine_kwargs) with the choices made before it starts: multimodal or
        text only, multi-item scoring and the hybrid fork, the fused-MoE configs; and whether the checkpoint
        is a vision-language one (rows may carry images: images.py)."""
        kw = engine_kwargs(opts, recurrent=self.model_info.recurrent)
        from ..hf.vision import is_vision_checkpoint  # lazy: torch (hf/vision.py)

        vision = is_vision_checkpoint(opts.model, opts.trust_remote_code)
        arch = self.model_info.architecture
        asked = opts.sglang.engine_args.get("enable_multimodal")
        # the job's input read before the engine starts (pipeline.job.choose_images): images → multimodal
        multimodal = images.starts_multimodal(arch, vision, asked, opts.images)
        self.vision_attention = ""
        if multimodal:  # sglang's own choice for a VL architecture (enable_multimodal unset): multimodal
            self.vision_attention = images.multimodal_kwargs(opts, kw)  # FA3 or a backend that exists; deepstack
        else:
            text_only(kw, opts)
        self.multi_item_off_reason = choose_multi_item(opts, kw, version)
        auto = opts.sglang.request_pattern == "auto" and (
            arch in mis.FORK_ARCHITECTURES or "enable_mis" not in opts.sglang.engine_args
        )
        if multimodal and kw.get("enable_mis") and auto:
            # the fork is shown exact on a text-only engine only, and an image row is never packed (images.py):
            # a multi-item engine would answer every image row with an error
            kw.pop("enable_mis")
            self.multi_item_off_reason = "off: the engine takes images (the input has image rows)"
        # The Qwen3.5/3.6 hybrids score items exactly only through our model override (backends/sglang/hybrid):
        # registered while this engine starts, then proven loaded (sglang's stock classes leak item to item)
        self.fork = bool(kw.get("enable_mis")) and mis.needs_fork({"architectures": [arch]})
        self.batch_memory = kw.batch_memory
        self.attention = kw.attention  # sglang's own attention choice unless its kernels are missing here
        self.moe_config_dir = None
        if self.model_info.moe and kw.get("device") != "cpu":
            # tuned fused-MoE kernel configs sglang 0.5.17 lacks (E=256, N=512 on the H200); see moe_configs
            self.moe_config_dir = moe_configs.use_for_engine()
        return kw, vision

    def _start(self, opts: BackendOptions, kw: Any) -> None:
        """Start the engine (and prove the fork loaded). sglang's SIGQUIT handlers SIGKILL this process when an
        engine process fails: the product handles it instead (sglang_signals), at start-up through sglang's own
        `custom_sigquit_handler` hook. `engine_class` imports sglang's Engine (and sgl_kernel): inside
        start_engine's `try`, so a missing kernel is its one-line message, not a traceback raised while the
        call's arguments are evaluated."""
        self.engine, self._error_file = sglang_signals.start_engine(
            lambda **kw: engine_class(opts.sglang.sglang_patches)(**kw),
            kw,
            opts,
            external_package=hybrid.PACKAGE if self.fork else None,
        )
        if self.fork:
            self._check_fork()

    def _startup_words(self, warm: bool) -> str:
        return (
            f"engine {self.start_s:.1f} s"
            + (f", kernel warm-up {self.warmup_s:.1f} s" if warm else "")
            + (f"; {self.attention}" if self.attention else "")
            + (f"; multimodal, {self.vision_attention}" if self.vision_attention else "")
            + (f"; batch-job memory {', '.join(f'{k}={v}' for k, v in self.batch_memory.items())}" * bool(self.batch_memory))
        )

    def _check_fork(self) -> None:
        """Raise BackendError (engine stopped) unless the scheduler runs our forking class: sglang's stock
        multi-item scoring on these models lets each item see the items before it (sgl-project/sglang#31969)."""
        reply = self.engine.get_weights_by_name(hybrid.MARKER)
        replies = reply if reply and isinstance(reply[0], list) else [reply]
        if all(r and float(r[0]) == hybrid.FORK_VERSION and float(r[1]) > 0 for r in replies):
            return
        self.close()
        raise BackendError(
            f"the exact multi-item class for {self.model_info.architecture} did not load in the sglang scheduler "
            f"(probe answered {reply!r}); sglang's own multi-item scoring is not exact on this model. "
            f"Check that {hybrid.PACKAGE} imports where sglang runs, or use --request-pattern prefix-first"
        )

    def _read_engine(self, info: dict[str, Any], kw: dict[str, Any]) -> None:
        """The started engine's facts: KV capacity, the recurrent-state budget (hybrid models: prefix-only
        requests, rows in flight bounded by the engine's state slots), multi-item scoring, the limits."""
        self._capacity = int(info.get("max_total_num_tokens") or 0) or None
        self.state_budget = state_budget_from_info(info) if self.model_info.recurrent else None
        if self.model_info.recurrent and self.state_budget is None:
            self.state_budget = StateBudget(slots=FALLBACK_SLOTS)
        self.auto_state_budget = self.state_budget  # what `auto` means for this model on this engine
        self.multi_item = bool(info.get("enable_mis", kw.get("enable_mis")))
        self.scoring = "multi-item" if self.multi_item else "branches"
        # A packed request is one forward (chunked prefill is off on such an engine): keep it within the
        # prefill budget and below the context (sglang refuses input_ids of ≥ context_len tokens).
        tm = getattr(self.engine, "tokenizer_manager", None)
        ctx = getattr(tm, "context_len", None)
        budget = int(info.get("max_prefill_tokens") or 16_384)
        self.pack_tokens = min(budget, int(ctx) - 16) if ctx else budget
        vocab = len(self.tokenizer)
        self.delimiter_id = mis.DELIMITER_ID if vocab > mis.DELIMITER_ID else 0  # any valid id (never read)
        # The engine's own limit on a request's input (sglang refuses len >= max_req_input_len, and
        # len + reserved >= context_len): branches above it become row errors in the prompt stage, before
        # any request (a refused request used to end the whole job).
        limits = [
            int(info.get("max_req_input_len") or 0) - 1,
            int(getattr(tm, "context_len", 0) or 0) - 1 - int(getattr(tm, "num_reserved_tokens", 0) or 0),
        ]
        self.context_length = min((n for n in limits if n > 0), default=None)

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

    def _pattern(self):
        """The pattern module `prefill` runs: multi-item on such an engine, prefix-first while a state
        budget is set (configure sets it), else first-branch."""
        if self.multi_item:
            return multi_item
        return first_branch if self.state_budget is None else prefix_first

    def configure(self, opts) -> None:
        """--request-pattern (resolved by `patterns.resolve`, as `--dry-run` resolves it), --groups-per-window,
        --pipeline-depth for the next job; sets the read-only facts `request_pattern`, `pattern`,
        `kv_capacity_tokens`. Raises ConfigError when this engine cannot serve the pattern asked for."""
        name = patterns.resolve(
            opts.sglang.request_pattern,
            multi_item=self.multi_item,
            hybrid=self.auto_state_budget is not None,
            multi_item_off=self.multi_item_off_reason,
        )
        if name == "first-branch":
            self.state_budget = None
        elif name == "prefix-first":
            self.state_budget = (
                self.auto_state_budget
                or state_budget_from_info(self.engine.get_server_info())
                or StateBudget(slots=FALLBACK_SLOTS)
            )
        self.request_pattern = name
        self.groups_per_window = opts.sglang.groups_per_window
        self.depth = opts.sglang.pipeline_depth
        self.hybrid_lead = opts.sglang.pipeline_depth  # prefix-first: steps in flight
        self.kv_capacity_tokens = self._capacity
        self._pattern_words = self._pattern().describe(self)
        self.job_tokens = [0, 0]

    @property
    def pattern(self) -> str:  # type: ignore[override]  # read-only: the words follow the engine and the job
        """The request pattern in words (run summary); on a hybrid multi-item job, with the planner's advice on
        whether prefix-first would have computed fewer tokens (`patterns.advice`); on a Qwen3.5/3.6 hybrid, the
        installed sglang release and whether the exact fork serves it (`release_line`, as `--dry-run` says)."""
        words = self._pattern_words
        if self.fork and self.job_tokens[1]:
            words = f"{words}; {patterns.advice(*self.job_tokens)}"
        return f"{words}; {self.release_line}" if self.release_line else words

    def kv_budget_tokens(self) -> int:
        # Leave room for the running batch's own activations and fragmentation of the radix tree.
        return int(self._capacity * 0.8) if self._capacity else 1 << 17

    def prefill(self, window: Window) -> list[list[BranchResult]]:
        """Label logprobs for every branch of the window, by this job's request pattern. Raises BackendError
        if the engine fails. An image row's requests carry its images (images.py); a bad image, or an engine
        that takes none, is that row's error, so no image is silently dropped."""
        if self.fork:
            mis_tokens, unique = patterns.multi_item_recompute([window])
            self.job_tokens = [self.job_tokens[0] + mis_tokens, self.job_tokens[1] + unique]
        if any(r.images for r in window.rows):
            try:
                return images.prefill_window(self, window, lambda w: self._pattern().prefill(self, w))
            except BackendError as e:
                raise BackendError(f"{e}; {images.died_on_images(self.vision_attention)}") from e
        return self._pattern().prefill(self, window)

    def check_alive(self) -> None:
        """A one-token request (a one-item pack on a multi-item engine: every request there needs delimiter
        indices); raises BackendError when an engine process has failed (SIGQUIT seen) or the engine no
        longer answers."""
        if why := sglang_signals.cause():
            raise BackendError(f"the sglang engine died: {why}")
        if self.multi_item:
            multi_item.check_alive(self)
            return
        requests.generate(self.engine, [[self.tokenizer.eos_token_id or 0]], [[0]], self.max_new_tokens)

    def close(self) -> None:
        eng, self.engine = getattr(self, "engine", None), None
        sglang_signals.stop_engine(eng, getattr(self, "_error_file", None))

