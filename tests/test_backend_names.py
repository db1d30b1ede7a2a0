"""Backends own their facts: outside backends/ and options.py (the `--backend` choices) no module writes a
backend's name as a string (the dry run, Ray, eval and the display ask `backends.SPECS[cfg.backend]`), so a new
backend is its folder, one `SPECS` line and its name in `options.BACKENDS`. Read token by token (tokenize), an
f-string's inner literals included; a name in a longer text (a help line, a message) is no test of it."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

from openjev_batch.backends import NAMES

PKG = Path(__file__).parent.parent / "openjev_batch"
OWNERS = ("backends/", "options.py")  # where backend names are written


def name_literals(src: str, names: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, text) of every string token in `src` that is, or holds as an f-string part, one of `names`."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type != tokenize.STRING:
            continue
        try:
            tree = ast.parse(tok.string.strip(), mode="eval")
        except SyntaxError:  # a piece of a longer implicit concatenation: parsed alone it still is a string
            continue
        if any(isinstance(n, ast.Constant) and n.value in names for n in ast.walk(tree)):
            out.append((tok.start[0], tok.line.strip()))
    return out


def test_no_backend_name_is_written_outside_backends_and_options():
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith(OWNERS):
            continue
        found += [f"{rel}:{line}: {text}" for line, text in name_literals(path.read_text(), NAMES)]
    assert found == []


def test_the_check_sees_a_name_in_a_comparison_and_in_an_f_string():
    src = (
        'if cfg.backend == "sglang":\n'
        "    x = f\"rate{'' if b == 'hf' else ', other'}\"\n"
        'help = "runs on sglang or hf"\n'  # in a longer text: not a name test
        "y = cfg.sglang.tp_size\n"  # an attribute, not a literal
    )
    assert [line for line, _ in name_literals(src, ("hf", "sglang"))] == [1, 2]
