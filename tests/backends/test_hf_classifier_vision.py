"""Image premises for the classifier-head readout on the hf backend (issue 33.3), with a tiny random Qwen3.5
vision-language classifier built here (its vision tower, a `score` head, its image processor, the real Qwen3
tokenizer; tests/tiny.py) and real image files made with PIL: the prompt's ids are the checkpoint's own
processor's, the logits equal one pass of transformers' own model over the processor's inputs, the same row
twice gives the same logits and another image other ones, bad images are row errors naming row and field,
a text-only classifier is refused at start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import cli, write_jsonl
from PIL import Image
from tiny import make_pictures, qwen_vl_processor

from openjev_batch.backends import BackendOptions, load_backend
from openjev_batch.core import Window
from openjev_batch.readouts.classifier_head import ClassifierHead

# builds or runs a model, or imports sglang, in this process: minutes under load (issue 48.10), so in the
# full set only (tests/conftest.py)
pytestmark = pytest.mark.heavy

PREMISE = "A photograph of a scene:"
HYPOTHESIS = "There is a dog."


@pytest.fixture(scope="module")
def tiny_vl_cls(qwen3_tok_dir, tmp_path_factory) -> Path:
    from tiny import make_tiny_qwen3_5_vl

    return make_tiny_qwen3_5_vl(qwen3_tok_dir, tmp_path_factory.mktemp("tiny-qwen3_5-vl-cls"), classifier=True)


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> Path:
    return make_pictures(tmp_path_factory.mktemp("pictures"))


@pytest.fixture(scope="module")
def hf_vl_cls(tiny_vl_cls):
    with load_backend("hf", BackendOptions(model=str(tiny_vl_cls), device="cpu"), kind="classifier-head") as b:
        yield b


def prompts(backend, folder: Path, recs: list[dict]):
    readout = ClassifierHead(backend.labels, image_root=str(folder), image_input=True)
    rows = [readout.parse_row(i, r) for i, r in enumerate(recs)]
    built = readout.prompter(backend.tokenizer).build_many(rows)
    assert all(not fails for _, fails in built), built
    return [rp for rp, _ in built]


def own_pass(tiny_vl_cls: Path, model, tok, text: str, image: Image.Image) -> tuple[list[int], list[float]]:
    """The checkpoint's own processor (Qwen3.5's Qwen3VLProcessor) over `text` with one image, and one pass of
    transformers' own model, positions computed by the model itself: (input ids, logits)."""
    proc = qwen_vl_processor(tiny_vl_cls, tok)
    inputs = proc(text=[text], images=[image], return_tensors="pt")
    model.model.rope_deltas = None
    with torch.inference_mode():
        logits = model(**inputs).logits[0].float().tolist()
    model.model.rope_deltas = None
    return inputs["input_ids"][0].tolist(), logits


def test_logits_are_one_pass_of_the_checkpoints_own_processor_and_model(tiny_vl_cls, hf_vl_cls, pictures):
    """The image goes where the template's premise goes (after the premise's text); the ids equal the
    processor's for the same text, the hypothesis is the branch, and the logits equal transformers' own
    forward over the processor's inputs."""
    (rp,) = prompts(hf_vl_cls, pictures, [{"id": "a", "premise": PREMISE, "hypothesis": HYPOTHESIS, "image": "red.png"}])
    assert len(rp.images) == 1 and rp.images[0].source == "red.png"
    text = f"Premise: {PREMISE}<|vision_start|><|image_pad|><|vision_end|>\nHypothesis: {HYPOTHESIS}"
    ids, logits = own_pass(tiny_vl_cls, hf_vl_cls.model, hf_vl_cls.tokenizer, text, Image.open(pictures / "red.png"))
    assert tuple(ids) == rp.prefix + rp.branches[0].suffix
    assert hf_vl_cls.tokenizer.decode(list(rp.branches[0].suffix)) == f" {HYPOTHESIS}"  # the premise, image: prefix
    assert rp.prefix.count(hf_vl_cls.model.config.image_token_id) == 6  # 96 × 64: 3 × 2 merged patches
    [[res]] = hf_vl_cls.prefill(Window((rp,), (len(rp.prefix),)))
    assert res.error is None and res.prompt_tokens == len(ids)
    assert max(abs(x - y) for x, y in zip(res.values, logits, strict=True)) < 1e-5, (res.values, logits)
    assert max(logits) - min(logits) > 0.1  # the head spreads them: a wrong image or position would show


def test_same_row_twice_and_another_image_beside_text_rows(hf_vl_cls, pictures):
    """In one window with text rows (batched as before): the same image row twice gives the same logits,
    another image other logits, an image row's logits are not a text row's."""
    recs = [
        {"id": "a", "premise": PREMISE, "hypothesis": HYPOTHESIS, "image": "red.png"},
        {"id": "t", "premise": PREMISE, "hypothesis": HYPOTHESIS},
        {"id": "b", "premise": PREMISE, "hypothesis": HYPOTHESIS, "image": "red.png"},
        {"id": "c", "premise": PREMISE, "hypothesis": HYPOTHESIS, "images": ["gradient.jpg"]},
        {"id": "u", "text": "Just text."},
    ]
    rps = prompts(hf_vl_cls, pictures, recs)
    assert [len(r.images) for r in rps] == [1, 0, 1, 1, 0]
    out = hf_vl_cls.prefill(Window(tuple(rps), tuple(len(r.prefix) for r in rps)))
    a, t, b, c, _ = (row[0].values for row in out)
    assert all(row[0].error is None for row in out)
    assert a == b
    assert max(abs(x - y) for x, y in zip(a, c, strict=True)) > 1e-4
    assert max(abs(x - y) for x, y in zip(a, t, strict=True)) > 1e-4


