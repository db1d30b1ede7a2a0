"""A tiny random **dense** vision-language model for the CPU sglang engine (issue 33): Qwen3-VL. The Qwen3.5 VL
model of tests/tiny.py is a hybrid whose linear-attention layers need sgl_kernel's CPU build (not on PyPI:
`srt/layers/attention/linear/gdn_backend.py:68` imports `sgl_kernel.mamba`'s CPU kernels), so the sglang CPU
engine cannot run it; Qwen3-VL has Qwen3.5's vision tower family, image processor, image markup and
interleaved M-RoPE, over plain attention layers, and both go through sglang's one Qwen-VL image processor."""

from __future__ import annotations

from pathlib import Path

from tiny import _tokenizer_into, save_vl_processing


def make_tiny_qwen3_vl(tokenizer_dir: Path, out: Path, seed: int = 0, max_pixels: int = 128 * 128) -> Path:
    """A float32 random `Qwen3VLForConditionalGeneration` (2 text layers, hidden 32, head 8; a 1-layer vision
    tower, patch 16, merge 2, no deepstack) around the real Qwen3 tokenizer, saved with its image processor
    (Qwen2VLImageProcessor; `max_pixels` keeps an image to a few tokens: 96 × 64 is 3 × 2 tokens) and an
    image-taking chat template. M-RoPE over 4 frequencies, [2, 1, 1] interleaved, so all three position axes
    reach the attention; weights N(0, 0.3) so label logprobs are far from uniform."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    tok = _tokenizer_into(tokenizer_dir, out)
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
