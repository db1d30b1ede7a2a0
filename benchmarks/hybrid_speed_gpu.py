"""Issue 38: the Qwen3.5/3.6 hybrid (35B-A3B, the released architecture) on whichever card the call gets: W3 (the
first 5,000 tickets × 3) and then W1 (64 rows × 8) through the product, one engine per variant, so each variant's
jobs share its start-up. Each result records the card and the sglang release (`common.save`).

Variants (documented options only):
- `default`: the product as it is now;
- `alloc`: `--sglang-patches with-alloc` (the state-slot allocation patch, opt-in until measured);
- `today`: sglang's own fused-MoE configs only (`SGLANG_MOE_CONFIG_DIR`, sglang's documented variable, pointed at
  sglang's own folder);
- `prefix-first`: `--request-pattern prefix-first`;
- `dense`: the Qwen3-0.6B shape (saved random bf16 weights), product default, so the dense rows stay current;
- `fp8-block`: the released FP8 checkpoints' shape (`common.FP8_BLOCK`: block-fp8 128 × 128, dummy weights),
  product defaults; its roofline stays the bf16 one, so the gain shows as a percentage.

`--moe-configs DIR` (issue 47) points `SGLANG_MOE_CONFIG_DIR` at a folder merged from sglang's configs, the
product's shipped ones and DIR's `configs/triton_*/` (benchmarks/moe_tune_gpu.py's output), DIR's winning.
`--cut-s S` stops W3 after S seconds and reports its rate (branches/s) and the projected whole-job time.

`--profile START:STEPS` sets `OPENJEV_GPU_PROFILE` (the product's diagnosis variable): the engine's scheduler
summarises the GPU timeline of batches START … START+STEPS-1 into $OUT/profile-<variant>.json. Run one variant
per process (a scheduler that dies takes only its own variant):

    bash benchmarks/gpu.sh benchmarks/hybrid_speed_gpu.py --variant today --profile 40:16
    PYTHONPATH=tests/shims SGLANG_USE_CPU_ENGINE=1 python benchmarks/hybrid_speed_gpu.py --smoke   # CPU plumbing
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import time
from pathlib import Path

import common
from common import HYBRID, HYBRID_FP8, OUT, ROOT, WORK, log, make_model, roofline_s, save

VARIANTS = {
    "default": {},
    "alloc": {"sglang_patches": "with-alloc"},
    "today": {},
    "prefix-first": {"request_pattern": "prefix-first"},
    "dense": {},
    "fp8-block": {},
}
SHIPPED_MOE = ROOT / "openjev_batch" / "backends" / "sglang" / "moe_configs" / "configs"


def merged_moe_dir(tuned: Path) -> Path:
    """A SGLANG_MOE_CONFIG_DIR of links: sglang's own config files, the product's shipped ones, then `tuned`'s
    (later ones win by file name)."""
    out = WORK / "moe-merged"
    root = sglang_moe_root()
    for src in [*([Path(root) / "configs"] if root else []), SHIPPED_MOE, tuned / "configs"]:
        for f in src.rglob("*.json"):
            link = out / "configs" / f.relative_to(src)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.unlink(missing_ok=True)
            link.symlink_to(f.resolve())
    return out


class Cut(BaseException):  # not an Exception: no handler inside the product swallows it
    """The job ran past --cut-s."""


def _cut(*_):
    raise Cut


def sglang_moe_root() -> str | None:
    """sglang's own fused-MoE config folder (what SGLANG_MOE_CONFIG_DIR means when unset)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.origin:
        return None
    root = Path(spec.origin).parent / "srt" / "layers" / "moe" / "moe_runner" / "triton_utils"
    return str(root) if (root / "configs").is_dir() else None


