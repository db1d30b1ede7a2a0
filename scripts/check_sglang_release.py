"""Whether the Qwen3.5/3.6 fork (openjev_batch/backends/sglang/hybrid) fits an sglang release, read from the
release's source tree with ast and nothing imported, so each release the package's extra allows can be compared
without installing it. A release-time tool: not in the wheel (the installed sglang is checked when the override
loads, hybrid/check.py).

    python scripts/check_sglang_release.py DIR…    # each DIR holds an sglang source tree (`sglang/`)

`problems_source(root)`: what the tree lacks of the fork's needs (hybrid/needs.SPEC). A name is followed through
`from X import name` within sglang and through a platform's rebinding (`name = other` under `if is_cuda():`),
and a class's attributes through its bases."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from openjev_batch.backends.sglang.hybrid.check import assigned_self
from openjev_batch.backends.sglang.hybrid.needs import SPEC, Need, missing


class _Source:
    """sglang's modules as parsed source under `root` (the folder that holds `sglang/`)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.cache: dict[str, ast.Module | None] = {}

    def module(self, name: str) -> ast.Module | None:
        if name not in self.cache:
            base = self.root.joinpath(*name.split("."))
            path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
            self.cache[name] = ast.parse(path.read_text()) if path.exists() else None
        return self.cache[name]

    def lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST] | None:
        """(module, node) defining `name` in `module`, following `from X import name` within sglang."""
        found = self.lookup_all(module, name, depth)
        return found[-1] if found else None

    def lookup_all(self, module: str, name: str, depth: int = 0) -> list[tuple[str, ast.AST]]:
        """Every definition of `name` in `module` (a name imported under `if is_cuda():` and again under
        `if is_cpu():` has two), in source order, following `from X import name` within sglang."""
        tree = self.module(module)
        if tree is None or depth > 6:
            return []
        out: list[tuple[int, tuple[str, ast.AST]]] = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                out.append((node.lineno, (module, node)))
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                tg = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in tg):
                    out.append((node.lineno, (module, node)))
        for node in ast.walk(
            tree
        ):  # `name = other` inside if/try blocks (a platform's binding): follow `other`
            if (
                isinstance(node, ast.Assign)
                and node not in tree.body
                and isinstance(node.value, ast.Name)
                and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                and node.value.id != name
                and not _in_function(tree, node)
            ):
                out += [(node.lineno, hit) for hit in self.lookup_all(module, node.value.id, depth + 1)]
        for node in ast.walk(tree):  # imports anywhere at module level, also inside try/if blocks
            if isinstance(node, ast.ImportFrom) and node.module and not _in_function(tree, node):
                src = node.module if node.level == 0 else _relative(module, node.module, node.level, True)
                for a in node.names:
                    if (a.asname or a.name) == name and src.startswith("sglang"):
                        out.append((node.lineno, self.lookup(src, a.name, depth + 1) or (src, node)))
        return [hit for _, hit in sorted(out, key=lambda x: x[0])]

    def member(self, module: str, dotted: str) -> tuple[str, ast.AST] | None:
        parts = dotted.split(".")
        found = self.lookup(module, parts[0])
        for part in parts[1:]:
            if found is None or not isinstance(found[1], ast.ClassDef):
                return None
            found = self.class_member(found[0], found[1], part)
        return found

    def bases(self, module: str, cls: ast.ClassDef) -> list[tuple[str, ast.ClassDef]]:
        out = []
        for b in cls.bases:
            name = b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else None
            if isinstance(b, ast.Attribute) and isinstance(b.value, ast.Name):
                mod = self._imported_module(module, b.value.id)
                hit = self.lookup(mod, name) if mod else None
            else:
                hit = self.lookup(module, name) if name else None
            if hit and isinstance(hit[1], ast.ClassDef):
                out.append((hit[0], hit[1]))
        return out

    def _imported_module(self, module: str, alias: str) -> str | None:
        tree = self.module(module)
        for node in ast.walk(tree) if tree else []:
            if isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    if (a.asname or a.name) == alias:
                        return f"{node.module}.{a.name}"
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname == alias:
                        return a.name
        return None

    def class_member(self, module: str, cls: ast.ClassDef, name: str, depth: int = 0):
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return module, node
        for bm, bc in self.bases(module, cls) if depth < 8 else []:
            if hit := self.class_member(bm, bc, name, depth + 1):
                return hit
        return None

    def class_attrs(self, module: str, cls: ast.ClassDef, depth: int = 0) -> set[str]:
        names = assigned_self(cls)
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.Assign):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
        for bm, bc in self.bases(module, cls) if depth < 8 else []:
            names |= self.class_attrs(bm, bc, depth + 1)
        return names


def _in_function(tree: ast.Module, target: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            x is target for x in ast.walk(node)
        ):
            return True
    return False


def _relative(module: str, target: str, level: int, _: bool) -> str:
    parts = module.split(".")
    return ".".join(parts[: len(parts) - level] + ([target] if target else []))


def _fn_params(node: ast.AST) -> set[str] | None:
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    a = node.args
    return {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]} | ({"**"} if a.kwarg else set())


def problems_source(root: Path, spec: tuple[Need, ...] = SPEC) -> list[str]:
    """What the sglang source tree under `root` lacks of `spec`, read with ast (nothing imported)."""
    src = _Source(root)
    out = []
    for n in spec:
        where = f"{n.module}.{n.name}"
        if src.module(n.module) is None:
            out.append(f"{n.module}: no such module")
            continue
        if "." not in n.name:
            hits = src.lookup_all(n.module, n.name)
        else:
            hit = src.member(n.module, n.name)
            hits = [hit] if hit else []
        if not hits:
            out.append(f"{where}: missing")
            continue
        for mod, node in hits:
            out += _node_problems(src, n, where, mod, node)
    return list(dict.fromkeys(out))


def _node_problems(src: _Source, n: Need, where: str, mod: str, node: ast.AST) -> list[str]:
    out = []
    if True:
        if n.params or n.accepts:
            target = node
            if isinstance(node, ast.ClassDef):
                target = (src.class_member(mod, node, "__init__") or (None, None))[1]
            got = _fn_params(target) if target is not None else None
            if got is not None and (miss := missing(n, got)):
                out.append(f"{where}: no parameter(s) {', '.join(miss)}")
        if isinstance(node, ast.ClassDef) and (n.attrs or n.methods):
            have = src.class_attrs(mod, node)
            if miss := [a for a in (*n.attrs, *n.methods) if a not in have]:
                out.append(f"{where}: no {', '.join(miss)}")
    return out


def main(argv: list[str]) -> int:
    """Each DIR of `argv` holds an sglang source tree: one line each, exit 1 when one does not fit."""
    bad = 0
    for d in argv:
        found = problems_source(Path(d))
        print(f"{d}: {'fits' if not found else 'DOES NOT FIT: ' + '; '.join(found)}")
        bad += bool(found)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
