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
