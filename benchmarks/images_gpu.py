"""Images on sglang against hf (issue 33): a saved small random Qwen3.5 vision-language checkpoint (the hybrid text
stack, a vision tower, the image processor, an image-taking chat template, the real Qwen3 tokenizer) and W1-shaped
rows (~1,000-token conversation, 8 questions) with one 448 × 448 image each (196 image tokens).

- parity: `openjev-batch run -b hf` against `-b sglang` on 32 image rows: answer agreement (target ≥ 99 %),
  max |Δprob| and max |Δ label logprob|;
- prefix reuse: per question after a row's first, the cached share of its prefix (target ≥ 90 % on sglang), from
  the output's `cached_tokens` / `prefix_tokens`;
- timing: sglang on all W1 rows with the image against the same rows without it (the cost of the image tokens:
  pixel processing in the tokenizer manager, the vision tower, 196 more prefix tokens per row).

    bash benchmarks/gpu.sh benchmarks/images_gpu.py                         # H200, sglang 0.5.17 kit
    bash benchmarks/gpu.sh benchmarks/images_gpu.py --arch qwen3-vl         # a dense Qwen3-VL of the same size
    PYTHONPATH=tests/shims SGLANG_USE_CPU_ENGINE=1 python benchmarks/images_gpu.py --smoke   # CPU plumbing

Results: $OUT/results.json under "images" (benchmarks/common.py `save`); copy it to benchmarks/results/.
The CPU engine runs no Qwen3.5 hybrid (no linear-attention kernels in the CPU build), so `--smoke` takes the
dense Qwen3-VL.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from common import OUT, WORK, _copy_tokenizer, head, log, save, workload_files

# Qwen3.5/3.6's image markup, rendered in place of an image part (the real Qwen3 tokenizer's template is text only)
TEMPLATE = (
    "{%- for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% if message.content is string %}{{ message.content }}"
    "{%- else %}{%- for item in message.content %}"
    "{%- if item.type == 'image' or 'image' in item %}<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif item.type == 'text' %}{{ item.text }}{%- endif %}"
    "{%- endfor %}{%- endif %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{%- endif %}"
)
# (text config, vision config): a small model with the released models' structure, hidden 1024
SIZES = {
    "full": (dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=128),
             dict(depth=4, hidden_size=512, intermediate_size=1536, num_heads=8, out_hidden_size=1024)),
    "smoke": (dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=8),
              dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32)),
}  # fmt: skip


def make_vl_model(arch: str, size: str) -> Path:
    """A random vision-language checkpoint folder (bf16 on a GPU, float32 for the smoke) with its image processor
    (patch 16, merge 2: 448 × 448 → 196 tokens) and the image-taking template."""
    d = WORK / f"{arch}-{size}"
    if (d / "config.json").exists():
        return d
    import torch
    import transformers as tf

    _copy_tokenizer(d)
    tok = tf.AutoTokenizer.from_pretrained(d)
    text, vision = (dict(x) for x in SIZES[size])
    ids = {k: tok.convert_tokens_to_ids(t) for k, t in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}  # fmt: skip
    # rotary frequencies: Qwen3-VL rotates the whole head, Qwen3.5 a quarter of it; split (t, h, w) as the
    # released [24, 20, 20] / [11, 11, 10]
    half = text["head_dim"] // 2 if arch == "qwen3-vl" else text["head_dim"] // 8
    section = [half - 2 * (half * 5 // 16), half * 5 // 16, half * 5 // 16]
    rope = dict(rope_type="default", rope_theta=10_000_000, mrope_section=section, mrope_interleaved=True)
    text.update(vocab_size=len(tok), max_position_embeddings=40960, rope_parameters=rope, tie_word_embeddings=False)
    vision.update(patch_size=16, spatial_merge_size=2, temporal_patch_size=2)
    if arch == "qwen3-vl":
        vision.update(deepstack_visual_indexes=[], num_position_embeddings=2304)
        cfg, cls = tf.Qwen3VLConfig(text_config=text, vision_config=vision, **ids), tf.Qwen3VLForConditionalGeneration
    else:
        n = text["num_hidden_layers"]
        rope["partial_rotary_factor"] = 0.25
        text.update(layer_types=(["linear_attention"] * 3 + ["full_attention"]) * (n // 4), full_attention_interval=4,
                    linear_num_value_heads=8, linear_num_key_heads=4, linear_key_head_dim=text["head_dim"],
                    linear_value_head_dim=text["head_dim"], eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                    pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))  # fmt: skip
        cfg, cls = tf.Qwen3_5Config(text_config=text, vision_config=vision, **ids), tf.Qwen3_5ForConditionalGeneration
    cfg.tie_word_embeddings = False
    smoke = size == "smoke"
    torch.manual_seed(0)
    with torch.device("cpu" if smoke or not torch.cuda.is_available() else "cuda"):
        m = cls(cfg)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3 if smoke else 0.02)
    (m if smoke else m.to(torch.bfloat16)).save_pretrained(d)
    tf.Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2).save_pretrained(d)
    (d / "chat_template.jinja").write_text(TEMPLATE)
    tc = json.loads((d / "tokenizer_config.json").read_text())
    tc.pop("chat_template", None)
    (d / "tokenizer_config.json").write_text(json.dumps(tc))
    return d


def with_images(rows: Path, out: Path, side: int = 448) -> Path:
    """`rows` with an `image` column: one random-noise PNG of side × side per row (each its own image), beside it."""
    from PIL import Image

    rng = random.Random(0)
    recs = [json.loads(line) for line in rows.read_text().splitlines()]
    out.parent.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(recs):
        name = f"img{i:04d}.png"
        if not (out.parent / name).exists():
            Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3)).save(out.parent / name)
        r["image"] = name
    out.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return out


def records(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def parity(x: list[dict], y: list[dict]) -> dict:
    """hf (`x`) against sglang (`y`), record by record: answer agreement, max |Δprob|, max |Δ label logprob|."""
    dp, dl = [], []
    for r, s in zip(x, y, strict=True):
        for p, q in zip(r["probs"] or [], s["probs"] or [], strict=True):
            dp.append(abs(p - q))
            dl.append(abs(math.log(p) + math.log(r["label_mass"]) - math.log(q) - math.log(s["label_mass"])))
    agree = sum(r["answer"] == s["answer"] for r, s in zip(x, y, strict=True)) / len(x)
    return {"records": len(x), "answer_agreement": agree, "max_abs_prob_diff": max(dp, default=None),
            "max_abs_logprob_diff": max(dl, default=None), "errors": sum(bool(s["error"]) for s in y)}  # fmt: skip


def reuse(recs: list[dict]) -> dict:
    """Per question after its row's first: cached_tokens / prefix_tokens (min, mean, share ≥ 0.9)."""
    seen, shares = set(), []
    for r in recs:
        if r["error"] or not r["prefix_tokens"]:
            continue
        if r["id"] in seen:
            shares.append(r["cached_tokens"] / r["prefix_tokens"])
        seen.add(r["id"])
    if not shares:
        return {"questions": 0}
    return {"questions": len(shares), "min": min(shares), "mean": sum(shares) / len(shares),
            "share_at_least_0.9": sum(s >= 0.9 for s in shares) / len(shares)}  # fmt: skip


