"""Issue 47: a narrow fused-MoE tuner for what a batch job runs. sglang's own tuner sweeps every batch size and
takes hours; a batch job's forwards are 8k–32k tokens. This times sglang's own fused-MoE Triton kernel
(`fused_experts_impl`, the call its MoE layer makes) over a short list of its configs, for the 35B-A3B shape
(transformers' `Qwen3_5MoeConfig().text_config`: E=256 experts, N=512 per expert, hidden 2048, top-8), in bf16 and
block-fp8 [128, 128], at the token counts the product's planner produces.

How: the up (w13) and down (w2) GEMMs have separate config files in sglang (`…json` and `…_down.json`, the down
one may set USE_TMA). sglang resolves both in `try_get_optimal_moe_config`; this script replaces that function in
the kernel's module with one that returns the candidate under test, sweeps the up configs with the down config held
at sglang's choice, then the down configs with the best up config (sglang forces the down BLOCK_SIZE_M to the up
one, so the down sweep keeps it). Each candidate is timed on the whole `fused_experts_impl` (align, both GEMMs,
activation, the top-k sum), median of `triton.testing.do_bench`. sglang's own choice for the card is always a
candidate, so what is written is never slower than it on these measurements.

Writes, under `--out` (default $OUT/moe_configs): `configs/triton_X_Y_Z/<sglang's file name>.json` for each dtype
(sglang's JSON: {"<tokens>": {BLOCK_SIZE_M: …}}; the entries of the file sglang would read today for the card are
kept for the token counts not tuned here), and `tune.json` with every timing. Point SGLANG_MOE_CONFIG_DIR at a
folder that holds these (benchmarks/hybrid_speed_gpu.py `--moe-configs`).

    bash benchmarks/gpu.sh benchmarks/moe_tune_gpu.py --budget-s 200
    TRITON_INTERPRET=1 python benchmarks/moe_tune_gpu.py --smoke     # CPU: the plumbing, tiny shape
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]
from common import OUT, env_info, log  # noqa: E402

# Up (w13: K=hidden → 2N) candidates: (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps, stages). Around sglang's H200
# tunings for this shape (E=256,N=512) and the large-M corners of its config space.
UP = {
    "bf16": [
        (64, 128, 64, 1, 4, 3), (64, 128, 64, 16, 4, 4), (64, 256, 64, 16, 8, 3), (128, 128, 64, 16, 8, 3),
        (128, 128, 64, 1, 4, 3), (128, 256, 64, 16, 8, 3), (128, 256, 64, 32, 8, 4), (128, 128, 128, 16, 8, 3),
        (64, 64, 64, 8, 4, 4), (128, 64, 64, 16, 4, 4), (256, 128, 64, 16, 8, 3), (64, 128, 128, 16, 4, 3),
    ],
    "fp8": [  # block-fp8: BLOCK_K divides the 128-wide scale block
        (64, 64, 128, 32, 4, 3), (64, 128, 128, 32, 4, 3), (128, 128, 128, 32, 8, 3), (128, 128, 128, 16, 4, 3),
        (128, 64, 128, 16, 4, 4), (64, 128, 128, 16, 4, 4), (128, 256, 128, 16, 8, 3), (64, 256, 128, 16, 8, 3),
        (128, 128, 64, 16, 8, 4), (64, 128, 64, 16, 4, 4), (256, 128, 128, 16, 8, 3), (128, 128, 128, 1, 8, 4),
    ],
}  # fmt: skip
# Down (w2: K=N → hidden): (BLOCK_N, BLOCK_K, GROUP_M, warps, stages, USE_TMA); BLOCK_M is the up config's.
DOWN = {
    "bf16": [
        (128, 64, 16, 4, 3, True), (128, 64, 16, 4, 3, False), (256, 64, 16, 8, 3, True), (128, 128, 16, 8, 3, True),
        (64, 64, 16, 4, 4, True), (128, 64, 32, 4, 4, True), (256, 64, 16, 8, 4, False), (128, 128, 16, 4, 3, False),
    ],
    "fp8": [
        (128, 128, 32, 4, 3, True), (128, 128, 32, 4, 3, False), (64, 128, 32, 4, 3, True), (256, 128, 16, 8, 3, True),
        (128, 128, 16, 8, 4, True), (128, 64, 16, 4, 4, True), (256, 128, 16, 8, 3, False), (64, 128, 16, 4, 4, False),
    ],
}  # fmt: skip
SMOKE_UP = {"bf16": [(16, 32, 32, 1, 4, 2), (32, 32, 32, 1, 4, 2)], "fp8": [(16, 32, 32, 1, 4, 2)]}
SMOKE_DOWN = {"bf16": [(32, 32, 1, 4, 2, False)], "fp8": [(32, 32, 1, 4, 2, False)]}
KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")


def shape(smoke: bool) -> dict:
    """E, N (per expert), K (hidden), top-k: the released 35B-A3B (transformers' config), or a tiny one."""
    if smoke:
        return {"E": 4, "N": 128, "K": 128, "topk": 2}  # one 128 × 128 fp8 block wide
    from transformers import Qwen3_5MoeConfig

    t = Qwen3_5MoeConfig().text_config
    return {"E": t.num_experts, "N": t.moe_intermediate_size, "K": t.hidden_size, "topk": t.num_experts_per_tok}


def publish_server_args(device: str) -> None:
    """The kernel reads sglang's process config (`get_exec()`: deterministic mode off); outside an engine nobody
    published it, so publish sglang's defaults for a tiny dense model folder (the model is never loaded)."""
    from sglang.srt import runtime_context as rc
    from sglang.srt.server_args import ServerArgs
    from transformers import Qwen3Config

    d = OUT.parent / "moe-tuner-model" if OUT.name else Path("/tmp/moe-tuner-model")
    d.mkdir(parents=True, exist_ok=True)
    cfg = Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=32, vocab_size=256).to_dict()  # fmt: skip
    (d / "config.json").write_text(json.dumps({**cfg, "architectures": ["Qwen3ForCausalLM"]}))
    sa = ServerArgs(model_path=str(d), device=device, skip_tokenizer_init=True)
    if hasattr(rc, "publish"):
        rc.publish(sa, role="test")
    else:
        rc.get_context().set_server_args(sa)


