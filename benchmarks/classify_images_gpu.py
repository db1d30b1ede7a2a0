"""`classify` with image premises on sglang against hf (issue 41.4): a saved small random Qwen3.5 vision-language
classifier (`Qwen3_5ForSequenceClassification`: images_gpu.py's hybrid text stack and vision tower, a 3-label bias-free
`score` head, its image processor, the real Qwen3 tokenizer; bf16 on a GPU) over rows of one 448 × 448 image premise
and K hypotheses each (the image prefix shared by the row's K requests).

- parity: `openjev-batch classify -b hf` against `-b sglang` (no extra engine arguments): label agreement (target
  ≥ 0.99), max |Δprob|, max |Δlogit|, row errors.

    bash benchmarks/gpu.sh benchmarks/classify_images_gpu.py          # GPU, sglang 0.5.17 kit
    PYTHONPATH=tests/shims SGLANG_USE_CPU_ENGINE=1 python benchmarks/classify_images_gpu.py --smoke   # hf only (CPU)

Results: $OUT/results.json under "classify_images_qwen3.5-vl" (common.py `save`). The CPU engine runs no Qwen3.5
hybrid, so `--smoke` runs the hf half only (the script's plumbing).
"""

from __future__ import annotations

import argparse
import json
import random

from common import WORK, cli, log, save
from images_gpu import SIZES, make_vl_model

HYPOTHESES = ("There is a dog.", "The picture is mostly red.", "It is a photograph taken at night.",
              "Someone is holding an umbrella.")  # fmt: skip
ID2LABEL = {0: "entailment", 1: "neutral", 2: "contradiction"}


def make_classifier(size: str):
    """images_gpu's random Qwen3.5 VL checkpoint as a sequence classifier: the same config with id2label and a
    `score` head (N(0, 1), so the logits spread), saved beside its image processor and tokenizer."""
    import shutil

    import torch
    import transformers as tf

    src = make_vl_model("qwen3.5-vl", size)
    d = WORK / f"qwen3.5-vl-cls-{size}"
    if (d / "config.json").exists():
        return d
    shutil.copytree(src, d)
    cfg = tf.AutoConfig.from_pretrained(d)
    cfg.id2label, cfg.label2id = ID2LABEL, {v: k for k, v in ID2LABEL.items()}
    torch.manual_seed(1)
    smoke = size == "smoke"
    with torch.device("cpu" if smoke or not torch.cuda.is_available() else "cuda"):
        m = tf.Qwen3_5ForSequenceClassification(cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() > 1:
                p.normal_(0, 1.0 if name == "score.weight" else (0.3 if smoke else 0.02))
    for f in d.glob("*.safetensors*"):
        f.unlink()
    (m if smoke else m.to(torch.bfloat16)).save_pretrained(d)
    return d


def rows_file(n: int, k: int, side: int) -> str:
    """n image premises × k hypotheses (one row each), each premise its own random-noise PNG."""
    from PIL import Image

    rng = random.Random(0)
    folder = WORK / "cls-img"
    folder.mkdir(parents=True, exist_ok=True)
    recs = []
    for i in range(n):
        name = f"p{i:03d}.png"
        Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3)).save(folder / name)
        for j in range(k):
            recs.append({"id": f"{i}-{j}", "premise": f"Photograph {i} of a scene:", "hypothesis": HYPOTHESES[j],
                         "image": name})  # fmt: skip
    path = folder / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return str(path)


def records(path):
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model, hf only, on a CPU")
    ap.add_argument("--rows", type=int, default=32, help="image premises (each with 4 hypotheses)")
    a = ap.parse_args()
    assert set(SIZES) >= {"smoke", "full"}
    m = make_classifier("smoke" if a.smoke else "full")
    src = rows_file(4 if a.smoke else a.rows, len(HYPOTHESES), 64 if a.smoke else 448)
    dev = ["--device", "cpu", "--dtype", "float32"] if a.smoke else ["--dtype", "bfloat16"]
    runs = {"hf": ["-b", "hf", *([] if a.smoke else ["--device", "cuda"])]}
    if not a.smoke:
        runs["sglang"] = ["-b", "sglang", "--mem-fraction-static", "0.8"]
    res: dict = {"model": str(m), "premises": a.rows, "hypotheses": len(HYPOTHESES), "image": "448x448 PNG"}
    for name, args in runs.items():
        out = WORK / "cls-img" / f"{name}.parquet"
        rc, secs, tail = cli("classify", src, "-m", m, "--no-progress", *dev, *args, "-o", out)
        log(name, rc, secs, tail[-600:])
        res[name] = {"rc": rc, "s": secs, "log_tail": tail[-600:]}
    if all(res.get(k, {}).get("rc") in (0, 3) for k in ("hf", "sglang")):
        x, y = (records(WORK / "cls-img" / f"{k}.parquet") for k in ("hf", "sglang"))
        dp = [abs(p - q) for r, s in zip(x, y, strict=True) for p, q in zip(r["probs"] or [], s["probs"] or [], strict=False)]
        dl = [abs(p - q) for r, s in zip(x, y, strict=True) for p, q in zip(r["logits"] or [], s["logits"] or [], strict=False)]
        res["parity"] = {"records": len(x), "label_agreement": sum(r["label"] == s["label"] for r, s in zip(x, y, strict=True)) / len(x),
                         "max_abs_prob_diff": max(dp, default=None), "max_abs_logit_diff": max(dl, default=None),
                         "errors": sum(bool(s["error"]) for s in y)}  # fmt: skip
        log("parity", res["parity"])
    save({"classify_images" + ("_smoke" if a.smoke else "_qwen3.5-vl"): res})


if __name__ == "__main__":
    main()
