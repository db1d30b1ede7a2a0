"""Images on the sglang backend (issue 33): image rows answered on the real CPU engine with a tiny random Qwen3-VL
(tests/tiny_vl.py: the Qwen3.5 VL hybrid needs sgl_kernel's CPU linear-attention kernels) and PIL images; the
product's prefix ids reach the model unchanged (processor output beside `input_ids`, sglang/images.py), answers
agree with hf's, every question after the first reuses the image prefix from the radix cache, a bad image is
a row error naming the row and the field while the window's other rows are answered."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import sglang_cpu_engine, sglang_cpu_env, write_jsonl
from PIL import Image

from openjev_batch.backends import BackendOptions, load_backend
from openjev_batch.backends.sglang import images as sg_images
from openjev_batch.backends.sglang import requests
from openjev_batch.core import Window
from openjev_batch.readouts.label_logprobs import LabelLogprobs
from openjev_batch.readouts.label_logprobs.questions import shared_questions

QUESTIONS = {
    "color": {"type": "choice", "instructions": "What colour is the picture?", "criteria": {"red": None, "blue": None}},
    "dog": {"type": "noul", "instructions": "Is there a dog?"},
    "kind": {"type": "choice", "instructions": "What kind?", "criteria": {"photo": None, "drawing": None, "scan": None}},
}


def test_image_data_is_one_list_per_request():
    """Text requests beside image ones get `[None]` (a first entry that is not a list would read as one image
    per request); a batch without images sends no image_data at all."""
    item = sg_images.processor_output("pixels", "grid")
    assert item == {"format": "processor_output", "pixel_values": "pixels", "image_grid_thw": "grid"}
    assert sg_images.image_data([None, None]) is None
    assert sg_images.image_data([None, item, item]) == [[None], [item], [item]]
    assert "image_data" not in requests.request([[1]], [[2]], 0, [None])
    assert requests.request([[1], [3]], [[2], [2]], 0, [item, None])["image_data"] == [[item], [None]]
    assert requests.request([[1]], [[2]], 0, [item])["input_ids"] == [[1]]  # the ids as given


def test_a_qwen3_5_hybrid_starts_text_only_unless_images_are_asked_for():
    """Released Qwen3.5/3.6 checkpoints have an image processor, and their text jobs run the GDN fork (multi-item),
    shown exact on a text-only engine: they start text only unless --engine-arg enable_multimodal=true; a dense
    VL checkpoint starts multimodal; a checkpoint without an image processor never does unless asked."""
    hybrid_cg = "Qwen3_5MoeForConditionalGeneration"
    assert not sg_images.starts_multimodal(hybrid_cg, vision=True)
    assert sg_images.starts_multimodal(hybrid_cg, vision=True, asked=True)
    assert sg_images.starts_multimodal("Qwen3VLForConditionalGeneration", vision=True)
    assert not sg_images.starts_multimodal("Qwen3VLForConditionalGeneration", vision=True, asked=False)
    assert not sg_images.starts_multimodal("Qwen3VLForConditionalGeneration", vision=False)


def test_the_job_s_images_decide_the_engine_unless_the_user_did():
    """Issue 41: the input read before the engine starts decides (`job_images`): images start a vision-language
    engine multimodal, a Qwen3.5/3.6 hybrid's too; a text-only job starts text only, a dense VL one too; the
    user's --engine-arg enable_multimodal wins; a checkpoint without an image processor never starts one."""
    hybrid_cg, dense = "Qwen3_5ForConditionalGeneration", "Qwen3VLForConditionalGeneration"
    assert sg_images.starts_multimodal(hybrid_cg, vision=True, job_images=True)
    assert not sg_images.starts_multimodal(hybrid_cg, vision=True, job_images=False)
    assert not sg_images.starts_multimodal(dense, vision=True, job_images=False)
    assert sg_images.starts_multimodal(dense, vision=True, job_images=True)
    assert not sg_images.starts_multimodal(hybrid_cg, vision=True, asked=False, job_images=True)
    assert sg_images.starts_multimodal(hybrid_cg, vision=True, asked=True, job_images=False)
    assert not sg_images.starts_multimodal(hybrid_cg, vision=False, job_images=True)


