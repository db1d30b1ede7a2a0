"""No code from checkpoints unless asked: pickle weights need --allow-pickle, a checkpoint's own Python code
needs --trust-remote-code, for every backend, checked before any loader or engine starts."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import EXAMPLES, cli, sglang_cpu_env

from openjev_batch.backends.base import BackendOptions
from openjev_batch.checkpoint.trust import check_model_trust, loader_options
from openjev_batch.errors import BackendError


class _RunsOnLoad:
    """Unpickling this creates a file: what a hostile checkpoint would do with something worse."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def pickle_folder(tiny_model, dest, marker):
    """The tiny model's config and tokenizer, with a legacy-tar pickle instead of its safetensors."""
    import torch

    shutil.copytree(tiny_model, dest, ignore=shutil.ignore_patterns("*.safetensors"))
    torch.save({"w": _RunsOnLoad(marker)}, dest / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    return dest


@pytest.mark.parametrize("backend", ["hf", "sglang"])
def test_pickle_weights_are_refused_before_loading(tiny_model, tmp_path, backend):
    marker = tmp_path / "ran"
    folder = pickle_folder(tiny_model, tmp_path / "m", marker)
    out = tmp_path / "o.parquet"
    r = cli("run", EXAMPLES / "tickets_inline.jsonl", "-m", folder, "-b", backend, "-o", out, "--no-progress")
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
    assert "pickle files (pytorch_model.bin)" in r.stderr and "--allow-pickle" in r.stderr
    assert not marker.exists() and not out.exists()
    import torch

    torch.load(folder / "pytorch_model.bin", weights_only=False)  # what sglang's loader falls back to
    assert marker.exists()  # the file really runs code when unpickled


def test_allow_pickle_loads_pickle_weights_with_hf(tiny_model, tmp_path):
    import torch
    from safetensors.torch import load_file

    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    state = {}
    for f in tiny_model.glob("*.safetensors"):
        state.update(load_file(f))
    torch.save(state, folder / "pytorch_model.bin")
    out = tmp_path / "o.parquet"
    args = ("run", EXAMPLES / "tickets_inline.jsonl", "-m", folder, "-b", "hf", "-o", out, "--no-progress")
    r = cli(*args, "--allow-pickle")
    assert r.returncode == 0, r.stderr


def test_remote_code_is_refused_without_the_option(tiny_model, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(
        json.dumps({**cfg, "auto_map": {"AutoModelForCausalLM": "evil.Model"}})
    )
    for backend in ("hf", "sglang"):
        out = tmp_path / "o.parquet"
        r = cli(
            "run", EXAMPLES / "tickets_inline.jsonl", "-m", folder, "-b", backend, "-o", out, "--no-progress"
        )
        assert r.returncode == 4 and "auto_map" in r.stderr and "--trust-remote-code" in r.stderr, r.stderr
    check_model_trust(BackendOptions(model=str(folder), trust_remote_code=True))  # allowed when asked


def test_loader_options():
    assert loader_options(BackendOptions(model="m")) == {"trust_remote_code": False, "use_safetensors": True}
    assert loader_options(BackendOptions(model="m", allow_pickle=True)) == {"trust_remote_code": False}
    assert loader_options(BackendOptions(model="m"), weights=False) == {"trust_remote_code": False}
    assert loader_options(BackendOptions(model="m", trust_remote_code=True))["trust_remote_code"] is True


def test_sglang_engine_loads_safetensors_only_unless_allowed():
    pytest.importorskip("sglang.srt")
    from openjev_batch.backends.sglang.kwargs import engine_kwargs

    kw = engine_kwargs(BackendOptions(model="m", device="cpu"))
    assert kw["load_format"] == "safetensors" and kw["trust_remote_code"] is False
    assert "load_format" not in engine_kwargs(BackendOptions(model="m", device="cpu", allow_pickle=True))
    with pytest.raises(BackendError, match="load_format=pt can load pickle weights.*--allow-pickle"):
        engine_kwargs(BackendOptions(model="m", device="cpu", engine_args={"load_format": "pt"}))
    with pytest.raises(BackendError, match="add --trust-remote-code"):
        engine_kwargs(BackendOptions(model="m", device="cpu", engine_args={"trust_remote_code": True}))
    kw = engine_kwargs(BackendOptions(model="m", device="cpu", trust_remote_code=True))
    assert kw["trust_remote_code"] is True


def test_loader_refusal_names_the_option(tiny_model, tmp_path):
    """What the folder check cannot see (a hub checkpoint, weights under another name) the loader refuses;
    the message then says which option allows it."""
    from openjev_batch.backends import load_backend

    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    with pytest.raises(BackendError, match="pass --allow-pickle for pickle weights you trust"):
        load_backend("hf", BackendOptions(model=str(folder), device="cpu"))


def remote_code_tokenizer(tiny_model, dest, marker):
    """The tiny model whose tokenizer class is the checkpoint's own Python code (auto_map), which leaves
    `marker` when it runs. Without trust_remote_code transformers 5 falls back to its generic tokenizer."""
    shutil.copytree(tiny_model, dest)
    (dest / "tok.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from transformers import PreTrainedTokenizerFast\n\n\nclass RemoteTok(PreTrainedTokenizerFast):\n    pass\n"
    )
    cfg = json.loads((dest / "tokenizer_config.json").read_text())
    cfg.update(tokenizer_class="RemoteTok", auto_map={"AutoTokenizer": [None, "tok.RemoteTok"]})
    (dest / "tokenizer_config.json").write_text(json.dumps(cfg))
    return dest


def test_tokenizer_only_paths_honour_trust_remote_code(tiny_model, tmp_path):
    """The stages that load a tokenizer without a backend (--dry-run, the Ray driver and render actors) load
    the checkpoint's own tokenizer code only with --trust-remote-code, and then do; the Ray ones ignored
    the option (they always loaded transformers' generic tokenizer instead)."""
    from openjev_batch.backends.base import load_tokenizer
    from openjev_batch.readouts.label_logprobs import LabelLogprobs

    marker = tmp_path / "ran"
    folder = remote_code_tokenizer(tiny_model, tmp_path / "m", marker)
    dry = ("run", EXAMPLES / "tickets_inline.jsonl", "-m", folder, "-b", "hf", "--dry-run")
    r = cli(*dry)
    assert r.returncode == 0 and not marker.exists(), r.stderr
    r = cli(*dry, "--trust-remote-code")
    assert r.returncode == 0 and marker.exists(), r.stderr
    assert type(load_tokenizer(str(folder), trust_remote_code=True)).__name__ == "RemoteTok"
    pytest.importorskip("ray")
    from openjev_batch.pipeline.runners.ray.stages import RenderStage

    stage = RenderStage(str(folder), LabelLogprobs(None), trust_remote_code=True)
    assert type(stage.prompter.tok).__name__ == "RemoteTok"


def test_sglang_refusal_names_allow_pickle(tiny_model, tmp_path):
    """sglang's loader with load_format=safetensors (the default here) finds nothing in a checkpoint whose
    weights are pickles under a name the folder check does not know (a hub repo); its message
    ("Cannot find any model weights") now says which option allows it, as the hf backend's does."""
    from openjev_batch.checkpoint.trust import trust_hint

    opts = BackendOptions(model="org/pickled")
    sglang_says = RuntimeError("Cannot find any model weights with `org/pickled`")
    assert "pass --allow-pickle" in trust_hint(opts, sglang_says)
    assert trust_hint(BackendOptions(model="org/pickled", allow_pickle=True), sglang_says) == ""


@pytest.mark.sglang
def test_sglang_engine_refusal_names_allow_pickle(tiny_model, tmp_path, monkeypatch):
    pytest.importorskip("sglang.srt")
    for k, v in sglang_cpu_env().items():
        monkeypatch.setenv(k, v)
    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    out = tmp_path / "o.parquet"
    r = cli("run", EXAMPLES / "tickets_inline.jsonl", "-m", folder, "-b", "sglang", "--device", "cpu", "-o", out,
            "--no-progress", "--engine-arg", "max_total_tokens=50000")  # fmt: skip
    # (sglang's scheduler logs its own traceback; the product's message is the last line)
    message = " ".join(r.stderr.split("error: ")[-1].split())
    assert r.returncode == 4 and message.startswith("sglang.Engine could not start"), r.stderr
    assert "Cannot find any model weights" in message and "pass --allow-pickle" in message, r.stderr