class Bench:
    """Inputs for one dtype at the largest token count (smaller counts are leading rows) and the timed call."""

    def __init__(self, dtype: str, s: dict, m_max: int, device: str):
        import torch
        from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe as fm

        self.fm, self.dtype, self.s, self.device = fm, dtype, s, device
        # the output buffer asks for the TP group's symmetric memory, off at tp 1; no process group here
        fm.get_tp_group = lambda: None
        E, N, K, topk = s["E"], s["N"], s["K"], s["topk"]
        g = torch.Generator(device="cpu").manual_seed(0)
        self.x = (torch.randn(m_max, K, generator=g) * 0.5).to(device, torch.bfloat16)  # (M, K)
        w1 = torch.randn(E, 2 * N, K, generator=g) / K**0.5  # (E, 2N, K): gate and up, stacked
        w2 = torch.randn(E, K, N, generator=g) / N**0.5  # (E, K, N)
        logits = torch.randn(m_max, E, generator=g)  # (M, E) router logits
        w, ids = torch.topk(logits.softmax(-1), topk, dim=-1)  # (M, topk)
        self.topk_w = (w / w.sum(-1, keepdim=True)).to(device, torch.float32)
        self.topk_ids = ids.to(device, torch.int32)
        self.kw: dict = {}
        if dtype == "fp8":
            self.w1, s1 = quant_block_fp8(w1, device)
            self.w2, s2 = quant_block_fp8(w2, device)
            self.kw = dict(use_fp8_w8a8=True, w1_scale=s1, w2_scale=s2, block_shape=[128, 128])
        else:
            self.w1 = w1.to(device, torch.bfloat16).contiguous()
            self.w2 = w2.to(device, torch.bfloat16).contiguous()
        self.stock = fm.try_get_optimal_moe_config

    def stock_configs(self, m: int) -> tuple[dict, dict | None]:
        """What sglang picks today for this card at m tokens: (up, down or None)."""
        cfg, (down, _) = self.stock(
            self.w1.shape, self.w2.shape, self.s["topk"], "fp8_w8a8" if self.dtype == "fp8" else None, m,
            block_shape=self.kw.get("block_shape"), return_down_config=True,
        )  # fmt: skip
        return dict(cfg), (dict(down) if down else None)

    def run(self, m: int, up: dict, down: dict | None):
        def pick(*a, **k):
            return dict(up), (dict(down) if down else None, up["BLOCK_SIZE_M"])

        self.fm.try_get_optimal_moe_config = pick  # the kernel module's own name for it (see the docstring)
        try:
            return self.fm.fused_experts_impl(
                self.x[:m], self.w1, self.w2, self.topk_w[:m], self.topk_ids[:m], inplace=False, **self.kw
            )
        finally:
            self.fm.try_get_optimal_moe_config = self.stock

    def time_ms(self, m: int, up: dict, down: dict | None, ref=None) -> float:
        """Median ms of the whole call; first checks the output against `ref` (sglang's pick) where given, so a
        config that computes something else is refused, not timed."""
        if ref is not None:
            out = self.run(m, up, down).float()  # (m, K)
            err = float((out - ref).norm() / ref.norm())
            if not err < 2e-2:  # bf16 operands land near 1e-3; NaN fails too
                raise ValueError(f"output differs from sglang's pick: relative error {err:.3g}")
        if self.device == "cpu":  # the smoke: one timed call after one warm call
            self.run(m, up, down)
            t = time.perf_counter()
            self.run(m, up, down)
            return (time.perf_counter() - t) * 1e3
        import triton

        return float(triton.testing.do_bench(lambda: self.run(m, up, down), warmup=10, rep=40, return_mode="median"))


