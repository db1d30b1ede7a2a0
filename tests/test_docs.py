"""README.md and docs/*.md name only what exists: every repository path, `openjev_batch` module (and the
name after it), `module.NAME` of a project module, `file.py:function`, and every CLI flag of an
`openjev-batch` command. A stale claim fails with its file:line, so a move that forgets the docs is caught.

What counts as a name (so that a user's own file names in the examples are not checked):
- a path: a code-span token with a `/` whose first part is a folder of the repository (`openjev_batch/`,
  `benchmarks/`, …) or of the package (`pipeline/`, `backends/`, …), or a bare `*.py` / `*.sh` file name;
  braces expand (`run5{a,b}.json`), globs must match, `:line` / `:name` suffixes are read as below;
- a module: `openjev_batch.a.b` (a file or package, then at most one attribute defined in it), or
  `mod.NAME` where `mod` is the file name of a module of the package (`options.ENGINE_OPTIONS`);
- a flag: `--flag` at the start of a code span, or on a line that runs `openjev-batch` / `python -m
  openjev_batch`. It must be an option of some CLI command or an option of `openjev_batch/options.py`.
"""

from __future__ import annotations

import ast
import functools
import glob
import itertools
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "openjev_batch"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP_DIRS = {".git", ".venv", "__pycache__", "node_modules", ".gpu", ".gpuray"}

SPAN = re.compile(r"`([^`\n]+)`")
PATH_TOKEN = re.compile(r"[\w.{},*~$/:-]+")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*(?![\w])")
# Other tools' flags that the docs name in prose (pip's), not options of ours.
FOREIGN_FLAGS = {"--no-deps"}
# Names of third-party packages that are also names of modules of ours (`sglang.Engine`, `ray.init`).
FOREIGN_MODULES = {"sglang", "ray", "torch", "transformers", "yaml", "json", "typer", "pyarrow", "polars"}
# Dotted names that are data, not modules: the Parquet metadata key the finished output's manifest is under.
DATA_KEYS = {"openjev_batch.manifest"}
EXTENSIONS = {
    "py",
    "md",
    "sh",
    "json",
    "jsonl",
    "yaml",
    "yml",
    "toml",
    "parquet",
    "csv",
    "log",
    "gz",
    "txt",
    "html",
    "safetensors",
    "bin",
    "pt",
    "lock",
    "xz",
}
MODULE = re.compile(r"\bopenjev_batch(?:\.\w+)+")
ATTR = re.compile(r"(?<![\w./])([a-z_][a-z0-9_]*)\.([A-Za-z_]\w*)\b")
RUNS_CLI = re.compile(r"openjev-batch\s|python3? -m openjev_batch\b|\bob\.")


def doc_lines(docs):
    """(file, line number, text, in a fenced code block) for every line of the docs."""
    for doc in docs:
        fenced = False
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            yield doc, n, line, fenced


def code_of(line: str, fenced: bool) -> list[str]:
    return [line] if fenced else SPAN.findall(line)


@functools.cache
def repo_files() -> tuple[set[str], set[str]]:
    """Every file and folder of the tree, relative to the root (ignored build folders left out)."""
    files, dirs = set(), set()
    for p in ROOT.rglob("*"):
        rel = p.relative_to(ROOT)
        if SKIP_DIRS & set(rel.parts) or any(part.startswith(".venv") for part in rel.parts):
            continue  # .venv-plain: CI's second venv, inside the tree (its site-packages has an io.py)
        (dirs if p.is_dir() else files).add(rel.as_posix())
    return files, dirs


@functools.cache
def top_folders() -> set[str]:
    _, dirs = repo_files()
    return {d.split("/")[0] for d in dirs} | {
        d.split("/")[0] for d in (x[len("openjev_batch/") :] for x in dirs if x.startswith("openjev_batch/"))
    }