def run_cli(*args) -> tuple[int, float, str]:
    """`openjev-batch ARGS` in a subprocess, its whole output kept (common.cli keeps the tail, which the
    answers table fills): exit code, seconds, stdout + stderr."""
    t = time.perf_counter()
    env = {**os.environ, "COLUMNS": "240"}
    r = subprocess.run([sys.executable, "-m", "openjev_batch", *map(str, args)], capture_output=True, text=True,
                       env=env)  # fmt: skip
    return r.returncode, round(time.perf_counter() - t, 1), r.stdout + r.stderr


def summary_lines(text: str) -> list[str]:
    """The run summary's lines that say how the engine ran: its start-up (multimodal, the vision attention),
    the request pattern, the throughput, the error count."""
    keys = ("start-up", "pattern", "branches/s", "errors", "multimodal", "the input has image rows")
    lines = [ln for ln in text.splitlines() if any(k in ln for k in keys) and not ln.startswith("[20")]  # no logs
    return [" ".join(ln.replace("│", " ").split()) for ln in lines][:12]


def machine() -> dict:
    """The card and the sglang release the results were measured with (`sglang_release`: "sglang" names the
    parity run)."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    try:
        sg = version("sglang")
    except PackageNotFoundError:
        sg = None
    return {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "sglang_release": sg}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny dense Qwen3-VL on a CPU (sglang's CPU engine)")
    ap.add_argument("--arch", choices=["qwen3.5-vl", "qwen3-vl"], default="qwen3.5-vl")
    ap.add_argument("--rows", type=int, default=256, help="W1 rows of the timing runs")
    a = ap.parse_args()
    from transformers import AutoTokenizer

    arch = "qwen3-vl" if a.smoke else a.arch
    m = make_vl_model(arch, "smoke" if a.smoke else "full")
    q_rows, qs = workload_files(AutoTokenizer.from_pretrained(m), ("w1",), small=a.smoke)["w1"]
    n = 4 if a.smoke else a.rows
    (WORK / "img").mkdir(parents=True, exist_ok=True)
    text_rows = head(q_rows, n, WORK / "img" / f"w1_{n}.jsonl")
    img_rows = with_images(text_rows, WORK / "img" / f"w1_{n}_img.jsonl")
    par_rows = head(img_rows, min(n, 32), WORK / "img" / "w1_32_img.jsonl")
    dev = ["--device", "cpu", "--dtype", "float32"] if a.smoke else ["--dtype", "bfloat16"]
    kit = ["--mem-fraction-static", "0.15"] if a.smoke else ["--attention-backend", "triton",
                                                            "--mem-fraction-static", "0.8"]  # fmt: skip
    common = ["-q", qs, "-m", m, "--no-progress", *dev]
    res: dict = {"arch": arch, "model": str(m), "rows": n, "image": "448x448 PNG, 196 image tokens"}
    runs = {"hf": (par_rows, ["-b", "hf", *([] if a.smoke else ["--device", "cuda"])]),
            "sglang": (par_rows, ["-b", "sglang", *kit]),
            "sglang_w1_image": (img_rows, ["-b", "sglang", *kit]),
            "sglang_w1_text": (text_rows, ["-b", "sglang", *kit])}  # fmt: skip
    res.update(machine())
    for name, (rows, args) in runs.items():
        rc, secs, text = run_cli("run", rows, *common, *args, "-o", WORK / "img" / f"{name}.parquet")
        (WORK / "img" / f"{name}.log").write_text(text)
        log(name, rc, secs, text[-600:])
        res[name] = {"rc": rc, "s": secs, "summary": summary_lines(text), "log_tail": text[-600:]}
        if rc in (0, 3):
            res[name]["reuse"] = reuse(records(WORK / "img" / f"{name}.parquet"))
    if all(res[k]["rc"] in (0, 3) for k in ("hf", "sglang")):
        res["parity"] = parity(*(records(WORK / "img" / f"{k}.parquet") for k in ("hf", "sglang")))
        log("parity", res["parity"])
    if all(res[k]["rc"] == 0 for k in ("sglang_w1_image", "sglang_w1_text")):
        res["image_cost_s"] = round(res["sglang_w1_image"]["s"] - res["sglang_w1_text"]["s"], 1)
    OUT.mkdir(parents=True, exist_ok=True)
    save({"images" + ("_smoke" if a.smoke else f"_{arch}"): res})


if __name__ == "__main__":
    main()