def test_a_classify_job_with_bad_images_writes_row_errors(tiny_vl_cls, pictures, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for f in ("red.png", "gradient.jpg"):
        (folder / f).write_bytes((pictures / f).read_bytes())
    (folder / "zero.png").write_bytes(b"")
    (folder / "cut.png").write_bytes((pictures / "red.png").read_bytes()[:60])
    (tmp_path / "secret.png").write_bytes((pictures / "red.png").read_bytes())
    (folder / "link.png").symlink_to(tmp_path / "secret.png")
    pair = {"premise": PREMISE, "hypothesis": HYPOTHESIS}
    rows = [
        {"id": "ok", **pair, "image": "red.png"},
        {"id": "two", **pair, "images": ["red.png", "gradient.jpg"]},
        {"id": "text", **pair},
        {"id": "missing", **pair, "image": "nope.png"},
        {"id": "zero", **pair, "image": "zero.png"},
        {"id": "cut", **pair, "image": "cut.png"},
        {"id": "link", **pair, "image": "link.png"},
        {"id": "url", **pair, "images": ["red.png", "http://example.com/a.png"]},
        {"id": "both", **pair, "image": "red.png", "images": ["red.png"]},
    ]
    inp = write_jsonl(folder / "rows.jsonl", rows)
    out = tmp_path / "out.jsonl"
    r = cli("classify", inp, "-m", tiny_vl_cls, "--backend", "hf", "--device", "cpu", "-o", out)
    assert r.returncode == 3, r.stderr[-3000:]
    recs = {x["id"]: x for x in map(json.loads, out.read_text().splitlines())}
    assert [recs[k]["error"] for k in ("ok", "two", "text")] == [None] * 3
    assert recs["ok"]["logits"] != recs["text"]["logits"] and recs["ok"]["label"] is not None
    errors = {k: x["error"] for k, x in recs.items()}
    assert errors["missing"] == "row missing: image: 'nope.png': no such file"
    assert errors["zero"] == "row zero: image: zero.png: empty (0 bytes)"
    assert errors["cut"].startswith("row cut: image: cut.png: corrupt image")
    assert errors["link"].startswith("row link: image: 'link.png': a symlink out of the input's folder")
    assert errors["url"].startswith("row url: images[1]: 'http://example.com/a.png': URLs are not fetched")
    assert errors["both"] == "row both: image, images: give one of the two columns, not both"
    assert "Traceback" not in r.stderr


def test_a_template_without_a_premise_has_no_place_for_the_image(tiny_vl_cls, pictures, tmp_path):
    inp = write_jsonl(pictures / "no-premise.jsonl", [{"id": "a", "premise": "p", "hypothesis": "h", "image": "red.png"}])
    out = tmp_path / "out.jsonl"
    r = cli("classify", inp, "-m", tiny_vl_cls, "--device", "cpu", "--template", "Claim: {hypothesis}", "-o", out)
    assert r.returncode == 3, r.stderr[-2000:]
    [rec] = map(json.loads, out.read_text().splitlines())
    assert rec["error"] == "row a: image: the template has no {premise} to put the image in"


def test_a_text_only_classifier_is_refused_at_start(tiny_classifier, pictures, tmp_path):
    inp = write_jsonl(pictures / "text-only.jsonl", [{"id": "a", "premise": "p", "hypothesis": "h", "image": "red.png"}])
    r = cli("classify", inp, "-m", tiny_classifier, "--backend", "hf", "--device", "cpu", "-o", tmp_path / "o.jsonl")
    assert r.returncode == 4, r.stderr[-2000:]
    assert "the input has an image column, but the model" in r.stderr and "takes no images" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "o.jsonl").exists()


def test_where_the_image_goes_in_other_templates_and_text_rows(hf_vl_cls, pictures):
    """A template with the hypothesis first keeps the whole prompt in the prefix (the image must be in it);
    a `text` row's image goes before its text."""
    vision = "<|vision_start|>" + "<|image_pad|>" * 6 + "<|vision_end|>"
    readout = ClassifierHead(hf_vl_cls.labels, "Claim: {hypothesis}\nEvidence: {premise}", image_root=str(pictures))
    rows = [readout.parse_row(0, {"id": "h", "premise": "Look:", "hypothesis": "A dog.", "image": "red.png"}),
            readout.parse_row(1, {"id": "t", "text": "A dog?", "image": "red.png"})]  # fmt: skip
    (h, _), (t, _) = readout.prompter(hf_vl_cls.tokenizer).build_many(rows)
    decode = hf_vl_cls.tokenizer.decode
    assert decode(list(h.prefix)) == f"Claim: A dog.\nEvidence: Look:{vision}" and h.branches[0].suffix == ()
    assert decode(list(t.prefix)) == f"{vision}A dog?" and len(t.images) == 1
