#!/usr/bin/env python3
"""The before/after table of order debiasing (issue 32.2) from the runs of evals/run_debias.sh: per task,
accuracy [Wilson 95 % CI], top-label ECE [bootstrap 95 % CI], the most-chosen letter's share [Wilson 95 % CI]
(the answer's position in the options as listed; with --debias-order the options are also shown shifted,
so this is the position in the listed order, the one the plain run reads as its letter), and the paired
bootstrap 95 % CI of each debiased run's accuracy change against the plain one (--debias-order 2, and 4
where run). Writes table.md and table.json beside the runs.

    .venv/bin/python evals/debias_table.py [evals/results/debias_smollm2-135m_hf-cpu]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from openjev_batch.evaluation.metrics import metrics, pad, wilson

LETTERS = "ABCDEFGHIJ"
BOOT, SEED = 2000, 42
ORDERS = (1, 2, 4)  # plain, then the debiased runs of run_debias.sh


def load(path: Path, gold: str) -> dict:
    """Answered rows of one run, by id: probs, gold index, chosen position, order spread."""
    rows = pq.read_table(path).to_pylist()
    out = {}
    for r in rows:
        if r["error"] is not None:
            continue
        g = r[gold]
        y = g if isinstance(g, int) else r["options"].index(g)
        out[r["id"]] = (r["probs"], y, r["options"].index(r["answer"]), r.get("order_spread"))
    return out


def summarise(run: dict, ids: list[str]) -> dict:
    P = pad([run[i][0] for i in ids])
    y = np.array([run[i][1] for i in ids])
    m = metrics(P, y, binary=False)
    pos = np.array([run[i][2] for i in ids])
    top = int(np.bincount(pos).argmax())
    k = int((pos == top).sum())
    rng = np.random.default_rng(SEED)
    eces = [metrics(P[s], y[s], binary=False)["ece"] for s in rng.integers(0, len(ids), (BOOT, len(ids)))]
    spreads = [run[i][3] for i in ids if run[i][3] is not None]
    return {
        "n": len(ids), "accuracy": m["accuracy"], "ci95": m["ci95"], "ece": m["ece"],
        "ece_ci95": [float(np.quantile(eces, 0.025)), float(np.quantile(eces, 0.975))],
        "top_letter": LETTERS[top], "top_letter_share": k / len(ids), "top_letter_ci95": wilson(k, len(ids)),
        "gold_share_of_that_letter": float((y == top).mean()),
        "mean_order_spread": float(np.mean(spreads)) if spreads else None,
        "hits": (P.argmax(1) == y).astype(float),
    }  # fmt: skip


def main(argv: list[str]) -> int:
    d = Path(argv[0] if argv else "evals/results/debias_smollm2-135m_hf-cpu")
    tasks = {
        "MMLU test (s300 seed 42, 0-shot)": ("mmlu-s300-k{}/predictions.parquet", "gold"),
        "SST-2 validation": ("sst2-k{}.parquet", "label"),
    }
    out, lines = (
        {},
        [
            "| task | run | n | accuracy [95 % CI] | ECE [95 % CI] | most-chosen letter: share [95 % CI] (gold share) "
            "| mean order_spread |",
            "|---|---|---|---|---|---|---|",
        ],
    )
    for task, (pattern, gold) in tasks.items():
        # plain and every debiased run present (--debias-order 2, and 4 where run)
        ks = [k for k in ORDERS if (d / pattern.format(k)).exists()]
        if ks[:1] != [1] or len(ks) < 2:
            lines.append(f"| {task} | not run: {pattern.format(2 if ks[:1] == [1] else 1)} missing | | | | | |")
            continue
        runs = {k: load(d / pattern.format(k), gold) for k in ks}
        ids = sorted(set.intersection(*(set(r) for r in runs.values())))  # answered by all: paired
        res = {k: summarise(runs[k], ids) for k in ks}
        out[task] = {f"debias_order_{k}": {a: b for a, b in r.items() if a != "hits"} for k, r in res.items()}
        for k, r in res.items():
            spread = "–" if r["mean_order_spread"] is None else f"{r['mean_order_spread']:.3f}"
            lines.append(
                f"| {task} | {'plain' if k == 1 else f'--debias-order {k}'} | {r['n']} | {r['accuracy']:.1%} "
                f"[{r['ci95'][0]:.1%}, {r['ci95'][1]:.1%}] | {r['ece']:.1%} [{r['ece_ci95'][0]:.1%}, "
                f"{r['ece_ci95'][1]:.1%}] | {r['top_letter']}: {r['top_letter_share']:.1%} "
                f"[{r['top_letter_ci95'][0]:.1%}, {r['top_letter_ci95'][1]:.1%}] "
                f"({r['gold_share_of_that_letter']:.1%}) | {spread} |"
            )
        for k in ks[1:]:
            diff = res[k]["hits"] - res[1]["hits"]
            rng = np.random.default_rng(SEED)
            boots = [diff[s].mean() for s in rng.integers(0, len(ids), (BOOT, len(ids)))]
            c, lo, hi = float(diff.mean()), float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))
            out[task][f"accuracy_change_{k}"] = {"change": c, "ci95": [lo, hi]}
            lines.append(f"| {task} | change {k} vs plain (paired bootstrap) | | {c:+.1%} [{lo:+.1%}, {hi:+.1%}] | | | |")
    text = "\n".join(lines) + "\n"
    (d / "table.md").write_text(text)
    (d / "table.json").write_text(json.dumps(out, indent=1) + "\n")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
