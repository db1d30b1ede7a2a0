"""Images on the hf backend (issue 33), with a tiny random Qwen3.5 vision-language model (its vision tower, its
image processor, the real Qwen3 tokenizer; tests/tiny.py) and real image files made with PIL: the prompt's ids
are the checkpoint's own processor's, an answer read through the reused image prefix equals one whole
uncached pass, the same row asked twice answers the same, bad images are row errors naming row and field, a
text-only model is refused at start, `--show-prompt` and `--dry-run` show the images."""

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
from openjev_batch.readouts.label_logprobs import LabelLogprobs
from openjev_batch.readouts.label_logprobs.prompt import ANSWER_LEAD, INSTRUCTIONS, SEP
from openjev_batch.readouts.label_logprobs.questions import shared_questions

QUESTIONS = {
    "color": {"type": "choice", "instructions": "What colour is the picture?", "criteria": {"red": None, "blue": None}},
    "dog": {"type": "noul", "instructions": "Is there a dog?"},
}


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> Path:
    return make_pictures(tmp_path_factory.mktemp("pictures"))


@pytest.fixture(scope="module")
def hf_vl(tiny_vl):
    with load_backend("hf", BackendOptions(model=str(tiny_vl), device="cpu")) as b:
        yield b


def prompts(backend, folder: Path, recs: list[dict]):
    readout = LabelLogprobs(shared_questions(QUESTIONS, "test"), image_root=str(folder))
    prompter = readout.prompter(backend.tokenizer)
    rows = [readout.parse_row(i, r) for i, r in enumerate(recs)]
    built = prompter.build_many(rows)
    assert all(not fails for _, fails in built), built
    return prompter, [rp for rp, _ in built]


def processor_inputs(tiny_vl: Path, tok, user_parts: list, image: Image.Image) -> dict:
    """The checkpoint's own processor (Qwen3.5's Qwen3VLProcessor over its image processor) and template."""
    proc = qwen_vl_processor(tiny_vl, tok)
    msgs = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": user_parts}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    return proc(text=[text + ANSWER_LEAD], images=[image], return_tensors="pt")


def test_ids_are_the_processors_and_the_cached_answer_is_one_whole_pass(tiny_vl, hf_vl, pictures):
    """The prompt's ids equal what the checkpoint's processor makes of the same conversation, and the label
    logprobs read after the reused image prefix equal those of one uncached pass over the processor's
    inputs (positions computed by the model itself)."""
    prompter, (rp,) = prompts(hf_vl, pictures, [{"id": "a", "state": "A photo.", "image": "red.png"}])
    assert len(rp.images) == 1 and rp.images[0].source == "red.png"
    [results] = hf_vl.prefill(Window((rp,), (len(rp.prefix),)))
    image = Image.open(pictures / "red.png").convert("RGB")
    for b, res in zip(rp.branches, results, strict=True):
        question = [s for s in shared_questions(QUESTIONS, "t") if s.qid == b.qid][0]
        user = "Text:\nA photo." + SEP + prompter.base.question_text(question)
        inputs = processor_inputs(tiny_vl, hf_vl.tokenizer, [{"type": "image"}, {"type": "text", "text": user}], image)
        assert tuple(inputs["input_ids"][0].tolist()) == rp.prefix + b.suffix
        hf_vl.model.model.rope_deltas = None
        with torch.inference_mode():
            logits = hf_vl.model(**inputs).logits[0, -1].float()
        hf_vl.model.model.rope_deltas = None
        whole = torch.log_softmax(logits, -1)[list(b.label_ids)].tolist()
        first = b is rp.branches[0]  # the image prefix's pass is counted in its first branch
        assert res.error is None and res.cached_tokens == (0 if first else len(rp.prefix))
        assert max(abs(x - y) for x, y in zip(res.values, whole, strict=True)) < 1e-5, (res.values, whole)


