"""The weights a backend starts on are the model's own (issue 25): a decoy safetensors file beside pickle
weights is not the model's weights (sglang globbed it and ran on uninitialised parameters), and a corrupt
`model.safetensors` is named as corrupt, not as a reason for --allow-pickle. Checked before any engine
starts, so these run on the CPU without sglang's engine."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import EXAMPLES, cli

from openjev_batch.backends.base import BackendOptions
from openjev_batch.checkpoint.trust import check_model_trust
from openjev_batch.checkpoint.weights import check_weights, model_fingerprint, safetensors_weights
from openjev_batch.errors import BackendError


def _decoy_folder(tiny_model, dest):
    """The tiny model's config and tokenizer, pickle weights, and a valid safetensors file of another name."""
    import torch
    from safetensors.torch import save_file

    shutil.copytree(tiny_model, dest, ignore=shutil.ignore_patterns("*.safetensors"))
    torch.save({"w": torch.zeros(2)}, dest / "pytorch_model.bin")
    save_file({"decoy": torch.zeros(2)}, dest / "adapter.safetensors")
    return dest


def _trust(folder, **kw):
    check_model_trust(BackendOptions(model=str(folder), **kw))


def test_a_decoy_safetensors_beside_pickle_weights_is_refused(tiny_model, tmp_path):
    folder = _decoy_folder(tiny_model, tmp_path / "m")
    with pytest.raises(BackendError, match=r"pickle files \(pytorch_model.bin\).*adapter.safetensors is not"):
        _trust(folder)
    _trust(folder, allow_pickle=True)  # the user's call


def test_only_a_stray_safetensors_file_is_no_weights(tiny_model, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    (folder / "model.safetensors").rename(folder / "adapter.safetensors")
    with pytest.raises(BackendError, match="no model weights .*adapter.safetensors is not the model's"):
        _trust(folder)


def test_the_index_decides_which_files_are_weights(tiny_model, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    assert [p.name for p in safetensors_weights(folder)] == ["model-00001-of-00001.safetensors"]
    _trust(folder)  # standard shard names without an index are weights
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(
        BackendError, match="index.json names model-00001-of-00002.safetensors, which is missing"
    ):
        _trust(folder)
    (folder / "model.safetensors.index.json").write_text("{not json")
    with pytest.raises(BackendError, match="index.json cannot be read"):
        _trust(folder)


def test_a_corrupt_model_safetensors_is_named_corrupt(tiny_model, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    w = folder / "model.safetensors"
    w.write_bytes(w.read_bytes()[:-100])  # truncated: the header's offsets run past the end
    with pytest.raises(BackendError, match="not a valid safetensors file .*corrupt or truncated") as e:
        check_weights(folder, allow_pickle=False)
    assert "--allow-pickle" not in str(e.value)
    w.write_bytes(b"\xff" * 64)  # a header length of 2**64 - 1
    with pytest.raises(BackendError, match="not a valid safetensors file"):
        _trust(folder)


@pytest.mark.parametrize("backend", ["hf", "sglang"])
def test_the_cli_refuses_a_decoy_folder_and_a_corrupt_one_on_both_backends(tiny_model, tmp_path, backend):
    decoy = _decoy_folder(tiny_model, tmp_path / "decoy")
    corrupt = tmp_path / "corrupt"
    shutil.copytree(tiny_model, corrupt)
    (corrupt / "model.safetensors").write_bytes(b"garbage" * 20)
    for folder, first in ((decoy, "pickle files (pytorch_model.bin)"), (corrupt, "not a valid safetensors")):
        out = tmp_path / f"{folder.name}.parquet"
        r = cli(
            "run", EXAMPLES / "tickets_inline.jsonl", "-m", folder, "-b", backend, "-o", out, "--no-progress"
        )
        assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
        line = r.stderr.strip().splitlines()[0]
        assert line.startswith("error: ") and first in line, r.stderr
        assert not out.exists() and not (tmp_path / f"{folder.name}.parquet.partial").exists()


def test_the_fingerprint_changes_with_the_weights_not_the_path(tiny_model, qwen3_tok_dir, tmp_path):
    from tiny import make_tiny_qwen3

    a = tmp_path / "a"
    shutil.copytree(tiny_model, a)
    b = tmp_path / "b"
    shutil.copytree(tiny_model, b)
    assert model_fingerprint(str(a)) == model_fingerprint(str(b))  # a copy is the same model
    other = make_tiny_qwen3(qwen3_tok_dir, tmp_path / "seed1", seed=1)  # same shapes, other values
    shutil.copy(other / "model.safetensors", b / "model.safetensors")
    fa, fb = model_fingerprint(str(a)), model_fingerprint(str(b))
    assert fa["weights"][0]["header_sha256"] == fb["weights"][0]["header_sha256"]  # same header…
    assert fa != fb  # …but the small file is hashed whole
    assert model_fingerprint("org/not-cached") == {"hub_id": "org/not-cached", "revision": None}


def test_a_large_weight_file_is_keyed_by_a_sample_of_every_tensor(
    tiny_model, qwen3_tok_dir, tmp_path, monkeypatch
):
    """Above SMALL_FILE the whole-file hash is skipped; a same-shape retrained checkpoint (same size, same
    header: the hostile trial's two 78 MB seeds) still differs in the sampled bytes of its tensors, and a
    copy keys the same."""
    from tiny import make_tiny_qwen3

    from openjev_batch.checkpoint import weights

    monkeypatch.setattr(weights, "SMALL_FILE", 1024)  # the tiny model counts as large
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(tiny_model, a)
    shutil.copytree(tiny_model, b)
    fa = model_fingerprint(str(a))
    assert fa == model_fingerprint(str(b)) and "sha256" not in fa["weights"][0]
    other = make_tiny_qwen3(qwen3_tok_dir, tmp_path / "seed1", seed=1)
    shutil.copy(other / "model.safetensors", b / "model.safetensors")
    fb = model_fingerprint(str(b))
    assert fa["weights"][0]["header_sha256"] == fb["weights"][0]["header_sha256"]
    assert fa["weights"][0]["size"] == fb["weights"][0]["size"]
    assert fa["weights"][0]["tensor_sample_sha256"] != fb["weights"][0]["tensor_sample_sha256"]
