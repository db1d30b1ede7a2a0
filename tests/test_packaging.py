"""What pyproject declares is installable: the `sglang` extra (a GPU host's one command) resolves, with pip's
own resolver against the package registry, together with openjev-batch's dependency ranges (in full for the
release it picks, on their torch/transformers/tokenizers pins for every release of the extra). Each sglang
release pins those, so a range of ours that excludes them would make `pip install 'openjev-batch[sglang]'`
fail or fall back to an older sglang.

Needs the registry (`pip install --dry-run` downloads the wheels it reads, installs nothing). Without it the test is
skipped, unless OPENJEV_REQUIRE_REGISTRY=1 (CI), where it fails instead."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRA = ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")  # the extra's releases (pyproject)


def _pip(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def _registry_or_skip() -> None:
    r = _pip("index", "versions", "sglang", timeout=120)
    if r.returncode != 0:
        if os.environ.get("OPENJEV_REQUIRE_REGISTRY") == "1":
            pytest.fail(f"package registry unreachable: {r.stderr[-500:]}")
        pytest.skip("package registry unreachable (set OPENJEV_REQUIRE_REGISTRY=1 to fail instead)")


def test_sglang_extra_covers_the_supported_range():
    (req,) = [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["sglang"]]
    assert req.name == "sglang"
    assert all(req.specifier.contains(v) for v in EXTRA)
    assert not req.specifier.contains("0.5.17") and not req.specifier.contains("0.5.24")


@pytest.mark.registry
def test_sglang_extra_resolves_with_our_ranges(tmp_path):
    """What `pip install '.[sglang]'` picks (the newest release in the extra), resolved in full by pip."""
    _registry_or_skip()
    report = tmp_path / "report.json"
    r = _pip(
        "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), f"{ROOT}[sglang]"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = {
        canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"]
        for i in json.loads(report.read_text())["install"]
    }
    assert got["sglang"] == EXTRA[-1] and got["openjev-batch"] == PYPROJECT["project"]["version"]
    for spec in PYPROJECT["project"]["dependencies"]:
        req = Requirement(spec)
        assert req.specifier.contains(got[canonicalize_name(req.name)], prereleases=True), (spec, got)
    # the engine's own pins won: the torch/transformers sglang was built against, not the newest
    for name, version in _pins_of(EXTRA[-1]).items():
        if name in ("torch", "transformers", "tokenizers"):
            assert got[name] == version, (name, got[name], version)


@pytest.mark.registry
@pytest.mark.parametrize("sglang", EXTRA)
def test_each_sglang_release_pins_fit_our_ranges(sglang):
    """Every release in the extra pins torch/transformers/tokenizers inside our ranges (its metadata only:
    0.5.18-0.5.22 also pin cuda-tile 1.6.0rc5, a stub sdist that fetches its wheel from pypi.nvidia.com
    while pip resolves, so their full resolution needs that index, which a GPU host has and this CI may not)."""
    _registry_or_skip()
    pins = _pins_of(sglang)
    ours = {
        canonicalize_name(Requirement(s).name): Requirement(s) for s in PYPROJECT["project"]["dependencies"]
    }
    checked = [n for n in ("torch", "transformers", "tokenizers") if n in pins]
    assert "torch" in checked and "transformers" in checked
    for name in checked:
        assert ours[name].specifier.contains(pins[name]), (name, pins[name], str(ours[name]))


def _pins_of(sglang: str) -> dict[str, str]:
    """`name==version` requirements of that sglang release, from pip's view of its metadata."""
    r = _pip("install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet", "--report", "-",
             f"sglang=={sglang}")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (item,) = json.loads(r.stdout)["install"]
    pins = {}
    for spec in item["metadata"].get("requires_dist", []):
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^;\s]+)", spec.strip())
        if m:
            pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def test_the_licence_field_builds_without_setuptools_deprecation(tmp_path):
    """Issue 42: every install printed setuptools' warning that `license = {text = …}` stops building after
    2027-02-18. The licence is an SPDX expression with its file (PEP 639, setuptools >= 77, which
    build-system requires); the wheel's metadata is built here with the installed setuptools, warnings shown."""
    setuptools = pytest.importorskip("setuptools")
    from packaging.version import Version

    assert Version(setuptools.__version__) >= Version("77")
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert all((ROOT / f).is_file() for f in PYPROJECT["project"]["license-files"])
    assert "setuptools>=77" in PYPROJECT["build-system"]["requires"]
    code = "from setuptools import build_meta as b; b.prepare_metadata_for_build_wheel(__import__('sys').argv[1])"
    r = subprocess.run(
        [sys.executable, "-W", "always", "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Deprecat" not in r.stderr + r.stdout, r.stderr[-2000:]
    (meta,) = tmp_path.glob("*.dist-info/METADATA")
    assert "License-Expression: Apache-2.0" in meta.read_text()
