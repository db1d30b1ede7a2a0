"""The package's import graph keeps its layers (docs/structure.md): every import runs down the floors that
docs/structure.md states, no module takes a name from a package above it, the pipeline's input and output
wings do not import each other, and no two modules import each other, directly or round a longer loop. Every
import that runs counts, a lazy one inside a function too: it runs back up the same way when it runs. An import
under `if TYPE_CHECKING:` never runs (it names a type for mypy), so it makes no arrow."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).parent.parent / "openjev_batch"
STRUCTURE = Path(__file__).parent.parent / "docs" / "structure.md"
ORDER = "A module imports only modules on the floors below it"  # how docs/structure.md states the order


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(test: ast.expr) -> bool:
    """The test of `if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_nodes(tree: ast.AST):
    """ast.walk, but not into the body of an `if TYPE_CHECKING:` block: those imports never run (its `else`
    does, so that is walked)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and _type_checking(node.test):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


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
        for node in runtime_nodes(ast.parse(path.read_text(), str(path))):
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


def stated_floors(text: str) -> list[list[str]]:
    """The floors the docs state, lowest first, each a list of rooms: the paragraph after ORDER's colon,
    floors split by `<`, rooms in backticks (`core`, `readouts/`, `pipeline/input/`)."""
    start = text.index(ORDER)
    paragraph = text[text.index(":", start) + 1 :].split("\n\n")[0]
    return [[r.rstrip("/") for r in re.findall(r"`([^`]+)`", floor)] for floor in paragraph.split("<")]


def room_of(mod: str, rooms: set[str]) -> str | None:
    """The room a module stands in: the longest stated room its path starts with (`pipeline/input` for
    openjev_batch.pipeline.input.read, `pipeline` for openjev_batch.pipeline.loop, `__init__` for the face)."""
    path = mod.split(".")[1:] or ["__init__"]
    for n in range(len(path), 0, -1):
        if "/".join(path[:n]) in rooms:
            return "/".join(path[:n])
    return None


def floor_breaks(graph: dict[str, set[str]], floors: list[list[str]]) -> list[str]:
    """Every import from one room to another that does not run down the floors (a room on the same floor
    counts as a break: rooms on one floor do not import each other), and every module in no stated room.
    A room nested in another (`pipeline/input/formats` in `pipeline`) stands on its own floor and is
    checked against it like any other room: the format readers import nothing of the pipeline above them."""
    level = {room: i for i, floor in enumerate(floors) for room in floor}
    out = []
    for a in sorted(graph):
        ra = room_of(a, set(level))
        if ra is None:
            out.append(f"{a}: in no room of the stated order")
            continue
        for b in sorted(graph[a]):
            rb = room_of(b, set(level))
            if rb is None or ra == rb:
                continue
            if level[ra] <= level[rb]:
                out.append(f"{a} -> {b} ({ra} on floor {level[ra]}, {rb} on floor {level[rb]})")
    return out


def names_from_above(root: Path = PKG) -> dict[str, set[str]]:
    """Module → the enclosing packages it takes a name (not a module) from: `from . import app` in
    cli/run.py, `from .. import __version__`. import_graph leaves these out; an __init__ that imports the
    module back (cli/__init__ importing its commands) makes them a circle."""
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    out: dict[str, set[str]] = {}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in runtime_nodes(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            if (
                base != mod
                and mod.startswith(base + ".")
                and any(f"{base}.{a.name}" not in files for a in node.names)
            ):
                out.setdefault(mod, set()).add(base)
    return out


LAZY = "# lazy:"  # how an own-module import inside a function says why it is not at the top


def untagged_lazy_imports(root: Path = PKG) -> list[str]:
    """Every import of a package module inside a function (`from .x import y`, `from openjev_batch… import`,
    `import openjev_batch…`) without a `# lazy: <why>` comment on its first line or the line above."""
    out = set()
    for path in sorted(root.rglob("*.py")):
        src = path.read_text()
        lines = src.splitlines()
        for fn in ast.walk(ast.parse(src, str(path))):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom):
                    own = node.level > 0 or (node.module or "").split(".")[0] == "openjev_batch"
                elif isinstance(node, ast.Import):
                    own = any(a.name.split(".")[0] == "openjev_batch" for a in node.names)
                else:
                    continue
                near = lines[max(node.lineno - 2, 0) : node.lineno]
                if own and not any(LAZY in line for line in near):
                    out.add(f"{path.relative_to(root.parent)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return sorted(out)


def test_an_import_inside_a_function_says_why_it_is_lazy():
    """Own-module imports stand at the top of the module; one inside a function is there for a reason its
    `# lazy:` comment gives (a heavy third-party package such as torch or pyarrow it would load where it is
    not loaded today, or what keeps `--help` fast: the CLI imports every command's module)."""
    assert untagged_lazy_imports() == []


def test_the_check_sees_an_untagged_lazy_import(tmp_path):
    root = tmp_path / "openjev_batch"
    (root / "cli").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "cli" / "__init__.py").write_text("")
    (root / "cli" / "run.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from ..errors import ConfigError\n"  # at the top: fine
        "if TYPE_CHECKING:\n"
        "    from ..config import RunConfig\n"
        "def run():\n"
        "    import torch\n"  # third-party: not this check's
        "    from ..pipeline import job  # lazy: keeps --help fast\n"
        "    # lazy: keeps --help fast\n"
        "    from ..pipeline.input.read import (\n"
        "        check_exists,\n"
        "    )\n"
        "    from .app import out\n"  # untagged
        "    def inner():\n"
        "        import openjev_batch.config\n"  # untagged, in a nested function
        "class A:\n"
        "    def m(self):\n"
        "        from openjev_batch.values import read_at_most\n"  # untagged, in a method
    )
    assert untagged_lazy_imports(root) == [
        "openjev_batch/cli/run.py:12: from .app import out",
        "openjev_batch/cli/run.py:14: import openjev_batch.config",
        "openjev_batch/cli/run.py:17: from openjev_batch.values import read_at_most",
    ]


# Known breaks, each to mend (not to grow). Empty since issue 31.6: the format readers
# (pipeline/input/formats/) stand on their own floor under the readouts, which ask an input's columns.
KNOWN_BREAKS: set[str] = set()


def test_imports_run_down_the_floors_docs_structure_states():
    floors = stated_floors(STRUCTURE.read_text())
    assert len(floors) > 5 and all(floors), floors
    breaks = floor_breaks(import_graph(), floors)
    assert [b for b in breaks if b.split(" (")[0] not in KNOWN_BREAKS] == []
    assert {b.split(" (")[0] for b in breaks} == KNOWN_BREAKS  # a mended one leaves the list


def test_no_circle_through_a_package_face():
    """A module that takes a name from an enclosing package's __init__ while that __init__ imports it (the
    commands of cli/ importing `app` from the cli/__init__ that imports them) is a circle too."""
    graph = import_graph()
    for mod, faces in names_from_above().items():
        graph[mod] = graph[mod] | faces
    assert circles(graph) == []


def test_the_pipeline_wings_do_not_import_each_other_or_the_loop():
    """pipeline/input/ (reading) and pipeline/output/ (writing) stand under the loop, side by side: neither
    imports the other, nor the pipeline's modules above them."""
    graph = import_graph()
    wings = ("openjev_batch.pipeline.input", "openjev_batch.pipeline.output")
    out = []
    for a, targets in graph.items():
        for wing in (w for w in wings if a.startswith(w + ".") or a == w):
            out += [
                f"{a} -> {b}"
                for b in targets
                if b.startswith("openjev_batch.pipeline") and not b.startswith(wing)
            ]
    assert sorted(out) == []


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
        # an import under `if TYPE_CHECKING:` never runs: no arrow back up, no circle (its `else` runs)
        (
            {
                "backends/__init__.py": "",
                "backends/eng.py": (
                    "from typing import TYPE_CHECKING\nimport typing\nfrom . import opts\n"
                    "if TYPE_CHECKING:\n    from ..pipeline import plan\n"
                    "if typing.TYPE_CHECKING:\n    from ..pipeline import job\nelse:\n    from ..core import x\n"
                ),
                "backends/opts.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .eng import x\n",
                "pipeline/__init__.py": "",
                "pipeline/plan.py": "",
                "pipeline/job.py": "",
                "core.py": "from .backends import eng\n",
            },
            [],
            [["openjev_batch.backends.eng", "openjev_batch.core"]],
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


def test_the_check_sees_floor_breaks_and_a_circle_through_a_package_face(tmp_path):
    root = tmp_path / "openjev_batch"
    files = {
        "core.py": "from .pipeline import loop\n",  # runs up: core stands below the pipeline
        "pipeline/__init__.py": "",
        "pipeline/loop.py": "from ..core import x\n",
        "cli/__init__.py": "app = 1\nfrom . import run\n",
        "cli/run.py": "from . import app\n",  # the name from the face that imports it back
        "extra.py": "",  # in no stated room
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "__init__.py").write_text("")
    floors = stated_floors(f"{ORDER} (lowest first): `core` < `pipeline/` < `cli/`, `__init__`.\n\nmore")
    assert floors == [["core"], ["pipeline"], ["cli", "__init__"]]
    graph = import_graph(root)
    assert floor_breaks(graph, floors) == [
        "openjev_batch.core -> openjev_batch.pipeline.loop (core on floor 0, pipeline on floor 1)",
        "openjev_batch.extra: in no room of the stated order",
    ]
    assert circles(graph) == [["openjev_batch.core", "openjev_batch.pipeline.loop"]]
    for mod, faces in names_from_above(root).items():
        graph[mod] = graph[mod] | faces
    assert ["openjev_batch.cli", "openjev_batch.cli.run"] in circles(graph)


def test_a_nested_room_on_a_lower_floor_is_checked_against_its_outer_room(tmp_path):
    """`pipeline/input/formats/` stands under the readouts though it sits in `pipeline/`: an import from it
    back up into the pipeline is a break, one from the pipeline down into it is not."""
    root = tmp_path / "openjev_batch"
    files = {
        "core.py": "",
        "pipeline/__init__.py": "",
        "pipeline/loop.py": "from .input.formats import reader\n",  # down: fine
        "pipeline/input/__init__.py": "",
        "pipeline/input/formats/__init__.py": "",
        "pipeline/input/formats/reader.py": "from ... import loop\nfrom ....core import x\n",  # up, then down
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "__init__.py").write_text("")
    floors = stated_floors(f"{ORDER}: `core` < `pipeline/input/formats/` < `pipeline/` < `__init__`.\n\n")
    assert floor_breaks(import_graph(root), floors) == [
        "openjev_batch.pipeline.input.formats.reader -> openjev_batch.pipeline.loop "
        "(pipeline/input/formats on floor 1, pipeline on floor 2)"
    ]


def folder_circles(graph: dict[str, set[str]], package: str) -> list[list[str]]:
    """The circles among `package`'s rooms: each module below it drawn as the file or folder directly in it
    (`backends.sglang.hybrid.qwen3_5_mis` as `backends.sglang.hybrid`), so a loop between two folders, or a
    file and a folder, shows that the module-level check cannot see (mis.py <-> hybrid/qwen3_5_mis.py)."""

    def room(mod: str) -> str | None:
        return f"{package}.{mod[len(package) + 1 :].split('.')[0]}" if mod.startswith(package + ".") else None

    rooms: dict[str, set[str]] = {}
    for a, targets in graph.items():
        if (ra := room(a)) is not None:
            rooms.setdefault(ra, set()).update(rb for b in targets if (rb := room(b)) not in (None, ra))
    return circles(rooms)


def test_no_circle_between_the_folders_of_a_package():
    """Inside every package below the top (backends/sglang/ included), its files and folders import one
    way; the top level's rooms are held by the stated floors above."""
    graph = import_graph()
    packages = {m for m in graph if any(k.startswith(m + ".") for k in graph)} - {"openjev_batch"}
    assert {p: c for p in sorted(packages) if (c := folder_circles(graph, p))} == {}


def test_the_folder_check_sees_a_loop_through_a_folder(tmp_path):
    root = tmp_path / "openjev_batch"
    files = {
        "backends/__init__.py": "",
        "backends/mis.py": "from .hybrid import ARCH\n",
        "backends/hybrid/__init__.py": "ARCH = 1\n",
        "backends/hybrid/model.py": "from .. import mis\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "__init__.py").write_text("")
    graph = import_graph(root)
    assert circles(graph) == []  # no module imports itself round a loop
    assert folder_circles(graph, "openjev_batch.backends") == [
        ["openjev_batch.backends.hybrid", "openjev_batch.backends.mis"]
    ]


BACKEND_FACES = ("openjev_batch.backends", "openjev_batch.backends.base")  # what the rest may import of backends/
# Modules outside backends/ allowed to import another backends/ module (at most one, the spawn guard's place;
# empty: the guard is asked through `backends.refuse_unguarded_main`).
BACKEND_REACH_INS: set[str] = set()


def backend_reach_ins(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a backends/ module other than its faces from a module outside backends/: backends own
    their facts (their specs), the rest asks them through `backends` (SPECS, load_backend) and `backends.base`."""
    inside = "openjev_batch.backends"
    return sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        if not (a == inside or a.startswith(inside + "."))
        for b in targets
        if b.startswith(inside + ".") and b not in BACKEND_FACES
    )


def test_outside_backends_a_module_imports_only_its_faces():
    assert len(BACKEND_REACH_INS) <= 1
    assert [r for r in backend_reach_ins(import_graph()) if r.split(" -> ")[0] not in BACKEND_REACH_INS] == []


def test_the_backend_rule_sees_a_reach_in(tmp_path):
    root = tmp_path / "openjev_batch"
    files = {
        "backends/__init__.py": "",
        "backends/base.py": "",
        "backends/sglang/__init__.py": "",
        "backends/sglang/mis.py": "",
        "pipeline/__init__.py": "",
        "pipeline/job.py": "from ..backends import base\nfrom ..backends.sglang.mis import needs_fork\n",
        "pipeline/dry.py": "from ..backends import SPECS\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "__init__.py").write_text("")
    assert backend_reach_ins(import_graph(root)) == ["openjev_batch.pipeline.job -> openjev_batch.backends.sglang.mis"]


def sibling_readout_imports(graph: dict[str, set[str]], root: Path = PKG) -> list[str]:
    """Imports from one readout's folder (readouts/label_logprobs/) into another's: what both share stands in
    readouts/ itself (images, the answer math, `Failed`)."""
    inside = "openjev_batch.readouts."
    folders = {p.name for p in (root / "readouts").iterdir() if (p / "__init__.py").is_file()}

    def folder(mod: str) -> str | None:
        return mod.split(".")[2] if mod.startswith(inside) and mod.split(".")[2] in folders else None

    return sorted(
        f"{a} -> {b}" for a, ts in graph.items() for b in ts if folder(a) and folder(b) and folder(a) != folder(b)
    )


def test_sibling_readouts_do_not_import_each_other():
    assert sibling_readout_imports(import_graph()) == []


def test_the_sibling_check_sees_one(tmp_path):
    root = tmp_path / "openjev_batch"
    files = {
        "readouts/__init__.py": "",
        "readouts/answer.py": "",
        "readouts/a/__init__.py": "from ..answer import x\n",
        "readouts/b/__init__.py": "",
        "readouts/b/prompt.py": "from ..a import y\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "__init__.py").write_text("")
    got = sibling_readout_imports(import_graph(root), root)
    assert got == ["openjev_batch.readouts.b.prompt -> openjev_batch.readouts.a"]


def test_no_test_module_imports_another():
    """Code the tests share stands in helper modules (conftest.py, tiny.py, token_rows.py, serve_process.py),
    never in a test module another one imports: moving or renaming a test file must not break a second one."""
    tests = Path(__file__).parent
    bad = []
    for path in sorted(tests.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(n.split(".")[-1].startswith("test_") for n in names):
                bad.append(f"{path.relative_to(tests)}:{node.lineno}")
    assert bad == []


def test_no_two_test_modules_share_a_file_name():
    """The tests have no __init__.py: two test modules of one file name stop pytest's collection ('import file
    mismatch'), so the README's test command ran nothing (tests/test_images.py twice, then test_request.py)."""
    from collections import Counter

    names = Counter(p.name for p in (Path(__file__).parent).rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
