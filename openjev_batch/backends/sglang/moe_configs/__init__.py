"""Tuned fused-MoE Triton kernel configs that the sglang releases we support lack, and how sglang finds them.

sglang picks a config for its fused MoE kernels by file name, `E={experts},N={intermediate per GPU},
device_name={GPU}[…].json` (plus `_down` for the down projection), under
`$SGLANG_MOE_CONFIG_DIR/configs/triton_{version}/` (default: the folder of its
`fused_moe_triton_config.py`); without one it logs "Using default MoE kernel config" and runs a generic
tiling. sglang 0.5.17 has none for E=256, N=512 on the H200 (Qwen3.5 / Qwen3.6-35B-A3B at tp 1): the files
here are sglang's own, tuned on the H200 with its `benchmark/kernels/fused_moe_triton` tuner and added
upstream after 0.5.17 (sgl-project/sglang#35374, `configs/triton_3_6_0/`). The block-fp8 pair
(`dtype=fp8_w8a8,block_shape=[128, 128]`, for the released FP8 checkpoints' 128 x 128 blocks) is byte-for-byte
sglang 0.5.20's (PyPI wheel). The bf16 pair's effect is measured in docs/benchmarks.md; the fp8 pair's is not
yet (issue 30: no device time left in that session). The H100 files (`device_name=NVIDIA_H100_80GB_HBM3`, bf16 and
block-fp8) are the product's own: `benchmarks/moe_tune_gpu.py` (issue 47) on an H100 with sglang 0.5.17, at the
8k/16k/32k-token forwards a batch job runs (sglang's pick for that card, its generic default, took 1.7-1.9x as
long in bf16 and 1.1x in block-fp8; `benchmarks/results/2026-12-07-h100-sglang0.5.17-issue47-moe-tune.json`).

`config_dir()` builds, once per sglang version, a folder that holds links to every config of the installed
sglang plus ours where sglang has no file of that name (never replacing one of sglang's), and the sglang
backend points `SGLANG_MOE_CONFIG_DIR` at it for MoE models unless the user set the variable.
"""

from __future__ import annotations

import os
from pathlib import Path

from ....packaged_models import cache_dir

HERE = Path(__file__).resolve().parent / "configs"
ENV = "SGLANG_MOE_CONFIG_DIR"


def shipped() -> list[Path]:
    """The config files this package ships (relative to `HERE`: triton_X_Y_Z/E=….json)."""
    return sorted(p.relative_to(HERE) for p in HERE.glob("triton_*/*.json"))


def sglang_config_root() -> Path | None:
    """The folder sglang reads its MoE configs from by default (it holds `configs/`), without importing
    sglang's kernels; None when the installed sglang has no such folder."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.origin:  # not installed, or a folder named sglang (no origin)
        return None
    root = Path(spec.origin).parent / "srt" / "layers" / "moe" / "moe_runner" / "triton_utils"
    return root if (root / "configs").is_dir() else None


def merged_dir(sglang_root: Path, out: Path) -> Path:
    """Fill `out/configs/` with links to every file under `sglang_root/configs/` and to each shipped file
    sglang lacks; returns `out` (the value for SGLANG_MOE_CONFIG_DIR). Idempotent; sglang's files win."""
    src = sglang_root / "configs"
    dst = out / "configs"
    for f in src.rglob("*"):
        if f.is_file():
            link = dst / f.relative_to(src)
            if link.is_symlink() and not link.exists():  # sglang moved (a new install): relink
                link.unlink()
            if not link.exists():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(f)
    for rel in shipped():
        link = dst / rel
        if not link.exists() and not (src / rel).exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(HERE / rel)
    return out


def config_dir(cache: Path | None = None) -> Path | None:
    """The merged config folder for the installed sglang (built on first use under the product's cache);
    None when sglang or its config folder is missing."""
    import hashlib

    root = sglang_config_root()
    if root is None:
        return None
    if cache is None:
        cache = cache_dir().parent  # models/ lives beside it
    key = hashlib.sha256(str(root).encode()).hexdigest()[:12]  # one folder per sglang install
    return merged_dir(root, cache / "sglang-moe-configs" / key)


def use_for_engine() -> str | None:
    """Point SGLANG_MOE_CONFIG_DIR at the merged folder (inherited by sglang's scheduler processes) unless
    the user set it; returns the folder used, or None."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    try:
        d = config_dir()
    except OSError:  # an unwritable cache: sglang's own configs only (slower kernels, same numbers)
        return None
    if d is None:
        return None
    os.environ[ENV] = str(d)
    return str(d)
