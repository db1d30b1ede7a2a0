"""Every sglang name the Qwen3.5/3.6 fork (qwen3_5_mis.py) and the scheduler patches it relies on touch, checked
against the installed sglang when the override loads (the design study's "assert signatures at load",
shared/research/hybrid-multi-item.md §7).

The fork calls sglang internals (GDN kernels, the linear-attention backend's metadata, the state pool, the model
classes). A release that moves one would otherwise fail inside the first multi-item forward, in the scheduler
process, or worse run with another meaning. `SPEC` lists each name with what the fork needs of it: a module
attribute, a callable's parameter names, a class's methods and the attributes its instances carry (annotated, or
assigned as `self.X = …` in a method of the class or a base). Two readers check it:

- `check_installed()` imports the installed sglang and reads the real objects (`inspect.signature`, the class's
  annotations and its methods' source). qwen3_5_mis.py runs it at import, so a moved name stops the engine's start
  with a message that names it (`SglangMismatch`), and the CPU tests run it under the CI's sglang.
- `check_source(root)` reads a release's source tree without importing it (ast), so the releases the package's
  extra allows can be compared without installing them (`python -m openjev_batch.backends.sglang.hybrid.check
  DIR…`, DIR holding `sglang/`). docs/benchmarks.md gives what it said for 0.5.17–0.5.23.

Neither proves the kernels compute the same thing: that is `benchmarks/hybrid_mis_exact_gpu.py`, on a GPU.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GDN = "sglang.srt.layers.attention.linear.gdn_backend"
LINEAR = "sglang.srt.layers.attention.hybrid_linear_attn_backend"
RLA = "sglang.srt.layers.radix_linear_attention"
FB = "sglang.srt.model_executor.forward_batch_info"
POOL = "sglang.srt.mem_cache.memory_pool"


@dataclass(frozen=True)
class Need:
    """`module.name` (a dotted path inside the module: `Class.method`) must exist; `params`: parameter names its
    signature must have; `attrs`: attributes its instances must carry (classes); `methods`: methods it must have."""

    module: str
    name: str
    params: tuple[str, ...] = ()
    attrs: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    why: str = ""
    gpu_only: bool = False  # sglang imports it only on a GPU platform: elsewhere its source is read instead
    accepts: tuple[
        str, ...
    ] = ()  # keywords the fork passes that a `**kwargs` may take (the CUDA conv ignores one)


SPEC: tuple[Need, ...] = (
    # the GDN kernels, called as GDNAttnBackend.forward_extend calls them (qwen3_5_mis._extend)
    Need(
        GDN,
        "causal_conv1d_fn",
        params=(
            "conv_states",
            "has_initial_state",
            "cache_indices",
            "query_start_loc",
            "activation",
            "bias",
        ),
        # on CUDA sglang binds the name to layers/attention/mamba/causal_conv1d.causal_conv1d_fn, which takes
        # seq_lens_cpu through **kwargs (the Triton one names it): the first H200 call of issue 38 found it
        accepts=("seq_lens_cpu",),
        why="pass A/B conv over varlen segments",
    ),
    Need(GDN, "fused_qkv_split_gdn_prefill", why="q/k/v split of the conv output", gpu_only=True),
    Need(GDN, "fused_gdn_gating", why="g, beta"),
    Need(GDN, "MAX_FUSED_QKV_SPLIT_DIM", why="which split the stock path takes"),
    Need(
        GDN,
        "GDNKernelDispatcher.extend",
        params=("q", "k", "v", "g", "beta", "ssm_states", "cache_indices", "query_start_loc"),
        why="the SSM prefill with a given pool, slots and segments",
    ),  # fmt: skip
    Need(
        GDN,
        "GDNAttnBackend",
        attrs=("kernel_dispatcher", "forward_metadata", "req_to_token_pool"),
        why="the linear-attention backend the fork reads",
    ),  # fmt: skip
    Need(
        LINEAR,
        "HybridLinearAttnBackend",
        attrs=("linear_attn_backend",),
        why="get_attn_backend().linear_attn_backend",
    ),
    Need(
        "sglang.srt.layers.attention.mamba.mamba2_metadata",
        "ForwardMetadata",
        attrs=("mamba_cache_indices", "has_mamba_track_mask"),
        why="the requests' state slots",
    ),  # fmt: skip
    # the layer whose class the fork swaps, and what it reads off it
    Need(RLA, "RadixLinearAttention.forward", params=("forward_batch", "mixed_qkv", "a", "b")),
    Need(
        RLA,
        "RadixLinearAttention",
        attrs=(
            "layer_id",
            "num_q_heads",
            "num_k_heads",
            "num_v_heads",
            "head_q_dim",
            "head_k_dim",
            "head_v_dim",
            "q_dim",
            "k_dim",
            "v_dim",
            "conv_weights",
            "bias",
            "activation",
            "A_log",
            "dt_bias",
        ),
    ),  # fmt: skip
    Need("sglang.srt.model_executor.forward_context", "get_attn_backend"),
    Need(
        "sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph",
        "get_tc_piecewise_forward_context",
    ),
    # the batch
    Need(
        FB,
        "ForwardBatch",
        attrs=(
            "forward_mode",
            "extend_prefix_lens_cpu",
            "extend_seq_lens_cpu",
            "multi_item_delimiter_indices",
            "positions",
            "mrope_positions",
        ),
        methods=("contains_image_inputs",),
    ),  # fmt: skip
    Need(FB, "ForwardMode", methods=("is_extend", "is_target_verify")),
    # the state pool
    Need(
        POOL,
        "HybridReqToTokenPool",
        methods=("mamba2_layer_cache", "alloc"),
        attrs=("req_index_to_mamba_index_mapping",),
        why="pools per layer; the allocation patch",
    ),  # fmt: skip
    Need(POOL, "MambaPool.State", attrs=("conv", "temporal")),
    # the classes the override subclasses (registered under the same names)
    Need(
        "sglang.srt.models.qwen3_5",
        "Qwen3_5ForConditionalGeneration",
        attrs=("is_mrope_enabled",),
        methods=("forward",),
    ),  # fmt: skip
    Need("sglang.srt.models.qwen3_5", "Qwen3_5MoeForConditionalGeneration", methods=("forward",)),
    Need("sglang.srt.models.qwen3_5_text", "Qwen3_5ForCausalLM", methods=("forward",)),
    Need("sglang.srt.models.qwen3_5_text", "Qwen3_5MoeForCausalLM", methods=("forward",)),
    Need(
        "sglang.srt.models.qwen3_5",
        "Qwen3_5ForConditionalGeneration.forward",
        params=("input_ids", "positions", "forward_batch"),
    ),  # fmt: skip
)


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
        names |= _assigned_self(tree)
    return names


def _assigned_self(tree: ast.AST) -> set[str]:
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


def _params(fn: Any) -> set[str] | None:
    """Parameter names, plus "**" when it takes **kwargs."""
    try:
        ps = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return {p.name for p in ps} | ({"**"} if any(p.kind is p.VAR_KEYWORD for p in ps) else set())


def _missing(n: Need, got: set[str]) -> list[str]:
    return [p for p in n.params if p not in got] + [p for p in n.accepts if p not in got and "**" not in got]


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
                out += problems_source(Path(importlib.import_module("sglang").__file__).parents[1], (n,))
            else:
                out.append(f"{where}: missing")
            continue
        if n.params or n.accepts:
            got = _params(obj)
            if got is not None and (miss := _missing(n, got)):
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


# --- reading a source tree without importing it ---------------------------------------------------------------


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
        names = _assigned_self(cls)
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
            if got is not None and (miss := _missing(n, got)):
                out.append(f"{where}: no parameter(s) {', '.join(miss)}")
        if isinstance(node, ast.ClassDef) and (n.attrs or n.methods):
            have = src.class_attrs(mod, node)
            if miss := [a for a in (*n.attrs, *n.methods) if a not in have]:
                out.append(f"{where}: no {', '.join(miss)}")
    return out


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
