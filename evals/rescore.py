#!/usr/bin/env python3
"""Re-score a finished `openjev-batch eval` folder without a model (after a metric change, or to try another
temperature-fit share): reads its predictions.parquet and report.json, rewrites report.json/.md and the PNG.

    .venv/bin/python evals/rescore.py evals/results/<run> [--calibrate 0.5]
"""

from __future__ import annotations

import argparse
import sys

from openjev_batch.evaluation import rescore


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--calibrate", type=float, default=None, help="temperature-fit share (default: as run)")
    args = ap.parse_args(argv)
    for d in args.folders:
        rep = rescore(d, args.calibrate)
        o = rep["overall"]
        print(f"{d}: accuracy {o['accuracy']:.4f} (n={o['n']}), Brier {o['brier']:.4f}, ECE {o['ece']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
