"""A GPU timeline of a window of sglang forwards, summarised in the scheduler process (a diagnosis tool).

`OPENJEV_GPU_PROFILE=DIR,START,STEPS` in the environment of the process that starts the engine (sglang's scheduler
inherits it): the scheduler process runs `torch.profiler` (GPU activity only: kernels, copies, sets) from its
START-th batch for STEPS batches and writes `DIR/gpu-profile-<pid>.json`: the GPU-busy share of the window, the top
kernels by GPU time, the idle gaps between kernels (the largest ones and a histogram). Not the trace: a W3 window
of 20 forwards holds ~10^5 kernels. Off unless set; the summary costs a few seconds inside the job (say so beside
any wall time measured with it). Why: py-spy sees the host only, and issue 38 asked what the GPU does meanwhile.

`summarize` is pure (kernel tuples in, dict out) and tested on the CPU; `install_from_env` wraps sglang's
`Scheduler.run_batch` (0.5.17–0.5.19) and is a no-op where that method is missing.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENV = "OPENJEV_GPU_PROFILE"
GAP_EDGES_US = (10, 100, 1_000, 10_000, 100_000)  # histogram of idle gaps between GPU work, microseconds


def parse(value: str | None) -> tuple[Path, int, int] | None:
    """`DIR,START,STEPS` → (dir, start batch, batches); None when unset or malformed."""
    if not value:
        return None
    parts = value.rsplit(",", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit() or int(parts[2]) < 1:
        return None
    return Path(parts[0]), int(parts[1]), int(parts[2])


def kernel_family(name: str) -> str:
    """A short family name for a kernel (template arguments and launch suffixes dropped)."""
    name = re.sub(r"<.*", "", name).strip()
    name = re.sub(r"^(void |at::native::|\(anonymous namespace\)::)+", "", name)
    return name[:90] or "?"


def summarize(events: Iterable[tuple[str, int, int]], window_ns: tuple[int, int] | None = None, steps: int = 0,
              top: int = 20) -> dict[str, Any]:  # fmt: skip
    """GPU work as (name, start ns, duration ns) → busy share over the window (default: first start to last end;
    overlapping work on several streams counts once), the top kernel families by GPU time, and the idle gaps."""
    ev = sorted((int(s), int(s) + max(0, int(d)), n) for n, s, d in events)
    if not ev:
        return {"kernels": 0}
    lo, hi = window_ns or (ev[0][0], max(e for _, e, _ in ev))
    busy = 0
    gaps: list[int] = []
    cur_s, cur_e = ev[0][0], ev[0][1]
    if cur_s > lo:
        gaps.append(cur_s - lo)
    for s, e, _ in ev[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            gaps.append(s - cur_e)
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    if hi > cur_e:
        gaps.append(hi - cur_e)
    span = max(1, hi - lo)
    by: dict[str, list[int]] = {}
    for s, e, n in ev:
        fam = by.setdefault(kernel_family(n), [0, 0])
        fam[0] += e - s
        fam[1] += 1
    total_kernel = sum(v[0] for v in by.values()) or 1
    hist = {}
    edges = (0, *GAP_EDGES_US)
    for a, b in zip(edges, (*GAP_EDGES_US, None), strict=True):
        sel = [g for g in gaps if g >= a * 1000 and (b is None or g < b * 1000)]
        hist[f">={a}us" if b is None else f"{a}-{b}us"] = {"n": len(sel), "ms": round(sum(sel) / 1e6, 2)}
    return {
        "window_ms": round(span / 1e6, 2),
        "gpu_busy_ms": round(busy / 1e6, 2),
        "gpu_busy_share": round(busy / span, 4),
        "kernels": len(ev),
        "steps": steps,
        "kernels_per_step": round(len(ev) / steps, 1) if steps else None,
        "idle_gaps": hist,
        "largest_gaps_ms": [round(g / 1e6, 2) for g in sorted(gaps, reverse=True)[:12]],
        "top_kernels": [
            {"kernel": k, "ms": round(v[0] / 1e6, 2), "share": round(v[0] / total_kernel, 4), "calls": v[1]}
            for k, v in sorted(by.items(), key=lambda kv: -kv[1][0])[:top]
        ],
    }


def _gpu_events(prof: Any) -> list[tuple[str, int, int]]:
    """(name, start ns, duration ns) of every GPU activity the profiler recorded."""
    out = []
    for e in prof.profiler.kineto_results.events():
        if "CUDA" not in str(e.device_type()):
            continue
        start = e.start_ns() if hasattr(e, "start_ns") else int(e.start_us() * 1000)
        dur = e.duration_ns() if hasattr(e, "duration_ns") else int(e.duration_us() * 1000)
        out.append((e.name(), start, dur))
    return out


def _begin(state: dict[str, Any]) -> None:
    """Start the GPU profiler before the window's first batch (its `prof` and start time into `state`)."""
    import time

    import torch

    torch.cuda.synchronize()
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
    prof.__enter__()
    state.update(prof=prof, t0=time.perf_counter())


def _end(state: dict[str, Any], out_dir: Path, start: int, steps: int) -> None:
    """Stop the profiler once the window's `steps` batches from batch `start` have run; write the summary."""
    import time

    import torch

    torch.cuda.synchronize()  # the window's last forwards have run
    wall = time.perf_counter() - state["t0"]
    prof = state.pop("prof")
    prof.__exit__(None, None, None)
    summary = summarize(_gpu_events(prof), steps=steps)
    summary.update(host_wall_ms=round(wall * 1000, 2), first_batch=start, device=torch.cuda.get_device_name())
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"gpu-profile-{os.getpid()}.json").write_text(json.dumps(summary, indent=1))
    log.warning("openjev-batch GPU profile written to %s", out_dir)


def install_from_env() -> bool:
    """Wrap sglang's `Scheduler.run_batch` to profile the window `ENV` names (in this, the scheduler process).
    Returns False (and changes nothing) when the variable is unset or sglang has no such method."""
    cfg = parse(os.environ.get(ENV))
    if cfg is None:
        return False
    out_dir, start, steps = cfg
    import importlib

    try:
        cls = importlib.import_module("sglang.srt.managers.scheduler").Scheduler
    except (ImportError, AttributeError):
        return False
    stock = getattr(cls, "run_batch", None)
    if not callable(stock) or getattr(stock, "_openjev_profile", False):
        return callable(stock)
    state: dict[str, Any] = {"n": 0, "prof": None, "t0": 0}

    @functools.wraps(stock)
    def run_batch(self, *args: Any, **kwargs: Any) -> Any:
        n = state["n"]
        state["n"] = n + 1
        try:
            if n == start:
                _begin(state)
            elif n == start + steps and state.get("prof") is not None:
                _end(state, out_dir, start, steps)
        except Exception as e:  # noqa: BLE001 - a diagnosis never ends the scheduler
            state["prof"] = None
            log.warning("openjev-batch GPU profile failed: %s: %s", type(e).__name__, e)
        return stock(self, *args, **kwargs)

    run_batch._openjev_profile = True  # type: ignore[attr-defined]
    cls.run_batch = run_batch
    return True
