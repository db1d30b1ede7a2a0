"""benchmarks/ measures the product as a user drives it: every script imports only the public API of
`openjev_batch` (the names of its `__all__`), never a submodule, and never touches the product's engine
(`.engine`); the naive baselines call `sglang.Engine` themselves. Each script's `--help` runs here (no
GPU, no model), so a script that no longer imports is caught before a device call is spent on it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCH.rglob("*.py"))


def public_names() -> set[str]:
    """`openjev_batch.__all__`, read from the package's __init__.py (no import)."""
    tree = ast.parse((ROOT / "openjev_batch" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("openjev_batch/__init__.py has no __all__")


def violations(path: Path) -> list[str]:
    """Each import of an openjev_batch internal, or use of the product's engine, as `file:line: what`."""
    public = public_names()
    tree = ast.parse(path.read_text())
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    found, aliases = [], set()
    for node in ast.walk(tree):
        line = f"{rel}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "openjev_batch":
                    aliases.add(a.asname or a.name)
                elif a.name.startswith("openjev_batch."):
                    found.append(f"{line}: import {a.name} (a submodule)")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("openjev_batch."):
                found.append(f"{line}: from {node.module} import … (a submodule)")
            elif node.module == "openjev_batch":
                found += [f"{line}: from openjev_batch import {a.name} (not in __all__)"
                          for a in node.names if a.name not in public]  # fmt: skip
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
            "__import__",
            "import_module",
        ):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and str(arg.value).startswith("openjev_batch."):
                found.append(f"{line}: dynamic import of {arg.value}")
        elif isinstance(node, ast.Attribute) and node.attr == "engine":
            found.append(
                f"{line}: .engine (the product's private sglang engine; start sglang.Engine yourself)"
            )
    for node in ast.walk(tree):  # ob.<name>: only the public ones
        if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) in aliases:
            if node.attr not in public:
                found.append(
                    f"{rel}:{node.lineno}: {node.value.id}.{node.attr} (not in openjev_batch.__all__)"
                )
    return found


def test_benchmarks_use_only_the_public_api():
    assert SCRIPTS, "no benchmark scripts found"
    found = [v for p in SCRIPTS for v in violations(p)]
    assert not found, "benchmarks reach into openjev_batch internals:\n" + "\n".join(found)


def test_the_check_catches_an_internal_import(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text(
        "import openjev_batch as ob\n"
        "from openjev_batch.pipeline.loop import run\n"
        "from openjev_batch import Classifier, build_nothing\n"
        "import openjev_batch.api\n"
        "x = __import__('openjev_batch.pipeline.plan')\n"
        "clf = ob.Classifier('m')\n"
        "clf.backend.engine.flush_cache()\n"
        "ob.api.Classifier\n"
    )
    got = [v.split(": ", 1)[1] for v in violations(bad)]
    assert sorted(got) == sorted([
        "from openjev_batch.pipeline.loop import … (a submodule)",
        "from openjev_batch import build_nothing (not in __all__)",
        "import openjev_batch.api (a submodule)",
        "dynamic import of openjev_batch.pipeline.plan",
        ".engine (the product's private sglang engine; start sglang.Engine yourself)",
        "ob.api (not in openjev_batch.__all__)",
    ])  # fmt: skip


MAINS = [p for p in SCRIPTS if "__main__" in p.read_text()]


@pytest.mark.parametrize("script", MAINS, ids=lambda p: str(p.relative_to(BENCH)))
def test_each_script_answers_help(script):
    """`--help` imports the script and its helpers on this CPU and prints its usage, running nothing."""
    r = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "usage" in (r.stdout + r.stderr).lower(), r.stdout + r.stderr