def quant_block_fp8(w, device: str):
    """(E, R, C) float → fp8 e4m3 weights and (E, R/128, C/128) float32 scales, one per 128×128 block (the
    released checkpoints' layout)."""
    import torch

    E, R, C = w.shape
    b = w.reshape(E, R // 128, 128, C // 128, 128)
    scale = b.abs().amax(dim=(2, 4), keepdim=True).clamp(min=1e-6) / 448.0  # (E, R/128, 1, C/128, 1)
    q = (b / scale).reshape(E, R, C).to(torch.float8_e4m3fn)
    return q.to(device).contiguous(), scale.reshape(E, R // 128, C // 128).to(device, torch.float32).contiguous()


def align_torch(topk_ids, block_m: int, E: int):
    """sglang's `moe_align_block_size` in plain torch (the CPU smoke only): token slots sorted by expert, each
    expert's run padded to a multiple of block_m with the pad id numel; the expert of each block; the total."""
    import torch

    flat = topk_ids.flatten()  # (M·topk,)
    ids, blocks = [], []
    for e in range(E):
        rows = (flat == e).nonzero().flatten()
        n = -(-rows.numel() // block_m) * block_m
        ids.append(torch.cat([rows, rows.new_full((n - rows.numel(),), flat.numel())]))
        blocks += [e] * (n // block_m)
    sorted_ids = torch.cat(ids).to(torch.int32)
    return sorted_ids, torch.tensor(blocks, dtype=torch.int32), torch.tensor([sorted_ids.numel()], dtype=torch.int32)


def up_cfg(c: tuple) -> dict:
    return dict(zip(KEYS, c, strict=True))


def down_cfg(bm: int, c: tuple) -> dict:
    d = dict(zip(KEYS, (bm, *c[:5]), strict=True))
    d["USE_TMA"] = c[5]
    return d


def sweep(b: Bench, ms: list[int], ups: list, downs: list, deadline: float) -> dict:
    """Per token count: sglang's pick, then the up sweep (down at sglang's pick), then the down sweep."""
    res: dict = {}
    for m in ms:
        stock_up, stock_down = b.stock_configs(m)
        ref = b.run(m, stock_up, stock_down).float()  # (m, K): what sglang's pick computes
        rows = [{"up": stock_up, "down": stock_down, "ms": b.time_ms(m, stock_up, stock_down), "stock": True}]
        best = rows[0]
        for c in ups:
            if time.time() > deadline:
                break
            up = up_cfg(c)
            dn = stock_down and {**stock_down, "BLOCK_SIZE_M": up["BLOCK_SIZE_M"]}  # as sglang forces it
            try:
                t = b.time_ms(m, up, dn, ref)
            except Exception as e:  # noqa: BLE001 - a config the kernel refuses (shared memory): recorded
                rows.append({"up": up, "error": f"{type(e).__name__}: {e}"[:200]})
                continue
            rows.append({"up": up, "down": dn, "ms": t})
            best = min(best, rows[-1], key=lambda r: r["ms"])
        best_up = best["up"]
        for c in downs:
            if time.time() > deadline:
                break
            down = down_cfg(best_up["BLOCK_SIZE_M"], c)
            try:
                t = b.time_ms(m, best_up, down, ref)
            except Exception as e:  # noqa: BLE001
                rows.append({"up": best_up, "down": down, "error": f"{type(e).__name__}: {e}"[:200]})
                continue
            rows.append({"up": best_up, "down": down, "ms": t})
            best = min(best, rows[-1], key=lambda r: r["ms"])
        res[str(m)] = {"stock_ms": rows[0]["ms"], "best": best, "speedup": rows[0]["ms"] / best["ms"], "rows": rows}
        log(f"m={m}: sglang's pick {rows[0]['ms']:.3f} ms, best {best['ms']:.3f} ms ({len(rows)} timed)")
    return res


def existing(name: str, version_dir: str) -> dict:
    """The entries of the file sglang reads for this name today: sglang's own folder, else the product's shipped
    copy (openjev_batch/backends/sglang/moe_configs), else none."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    roots = []
    if spec and spec.origin:
        roots.append(Path(spec.origin).parent / "srt/layers/moe/moe_runner/triton_utils/configs" / version_dir)
    roots.append(Path(__file__).resolve().parents[1] / "openjev_batch/backends/sglang/moe_configs/configs" / version_dir)
    for r in roots:
        if (r / name).is_file():
            return json.loads((r / name).read_text())
    return {}


def write_configs(dtype: str, s: dict, res: dict, out: Path) -> list[str]:
    """sglang's two files (up, `_down`) for this card and dtype, the tuned token counts over today's entries."""
    import triton
    from sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config import get_config_file_name

    vdir = f"triton_{triton.__version__.replace('.', '_')}"
    q = "fp8_w8a8" if dtype == "fp8" else None
    bs = [128, 128] if dtype == "fp8" else None
    written = []
    for down in (False, True):
        name = get_config_file_name(s["E"], s["N"], q, bs, down_moe=down)
        table = existing(name, vdir)
        for m, r in res.items():
            cfg = r["best"]["down" if down else "up"]
            if cfg is None:  # sglang had no down config and the sweep found none better: the up one, no TMA
                cfg = {k: v for k, v in r["best"]["up"].items() if k != "USE_TMA"}
            table[m] = cfg
        table = dict(sorted(table.items(), key=lambda kv: int(kv[0])))
        p = out / "configs" / vdir / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(table, indent=4) + "\n")
        written.append(str(p.relative_to(out)))
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description="Issue 47: sglang's fused-MoE configs for the 35B-A3B at batch sizes.")
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--tokens", default="8192,16384,32768", help="token counts a forward holds (the planner's)")
    ap.add_argument("--budget-s", type=float, default=200, help="stop sweeping after this long (best so far kept)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="CPU (TRITON_INTERPRET=1): tiny shape, two candidates")
    a = ap.parse_args()
    if a.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    device = "cuda" if torch.cuda.is_available() and not a.smoke else "cpu"
    out = a.out or (OUT / "moe_configs")
    s = shape(a.smoke)
    ms = [16, 32] if a.smoke else [int(t) for t in a.tokens.split(",")]
    dtypes = [d for d in a.dtypes.split(",") if d]
    t0 = time.time()
    publish_server_args(device)
    if device == "cpu":  # sglang names config files by the GPU; a CPU has none (the smoke writes "cpu_smoke")
        from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe_triton_config as fmc

        fmc.get_device_name = lambda *_: "cpu smoke"
        from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe as fm

        fm.moe_align_block_size = align_torch  # sglang's is a CUDA op of sgl_kernel
    report: dict = {**env_info(), "shape": s, "tokens": ms, "results": {}, "files": []}
    for i, dtype in enumerate(dtypes):
        # each dtype gets an equal share of what is left of the budget
        deadline = t0 + a.budget_s * (i + 1) / len(dtypes)
        try:
            b = Bench(dtype, s, max(ms), device)
            ups = (SMOKE_UP if a.smoke else UP)[dtype]
            downs = (SMOKE_DOWN if a.smoke else DOWN)[dtype]
            res = sweep(b, ms, ups, downs, deadline)
            report["results"][dtype] = res
            report["files"] += write_configs(dtype, s, res, out)
        except Exception as e:  # noqa: BLE001 - recorded; the other dtype still runs
            report["results"][dtype] = {"error": f"{type(e).__name__}: {e}"[:1000]}
            log(dtype, "failed:", report["results"][dtype]["error"])
        finally:
            if device == "cuda":
                torch.cuda.empty_cache()
    report["seconds"] = round(time.time() - t0, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tune.json").write_text(json.dumps(report, indent=1))
    for dtype, res in report["results"].items():
        for m, r in res.items() if "error" not in res else []:
            log(f"{dtype} m={m}: sglang {r['stock_ms']:.3f} ms → tuned {r['best']['ms']:.3f} ms ({r['speedup']:.2f}×)")
    log("wrote", report["files"], "in", report["seconds"], "s")
    if a.smoke and (not report["files"] or any("error" in r for r in report["results"].values())):
        raise SystemExit("smoke failed: " + json.dumps({k: v.get("error") for k, v in report["results"].items()}))


if __name__ == "__main__":
    main()
