"""The backends' specs (backends/base.BackendSpec, backends/<name>/spec.py, registered in `backends.SPECS`):
each answers its facts on a tiny plan without importing its engine, and a third backend registered here gets
a dry-run table and a Ray GPU count with no other edit to the package."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import write_jsonl

from openjev_batch import config, options
from openjev_batch.backends import NAMES, SPECS, BackendPlan, BackendSpec
from openjev_batch.checkpoint.info import model_info
from openjev_batch.cli.display import _print_plan, out
from openjev_batch.config import build_config
from openjev_batch.core import BranchSpec, RowPrompt
from openjev_batch.errors import ConfigError
from openjev_batch.pipeline.dry_run import dry_run
from openjev_batch.pipeline.plan import plan
from openjev_batch.pipeline.runners.ray.cluster import RayOptions, _gpus

Q = {"urgent": {"type": "noul", "instructions": "Urgent?"}}


def row(pos: int, prefix: list[int]) -> RowPrompt:
    return RowPrompt(
        pos, str(pos), tuple(prefix), tuple(BranchSpec(f"q{i}", (900 + i,) * 3, (1, 2)) for i in range(2))
    )


def tiny_plan():
    """Three rows of 2 branches × 3 suffix tokens: two with one 10-token prefix, one sharing 8 of its tokens."""
    return plan([row(0, [7] * 10), row(1, [7] * 8 + [1, 1]), row(2, [7] * 10)], kv_budget_tokens=10_000)


def never(_cfg):
    raise AssertionError("a job that is no hybrid on auto plans nothing before its engine starts")


# what each backend computes of tiny_plan: hf each new prefix (10 + 10) + every suffix (18); sglang the planner's
# LCP (10 + 2 + 18), multi-item each run of one prefix once (10 + 10 + 18)
COUNTS = {"hf": (38, {}), "sglang": (30, {"tokens multi-item scoring computes (sglang, GPU)": 38})}


@pytest.mark.parametrize("name", NAMES)
def test_every_spec_answers_its_facts(name):
    spec = SPECS[name]
    assert isinstance(spec, BackendSpec) and spec.name == name and spec.cache
    assert set(spec.kinds) == {
        "label-logprobs",
        "classifier-head",
    }  # a class per readout kind, by where it lives
    counts = BackendPlan(spec.cache)
    spec.count(counts, tiny_plan())
    assert (counts.unique_tokens, counts.more) == COUNTS[name]
    cfg = build_config(input="-", model="", backend=name, tp_size=2) if name == "sglang" else None
    cfg = cfg or build_config(input="-", model="", backend=name)
    assert spec.prepare(cfg, never) == (cfg, "")
    assert spec.gpus_per_worker(cfg) == (2 if name == "sglang" else 1)
    assert spec.device(cfg.model_copy(update={"device": "cpu"})) == "cpu"
    assert spec.planned(cfg, model_info("")) == ""  # no config.json: nothing to say


def test_specs_load_no_engine():
    """Asking every spec imports neither sglang nor torch nor transformers (the dry run and Ray's driver ask
    them before any engine, and the CLI's --help path loads the backends' face)."""
    code = (
        "import sys; from openjev_batch.backends import SPECS, NAMES\n"
        "[SPECS[n].cache for n in NAMES]\n"
        "print(sorted(m for m in ('sglang', 'torch', 'transformers') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr


class FakeSpec(BackendSpec):
    """A third backend, as its own package would declare it: nothing else of the package is edited."""

    name = "fake"
    kinds = {"label-logprobs": "fake_backend:FakeBackend"}
    cache = "a cache of its own"

    def planned(self, cfg, info):
        return "one request per row"

    def gpus_per_worker(self, cfg):
        return 3.0

    def check_gpus(self, cfg, gpus):
        if gpus < 3:
            raise ConfigError(f"fake needs 3 GPUs per worker; --gpus-per-worker is {gpus:g}")


@pytest.fixture
def fake(monkeypatch):
    """Registered as a backend is: its spec in SPECS, its name among the --backend choices (options.BACKENDS,
    as config reads it) with its own options type (here hf's)."""
    monkeypatch.setattr(SPECS, "_items", dict(SPECS._items))
    SPECS.register("fake")(FakeSpec())
    monkeypatch.setattr(config, "BACKENDS", (*options.BACKENDS, "fake"))
    monkeypatch.setitem(options.OWNED, "fake", options.HFOptions)


def test_a_third_backend_gets_a_dry_run_table(fake, tmp_path, qwen3_tok, qwen3_tok_dir, monkeypatch):
    src = write_jsonl(
        tmp_path / "in.jsonl", [{"id": f"r{i}", "state": f"ticket {i}", "questions": Q} for i in range(3)]
    )
    p = dry_run(build_config(input=src, model=str(qwen3_tok_dir), backend="fake", progress=False), qwen3_tok)
    assert list(p.by_backend) == ["fake", *NAMES]  # the run's backend first, every other one beside it
    assert p.by_backend["fake"].unique_tokens == p.unique_tokens  # BackendSpec.count: the planner's own count
    monkeypatch.setattr(out, "width", 160)  # a terminal's width: rich wraps labels at 80 columns off a terminal
    with out.capture() as shown:
        _print_plan(p)
    text = " ".join(shown.get().split())
    assert f"unique tokens, fake (a cache of its own) │ {p.unique_tokens:,}" in text
    assert "expected cache hit rate, fake (this run's backend)" in text
    assert "request pattern │ one request per row" in text  # its own pattern, as this run's
    assert "expected cache hit rate, hf" in text and "expected cache hit rate, sglang" in text


def test_a_third_backend_gets_a_ray_gpu_count(fake, tmp_path):
    cfg = build_config(input="-", model="", backend="fake")
    assert _gpus(8, cfg, RayOptions()) == 3.0  # the spec's, on a cluster with GPUs
    assert _gpus(0, cfg, RayOptions()) == 0  # a CPU cluster
    with pytest.raises(ConfigError, match="fake needs 3 GPUs per worker; --gpus-per-worker is 1"):
        _gpus(8, cfg, RayOptions(gpus_per_worker=1))