def job(clf, files, warm, out_name: str, shape: str, cut_s: float = 0) -> dict:
    from product import run_job

    t = time.perf_counter()
    run_job(clf, *warm)
    r: dict = {"warm_job_s": round(time.perf_counter() - t, 1)}
    prog: list = []
    if cut_s:
        signal.signal(signal.SIGALRM, _cut)
        signal.alarm(int(cut_s))
    try:
        r["product"] = run_job(clf, *files, WORK / out_name, progress=prog)
    except Cut:
        n_q = len(json.loads(Path(files[1]).read_text())) if files[1] else 1
        total = sum(1 for _ in open(files[0])) * n_q
        done, secs = prog[-1] if prog else (0, cut_s)
        rate = done / secs if secs else 0.0
        r["cut"] = {"after_s": cut_s, "branches": done, "of": total, "branches_per_s": round(rate, 1),
                    "projected_s": round(total / rate, 1) if rate else None}  # fmt: skip
        return r
    finally:
        signal.alarm(0)
    r["roofline_s"] = round(roofline_s(shape, r["product"]["unique_tokens"]), 3) if shape != "tiny" else None
    if r["roofline_s"]:
        r["pct_roofline"] = round(100 * r["roofline_s"] / r["product"]["s"], 1)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description="Issue 38: the 35B-A3B hybrid's W3 and W1 per variant.")
    ap.add_argument("--variant", default="default", choices=list(VARIANTS))
    ap.add_argument("--w3-rows", type=int, default=5000)
    ap.add_argument("--w1-rows", type=int, default=64)
    ap.add_argument("--no-w1", action="store_true")
    ap.add_argument("--profile", help="START:STEPS: the scheduler's GPU timeline over these batches")
    ap.add_argument("--tag", default="", help="suffix of the results keys")
    ap.add_argument("--moe-configs", type=Path, help="tuned fused-MoE configs (moe_tune_gpu.py's --out)")
    ap.add_argument("--cut-s", type=float, default=0, help="stop W3 after this long; report its rate")
    ap.add_argument("--smoke", action="store_true", help="the plumbing on a CPU (tiny model, few rows)")
    a = ap.parse_args()
    from labels_gpu import warm_file
    from product import engine_options, open_classifier
    from transformers import AutoTokenizer

    shape = "tiny" if a.smoke else {"dense": "qwen3-0.6b", "fp8-block": HYBRID_FP8}.get(a.variant, HYBRID)
    model = make_model(shape, weights=shape in ("qwen3-0.6b", "tiny"))
    tok = AutoTokenizer.from_pretrained(model)
    wl = common.workload_files(tok, ("w1", "w3"), small=a.smoke)
    w3 = (common.head(wl["w3"][0], a.w3_rows, WORK / f"w3-{a.w3_rows}.jsonl"), wl["w3"][1])
    w1 = (common.head(wl["w1"][0], a.w1_rows, WORK / f"w1-{a.w1_rows}.jsonl"), wl["w1"][1])
    opts = engine_options(a.smoke, **dict(VARIANTS[a.variant]))
    if shape in (HYBRID, HYBRID_FP8):
        opts["engine_args"].setdefault("load_format", "dummy")
    if a.variant == "today" and (root := sglang_moe_root()):
        os.environ["SGLANG_MOE_CONFIG_DIR"] = root
    if a.moe_configs:
        os.environ["SGLANG_MOE_CONFIG_DIR"] = str(merged_moe_dir(a.moe_configs))
    if a.profile:
        start, steps = a.profile.split(":")
        os.environ["OPENJEV_GPU_PROFILE"] = f"{WORK / 'profile'},{int(start)},{int(steps)}"
    key = f"{{}}/{shape}/{a.variant}{a.tag}"
    try:
        clf, start_s = open_classifier(model, "sglang", **opts)
    except Exception as e:  # noqa: BLE001 - recorded
        save({key.format("w3"): {"error": f"{type(e).__name__}: {e}"[:2000], "options": opts}})
        raise
    log("started", start_s, "s")
    try:
        for wl_name, files, skip in (("w3", w3, False), ("w1", w1, a.no_w1)):
            if skip:
                continue
            k = key.format(wl_name)
            r: dict = {
                "start_s": start_s,
                "options": opts,
                "moe_config_dir": os.environ.get("SGLANG_MOE_CONFIG_DIR"),
            }
            try:
                r.update(
                    job(clf, files, warm_file(tok, wl_name, a.smoke), f"{wl_name}-{a.variant}.parquet", shape,
                        a.cut_s if wl_name == "w3" else 0)  # fmt: skip
                )
                r["summary_pattern"] = r.get("product", {}).get("pattern")
            except Exception as e:  # noqa: BLE001 - recorded; W1 still runs after a failed W3
                r["error"] = f"{type(e).__name__}: {e}"[:2000]
            log(k, r)
            save({k: r})
    finally:
        clf.close()
        prof = sorted((WORK / "profile").glob("gpu-profile-*.json"), key=lambda p: p.stat().st_mtime)
        if prof:
            OUT.mkdir(parents=True, exist_ok=True)
            (OUT / f"profile-{a.variant}{a.tag}.json").write_text(prof[-1].read_text())
            for p in prof:
                p.unlink()


if __name__ == "__main__":
    main()