def test_the_vision_attention_is_one_the_installed_kernels_have():
    """Issue 41: sglang takes FlashAttention-3 for the vision tower on a Hopper card without checking that
    sgl_kernel has it (the kit's slim build does not: the engine died at the first image). FA3 where it
    imports, else triton_attn; the user's --engine-arg mm_attention_backend wins; the CPU keeps sglang's own."""
    no_fa3 = lambda: "ImportError: Can not import FA3 in sgl_kernel"  # noqa: E731
    backend, words = sg_images.choose_vision_attention("cuda", (9, 0), None, no_fa3)
    assert backend == "triton_attn" and "no FA3 in sgl_kernel" in words
    assert sg_images.choose_vision_attention("cuda", (9, 0), None, lambda: None) == ("fa3", "vision attention fa3")
    assert sg_images.choose_vision_attention("cuda", (8, 0), None, no_fa3)[0] == "triton_attn"
    assert sg_images.choose_vision_attention("cuda", (9, 0), "sdpa", no_fa3) == (None, "vision attention sdpa (--engine-arg)")
    assert sg_images.choose_vision_attention("cpu", None, None, no_fa3)[0] is None
    assert sg_images.fa3_imports() is not None  # no FA3 on this machine: the reason, in words


def test_sglang_is_told_the_deepstack_layers_transformers_uses(tiny_vl, tiny_qwen3_vl):
    """Issue 41's device-side assertion: transformers saves a Qwen3.5 VL config without
    `deepstack_visual_indexes` (its Qwen3.5 has no deepstack), sglang reads that as Qwen3-VL's [8, 16, 24] and
    splits the tower's features into deepstack slices it never made. The engine is given [] (transformers'
    Qwen3.5) or the listed layers that exist (Qwen3-VL); a released config that says [] needs nothing; a user's
    override naming layers the tower lacks is refused before the engine starts."""
    from openjev_batch.checkpoint.info import load_config
    from openjev_batch.errors import BackendError

    q35 = load_config(str(tiny_vl))
    assert "deepstack_visual_indexes" not in q35["vision_config"]  # as transformers saves Qwen3.5
    assert sg_images.vision_overrides(q35) == {"vision_config": {"deepstack_visual_indexes": []}}
    assert json.loads(json.dumps(sg_images.vision_overrides(q35, '{"architectures": ["X"]}')))["architectures"] == ["X"]
    released = {**q35, "vision_config": {**q35["vision_config"], "deepstack_visual_indexes": []}}
    assert sg_images.vision_overrides(released) == {}
    vl3 = load_config(str(tiny_qwen3_vl))  # this module's checkpoint: its config names no deepstack layers
    assert sg_images.deepstack_indexes(vl3) == ([8, 16, 24], []) and sg_images.vision_overrides(vl3)
    deep = {**vl3, "vision_config": {**vl3["vision_config"], "depth": 27}}
    assert sg_images.vision_overrides(deep) == {}  # a real Qwen3-VL tower has layers 8, 16, 24
    assert sg_images.vision_overrides({"model_type": "llava", "vision_config": {}}) == {}
    with pytest.raises(BackendError, match="deepstack_visual_indexes=\\[8\\].*1 layers.*device-side assertion"):
        sg_images.vision_overrides(vl3, {"vision_config": {"deepstack_visual_indexes": [8]}})


def test_token_count_follows_the_grid():
    import torch

    assert sg_images.token_count(torch.tensor([[1, 4, 6], [1, 6, 4]]), 2) == 12


def test_row_errors_leave_the_other_rows_to_run():
    """The rows named in `errors` answer with that error on every branch; the others go to `run` as a window of
    their own, each counting its whole prefix, and come back in their places."""
    from openjev_batch.core import BranchResult, BranchSpec, RowPrompt

    rows = tuple(RowPrompt(i, f"r{i}", (1, 2, i), (BranchSpec("q", (9,), (5, 6)),) * 2) for i in range(3))
    seen = []

    def run(w):
        seen.append(w)
        return [[BranchResult((float(r.pos),), 4, 3)] * 2 for r in w.rows]

    out = sg_images.with_row_errors(Window(rows, (3, 0, 0)), {1: "row r1: image: bad"}, run)
    assert [r.pos for r in seen[0].rows] == [0, 2] and seen[0].new_prefix_tokens == (3, 3)
    assert [x.values for x in out[0]] == [(0.0,), (0.0,)] and [x.values for x in out[2]] == [(2.0,), (2.0,)]
    assert [x.error for x in out[1]] == ["row r1: image: bad"] * 2


