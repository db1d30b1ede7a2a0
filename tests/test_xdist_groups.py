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
