"""Every sglang name the Qwen3.5/3.6 fork (qwen3_5_mis.py) and the scheduler patches it relies on touch, checked
against the installed sglang when the override loads (the design study's "assert signatures at load",
shared/research/hybrid-multi-item.md §7).

The fork calls sglang internals (GDN kernels, the linear-attention backend's metadata, the state pool, the model
classes). A release that moves one would otherwise fail inside the first multi-item forward, in the scheduler
process, or worse run with another meaning. `SPEC` (needs.py) lists each name with what the fork needs of it: a
module attribute, a callable's parameter names, a class's methods and the attributes its instances carry (annotated,
or assigned as `self.X = …` in a method of the class or a base). Two readers check it:

- `check_installed()` imports the installed sglang and reads the real objects (`inspect.signature`, the class's
  annotations and its methods' source). qwen3_5_mis.py runs it at import, so a moved name stops the engine's start
  with a message that names it (`SglangMismatch`), and the CPU tests run it under the CI's sglang.
- `problems_source(root)` (check_source.py) reads a release's source tree without importing it (ast), so the
  releases the package's extra allows can be compared without installing them (`python -m
  openjev_batch.backends.sglang.hybrid.check DIR…`, DIR holding `sglang/`). docs/benchmarks.md gives what it said for 0.5.17–0.5.23.

Neither proves the kernels compute the same thing: that is `benchmarks/hybrid_mis_exact_gpu.py`, on a GPU.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any, cast

from .check_source import assigned_self, problems_source
from .needs import SPEC, Need, missing

# the check's public face, the spec and the source reader included (tests import them from here)
__all__ = [
    "SPEC", "Need", "SglangMismatch", "check_installed", "main", "problems_installed", "problems_source",
]  # fmt: skip


class SglangMismatch(ImportError):
    """The installed sglang lacks a name the fork needs (an ImportError: sglang's registry then fails loudly)."""


def _mro_self_attrs(cls: type) -> set[str]:
    """Attributes a class's instances carry: annotations and `self.X = …` in any method of the class or a base."""
    names: set[str] = set()
    for c in inspect.getmro(cls):
        if c is object:
            continue
        names |= set(getattr(c, "__annotations__", {}) or {})
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(c)))
        except (OSError, TypeError, SyntaxError):
            continue
        names |= assigned_self(tree)
    return names


def _params(fn: Any) -> set[str] | None:
    """Parameter names, plus "**" when it takes **kwargs."""
    try:
        ps = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return {p.name for p in ps} | ({"**"} if any(p.kind is p.VAR_KEYWORD for p in ps) else set())


def problems_installed(spec: tuple[Need, ...] = SPEC) -> list[str]:
    """What the installed sglang lacks of `spec`, one line each (empty: all there)."""
    import importlib

    out = []
    for n in spec:
        where = f"{n.module}.{n.name}"
        try:
            obj: Any = importlib.import_module(n.module)
        except ImportError as e:
            out.append(f"{n.module}: cannot import ({e})")
            continue
        try:
            for part in n.name.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            if n.gpu_only and not _on_gpu():  # imported under `if is_cuda():`: read what a GPU would import
                sglang_file = cast(str, importlib.import_module("sglang").__file__)  # a package: it has one
                out += problems_source(Path(sglang_file).parents[1], (n,))
            else:
                out.append(f"{where}: missing")
            continue
        if n.params or n.accepts:
            got = _params(obj)
            if got is not None and (miss := missing(n, got)):
                out.append(f"{where}: no parameter(s) {', '.join(miss)}")
        if n.methods and (miss := [m for m in n.methods if not callable(getattr(obj, m, None))]):
            out.append(f"{where}: no method(s) {', '.join(miss)}")
        if n.attrs and isinstance(obj, type):
            have = _mro_self_attrs(obj) | set(dir(obj))
            if miss := [a for a in n.attrs if a not in have]:
                out.append(f"{where}: instances carry no {', '.join(miss)}")
    return out


def _on_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def check_installed() -> None:
    """Raise SglangMismatch naming every name of SPEC the installed sglang lacks."""
    if found := problems_installed():
        import sglang

        raise SglangMismatch(
            f"openjev-batch's exact multi-item fork does not fit sglang {getattr(sglang, '__version__', '?')}: "
            + "; ".join(found)
            + " (use --request-pattern prefix-first, or an sglang release the fork lists: mis.FORK_SGLANG)"
        )


def main(argv: list[str]) -> int:
    """`python -m openjev_batch.backends.sglang.hybrid.check DIR…`: each DIR holds an sglang source tree."""
    bad = 0
    for d in argv:
        found = problems_source(Path(d))
        print(f"{d}: {'fits' if not found else 'DOES NOT FIT: ' + '; '.join(found)}")
        bad += bool(found)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