@pytest.fixture(scope="module")
def tiny_qwen3_vl(qwen3_tok_dir, tmp_path_factory) -> Path:
    """The tiny Qwen3-VL with a config.json that names no `deepstack_visual_indexes`, as transformers saves a
    Qwen3.5 VL one (issue 41): transformers reads Qwen3-VL's default [8, 16, 24] and, with one vision layer,
    captures none; sglang read the same default and died at the first image (on this CPU engine:
    "index_copy_(): … source slice shape: 0", the deepstack slice; a device-side assertion on a GPU) until the
    backend told it the layers that exist (images.vision_overrides). Every engine test below runs it."""
    from tiny_vl import make_tiny_qwen3_vl

    d = make_tiny_qwen3_vl(qwen3_tok_dir, tmp_path_factory.mktemp("tiny-qwen3-vl"))
    cfg = json.loads((d / "config.json").read_text())
    del cfg["vision_config"]["deepstack_visual_indexes"]
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pictures")
    Image.new("RGB", (96, 64), (220, 20, 20)).save(d / "red.png")
    Image.linear_gradient("L").convert("RGB").resize((64, 96)).save(d / "gradient.jpg")
    Image.new("RGB", (128, 128), (20, 20, 220)).save(d / "blue.png")
    return d


@pytest.fixture(scope="module")
def sglang_vl(tiny_qwen3_vl):
    """One CPU engine for this module (closed at its end, so no second engine outlives it)."""
    yield from sglang_cpu_engine(tiny_qwen3_vl, 200_000)


@pytest.fixture(scope="module")
def hf_vl3(tiny_qwen3_vl):
    with load_backend("hf", BackendOptions(model=str(tiny_qwen3_vl), device="cpu")) as b:
        yield b


def _window(backend, folder: Path, recs: list[dict]) -> Window:
    readout = LabelLogprobs(shared_questions(QUESTIONS, "test"), image_root=str(folder))
    prompter = readout.prompter(backend.tokenizer)
    built = prompter.build_many([readout.parse_row(i, r) for i, r in enumerate(recs)])
    assert all(not fails for _, fails in built), built
    rows = tuple(rp for rp, _ in built)
    return Window(rows, tuple(len(r.prefix) for r in rows))


ROWS = [
    {"id": "one", "state": "A photo.", "image": "red.png"},
    {"id": "two", "state": "Two photos.", "images": ["gradient.jpg", "blue.png"]},
    {"id": "text", "state": "No photo at all."},
    {"id": "part", "state": [{"role": "user", "content": [
        {"type": "text", "text": "Look: "}, {"type": "image", "image": "blue.png"}, {"type": "text", "text": " ok?"}]}]},
    # 64 × 96: red.png's token count, so "one"'s ids with another image (its first branch: 44 of 56 tokens
    # cached, the instructions and `<|vision_start|>`; "two"'s gradient.jpg is keyed by sglang's own hash of
    # it, a single image by its sha256: sglang/images.py)
    {"id": "same-ids", "state": "A photo.", "image": "gradient.jpg"},
]  # fmt: skip


def _answer(values) -> list[float]:
    """A branch's answer distribution: its label probabilities renormalised over the labels (a tiny random
    model gives each label ~1e-6 of the whole vocabulary, so raw probabilities would hide any difference)."""
    m = max(values)
    e = [math.exp(v - m) for v in values]
    return [x / sum(e) for x in e]


def _compare(hf_out, sg_out, rows) -> tuple[float, float]:
    """Argmax agreement (asserted); the largest |Δprob| of the answers and |Δlogprob| of the labels."""
    dp = dl = 0.0
    for row, a, b in zip(rows, hf_out, sg_out, strict=True):
        for br, x, y in zip(row.branches, a, b, strict=True):
            assert x.error is None and y.error is None, (x.error, y.error)
            px, py = _answer(x.values), _answer(y.values)
            assert px.index(max(px)) == py.index(max(py)), (row.row_id, br.qid, px, py)
            dp = max(dp, *(abs(p - q) for p, q in zip(px, py, strict=True)))
            dl = max(dl, *(abs(p - q) for p, q in zip(x.values, y.values, strict=True)))
    return dp, dl


