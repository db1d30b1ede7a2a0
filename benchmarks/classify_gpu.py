"""GPU throughput of `openjev-batch classify`: sglang (is_embedding, prefix warm-up) vs the hf backend, through
`openjev_batch.Classifier(readout="classifier-head")`.

Run on the H200 through the kit (docs/benchmarks.md, "Running it"):

    bash benchmarks/gpu.sh benchmarks/classify_gpu.py          # -> $OUT/classify.json, $OUT/classify.md

`--smoke` checks the script on a CPU (tiny model, small workload, float32; sglang through the test shims):
    PYTHONPATH=tests/shims SGLANG_USE_CPU_ENGINE=1 OUT=/tmp/smoke .venv/bin/python benchmarks/classify_gpu.py --smoke

Model: a random Qwen3ForSequenceClassification of Qwen3-0.6B's shape (3 labels, id2label, pad id; bf16)
with the real Qwen3 tokenizer. Workload: real RTE/CB text (the committed samples in examples/nli),
"many hypotheses per premise": each passage (a few real premises joined, ~250 tokens) is paired with
K real hypotheses, so one premise's KV serves K rows. Each backend and variant is its own Classifier
(started apart, its start reported apart); a warm-up job on other passages (three premises joined, not
four: no prefix in common) comes before the timed job, which is `Classifier.run` end to end (template →
tokenize → plan → classify → softmax → Parquet). The sglang baseline without the per-prefix warm-up
request is the documented `--skip-prefix-warmup` (`skip_prefix_warmup=True`). Parity: max |Δlogit| and
argmax agreement between the two backends on the same rows (both bf16).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from common import ROOT

WORK = Path("/tmp/bench-classify")
OUT = Path(os.environ.get("OUT", "/tmp/out"))
SHAPE = dict(
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
)
ID2LABEL = {0: "contradiction", 1: "entailment", 2: "neutral"}


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


SMOKE = "--smoke" in sys.argv
if SMOKE:
    SHAPE = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    WORK = Path("/tmp/bench-classify-smoke")
DEVICE, DTYPE = ("cpu", "float32") if SMOKE else ("cuda", "bfloat16")


def make_model(out: Path) -> Path:
    import torch
    from common import tokenizer_dir
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Qwen3Config

    if (out / "config.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    for f in Path(tokenizer_dir()).iterdir():
        if f.is_file():
            shutil.copy(f, out / f.name)
    tok = AutoTokenizer.from_pretrained(out)
    cfg = Qwen3Config(
        vocab_size=len(tok),
        max_position_embeddings=40960,
        rope_theta=1_000_000.0,
        tie_word_embeddings=False,
        id2label=ID2LABEL,
        label2id={v: k for k, v in ID2LABEL.items()},
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        architectures=["Qwen3ForSequenceClassification"],
        **SHAPE,
    )
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(cfg).to(getattr(torch, DTYPE))
    model.save_pretrained(out, safe_serialization=True)
    return out


def workload(path: Path, passages: int, k: int, joined: int = 4) -> int:
    rows = [
        json.loads(x)
        for f in ("rte_sample.jsonl", "cb_sample.jsonl")
        for x in open(ROOT / "examples/nli" / f)
    ]
    prem = [r["premise"] for r in rows]
    hyps = [r["hypothesis"] for r in rows]
    n = 0
    with open(path, "w") as f:
        for i in range(passages):
            passage = " ".join(prem[(i + j) % len(prem)] for j in range(joined))  # ~250 tokens of real text
            for j in range(k):
                f.write(
                    json.dumps(
                        {"id": f"p{i}-h{j}", "premise": passage, "hypothesis": hyps[(i * k + j) % len(hyps)]}
                    )
                )
                f.write("\n")
                n += 1
    return n


def timed(clf, src: Path, warm: Path, out: Path) -> tuple[float, object]:
    """The warm-up job on `warm`, then the timed job on `src` end to end (rows read, Parquet written)."""
    import pyarrow.parquet as pq
    from product import read_rows

    clf.run(read_rows(warm), output="arrow")
    t0 = time.perf_counter()
    table = clf.run(read_rows(src), output="arrow")
    pq.write_table(table, out)
    return time.perf_counter() - t0, clf.last_summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model, small workload, float32 on a CPU")
    ap.parse_args()  # SMOKE was read from argv at import (it sizes the model)
    import openjev_batch as ob

    WORK.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    model = str(make_model(WORK / "qwen3-0.6b-cls"))
    res: dict = {
        "model": f"random {'tiny' if SMOKE else 'Qwen3-0.6B'}-shaped Qwen3ForSequenceClassification, {DTYPE}"
    }
    res["runs"] = {}
    loads = ((4, 4),) if SMOKE else ((64, 32), (256, 16))
    srcs = {}
    for passages, k in loads:
        src, warm = WORK / f"w-{passages}x{k}.jsonl", WORK / f"warm-{passages}x{k}.jsonl"
        workload(warm, min(passages, 16), k, joined=3)
        srcs[(passages, k)] = (src, workload(src, passages, k), warm)
    outs: dict = {}
    gpu_kit = {} if SMOKE else dict(attention_backend="triton", engine_args={"disable_cuda_graph": True})
    variants = {  # name: (backend, Classifier keywords)
        "hf": ("hf", dict(batch_tokens=65_536)),
        "sglang": ("sglang", dict(gpu_kit)),
        "sglang-no-warmup": ("sglang", dict(gpu_kit, skip_prefix_warmup=True)),  # --skip-prefix-warmup
    }
    for name, (backend, kw) in variants.items():
        t0 = time.perf_counter()
        clf = ob.Classifier(model, backend, readout="classifier-head", device=DEVICE, dtype=DTYPE, **kw)
        start_s = time.perf_counter() - t0
        try:
            for (passages, k), (src, n, warm) in srcs.items():
                out = WORK / f"{name}-{passages}x{k}.parquet"
                wall, s = timed(clf, src, warm, out)
                import pyarrow.parquet as pq

                outs[(name, passages, k)] = pq.read_table(out).to_pylist()
                res["runs"][f"{name} {passages}x{k}"] = dict(
                    rows=n,
                    start_s=round(start_s, 1),
                    wall_s=round(wall, 3),
                    rows_per_s=round(n / wall, 1),
                    tokens_per_s=round(s.logical_tokens / wall),
                    unique_tokens=s.unique_tokens,
                    logical_tokens=s.logical_tokens,
                    errors=s.errors,
                )
                log(name, passages, k, res["runs"][f"{name} {passages}x{k}"])
                (OUT / "classify.json").write_text(json.dumps(res, indent=1))
        finally:
            clf.close()
    for passages, k in loads:
        a, b2 = outs[("hf", passages, k)], outs[("sglang", passages, k)]
        d = max(
            abs(x - y)
            for r, q in zip(a, b2, strict=True)
            for x, y in zip(r["logits"], q["logits"], strict=True)
        )
        agree = sum(r["label"] == q["label"] for r, q in zip(a, b2, strict=True)) / len(a)
        hf_s = res["runs"][f"hf {passages}x{k}"]["wall_s"]
        sg_s = res["runs"][f"sglang {passages}x{k}"]["wall_s"]
        res[f"parity {passages}x{k}"] = dict(
            max_abs_dlogit=d, argmax_agreement=agree, speedup=round(hf_s / sg_s, 2)
        )
        log("parity", res[f"parity {passages}x{k}"])
    (OUT / "classify.json").write_text(json.dumps(res, indent=1))
    lines = [
        "| run | rows | wall s | rows/s | tokens/s | unique/logical tokens |",
        "|---|---|---|---|---|---|",
    ]
    for key, r in res["runs"].items():
        lines.append(
            f"| {key} | {r['rows']} | {r['wall_s']} | {r['rows_per_s']} | {r['tokens_per_s']:,} | "
            f"{r['unique_tokens']:,}/{r['logical_tokens']:,} |"
        )
    (OUT / "classify.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