def test_image_parts_in_messages_and_the_same_row_twice(hf_vl, pictures):
    """A content-part image goes where the message has it; the same row twice answers the same; another image
    answers otherwise (the image is read)."""
    conv = [{"role": "user", "content": [{"type": "text", "text": "Look: "}, {"type": "image", "image": "red.png"},
                                         {"type": "text", "text": " what is it?"}]}]  # fmt: skip
    recs = [
        {"id": "a", "state": conv},
        {"id": "b", "state": conv},
        {"id": "c", "state": json.dumps(conv).replace("red.png", "gradient.jpg")},
    ]
    prompter, rps = prompts(hf_vl, pictures, recs)
    text = prompter.tok.decode(list(rps[0].prefix))
    assert "user: Look: <|vision_start|><|image_pad|>" in text and "<|vision_end|> what is it?" in text
    out = hf_vl.prefill(Window(tuple(rps), tuple(len(r.prefix) for r in rps)))
    a, b, c = ([r.values for r in row] for row in out)
    assert rps[0].prefix == rps[1].prefix and rps[0].images[0].sha256 != rps[2].images[0].sha256
    assert a == b
    assert all(r.error is None for row in out for r in row)
    assert max(abs(x - y) for qa, qc in zip(a, c, strict=True) for x, y in zip(qa, qc, strict=True)) > 1e-6