@pytest.mark.sglang
@pytest.mark.parametrize("pattern", ["first-branch", "prefix-first"])
def test_image_rows_match_hf_and_reuse_the_image_prefix(sglang_vl, hf_vl3, pictures, pattern, monkeypatch):
    """Both request patterns: answers equal hf's (argmax, max |Δprob| printed and bounded), and every question
    after a row's first reads ≥ 90 % of its prefix, images included, from the radix cache."""
    from openjev_batch.backends.sglang.state import StateBudget

    if pattern == "prefix-first":
        monkeypatch.setattr(sglang_vl, "state_budget", StateBudget(slots=40, per_request=3))
    w = _window(hf_vl3, pictures, ROWS)
    assert w.rows[0].prefix == w.rows[4].prefix and w.rows[0].images != w.rows[4].images
    sglang_vl.engine.flush_cache()
    hf_out, sg_out = hf_vl3.prefill(w), sglang_vl.prefill(w)
    dp, dl = _compare(hf_out, sg_out, w.rows)
    n = sum(len(r.branches) for r in w.rows)
    print(f"{pattern}: sglang vs hf over {n} branches: max |Δprob| {dp:.2e}, max |Δlogprob| {dl:.2e}")
    assert dp < 1e-4 and dl < 1e-3
    # the image is read: equal ids with another image answer otherwise (not one cached image for both)
    for out in (hf_out, sg_out):
        a, b = ([_answer(r.values) for r in out[k]] for k in (0, 4))
        assert max(abs(p - q) for x, y in zip(a, b, strict=True) for p, q in zip(x, y, strict=True)) > 1e-3
    for row, res in zip(w.rows, sg_out, strict=True):
        later = res[1:] if pattern == "first-branch" else res  # prefix-first: a prefix-only request came first
        shares = [r.cached_tokens / len(row.prefix) for r in later]
        print(row.row_id, len(row.prefix), [r.cached_tokens for r in res])
        assert min(shares) >= 0.9, (row.row_id, shares)


@pytest.mark.sglang
def test_the_start_up_line_names_the_multimodal_engine_and_its_vision_attention(sglang_vl):
    """The run summary's start-up says the engine takes images and which vision attention it runs (issue 41:
    on a GPU FA3 or triton_attn, from the installed kernels; the CPU engine keeps sglang's own)."""
    assert "; multimodal, vision attention: sglang's default for this device" in sglang_vl.startup
    assert sglang_vl.images is not None and sglang_vl.multi_item is False


@pytest.mark.sglang
def test_a_changed_image_is_that_rows_error_and_the_rest_run(sglang_vl, pictures, tmp_path):
    """An image file that changed after its row was read is that row's error (the backend reads it again);
    the window's other rows, image and text, are answered."""
    folder = tmp_path / "in"
    folder.mkdir()
    for f in ("red.png", "blue.png"):
        (folder / f).write_bytes((pictures / f).read_bytes())
    w = _window(sglang_vl, folder, [ROWS[0], ROWS[2], {"id": "blue", "state": "Blue.", "image": "blue.png"}])
    Image.new("RGB", (96, 64), (0, 200, 0)).save(folder / "red.png")  # same size, other pixels
    out = sglang_vl.prefill(w)
    assert {r.error for r in out[0]} == {"row one: image: red.png: the file changed since the row was read"}
    assert all(r.error is None and all(math.isfinite(v) for v in r.values) for r in out[1] + out[2])


