"""Every sglang name the Qwen3.5/3.6 fork (qwen3_5_mis.py) and the scheduler patches it relies on touch, checked
against the installed sglang when the override loads (the design study's "assert signatures at load",
shared/research/hybrid-multi-item.md §7).

The fork calls sglang internals (GDN kernels, the linear-attention backend's metadata, the state pool, the model
classes). A release that moves one would otherwise fail inside the first multi-item forward, in the scheduler
process, or worse run with another meaning. `SPEC` (needs.py) lists each name with what the fork needs of it: a
module attribute, a callable's parameter names, a class's methods and the attributes its instances carry (annotated,
or assigned as `self.X = …` in a method of the class or a base). `check_installed()` imports the installed sglang
and reads the real objects (`inspect.signature`, the class's annotations and its methods' source). qwen3_5_mis.py
runs it at import, so a moved name stops the engine's start with a message that names it (`SglangMismatch`), and
the CPU tests run it under the CI's sglang. A name sglang imports on a GPU platform only (`Need.gpu_only`) is
checked where the fork runs, on a GPU; elsewhere the release tool reads it from the source
(scripts/check_sglang_release.py, which compares releases without installing them; not in the wheel).

Neither proves the kernels compute the same thing: that is `benchmarks/hybrid_mis_exact_gpu.py`, on a GPU.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from .needs import SPEC, Need, missing


def assigned_self(tree: ast.AST) -> set[str]:
    """Names assigned as `self.X = …` (or annotated, or augmented) anywhere in `tree`."""
    out = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name) and el.value.id == "self":
                    out.add(el.attr)
    return out


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
            if not (n.gpu_only and not _on_gpu()):  # imported under `if is_cuda():`: checked on a GPU
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
            + " (use --request-pattern prefix-first, or an sglang release the fork lists: fork_releases.FORK_SGLANG)"
        )
