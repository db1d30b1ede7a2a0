"""Issue 39's size target: no module of the package over 300 lines, no function or method over 60
(docs/structure.md). A function's length is its `def` line to its last (ast: end_lineno - lineno + 1, its
decorators not counted, a nested function counted in its own right and inside the one holding it). No
allow-list: a module that grows past a limit is split where its parts have names of their own."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).parent.parent / "openjev_batch"
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 60


def oversized(root: Path = PKG) -> list[str]:
    """`path:length` of each module over MAX_MODULE_LINES and `path:name:length` of each function over
    MAX_FUNCTION_LINES, paths relative to the repository."""
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(root.parent).as_posix()
        if (n := len(text.splitlines())) > MAX_MODULE_LINES:
            out.append(f"{where}:{n}")
        for node in ast.walk(ast.parse(text, where)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out.append(f"{where}:{node.name}:{length}")
    return out


def test_no_module_over_300_lines_no_function_over_60():
    found = oversized()
    assert not found, (
        f"over {MAX_MODULE_LINES} lines (module) or {MAX_FUNCTION_LINES} (function), path[:name]:length:\n"
        + "\n".join(found)
    )


def test_the_check_finds_a_long_module_and_a_long_function(tmp_path):
    """The checker itself: a module of 301 lines and a method of 61 are named; 300 and 60 pass."""
    pkg = tmp_path / "openjev_batch"
    pkg.mkdir()
    body = "\n".join(f"    x = {i}" for i in range(59))
    (pkg / "ok.py").write_text("def f():\n" + body + "\n" + "\n" * (300 - 61) + "# end\n")
    (pkg / "long.py").write_text("class C:\n    def g(self):\n" + "\n".join(f"        y = {i}" for i in range(60))
                                 + "\n" + "\n" * 238 + "# end\n")  # fmt: skip
    assert len((pkg / "ok.py").read_text().splitlines()) == 300
    assert len((pkg / "long.py").read_text().splitlines()) == 301
    assert oversized(pkg) == ["openjev_batch/long.py:301", "openjev_batch/long.py:g:61"]
