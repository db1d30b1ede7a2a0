"""A GGUF checkpoint as a plain Hugging Face folder: dequantised to float32 safetensors with its tokenizer
and config.json, and checked to reload with plain transformers and give the GGUF model's logits."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ModelFetchError

# tokenizer attribute -> GGUF metadata key `tokenizer.ggml.<key>_token_id`
_GGUF_SPECIAL_TOKENS = {
    "bos_token": "bos",
    "eos_token": "eos",
    "pad_token": "padding",
    "unk_token": "unknown",
}


def _update_json(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}, indent=2) + "\n")


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise a GGUF checkpoint to a float32 safetensors folder and check it reloads identically."""
    import torch
    from gguf import GGUFReader
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d, f = str(gguf.parent), gguf.name
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    gguf_model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    config = gguf_model.config
    # GGUF general.name leaks into config.json as a stray key; the provenance is in .complete instead
    vars(config).pop("_model_name_or_path", None)
    config.dtype = torch.float32  # serialised as "dtype" (transformers 5); sglang reads it too

    # transformers' GGUF llama tokenizer converter sets eos = bos (SmolLM2 got eos <|im_start|>) and no
    # pad: take the special tokens from the GGUF metadata, which llama.cpp itself uses.
    fields = GGUFReader(gguf).fields
    for attr, key in _GGUF_SPECIAL_TOKENS.items():
        if (field := fields.get(f"tokenizer.ggml.{key}_token_id")) is not None:
            setattr(tok, attr, tok.convert_ids_to_tokens(int(field.contents())))
    tok.model_max_length = config.max_position_embeddings
    tok.clean_up_tokenization_spaces = False  # the GGUF converter's True would strip spaces from BPE output
    if not tok.chat_template:
        raise ModelFetchError("the GGUF file has no chat template")

    # save_pretrained refuses GGUF-loaded models: a fresh model from the same config is a plain one.
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)  # writes chat_template.jinja next to tokenizer_config.json
    del model
    # pyproject allows transformers 4.57, which knows neither the v5 tokenizer class name nor
    # rope_parameters (it would silently fall back to rope_theta 10000): spell both the old way too.
    # Its PreTrainedTokenizerFast also returns token_type_ids, which generate(**enc) rejects.
    _update_json(
        out / "tokenizer_config.json",
        tokenizer_class="PreTrainedTokenizerFast",
        model_input_names=["input_ids", "attention_mask"],
    )
    if theta := (getattr(config, "rope_parameters", None) or {}).get("rope_theta"):
        _update_json(out / "config.json", rope_theta=theta)

    # The saved folder must load with plain transformers and give the GGUF model's logits.
    text = tok.apply_chat_template([{"role": "user", "content": "The capital of France is"}], tokenize=False)
    ids = tok(text, return_tensors="pt").input_ids
    reloaded_tok = AutoTokenizer.from_pretrained(out)
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        diff = (gguf_model(ids).logits - reloaded(ids).logits).abs().max().item()
    if reloaded_tok(text).input_ids != ids[0].tolist() or not reloaded_tok.chat_template or diff > 1e-4:
        raise ModelFetchError(f"the converted folder does not match the GGUF model (max |Δlogit| {diff:.2e})")