def expand(token: str) -> list[str]:
    """`a{b,c}.{d,e}` → its four spellings."""
    parts = re.split(r"(\{[^{}]*\})", token)
    options = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*options)]


def path_exists(rel: str) -> bool:
    """A file or folder (relative to the root, the package, benchmarks/ or tests/); `pipeline/input/read` for
    `pipeline/input/read.py` and `pipeline/progress.Progress` for a name in it count; a glob must match; a path
    git ignores is a build output (`evals/data/…`, written by a script) and counts."""
    files, dirs = repo_files()
    rel = rel.rstrip("/")
    for base in ("", "openjev_batch/", "benchmarks/", "tests/"):
        cand = base + rel
        if any(ch in cand for ch in "*?["):
            if glob.glob(str(ROOT / cand)):
                return True
        elif cand in files or cand in dirs or cand + ".py" in files:
            return True
        stem, _, attr = cand.rpartition(".")
        if stem + ".py" in files and attr in defined_names(ROOT / (stem + ".py")):
            return True
    return git_ignored(rel)


@functools.cache
def git_ignored(rel: str) -> bool:
    r = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", rel], capture_output=True)
    return r.returncode == 0


def bare_file_exists(name: str) -> bool:
    files, _ = repo_files()
    return any(f == name or f.endswith("/" + name) for f in files)


@functools.cache
def defined_names(path: Path) -> frozenset[str]:
    """Top-level names of a module (defs, classes, assignments, imports) and the attributes its classes
    define (methods, class-level and `self.x` assignments), for `file.py:name` and `Class.attr` claims."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    for node in tree.body:  # a package's lazy names (`__getattr__`) are the ones its __all__ lists
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            names.update(ast.literal_eval(node.value))
    return frozenset(names)


def module_file(dotted: list[str]) -> Path | None:
    p = ROOT.joinpath(*dotted)
    if (p / "__init__.py").exists():
        return p / "__init__.py"
    if p.with_suffix(".py").exists():
        return p.with_suffix(".py")
    return None


def check_path(token: str) -> str | None:
    """Why `token` (a path-looking code token) names nothing, or None when it exists or is not a repo path."""
    token = token.strip(".,;:()'\"")
    if not token or token.startswith(("/", "~", "$", "../", "http")) or "://" in token or "<" in token:
        return None
    name = None
    if ":" in token:  # file.py:123, file.py:12-40, file.py:function
        token, _, name = token.partition(":")
    first = token.split("/")[0]
    is_path = "/" in token and first in top_folders()
    is_bare = "/" not in token and re.fullmatch(r"[\w.-]+\.(py|sh)", token or "-") is not None
    if not (is_path or is_bare):
        return None
    for spelled in expand(token):
        ok = path_exists(spelled) if is_path else bare_file_exists(spelled)
        if not ok:
            return f"no file {spelled}"
        if name and re.fullmatch(r"[A-Za-z_]\w*(\.\w+)?", name) and spelled.endswith(".py"):
            files = [
                ROOT / b / spelled
                for b in ("", "openjev_batch/", "benchmarks/")
                if (ROOT / b / spelled).is_file()
            ]
            if not files and is_bare:
                files = [ROOT / f for f in repo_files()[0] if f.endswith("/" + spelled) or f == spelled]
            if files and not any(name.split(".")[-1] in defined_names(f) for f in files):
                return f"{spelled} defines no {name}"
    return None


@functools.cache
def module_basenames() -> dict[str, list[Path]]:
    """File name (no .py) → the package modules with that name; a package's __init__ counts as its folder."""
    out: dict[str, list[Path]] = {}
    for p in PKG.rglob("*.py"):
        key = p.parent.name if p.name == "__init__.py" else p.stem
        out.setdefault(key, []).append(p)
    return out


