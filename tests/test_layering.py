"""The package's import graph keeps its layers (docs/structure.md): the backends never import the pipeline,
and no two modules import each other, directly or round a longer loop. Every import counts, a lazy one inside a
function too: it runs back up the same way when it runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).parent.parent / "openjev_batch"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = PKG) -> dict[str, set[str]]:
    """Module → the package modules it imports (`from pkg import name` counts as pkg.name where that is a
    module, else as pkg). A module's import of its own enclosing package is left out: Python runs that
    package's __init__ before the module anyway, and an __init__ that imports its submodules to assemble
    itself (cli/ registering its commands on the `app` they import from it) is not a layer running back."""
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                for a in node.names:
                    out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in files else base)
        graph[mod] = {m for m in out if m in files and m != mod and not mod.startswith(m + ".")}
    return graph


def back_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    below, above = "openjev_batch.backends", "openjev_batch.pipeline"
    return sorted(
        (a, b)
        for a, targets in graph.items()
        for b in targets
        if (a == below or a.startswith(below + ".")) and (b == above or b.startswith(above + "."))
    )


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_backends_never_import_the_pipeline():
    assert back_imports(import_graph()) == []


def test_no_import_circles():
    assert circles(import_graph()) == []


@pytest.mark.parametrize(
    "files, back, loops",
    [
        # a lazy import inside a function runs back up too, and makes a circle with the import the other way
        (
            {
                "backends/__init__.py": "",
                "backends/eng.py": "from ..pipeline import plan\nfrom . import opts\n",
                "backends/opts.py": "def f():\n    from .eng import x\n",
                "pipeline/__init__.py": "",
                "pipeline/plan.py": "import openjev_batch.core\n",
                "core.py": "",
            },
            [("openjev_batch.backends.eng", "openjev_batch.pipeline.plan")],
            [["openjev_batch.backends.eng", "openjev_batch.backends.opts"]],
        ),
        # the layers kept: the pipeline imports the backends, a chain without a loop
        (
            {
                "backends/__init__.py": "",
                "backends/eng.py": "from ..core import x\n",
                "pipeline/__init__.py": "",
                "pipeline/job.py": "from ..backends.eng import y\nfrom openjev_batch import core\n",
                "core.py": "",
                "cli/__init__.py": "app = 1\nfrom . import run\n",
                "cli/run.py": "from . import app\nfrom .. import core\n",
            },
            [],
            [],
        ),
    ],
)
def test_the_check_sees_back_imports_and_circles(tmp_path, files, back, loops):
    root = tmp_path / "openjev_batch"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "__init__.py").write_text("")
    graph = import_graph(root)
    assert back_imports(graph) == back and circles(graph) == loops


def test_every_import_of_a_package_module_names_one_that_exists():
    """A move leaves no stale import behind, a lazy one inside a function included (`cli/models.py` still
    imported `..models` after models.py became packaged_models.py: `models list` failed only when run)."""
    files = {module_name(p, PKG): p for p in PKG.rglob("*.py")}
    missing = []
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (
                node.level or (node.module or "").startswith("openjev_batch")
            ):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                if base not in files:
                    missing.append(f"{mod}: {base}")
            elif isinstance(node, ast.Import):
                missing += [f"{mod}: {a.name}" for a in node.names
                            if a.name.startswith("openjev_batch") and a.name not in files]  # fmt: skip
    assert not missing, missing


def test_every_name_imported_from_a_package_module_exists():
    """`from .x import name` names something x has, lazy imports too (a merge left `evaluation/samples.py`
    importing the removed `pipeline.job.make_readout`). sglang's heads run only in its scheduler: left out; a
    module whose third-party dependency is not installed here (sglang on the plain install) is skipped."""
    import importlib

    bad = []
    for path in PKG.rglob("*.py"):
        if "heads" in path.parts:
            continue
        mod = module_name(path, PKG)
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            if not base.startswith("openjev_batch"):
                continue
            try:
                target = importlib.import_module(base)
            except ModuleNotFoundError as e:
                if (e.name or "").startswith("openjev_batch"):
                    bad.append(f"{mod}: {base} ({e})")
                continue
            for a in node.names:
                if a.name != "*" and not hasattr(target, a.name):
                    try:
                        importlib.import_module(f"{base}.{a.name}")
                    except ModuleNotFoundError:
                        bad.append(f"{mod}: {base}.{a.name}")
    assert not bad, bad
