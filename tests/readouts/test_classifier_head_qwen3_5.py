"""The Qwen3.5 classifier (the openjev NLI cross-encoder's family), dense and MoE, on what the CPU can prove.

sglang's Qwen3.5 model does not run here (its Gated DeltaNet kernels have no CPU build, and the head modules
do not even import on the CPU shims), so the sglang side is proved piecewise: the checkpoint check both
backends run, the weight names the sglang loader maps (its own mapping, read from the installed sglang
source), the registry names of our head classes, and the engine arguments. The pooling is proved on the hf
backend against transformers' own class. Parity of the sglang head with hf: docs/benchmarks.md run 5c
(`cls35` of benchmarks/hybrid_gpu.py at commit 940ca37).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import struct
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from openjev_batch.backends import load_backend
from openjev_batch.backends.base import BackendOptions
from openjev_batch.backends.sglang.heads import OVERRIDES, TEXT_ONLY
from openjev_batch.checkpoint.classifier import read_checkpoint, weight_names
from openjev_batch.errors import BackendError

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: conftest, tiny
from conftest import cli, write_jsonl  # noqa: E402
from tiny import ID2LABEL, make_tiny_qwen3_5_classifier  # noqa: E402

# builds or runs a model, or imports sglang, in this process: minutes under load (issue 48.10), so in the
# full set only (tests/conftest.py)
pytestmark = pytest.mark.heavy

LABELS = tuple(ID2LABEL.values())
HEADS = Path(__file__).parents[2] / "openjev_batch/backends/sglang/heads"
DENSE, MOE = "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"


@pytest.fixture(scope="module")
def ckpts(qwen3_tok_dir, tmp_path_factory):
    """name -> checkpoint folder: dense and MoE classifiers as transformers saves them, the same under the
    multimodal architecture name (the seeds' form) with and without preprocessor_config.json, and a
    multimodal chat model (lm_head, no score head) of each."""
    root = tmp_path_factory.mktemp("qwen3.5-cls")
    out = {}
    for kind, moe, mm in (("dense", False, DENSE), ("moe", True, MOE)):
        out[kind] = make_tiny_qwen3_5_classifier(qwen3_tok_dir, root / kind, moe=moe)
        out[f"{kind}-mm"] = make_tiny_qwen3_5_classifier(
            qwen3_tok_dir, root / f"{kind}-mm", moe=moe, architecture=mm
        )
        out[f"{kind}-mm-pp"] = make_tiny_qwen3_5_classifier(
            qwen3_tok_dir, root / f"{kind}-mm-pp", moe=moe, architecture=mm, preprocessor=True
        )
        out[f"{kind}-chat"] = make_tiny_qwen3_5_classifier(
            qwen3_tok_dir, root / f"{kind}-chat", moe=moe, score=False
        )
    return out


# --------------------------------------------------------------------------- the checkpoint check


@pytest.mark.parametrize(
    "name, arch",
    [
        ("dense", "Qwen3_5ForSequenceClassification"),
        ("dense-mm", DENSE),
        ("dense-mm-pp", DENSE),
        ("moe", "Qwen3_5MoeForSequenceClassification"),
        ("moe-mm", MOE),
        ("moe-mm-pp", MOE),
    ],
)
def test_read_checkpoint_accepts_qwen3_5_classifiers(ckpts, name, arch):
    d = ckpts[name]
    assert (d / "preprocessor_config.json").exists() == name.endswith("-pp")
    ck = read_checkpoint(str(d))
    assert ck.architecture == arch and ck.labels == LABELS
    assert arch in OVERRIDES and arch in TEXT_ONLY  # both backends and the sglang head cover it


def test_a_multimodal_checkpoint_without_a_score_head_is_refused(ckpts, tmp_path):
    for kind, arch in (("dense", DENSE), ("moe", MOE)):
        d = ckpts[f"{kind}-chat"]
        assert json.loads((d / "config.json").read_text())["architectures"] == [arch]
        assert "lm_head.weight" in weight_names(str(d)) and "score.weight" not in weight_names(str(d))
        with pytest.raises(
            BackendError, match=rf"{arch} without a classification head \(its weights have no score.weight\)"
        ):
            read_checkpoint(str(d))
    # the same config with no weights at all says so
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text((ckpts["dense-mm"] / "config.json").read_text())
    with pytest.raises(BackendError, match="no score.weight: no safetensors weights found"):
        read_checkpoint(str(empty))
    # the CLI refuses it once, before any model loads, with the job-error exit code
    src = write_jsonl(
        tmp_path / "in.jsonl", [{"id": "a", "premise": "It rains.", "hypothesis": "It is wet."}]
    )
    for backend in ("hf", "sglang"):
        r = cli(
            "classify",
            src,
            "-o",
            tmp_path / f"o-{backend}.parquet",
            "-m",
            ckpts["moe-chat"],
            "-b",
            backend,
            "--no-progress",
        )
        assert r.returncode == 4, r.stderr
        assert "without a classification head" in r.stderr and "Traceback" not in r.stderr
        assert not (tmp_path / f"o-{backend}.parquet").exists()


def test_weight_names_come_from_the_index_when_sharded(ckpts, tmp_path):
    d = tmp_path / "sharded"
    d.mkdir()
    (d / "config.json").write_text((ckpts["moe-mm"] / "config.json").read_text())
    names = sorted(weight_names(str(ckpts["moe-mm"])))
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {n: "model-00001.safetensors" for n in names}})
    )
    assert read_checkpoint(str(d)).architecture == MOE
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {n: "x" for n in names if n != "score.weight"}})
    )
    with pytest.raises(BackendError, match="without a classification head"):
        read_checkpoint(str(d))


# --------------------------------------------------------------------------- the sglang head's weights


def _header(d: Path) -> dict:
    with (d / "model.safetensors").open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def _sglang_load_weights(cls_name: str) -> tuple[list[tuple], list[tuple[str, str]]]:
    """(stacked_params_mapping, the constant `name.replace(a, b)` pairs) of `cls_name.load_weights` in the
    installed sglang's models/qwen3_5.py, read from its source (it cannot be imported on this CPU)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        pytest.skip("sglang is not installed")
    tree = ast.parse((Path(spec.origin).parent / "srt/models/qwen3_5.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name]
    (fn,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "load_weights"]
    stacked, replaces = None, []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", "") == "stacked_params_mapping" for t in node.targets
        ):
            stacked = ast.literal_eval(node.value)
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "replace"
            and len(node.args) == 2
            and all(isinstance(a, ast.Constant) for a in node.args)
        ):
            replaces.append((node.args[0].value, node.args[1].value))
    assert stacked, f"no stacked_params_mapping in sglang's {cls_name}.load_weights"
    return stacked, replaces


def _sglang_name(name: str, stacked: list[tuple], moe: bool) -> str | None:
    """The parameter name sglang's Qwen3.5 `load_weights` loads checkpoint tensor `name` into (None: skipped),
    following its branches: language model prefix, `.self_attn` dropped, stacked (fused) projections except
    vision and experts, experts (per-expert names → FusedMoE's w13/w2), vision prefix, else the name as is."""
    if "rotary_emb.inv_freq" in name or "mtp" in name:
        return None
    name = name.replace("model.language_model.", "model.").replace(".self_attn", "")
    for param, weight, _ in stacked:
        if weight in name and "visual" not in name and "mlp.experts" not in name:
            return name.replace(weight, param)
    if (
        moe and ".mlp.experts." in name
    ):  # FusedMoE.make_expert_params_mapping: experts.{e}.gate_proj. -> experts.w13_
        head, rest = name.split(".mlp.experts.")
        _, proj, tail = rest.split(".", 2)
        return f"{head}.mlp.experts.{'w2_' if proj == 'down_proj' else 'w13_'}{tail}"
    if "visual" in name:
        return name.replace("attn.qkv.", "attn.qkv_proj.").replace("model.visual.", "visual.")
    return name


@pytest.mark.parametrize("kind, cls_name", [("dense", DENSE), ("moe", MOE)])
def test_sglang_loader_maps_every_checkpoint_weight(ckpts, kind, cls_name):
    d = ckpts[f"{kind}-mm"]
    stacked, replaces = _sglang_load_weights(cls_name)
    # the mapping _sglang_name follows is the one the installed sglang states
    for pair in (("model.language_model.", "model."), (".self_attn", ""), ("model.visual.", "visual.")):
        assert pair in replaces, f"sglang's {cls_name}.load_weights no longer maps {pair}"
    assert ("attn.qkv.", "attn.qkv_proj.") in replaces
    assert {w for _, w, _ in stacked} >= {
        "q_proj",
        "k_proj",
        "v_proj",
        "gate_proj",
        "up_proj",
        "in_proj_qkv.",
        "in_proj_z.",
        "in_proj_b.",
        "in_proj_a.",
    }
    header = _header(d)
    names = set(header) - {"__metadata__"}
    mapped = {n: _sglang_name(n, stacked, kind == "moe") for n in names}
    assert None not in mapped.values()  # nothing in a transformers checkpoint is skipped
    text = {n: m for n, m in mapped.items() if n.startswith("model.language_model.")}
    vision = {n: m for n, m in mapped.items() if n.startswith("model.visual.")}
    assert set(mapped) == set(text) | set(vision) | {"score.weight"}  # no lm_head: a classifier
    assert all(m.startswith("model.") and "language_model" not in m for m in text.values())
    assert all(m.startswith("visual.") for m in vision.values())
    assert mapped["score.weight"] == "score.weight"  # the head's own nn.Linear, loaded by the plain branch
    fused = {
        m
        for m in text.values()
        if any(p in m for p in ("qkv_proj", "gate_up_proj", "in_proj_qkvz", "in_proj_ba"))
    }
    assert any("in_proj_qkvz" in m for m in fused) and any("in_proj_ba" in m for m in fused)
    assert any(".qkv_proj." in m for m in fused) and any("gate_up_proj" in m for m in fused)
    if kind == "moe":
        experts = {m for m in text.values() if ".mlp.experts." in m}
        assert experts == {
            f"model.layers.{i}.mlp.experts.{w}_weight" for i in range(4) for w in ("w13", "w2")
        }
    # the score head's shape is what the sglang head builds: nn.Linear(text hidden, num_labels), no bias
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(d)
    assert header["score.weight"]["shape"] == [cfg.num_labels, cfg.get_text_config().hidden_size] == [3, 32]
    assert "score.bias" not in names


def test_head_classes_register_under_the_names_the_engine_is_told():
    """sglang registers an external class under its class `__name__`: each Qwen3.5 override's module must
    define, in EntryClass, a class of the registry key it replaces, with a bias-free score head and LAST
    pooling without normalisation (the modules cannot be imported here, so their source is read)."""
    for arch in TEXT_ONLY:
        module, key, told = OVERRIDES[arch]
        assert told == key  # the engine is told the name our class is registered under
        tree = ast.parse((HEADS / f"{module}.py").read_text())
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        (entry,) = [n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "EntryClass"]
        assert [e.id for e in entry.value.elts] == [key] and key in classes
        head, base = classes[key].bases
        assert (base.value.id, base.attr) == ("_upstream", key)  # wraps sglang's own class of that name
        assert head.id == "LastTokenScoreHead"  # in front of it in the MRO: its __init__ and forward win
    mixin = ast.parse((HEADS / "_qwen3_5.py").read_text())
    (cls,) = [n for n in mixin.body if isinstance(n, ast.ClassDef) and n.name == "LastTokenScoreHead"]
    src = ast.unparse(cls)
    assert "nn.Linear(text.hidden_size, config.num_labels, bias=False)" in src
    assert "Pooler(pooling_type=PoolingType.LAST, normalize=False)" in src
    assert not any(isinstance(n, ast.Assign) and n.targets[0].id == "EntryClass" for n in mixin.body)


# --------------------------------------------------------------------------- the engine arguments


@pytest.mark.parametrize(
    "name, told",
    [
        ("dense", DENSE),
        ("dense-mm", DENSE),
        ("dense-mm-pp", DENSE),
        ("moe", MOE),
        ("moe-mm", MOE),
        ("moe-mm-pp", MOE),
    ],
)
def test_engine_kwargs_are_text_only_with_the_multimodal_name(ckpts, name, told):
    pytest.importorskip("sglang.srt")  # ServerArgs validates the kwargs
    from openjev_batch.backends.sglang.classifier import engine_kwargs

    ck = read_checkpoint(str(ckpts[name]))
    kw = engine_kwargs(BackendOptions(model=str(ckpts[name]), device="cuda"), ck)
    assert kw["enable_multimodal"] is False and kw["is_embedding"] is True
    assert json.loads(kw["json_model_override_args"]) == {"architectures": [told]}
    opts = BackendOptions(model=str(ckpts[name]), device="cuda", engine_args={"enable_multimodal": True})
    assert engine_kwargs(opts, ck)["enable_multimodal"] is True  # --engine-arg wins


def test_enable_multimodal_is_a_server_arg_and_only_qwen3_5_gets_it(tiny_classifier):
    pytest.importorskip("sglang.srt")
    import dataclasses

    from sglang.srt.server_args import ServerArgs

    from openjev_batch.backends.sglang.classifier import engine_kwargs

    assert "enable_multimodal" in {f.name for f in dataclasses.fields(ServerArgs)}
    kw = engine_kwargs(
        BackendOptions(model=str(tiny_classifier), device="cpu"), read_checkpoint(str(tiny_classifier))
    )
    assert "enable_multimodal" not in kw and "json_model_override_args" not in kw


# --------------------------------------------------------------------------- the hf backend (pooling)


@pytest.mark.parametrize("name", ["dense", "dense-mm", "moe", "moe-mm-pp"])
def test_hf_pools_the_last_token_as_transformers_does(ckpts, name, qwen3_tok, tmp_path):
    """`classify -b hf` on the checkpoint gives the logits of transformers' own class called directly (its
    last-non-pad pooling, batch of one, no normalisation), for rows of different lengths in one batch."""
    import torch

    d = ckpts[name]
    b = load_backend("hf", BackendOptions(model=str(d), device="cpu"), "classifier-head")
    try:
        want = (
            "Qwen3_5MoeForSequenceClassification"
            if name.startswith("moe")
            else "Qwen3_5ForSequenceClassification"
        )
        assert type(b.model).__name__ == want and b.labels == LABELS
        rows = [
            {"id": "a", "premise": "A man is eating pasta.", "hypothesis": "Someone eats."},
            {"id": "b", "premise": "The cat sat on the mat, " * 6, "hypothesis": "A dog is sleeping."},
            {"id": "c", "premise": "Prices rose 3% in May.", "hypothesis": "Inflation went up."},
        ]
        tmpl = r"P: {premise}\nH: {hypothesis}"
        ids = [tuple(qwen3_tok(f"P: {r['premise']}\nH: {r['hypothesis']}")["input_ids"]) for r in rows]
        with torch.no_grad():
            ref = [b.model(input_ids=torch.tensor([x])).logits[0].tolist() for x in ids]
    finally:
        b.close()
    assert len({len(x) for x in ids}) == 3
    assert max(abs(v) for r in ref for v in r) > 0.1  # real, non-trivial logits
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    r = cli(
        "classify",
        src,
        "-o",
        tmp_path / "o.parquet",
        "-m",
        d,
        "-b",
        "hf",
        "--template",
        tmpl,
        "--no-progress",
    )
    assert r.returncode == 0, r.stderr
    out = pq.read_table(tmp_path / "o.parquet").to_pylist()
    assert [x["prompt_tokens"] for x in out] == [len(x) for x in ids]
    got = [v for x in out for v in x["logits"]]
    assert got == pytest.approx([v for x in ref for v in x], abs=1e-5)
    assert [x["label"] for x in out] == [LABELS[max(range(3), key=lambda i: x[i])] for x in ref]


# --------------------------------------------------------------------------- the engine start (CPU, up to the model)


@pytest.mark.parametrize("kind, multimodal", [("dense", "true"), ("dense", None), ("moe", None)])
def test_sglang_start_gets_past_the_image_processor(ckpts, kind, multimodal, tmp_path, monkeypatch):
    """The H200 failure, on sglang's CPU engine: a Qwen3.5 classifier without preprocessor_config.json dies
    in the tokenizer manager loading an image processor when multimodal is on (`--engine-arg
    enable_multimodal=true` forces it back); with the product's default (off) the start gets past it, as far as
    this CPU goes: the scheduler's model class, whose Gated DeltaNet kernels have no CPU build."""
    pytest.importorskip("sglang.srt")
    from conftest import sglang_cpu_env

    monkeypatch.setenv("PYTHONPATH", sglang_cpu_env()["PYTHONPATH"])
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")
    d = ckpts[f"{kind}-mm"]
    assert not (d / "preprocessor_config.json").exists()
    src = write_jsonl(
        tmp_path / "in.jsonl", [{"id": "a", "premise": "It rains.", "hypothesis": "It is wet."}]
    )
    # the CPU build has no FLA kernels for sglang's default mamba radix-cache strategy
    args = ["mamba_radix_cache_strategy=no_buffer", "disable_overlap_schedule=true", "max_total_tokens=16384"]
    if multimodal:
        args.append(f"enable_multimodal={multimodal}")
    eng = [x for a in args for x in ("--engine-arg", a)]
    r = cli("classify", src, "-o", tmp_path / "o.parquet", "-m", d, "-b", "sglang", *eng, "--no-progress")
    assert r.returncode == 4 and not (tmp_path / "o.parquet").exists()
    arch = DENSE if kind == "dense" else MOE
    if multimodal:
        assert "Can't load image processor" in r.stderr
    else:
        assert "Can't load image processor" not in r.stderr
        # the model class, GPU only here; rich wraps the message where its width (a pid, a path) puts it. Since
        # the test shim declares the Qwen3.5 CPU ops sglang's Qwen-VL image processor import reads (issue 33),
        # sglang gets as far as the GDN layers' missing CPU kernels (sgl_kernel.mamba) instead
        said = " ".join(r.stderr.split())
        assert f"{arch} has no SGlang implementation" in said or "No module named 'sgl_kernel.mamba'" in said, said