def test_a_job_with_bad_images_writes_row_errors(tiny_vl, pictures, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for f in ("red.png", "gradient.jpg"):
        (folder / f).write_bytes((pictures / f).read_bytes())
    (folder / "zero.png").write_bytes(b"")
    (folder / "cut.png").write_bytes((pictures / "red.png").read_bytes()[:60])
    (tmp_path / "secret.png").write_bytes((pictures / "red.png").read_bytes())
    (folder / "link.png").symlink_to(tmp_path / "secret.png")
    q = json.dumps(QUESTIONS)
    rows = [
        {"id": "ok", "state": "A photo.", "image": "red.png", "questions": q},
        {"id": "two", "state": "Two photos.", "images": ["red.png", "gradient.jpg"], "questions": q},
        {"id": "text", "state": "No photo.", "questions": q},
        {"id": "missing", "state": "x", "image": "nope.png", "questions": q},
        {"id": "zero", "state": "x", "image": "zero.png", "questions": q},
        {"id": "cut", "state": "x", "image": "cut.png", "questions": q},
        {"id": "link", "state": "x", "image": "link.png", "questions": q},
        {"id": "url", "state": "x", "images": ["red.png", "http://example.com/a.png"], "questions": q},
        {"id": "part", "state": [{"role": "user", "content": [{"type": "image", "image": "nope.png"}]}], "questions": q},
    ]
    inp = write_jsonl(folder / "rows.jsonl", rows)
    out = tmp_path / "out.jsonl"
    r = cli("run", inp, "-m", tiny_vl, "--backend", "hf", "--device", "cpu", "-o", out)
    assert r.returncode == 3, r.stderr[-3000:]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    errors = {x["id"]: x["error"] for x in recs}
    assert [errors[k] for k in ("ok", "two", "text")] == [None] * 3
    assert errors["missing"] == "row missing: image: 'nope.png': no such file"
    assert errors["zero"] == "row zero: image: zero.png: empty (0 bytes)"
    assert errors["cut"].startswith("row cut: image: cut.png: corrupt image")
    assert errors["link"].startswith("row link: image: 'link.png': a symlink out of the input's folder")
    assert errors["url"].startswith("row url: images[1]: 'http://example.com/a.png': URLs are not fetched")
    assert errors["part"] == "row part: state.messages[0].content[0].image: 'nope.png': no such file"
    ok = [x for x in recs if x["id"] == "ok"]
    # the first question computed the prefix, every other reused it
    assert [x["cached_tokens"] for x in ok] == [0] + [x["prefix_tokens"] for x in ok[1:]]
    assert all(x["prefix_tokens"] > 0 for x in ok)
    assert "Traceback" not in r.stderr


def test_show_prompt_and_dry_run_show_the_images(tiny_vl, pictures, tmp_path):
    # issue 48.7: a file name holding a newline printed raw over two lines; it is shown escaped
    (pictures / "red\nforged.png").write_bytes((pictures / "red.png").read_bytes())
    inp = write_jsonl(pictures / "show.jsonl", [{"id": "a", "state": "A photo.", "image": "red.png",
                                                 "questions": json.dumps(QUESTIONS)},
                                                {"id": "b", "state": "A photo.", "image": "red\nforged.png",
                                                 "questions": json.dumps(QUESTIONS)}])  # fmt: skip
    r = cli("run", inp, "-m", tiny_vl, "--show-prompt", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "<|vision_start|>⟦image red.png · 96×64 PNG · 6 tokens⟧<|vision_end|>Text:\nA photo." in r.stdout
    assert "⟦image red\\nforged.png · 96×64 PNG" in r.stdout and "\nforged.png" not in r.stdout
    assert "(6 of them for 1 image(s)" in r.stdout and "<|image_pad|> × 6" in r.stdout
    r = cli("run", inp, "-m", tiny_vl, "--dry-run")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "12 in 2 images" in r.stdout


def test_a_text_only_model_is_refused_at_start(tiny_model, pictures, tmp_path):
    inp = write_jsonl(pictures / "text-only.jsonl", [{"id": "a", "state": "x", "image": "red.png",
                                                      "questions": json.dumps(QUESTIONS)}])  # fmt: skip
    r = cli("run", inp, "-m", tiny_model, "--backend", "hf", "--device", "cpu", "-o", tmp_path / "o.jsonl")
    assert r.returncode == 4, r.stderr[-2000:]  # a job-level error, as every refused option
    assert "the input has an image column, but the model" in r.stderr and "takes no images" in r.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_the_start_check_reads_no_weights(tiny_model, tiny_vl):
    """The refusal comes from the tokenizer's template and the image processor, when the readout is built
    (before a backend loads): a text-only Qwen3 is refused, the vision-language model is not."""
    from openjev_batch.errors import ConfigError
    from openjev_batch.readouts.image_prompt import check_model_takes_images

    with pytest.raises(ConfigError, match="its chat template refuses image parts"):
        check_model_takes_images(str(tiny_model))
    check_model_takes_images(str(tiny_vl))


def test_parquet_bytes_are_the_same_image_as_its_file(tiny_vl, hf_vl, pictures, tmp_path):
    """A Parquet binary `image` column: the bytes of red.png give the prompt of the file red.png; a zero-byte
    cell is that row's error and a null cell a text row (exit 3, the other rows answered)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = (pictures / "red.png").read_bytes()
    _, (from_file, from_bytes) = prompts(
        hf_vl, pictures, [{"id": "f", "state": "A photo.", "image": "red.png"}, {"id": "b", "state": "A photo.", "image": raw}]
    )
    assert from_file.prefix == from_bytes.prefix and from_file.images[0].sha256 == from_bytes.images[0].sha256
    table = pa.table(
        {
            "id": ["b", "zero", "none"],
            "state": ["A photo."] * 3,
            "image": pa.array([raw, b"", None], pa.binary()),
            "questions": [json.dumps(QUESTIONS)] * 3,
        }
    )
    pq.write_table(table, tmp_path / "rows.parquet")
    out = tmp_path / "out.jsonl"
    r = cli("run", tmp_path / "rows.parquet", "-m", tiny_vl, "--backend", "hf", "--device", "cpu", "-o", out)
    assert r.returncode == 3, r.stderr[-3000:]
    errors = {x["id"]: x["error"] for x in map(json.loads, out.read_text().splitlines())}
    assert errors == {"b": None, "zero": "row zero: image: <0 bytes>: empty (0 bytes)", "none": None}


def test_answer_leads_and_examples_keep_the_rows_images(hf_vl, pictures):
    """Questions with their own answer lead and worked examples (prompt_variants.py) are asked over the same
    image prefix."""
    qs = {**QUESTIONS, "lead": {"type": "noul", "instructions": "Bright?", "answer_lead": "Verdict:",
                                "examples": [{"text": "A dark room.", "answer": False}]}}  # fmt: skip
    readout = LabelLogprobs(image_root=str(pictures))
    row = readout.parse_row(0, {"id": "a", "state": "A photo.", "image": "red.png", "questions": qs})
    [(rp, fails)] = readout.prompter(hf_vl.tokenizer).build_many([row])
    assert not fails and [b.qid for b in rp.branches] == ["color", "dog", "lead"]
    assert len(rp.images) == 1 and rp.images[0].source == "red.png"
    [res] = hf_vl.prefill(Window((rp,), (len(rp.prefix),)))
    assert all(r.error is None for r in res)
