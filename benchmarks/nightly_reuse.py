"""Nightly jobs that pay only for what changed (issue 50): night 1 labels N ticket rows; night 2 is the same
table with 5 % of its rows new or edited. Night 2 is run twice with one held-open Classifier (CPU, the
packaged smollm2-135m, hf backend): in full, and with `reuse=` night 1's output. Recorded: each run's rows,
reused and computed rows, computed tokens and wall time (from `Classifier.last_summary`, the summary the CLI
prints), the incremental run's share of the full run's computed tokens (target ≤ 10 %), and whether its output
equals the full run's on the answer columns (`DataFrame.equals`, target: True).

    python benchmarks/nightly_reuse.py --rows 2000 --out benchmarks/results/DATE-cpu-nightly-reuse.json
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

import polars as pl

import openjev_batch as ob

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "examples" / "ticket_questions.yaml"
ANSWERS = ["id", "question_id", "type", "options", "probs", "answer", "p_true", "score", "confidence",
           "label_mass", "error", "chosen", "order_spread", "answer_key"]  # fmt: skip

WHO = ["I", "Our team", "My manager", "The whole office", "A customer of ours", "Our finance department"]
WHAT = [
    "was charged twice for the Pro plan this month",
    "cannot log in since the password reset",
    "sees a 502 error on every board",
    "wants to export all our data before we cancel",
    "never received the parcel we ordered last week",
    "would love a dark mode in the mobile app",
    "gets an error when uploading files larger than 10 MB",
    "needs the invoice address changed",
    "is locked out after enabling two-factor authentication",
    "asks whether the annual plan can be refunded",
]
WHEN = ["since Monday", "today", "for two weeks", "after the last update", "since yesterday evening", ""]
ASK = ["Please help.", "Can you fix this today?", "No rush.", "This is blocking our launch!", "Thanks.", ""]


def ticket(rng: random.Random, i: int) -> dict:
    text = f"{rng.choice(WHO)} {rng.choice(WHAT)} {rng.choice(WHEN)}. {rng.choice(ASK)} (ref {i:05d})"
    return {"id": f"T{i:05d}", "channel": rng.choice(["email", "chat", "phone"]), "state": text}


def nights(n: int, changed: float, seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Night 1's n rows, and night 2's: the same with `changed` of them new or edited (half each: the edited
    rows get a new text, the new rows replace as many dropped ones). Returns both and the rows changed."""
    rng = random.Random(seed)
    one = [ticket(rng, i) for i in range(n)]
    k = max(2, round(n * changed))
    picked = rng.sample(range(n), k)
    two = [dict(r) for r in one]
    for j, i in enumerate(picked):
        if j % 2 == 0:  # edited: same id, another text
            two[i]["state"] = two[i]["state"] + " Update: still not working, please call me back."
        else:  # new: a row that was not there last night in place of one that left
            two[i] = ticket(rng, n + j)
    return pl.DataFrame(one), pl.DataFrame(two), k


def measured(clf, data, reuse=None) -> tuple[pl.DataFrame, dict]:
    t0 = time.perf_counter()
    out = clf.run(data, str(QUESTIONS), keep="channel", reuse=reuse)
    s = clf.last_summary
    print(f"{s.rows} rows, reused {s.reused_rows}, computed tokens {s.computed_tokens:,}, "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)  # fmt: skip
    return out, {
        "rows": s.rows, "reused_rows": s.reused_rows, "computed_rows": s.rows - (s.reused_rows or 0),
        "computed_tokens": s.computed_tokens, "logical_tokens": s.logical_tokens,
        "wall_s": round(time.perf_counter() - t0, 2),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--changed", type=float, default=0.05, help="Share of night 2's rows new or edited.")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None, help="Results JSON (default: print only).")
    a = ap.parse_args()
    one, two, k = nights(a.rows, a.changed)
    opts = {"backend": "hf", "device": "cpu", **({"threads": a.threads} if a.threads else {})}
    with ob.Classifier(a.model, **opts) as clf:
        first, night1 = measured(clf, one)
        full, night2_full = measured(clf, two)
        inc, night2_inc = measured(clf, two, reuse=first)
    equal = inc.select(ANSWERS).equals(full.select(ANSWERS))
    share = night2_inc["computed_tokens"] / night2_full["computed_tokens"]
    res = {
        "benchmark": "nightly_reuse", "model": a.model, "backend": "hf on cpu", "rows": a.rows,
        "changed_rows": k, "changed_share": a.changed, "night1": night1, "night2_full": night2_full,
        "night2_reuse": night2_inc, "computed_tokens_share": round(share, 4), "target_share": 0.10,
        "answers_equal_full": equal, "machine": platform.machine(), "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }  # fmt: skip
    print(json.dumps(res, indent=1))
    if a.out is not None:
        a.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
