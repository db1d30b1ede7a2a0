"""The test command runs on pytest-xdist with the sglang engine's tests in one worker (tests/conftest.py).
Under pytest 9.2 xdist's grouping silently stopped (pytest-dev/pytest-xdist#1386) and two CPU engines
started at once: this fails when a marked test is not in its group."""

import os

import pytest


@pytest.mark.sglang
def test_an_sglang_test_runs_in_the_sglang_group(request):
    if "PYTEST_XDIST_WORKER" not in os.environ or not request.config.getvalue("loadgroup"):
        pytest.skip("runs under `pytest -n N` (the README's test command)")
    assert request.node.nodeid.endswith("@sglang"), request.node.nodeid


def test_the_quick_set_leaves_out_engines_clusters_and_jobs_in_other_processes():
    """Issue 34.12: the test command took over 50 minutes on a loaded 2-core machine. `-m "not slow"` (the
    README's quick command) leaves out the sglang engine, Ray, the packaged real models and the tests that
    run the real command on a model in another process; a marked test keeps its xdist group, and a test
    made slow by its fixtures joins none (it spreads over the workers as before)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    ids = [
        "tests/test_xdist_groups.py::test_an_sglang_test_runs_in_the_sglang_group",  # sglang
        "tests/test_real_model.py",  # a packaged real model
        "tests/pipeline/output/test_store.py::test_a_job_with_row_errors_exits_3_with_no_reader_of_stderr",  # the CLI
        "tests/readouts/test_rows.py::test_whole_file_errors",  # in-process, fast
    ]
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "-m", "not slow", *ids], capture_output=True, text=True, cwd=root, timeout=300)  # fmt: skip
    kept = {line.split("[")[0] for line in r.stdout.splitlines() if "::" in line}
    assert kept == {ids[3]}, r.stdout + r.stderr


def test_the_quick_set_leaves_out_model_builds_and_the_registry_and_counts_as_it_runs():
    """Issue 48.10: the quick set had run 23 of 487 tests after 15 minutes at load 8–15: single tests that build
    tiny hybrids or import sglang took 195–265 s, and the registry tests run pip's resolver. They are `slow`
    (in CI's full set); a test whose fixture builds a model (hf_backend → tiny_model) is too. And the run shows
    a count (`[1/1]`) as it goes, not dots alone."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    fast = "tests/test_packaging.py::test_sglang_extra_covers_the_supported_range"
    ids = [
        "tests/backends/test_backends.py::test_hf_hybrid_qwen3_5_equals_full_forward",  # heavy
        "tests/backends/sglang/hybrid/test_fork.py",  # heavy (its module)
        "tests/backends/sglang/test_mis.py::test_packed_request_equals_separate_requests_on_the_tiny_qwen3",  # hf_backend
        "tests/test_packaging.py::test_each_sglang_release_pins_fit_our_ranges",  # registry
        fast,
    ]
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "-m", "not slow", *ids], capture_output=True, text=True, cwd=root, timeout=300)  # fmt: skip
    kept = {line.split("[")[0] for line in r.stdout.splitlines() if "::" in line}
    assert kept == {fast}, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", fast],
                       capture_output=True, text=True, cwd=root, timeout=300)  # fmt: skip
    assert r.returncode == 0 and "[1/1]" in r.stdout, r.stdout + r.stderr