def check_module(dotted: str) -> str | None:
    if dotted in DATA_KEYS:
        return None
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        f = module_file(parts[:i])
        if f is None:
            continue
        rest = parts[i:]
        if not rest:
            return None
        if rest[0] not in defined_names(f):
            return f"{'.'.join(parts[:i])} defines no {rest[0]}"
        return None
    return f"no module {'.'.join(parts[:2])}"


def check_attr(mod: str, name: str) -> str | None:
    """`mod.NAME` where `mod` is the name of a package module: NAME must be defined there."""
    files = module_basenames().get(mod)
    if not files or mod in FOREIGN_MODULES or name in EXTENSIONS:
        return None
    if not (name.isupper() or "_" in name or name[:1].isupper()):  # `questions.urgency`: a key, not code
        return None
    if any(name in defined_names(f) for f in files):
        return None
    return f"no {name} in module {mod} ({', '.join(str(f.relative_to(ROOT)) for f in files)})"


@functools.cache
def cli_flags() -> frozenset[str]:
    """Every option of every `openjev-batch` command (from the click tree the CLI is built as) and every
    option the option table declares."""
    import typer.main

    from openjev_batch.cli import app

    flags = set()

    def walk(cmd):
        for p in getattr(cmd, "params", []):
            flags.update(o for o in [*p.opts, *p.secondary_opts] if o.startswith("--"))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    flags.add("--help")  # click adds it to every command outside its params
    from openjev_batch import options

    text = (PKG / "options.py").read_text()
    flags.update(re.findall(r"flag=\"(--[\w-]+)\"", text))
    for o in getattr(options, "ENGINE_OPTIONS", ()):
        flags.add(getattr(o, "flag", None) or "--" + o.name.replace("_", "-"))
        if getattr(o, "type", None) is bool:
            flags.add("--no-" + o.name.replace("_", "-"))
    # a benchmark's or a helper script's own flags (`benchmarks/classify_gpu.py --smoke`,
    # `scripts/make_test_vl_model.py --example`)
    for script in [*(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        flags.update(re.findall(r"[\"'](--[a-z][\w-]*)[\"']", script.read_text()))
    return frozenset(f for f in flags if f)


def problems(docs: list[Path]) -> list[str]:
    out = []
    for doc, n, line, fenced in doc_lines(docs):
        where = f"{doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc.name}:{n}"
        for code in code_of(line, fenced):
            for token in PATH_TOKEN.findall(code):
                if (why := check_path(token)) is not None:
                    out.append(f"{where}: {why} (`{token}`)")
            for dotted in MODULE.findall(code):
                if (why := check_module(dotted)) is not None:
                    out.append(f"{where}: {why} (`{dotted}`)")
            for mod, name in ATTR.findall(code):
                if mod != "openjev_batch" and (why := check_attr(mod, name)) is not None:
                    out.append(f"{where}: {why} (`{mod}.{name}`)")
            runs = (
                fenced
                and RUNS_CLI.search(code)
                or not fenced
                and (code.startswith("--") or RUNS_CLI.search(code))
            )
            if runs:
                scan = code if RUNS_CLI.search(code) else code.split()[0]
                for flag in FLAG.findall(scan):
                    if flag not in cli_flags() and flag not in FOREIGN_FLAGS:
                        out.append(f"{where}: no CLI option {flag}")
    return out


def test_docs_name_only_what_exists():
    found = problems(DOCS)
    assert not found, "stale names in README.md / docs/*.md:\n" + "\n".join(found)


def test_the_check_finds_a_stale_name(tmp_path):
    """The checker itself: each kind of stale claim is reported with its line; the true ones are not."""
    doc = tmp_path / "x.md"
    doc.write_text(
        "`pipeline/scaleout.py` and `io.py`, `config.ENGINE_OPTIONS`, `openjev_batch.pipeline.nope`\n"
        "`openjev-batch run --no-such-flag`, `options.py:nothing_here`, `pipeline._chunk_records`\n"
        "true: `openjev_batch/options.py`, `options.ENGINE_OPTIONS`, `--help`, `out.parquet`, `../x/y.py`\n"
    )
    assert problems([doc]) == [
        "x.md:1: no file pipeline/scaleout.py (`pipeline/scaleout.py`)",
        "x.md:1: no file io.py (`io.py`)",
        "x.md:1: no ENGINE_OPTIONS in module config (openjev_batch/config.py) (`config.ENGINE_OPTIONS`)",
        "x.md:1: openjev_batch.pipeline defines no nope (`openjev_batch.pipeline.nope`)",
        "x.md:2: no CLI option --no-such-flag",
        "x.md:2: options.py defines no nothing_here (`options.py:nothing_here`)",
        "x.md:2: no _chunk_records in module pipeline (openjev_batch/pipeline/__init__.py) (`pipeline._chunk_records`)",
    ]


def test_the_folders_the_readmes_commands_write_are_ignored_by_git():
    """Issue 34.11: the README's eval examples write `-o mmlu_run` … into the clone, and git showed them as
    untracked. Every `-o NAME` of a README command line that runs the CLI is ignored."""
    lines = [ln for ln in (ROOT / "README.md").read_text(encoding="utf-8").splitlines() if RUNS_CLI.search(ln)]
    outs = {m for ln in lines for m in re.findall(r"(?:-o|--output-dir|--output) ([\w.-]+)", ln)}
    outs -= {"-", "OUT", "DIR", "OUT.parquet"}  # placeholders and standard output
    assert {"mmlu_run", "boolq_run"} <= outs, outs
    assert [o for o in sorted(outs) if not git_ignored(o)] == []


def test_the_data_scripts_cache_honours_openjev_cache(tmp_path):
    """Issue 34.11: OPENJEV_CACHE moved the packaged models' cache but not the data scripts' one
    (evals/make_mmlu.py, examples/nli/make_nli_data.py: examples/make_real_data.DEFAULT_CACHE)."""
    import os
    import sys

    code = "import make_real_data as m; print(m.DEFAULT_CACHE)"
    env = {**os.environ, "OPENJEV_CACHE": str(tmp_path / "c"), "PYTHONPATH": str(ROOT / "examples")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.strip() == str(tmp_path / "c" / "data"), r.stderr
    assert "OPENJEV_CACHE" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_repository_tracks_no_pid_file_and_ignores_them():
    """Issue 48.18: a stray `serve1.pid` (a shell's `echo $! > serve1.pid` beside a trial's server) was committed
    at the root. No pid file is tracked, and git ignores the next one."""
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True)
    assert [f for f in tracked.stdout.splitlines() if f.endswith(".pid")] == []
    assert git_ignored("serve1.pid") and git_ignored("benchmarks/server.pid")


def test_install_sh_says_the_setuptools_warning_is_expected_before_it_prints():
    """Issue 48.17: the install printed setuptools' boxed warning about folders named as the package (the
    editable install of the clone) without a word; the script says, before that step, that it is expected."""
    lines = (ROOT / "scripts" / "install.sh").read_text(encoding="utf-8").splitlines()
    step = next(i for i, ln in enumerate(lines) if "install -q -e" in ln)
    said = " ".join(ln for ln in lines[:step] if ln.lstrip().startswith("echo"))
    assert "boxed 'Please be careful with folders" in said and "it is expected" in said, said


def test_untrusted_input_says_where_the_seeds_layout_tokenizes_apart():
    """The new-user trial of issue 46: "Untrusted input" promised the whole branch text's own ids, which `serve`'s
    default layout (`--layout systemone`, the seed's) does not give by design: the bullet says so."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Untrusted input\n", 1)[1].split("\n## ", 1)[0]
    bullet = next(b for b in section.split("\n- ") if b.startswith("**The model reads its natural tokenization"))
    assert "--layout systemone" in bullet and "tokenized apart" in bullet and "ĊĊ" in bullet, bullet
