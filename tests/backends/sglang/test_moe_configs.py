"""The shipped fused-MoE kernel configs and the merged folder sglang is pointed at (no GPU needed)."""

from __future__ import annotations

import json

import pytest

from openjev_batch.backends.sglang import moe_configs


def test_shipped_configs_are_sglang_configs_for_the_35b_a3b_on_the_h200():
    names = {p.name for p in moe_configs.shipped()}
    assert "E=256,N=512,device_name=NVIDIA_H200.json" in names
    assert "E=256,N=512,device_name=NVIDIA_H200_down.json" in names
    # the released block-fp8 checkpoints (128 x 128 blocks): sglang 0.5.20's pair, absent from 0.5.17 (issue 30)
    assert "E=256,N=512,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json" in names
    assert "E=256,N=512,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json" in names
    for rel in moe_configs.shipped():
        cfg = json.loads((moe_configs.HERE / rel).read_text())
        assert all(int(k) > 0 for k in cfg)  # sglang reads the keys as token counts
        assert all(
            {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M"} <= set(v) for v in cfg.values()
        )


def test_merged_dir_keeps_sglangs_files_and_adds_ours(tmp_path):
    fake = tmp_path / "sglang_root"
    own = fake / "configs" / "triton_3_6_0" / "E=128,N=768,device_name=NVIDIA_H200.json"
    clash = fake / "configs" / moe_configs.shipped()[0]
    for f in (own, clash):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}")
    out = moe_configs.merged_dir(fake, tmp_path / "merged")
    got = {p.relative_to(out / "configs") for p in (out / "configs").rglob("*.json")}
    assert own.relative_to(fake / "configs") in got and set(moe_configs.shipped()) <= got
    assert (out / "configs" / moe_configs.shipped()[0]).resolve() == clash.resolve()  # sglang's wins
    assert (out / "configs" / moe_configs.shipped()[1]).resolve().read_text() == (
        moe_configs.HERE / moe_configs.shipped()[1]
    ).read_text()
    moe_configs.merged_dir(fake, tmp_path / "merged")  # idempotent


def test_config_dir_for_the_installed_sglang(tmp_path, monkeypatch):
    pytest.importorskip("sglang.srt")
    root = moe_configs.sglang_config_root()
    if root is None:
        pytest.skip("this sglang keeps no fused-MoE config folder")
    d = moe_configs.config_dir(tmp_path)
    n_sglang = sum(1 for p in (root / "configs").rglob("*") if p.is_file())
    assert sum(1 for p in (d / "configs").rglob("*") if p.is_file()) >= n_sglang
    monkeypatch.delenv(moe_configs.ENV, raising=False)
    monkeypatch.setenv("OPENJEV_CACHE", str(tmp_path / "c"))
    assert (
        moe_configs.use_for_engine() == str(moe_configs.config_dir())
        and moe_configs.ENV in __import__("os").environ
    )
    monkeypatch.setenv(moe_configs.ENV, "/elsewhere")
    assert moe_configs.use_for_engine() == "/elsewhere"  # the user's choice stands
