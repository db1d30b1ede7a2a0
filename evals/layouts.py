#!/usr/bin/env python3
"""Both prompt layouts (`--layout transcript|systemone`, issue 46.2) on the same labelled rows: per data set
and layout, accuracy [Wilson 95 % CI], NLL and top-label ECE (openjev_batch/evaluation/metrics.py), and the
paired discordant counts with the exact McNemar p. Each run is the real command (`run --layout L --keep
label`); a run whose output exists is not run again. Writes table.md and table.json into the output folder.

    PYTHONPATH=. .venv/bin/python evals/layouts.py -m qwen2.5-0.5b -o evals/results/layouts_qwen2.5-0.5b_hf-cpu

Sets: examples/boolq_sample.jsonl (per-row noul question, gold `label` a boolean) and
examples/sst2_sample.jsonl with examples/sst2_questions.yaml (choice, gold `label` an option name); other rows
of examples/make_real_data.py with --data DIR --suffix S (`make_real_data.py --out-dir DIR --limit 200 --suffix
_200`: the first 200 rows of each validation split).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from openjev_batch.evaluation.metrics import metrics, pad

ROOT = Path(__file__).resolve().parent.parent
LAYOUTS = ("transcript", "systemone")


def sets(data: Path, suffix: str) -> dict[str, tuple[Path, list[str]]]:
    ex = ROOT / "examples"
    d, name = data, "{}" + suffix + ".jsonl"
    return {
        "boolq": (d / name.format("boolq"), []),
        "sst2": (d / name.format("sst2"), ["-q", str(ex / "sst2_questions.yaml")]),
    }


def run(inp: Path, extra: list[str], out: Path, layout: str, model: str, backend: str) -> None:
    if out.exists():
        return
    cmd = [sys.executable, "-m", "openjev_batch", "run", str(inp), *extra, "-o", str(out), "-m", model,
           "-b", backend, "--layout", layout, "--keep", "label", "--no-progress"]  # fmt: skip
    print("$", " ".join(cmd), flush=True)
    r = subprocess.run(cmd)
    if r.returncode not in (0, 3):  # 3: some rows have errors (counted in the table)
        raise SystemExit(f"run failed ({r.returncode}): {' '.join(cmd)}")


def gold_index(row: dict) -> int:
    g = row["label"]
    name = str(g).lower() if isinstance(g, bool) else str(g)
    return row["options"].index(name)


def load(path: Path) -> dict[str, tuple[list[float], int]]:
    return {r["id"]: (r["probs"], gold_index(r)) for r in pq.read_table(path).to_pylist() if r["error"] is None}


def mcnemar(b: int, c: int) -> float:
    """Exact two-sided McNemar p for b and c discordant pairs (binomial, p = 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def summarise(runs: dict[str, dict], binary: bool) -> dict:
    ids = sorted(set.intersection(*(set(r) for r in runs.values())))
    out, hits = {}, {}
    for layout, r in runs.items():
        P, y = pad([r[i][0] for i in ids]), np.array([r[i][1] for i in ids])
        m = metrics(P, y, binary)
        hits[layout] = P.argmax(1) == y
        out[layout] = {"n": len(ids), "errors": None, "accuracy": m["accuracy"], "ci95": list(m["ci95"]),
                       "nll": m["nll"], "ece": m["ece"]}  # fmt: skip
    t, s = hits["transcript"], hits["systemone"]
    b, c = int((t & ~s).sum()), int((~t & s).sum())
    out["paired"] = {"transcript_only_right": b, "systemone_only_right": c, "mcnemar_p": mcnemar(b, c)}
    return out


def table(results: dict, model: str, rows: str) -> str:
    lines = [f"Rows: {rows}. Model `{model}`, hf backend, CPU. Accuracy with its Wilson 95 % interval; NLL = mean −ln P(gold); "
             "ECE: top-label, 15 bins.", "",
             "| set | layout | n | errors | accuracy [95 % CI] | NLL | ECE |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, res in results.items():
        for layout in LAYOUTS:
            x = res[layout]
            lines.append(f"| {name} | {layout} | {x['n']} | {x['errors']} | {x['accuracy']:.1%} "
                         f"[{x['ci95'][0]:.1%}, {x['ci95'][1]:.1%}] | {x['nll']:.3f} | {x['ece']:.3f} |")  # fmt: skip
    lines += ["", "| set | right only under transcript | right only under systemone | exact McNemar p |",
              "|---|---|---|---|"]  # fmt: skip
    for name, res in results.items():
        p = res["paired"]
        lines.append(f"| {name} | {p['transcript_only_right']} | {p['systemone_only_right']} | {p['mcnemar_p']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default="qwen2.5-0.5b")
    ap.add_argument("-b", "--backend", default="hf")
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=ROOT / "examples", help="folder of boolq<SUFFIX>.jsonl, sst2<…>")
    ap.add_argument("--suffix", default="_sample", help="'' for make_real_data.py's full files, _200 for --limit 200")
    ap.add_argument("--only", nargs="*", default=None, help="set names (boolq, sst2)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, (inp, extra) in sets(a.data, a.suffix).items():
        if a.only and name not in a.only:
            continue
        outs = {lay: a.out / f"{name}_{lay}.parquet" for lay in LAYOUTS}
        for lay, out in outs.items():
            run(inp, extra, out, lay, a.model, a.backend)
        runs = {lay: load(out) for lay, out in outs.items()}
        results[name] = summarise(runs, binary=name == "boolq")
        for lay, out in outs.items():
            results[name][lay]["errors"] = sum(r["error"] is not None for r in pq.read_table(out).to_pylist())
    (a.out / "table.json").write_text(json.dumps(results, indent=1) + "\n")
    rows = f"`boolq{a.suffix}.jsonl`, `sst2{a.suffix}.jsonl` ({a.data.name}/)"
    (a.out / "table.md").write_text(table(results, a.model, rows))
    print(table(results, a.model, rows))


if __name__ == "__main__":
    main()
