"""Benchmark workloads as real input files for `openjev-batch` (text in, built for a given tokenizer).

- W1: R rows × 8 questions, a ~1,000-token conversation per row, ~40-token question suffix, 4 options.
- W2: MMLU-style: single 10-option questions, a 5-shot block shared by every question of a category
  (14 categories) placed in the conversation, so the prefix is shared per category.
- W3: nightly labelling: short tickets (~300 tokens) × 3 questions (noul, choice of 8, score of 5).
Text is random English-like words (fixed seed): the model's weights are random too, so only the token
counts and the prefix structure matter.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = (
    "account billing charge refund invoice login password error page server outage delay order shipping "
    "package customer support agent team product feature request update version mobile desktop browser "
    "network payment card bank transfer week month today yesterday please thanks again still never always "
    "problem issue fix broken slow fast screen button email message phone call reply answer question the a "
    "and of to in for on with at by from is was are were be been have has had do does did will would can "
    "could should may might must not no yes very really quite just only also even more most less much many"
).split()


def text_of_tokens(tok, n: int, rng: random.Random) -> str:
    """Random words cut to exactly about `n` tokens of `tok`."""
    words = " ".join(rng.choice(WORDS) for _ in range(int(n * 1.2) + 10))
    ids = tok(words, add_special_tokens=False)["input_ids"][:n]
    return tok.decode(ids)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def w1(tok, out: Path, rows: int = 256, prefix_tokens: int = 1000, seed: int = 0) -> tuple[Path, Path]:
    rng = random.Random(seed)
    data = []
    for i in range(rows):
        conv = text_of_tokens(tok, prefix_tokens - 80, rng)  # template + instructions take ~80 tokens
        data.append({"id": f"w1-{i}", "state": [{"role": "user", "content": conv}]})
    qs = {
        f"q{j}": {
            "type": "choice",
            "instructions": f"Which topic best fits aspect {j} of this conversation?",
            "criteria": {"alpha": None, "beta": None, "gamma": None, "delta": None},
        }
        for j in range(8)
    }
    qpath = out / "w1_questions.json"
    qpath.write_text(json.dumps(qs))
    return _write(out / "w1.jsonl", data), qpath


def w2(tok, out: Path, total: int = 12_032, categories: int = 14, shots: int = 5, seed: int = 0) -> Path:
    rng = random.Random(seed)
    shot_blocks = []
    for c in range(categories):
        ex = []
        for _ in range(shots):
            opts = "\n".join(f"{chr(65 + k)}. {text_of_tokens(tok, 8, rng)}" for k in range(10))
            ex.append(
                f"Question: {text_of_tokens(tok, 40, rng)}\n{opts}\nAnswer: {chr(65 + rng.randrange(10))}"
            )
        shot_blocks.append(
            f"The following are multiple choice questions about category {c}.\n\n" + "\n\n".join(ex)
        )
    data = []
    for i in range(total):
        c = i % categories
        crit = {f"o{k}": text_of_tokens(tok, 8, rng) for k in range(10)}
        data.append(
            {
                "id": f"w2-{i}",
                "state": shot_blocks[c],
                "questions": {
                    "answer": {
                        "type": "choice",
                        "instructions": text_of_tokens(tok, 40, rng),
                        "criteria": crit,
                    }
                },
            }
        )
    rng.shuffle(data)  # input order is not category order: the planner must regroup
    return _write(out / "w2.jsonl", data)


def w3(tok, out: Path, rows: int = 20_000, ticket_tokens: int = 300, seed: int = 0) -> tuple[Path, Path]:
    rng = random.Random(seed)
    data = [{"id": f"w3-{i}", "state": text_of_tokens(tok, ticket_tokens, rng)} for i in range(rows)]
    qs = {
        "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
        "category": {
            "type": "choice",
            "instructions": "Which category fits the ticket best?",
            "criteria": {
                k: None
                for k in (
                    "billing",
                    "outage",
                    "login",
                    "bug",
                    "feature_request",
                    "account",
                    "shipping",
                    "other",
                )
            },
        },
        "urgency": {
            "type": "score",
            "instructions": "How urgent is the ticket?",
            "criteria": ["not urgent", "low", "medium", "high", "critical"],
        },
    }
    qpath = out / "w3_questions.json"
    qpath.write_text(json.dumps(qs))
    return _write(out / "w3.jsonl", data), qpath