@pytest.mark.sglang
def test_a_job_with_bad_images_on_sglang(sglang_vl, pictures, tmp_path):
    """A job (run_job on the started engine): the bad-image table is row errors naming the row and the field,
    the good rows are answered and reuse their image prefix (the summary's cached share)."""
    from openjev_batch.config import build_config
    from openjev_batch.pipeline.job import run_job

    folder = tmp_path / "in"
    folder.mkdir()
    for f in ("red.png", "gradient.jpg", "blue.png"):
        (folder / f).write_bytes((pictures / f).read_bytes())
    (folder / "zero.png").write_bytes(b"")
    (folder / "cut.png").write_bytes((pictures / "red.png").read_bytes()[:60])
    (tmp_path / "secret.png").write_bytes((pictures / "red.png").read_bytes())
    (folder / "link.png").symlink_to(tmp_path / "secret.png")
    Image.new("RGB", (50_000, 1)).save(folder / "wide.png")  # refused from the header: 1 : 50,000
    q = json.dumps(QUESTIONS)
    recs = [{**r, "questions": q} for r in ROWS[:3]] + [
        {"id": "missing", "state": "x", "image": "nope.png", "questions": q},
        {"id": "zero", "state": "x", "image": "zero.png", "questions": q},
        {"id": "cut", "state": "x", "image": "cut.png", "questions": q},
        {"id": "link", "state": "x", "image": "link.png", "questions": q},
        {"id": "wide", "state": "x", "image": "wide.png", "questions": q},
    ]
    inp = write_jsonl(folder / "rows.jsonl", recs)
    cfg = build_config(input=inp, output=tmp_path / "o.jsonl", model="-", backend="sglang", progress=False)
    sglang_vl.engine.flush_cache()
    s = run_job(cfg, backend=sglang_vl)
    out = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    errors = {x["id"]: x["error"] for x in out}
    assert [errors[k] for k in ("one", "two", "text")] == [None] * 3
    assert errors["missing"] == "row missing: image: 'nope.png': no such file"
    assert errors["zero"] == "row zero: image: zero.png: empty (0 bytes)"
    assert errors["cut"].startswith("row cut: image: cut.png: corrupt image")
    assert errors["link"].startswith("row link: image: 'link.png': a symlink out of the input's folder")
    assert errors["wide"].startswith("row wide: image:"), errors["wide"]
    print("summary: cached", s.cached_tokens, "of", s.branch_tokens, "branch tokens")
    assert s.cached_tokens > 0


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_closing_one_engine_leaves_another_engine_of_the_process_running(sglang_backend, sglang_vl):
    """sglang's `Engine.shutdown` kills every child of the process: closing this module's engine killed the
    session's engine too, whose next request (`flush_cache`) then waited forever (CI ran out of time on it).
    Last in the module: it closes the module's engine (the fixture's own close is then a no-op)."""
    session, mine = sglang_backend.engine._openjev_children, sglang_vl.engine._openjev_children
    assert session and mine and not session & mine
    sglang_vl.close()
    assert not any(_alive(p) for p in mine)
    assert all(_alive(p) for p in session)
    sglang_backend.check_alive()  # a one-token request on the session's engine


@pytest.mark.sglang
def test_deepstack_layers_the_tower_lacks_are_a_job_error_before_the_engine_starts(tiny_qwen3_vl, pictures, tmp_path):
    """The real command: an input with images starts the engine multimodal (images.py), and a user's override
    naming deepstack layers the one-layer tower lacks, which would kill the engine at the first image with a
    device-side assertion (issue 41), is the job's error (exit 4) naming the cause, before any engine starts."""
    import os

    from conftest import cli

    os.environ.update(sglang_cpu_env())
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "red.png").write_bytes((pictures / "red.png").read_bytes())
    inp = write_jsonl(folder / "rows.jsonl", [{**ROWS[0], "questions": json.dumps(QUESTIONS)}])
    over = 'json_model_override_args={"vision_config": {"deepstack_visual_indexes": [8]}}'
    r = cli("run", inp, "-m", tiny_qwen3_vl, "-b", "sglang", "--device", "cpu", "--no-progress",
            "--engine-arg", over, "-o", tmp_path / "o.jsonl")  # fmt: skip
    assert r.returncode == 4, r.stderr[-2000:]
    assert "deepstack_visual_indexes=[8]" in r.stderr and "device-side assertion" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_a_qwen3_5_classifier_engine_starts_text_only_unless_the_job_has_images(tiny_vl):
    """classify on sglang (issue 41): the Qwen3.5 classifier's engine arguments are text only
    (`enable_multimodal=False`, no image processor loaded) unless it is to take images, then sglang's own
    multimodal start with the `architectures` override kept beside the deepstack one."""
    pytest.importorskip("sglang.srt")
    from openjev_batch.backends.sglang.classifier import engine_kwargs
    from openjev_batch.checkpoint.classifier import Checkpoint

    arch = "Qwen3_5ForSequenceClassification"
    ckpt = Checkpoint(str(tiny_vl), ("entailment", "neutral", "contradiction"), arch, {})
    opts = BackendOptions(model=str(tiny_vl), device="cpu")
    assert engine_kwargs(opts, ckpt)["enable_multimodal"] is False
    kw = engine_kwargs(opts, ckpt, multimodal=True)
    assert "enable_multimodal" not in kw
    assert sg_images.multimodal_kwargs(opts, kw) == "vision attention: sglang's default for this device"
    assert json.loads(kw["json_model_override_args"]) == {
        "architectures": ["Qwen3_5ForConditionalGeneration"], "vision_config": {"deepstack_visual_indexes": []}}  # fmt: skip
