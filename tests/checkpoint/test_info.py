"""model_info: the model's kind from its config alone (configs built with transformers' own classes, no
weights), and `run --dry-run` showing it with the request pattern it implies."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import EXAMPLES, cli

from openjev_batch.backends.sglang.patterns import resolve, words
from openjev_batch.checkpoint.info import UNKNOWN, from_config, load_config, model_info
from openjev_batch.errors import BackendError


def auto_pattern(info) -> str:
    """The words `--dry-run` shows for `auto` where the engine runs no multi-item scoring (a CPU, hf)."""
    return words(resolve("auto", multi_item=False, hybrid=info.recurrent), info)


def _cfg(config, arch: str) -> dict:
    d = config.to_dict()
    d["architectures"] = [arch]
    return d


def test_qwen3_5_moe_35b_a3b_is_hybrid_moe():
    from transformers import Qwen3_5MoeTextConfig

    info = from_config(_cfg(Qwen3_5MoeTextConfig(), "Qwen3_5MoeForCausalLM"))
    assert info.recurrent and info.moe
    assert (info.layers, info.recurrent_layers, info.attention_layers) == (40, 30, 10)
    assert (info.experts, info.experts_per_token) == (256, 8)
    assert 2.3e9 < info.active_params < 2.5e9  # "~2.4 B active parameters a token"
    assert "hybrid" in info.describe() and "256 experts" in info.describe()
    assert "prefix-only" in auto_pattern(info)


def test_multimodal_checkpoint_is_read_through_its_text_config():
    from transformers import Qwen3_5Config, Qwen3_5MoeConfig

    moe = from_config(_cfg(Qwen3_5MoeConfig(), "Qwen3_5MoeForConditionalGeneration"))
    assert moe.recurrent and moe.moe and moe.architecture == "Qwen3_5MoeForConditionalGeneration"
    dense = from_config(_cfg(Qwen3_5Config(), "Qwen3_5ForConditionalGeneration"))
    assert dense.recurrent and not dense.moe


def test_hybrid_without_layer_types_uses_full_attention_interval():
    cfg = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_hidden_layers": 8}
    assert from_config({**cfg, "full_attention_interval": 4}).recurrent_layers == 6
    assert from_config({**cfg, "full_attention_interval": 2}).recurrent_layers == 4
    nemotron = {"architectures": ["NemotronHForCausalLM"], "hybrid_override_pattern": "M-M-M*-M-"}
    assert from_config(nemotron).recurrent_layers == 4 and from_config(nemotron).attention_layers == 1


def test_plain_moe_and_dense_models_keep_no_state():
    from transformers import Qwen3Config, Qwen3MoeConfig

    a3b = Qwen3MoeConfig(
        hidden_size=2048,
        num_hidden_layers=48,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        num_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=768,
    )
    info = from_config(_cfg(a3b, "Qwen3MoeForCausalLM"))
    assert info.moe and not info.recurrent and (info.experts, info.experts_per_token) == (128, 8)
    assert 2.5e9 < info.active_params < 3.0e9  # Qwen3-30B-A3B: ~3.3 B active with embeddings
    dense = from_config(_cfg(Qwen3Config(num_hidden_layers=2), "Qwen3ForCausalLM"))
    assert not dense.moe and not dense.recurrent and dense.layers == 2
    assert "warm-up" in auto_pattern(dense)


def test_unreadable_config_is_unknown(tmp_path):
    assert model_info(str(tmp_path)) == UNKNOWN  # a folder without config.json
    assert model_info("no-such-org/no-such-model-xyz") == UNKNOWN  # not in the local cache
    assert not UNKNOWN.known and not UNKNOWN.recurrent


def test_dry_run_shows_a_hybrid_model_and_its_request_pattern(tmp_path, qwen3_tok_dir):
    from transformers import Qwen3_5MoeTextConfig

    m = tmp_path / "qwen35-config-only"
    shutil.copytree(qwen3_tok_dir, m)
    (m / "config.json").write_text(json.dumps(_cfg(Qwen3_5MoeTextConfig(), "Qwen3_5MoeForCausalLM")))
    r = cli("run", EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml", "-o", tmp_path / "o.parquet", "-m", m, "-b", "hf", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "Qwen3_5MoeForCausalLM" in r.stdout and "30 recurrent-state" in r.stdout
    assert "prefix-only request per prefix" in r.stdout


@pytest.mark.parametrize("arch", ["Qwen3ForCausalLM"])
def test_dry_run_shows_a_dense_model(tmp_path, tiny_model, arch):
    r = cli("run", EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml", "-o", tmp_path / "o.parquet", "-m", tiny_model, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert arch in r.stdout and "2 attention layers" in r.stdout and "warm-up" in r.stdout


def test_dry_run_names_the_request_pattern_asked_for(tmp_path, tiny_model):
    """Hostile trial: `--dry-run --request-pattern prefix-first` still printed the automatic pattern."""
    info = model_info(str(tiny_model))
    assert auto_pattern(info).startswith("first branch of each prefix")
    pytest.importorskip("sglang.srt")  # -b sglang: the option is refused by hf
    r = cli("run", EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml", "-m", tiny_model, "-b", "sglang", "--dry-run",
            "--request-pattern", "prefix-first")  # fmt: skip
    assert r.returncode == 0 and "prefix-only request per prefix" in r.stdout, r.stdout + r.stderr


def test_the_recurrent_state_of_a_sequence_matches_sglangs_pool():
    """61.4 MiB for the 35B-A3B shape: sglang 0.5.17 on the H200 logged 71.60 GiB of ssm and 1.68 GiB of conv
    state for 1,221 (+1 padding) slots; --dry-run names it beside the prefix-first pattern."""
    from transformers import Qwen3_5MoeTextConfig

    info = from_config(_cfg(Qwen3_5MoeTextConfig(), "Qwen3_5MoeForCausalLM"))
    assert abs(info.state_bytes * 1222 - (71.60 + 1.68) * 2**30) < 0.01 * 2**30
    assert "61 MiB of recurrent state" in auto_pattern(info)
    half = from_config(
        {**_cfg(Qwen3_5MoeTextConfig(), "Qwen3_5MoeForCausalLM"), "mamba_ssm_dtype": "bfloat16"}
    )
    assert half.state_bytes < 0.52 * info.state_bytes  # the SSM part halves, the conv state stays
    dense = from_config({"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 4})
    assert dense.state_bytes is None and "MiB" not in words("prefix-first", dense)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"model_type": "llama",\n', r"config.json is not valid JSON \(Expecting property name"),
        (b'{"model_type": "llama"}\0', r"config.json is not valid JSON \(Extra data"),
        (b'{"model_type": "ll\xffama"}', r"config.json is not valid JSON \('utf-8' codec can't decode"),
        (b"[1, 2]", r"config.json is not a JSON object \(it holds a list\)"),
    ],
)
def test_a_broken_config_json_is_one_backend_error(tmp_path, body, says):
    """The hostile trial: a cut config.json sent run, serve and the API out through a JSONDecodeError traceback
    (exit 1); it is a BackendError naming the file (exit 4), from model_info as from load_config."""
    (tmp_path / "config.json").write_bytes(body)
    with pytest.raises(BackendError, match=says):
        load_config(str(tmp_path))
    with pytest.raises(BackendError, match=says):
        model_info(str(tmp_path))
