"""The test models themselves (tests/tiny.py): the Qwen3.5 builders share one text config."""

from __future__ import annotations

import json

from tiny import make_tiny_qwen3_5_classifier, make_tiny_qwen3_5_moe, qwen3_5_text_config


def test_qwen3_5_builders_write_the_one_text_config(qwen3_tok, qwen3_tok_dir, tmp_path):
    """The MoE/dense builder and the classifier builder (a third copy lived in benchmarks/) each wrote their
    own copy of the text config; both now write qwen3_5_text_config's, less their own overrides
    (context length, and the causal model's untied head)."""
    shared = qwen3_5_text_config(qwen3_tok)
    moe = json.loads((make_tiny_qwen3_5_moe(qwen3_tok_dir, tmp_path / "moe") / "config.json").read_text())
    cls = json.loads(
        (make_tiny_qwen3_5_classifier(qwen3_tok_dir, tmp_path / "cls") / "config.json").read_text()
    )
    for text in (moe, cls["text_config"]):
        assert {k: text[k] for k in shared} == shared
    assert (moe["max_position_embeddings"], cls["text_config"]["max_position_embeddings"]) == (40960, 4096)
    assert moe["num_experts"] == 8 and "num_experts" not in cls["text_config"]
