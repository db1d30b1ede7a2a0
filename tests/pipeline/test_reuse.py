"""`run --reuse PREVIOUS` (pipeline/reuse.py, output/previous.py): answer keys, rows copied from earlier
outputs, and a reused output equal to a full recompute on the answer columns (hf, the tiny model)."""

import hashlib
import json
import re
import shutil

import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import EXAMPLES, cli, start_cli, wait_parts, write_jsonl
from PIL import Image

import openjev_batch as ob
from openjev_batch.pipeline.reuse import job_key, row_key
from openjev_batch.readouts.label_logprobs import LabelLogprobs
from openjev_batch.readouts.label_logprobs.questions import load_questions

QS = EXAMPLES / "ticket_questions.yaml"
# every column but the token counts (how a row was batched) and the kept ones
ANSWERS = ["id", "question_id", "type", "options", "probs", "answer", "p_true", "score", "confidence",
           "label_mass", "error", "chosen", "order_spread", "answer_key"]  # fmt: skip
TICKETS = [json.loads(line) for line in (EXAMPLES / "tickets.jsonl").read_text().splitlines()[:8]]


def night2() -> list[dict]:
    """Night 1's 8 tickets with one kept value changed (still copied), one text edited and one row new."""
    rows = [dict(r) for r in TICKETS]
    rows[1]["channel"] = "phone"
    rows[4]["state"] = "My parcel never arrived and tracking says it is lost."
    return [*rows, {"id": "T900", "channel": "email", "state": "Please refund my last invoice."}]


def run(inp, out, model, *extra):
    args = ("run", inp, "-q", QS, "-m", model, "-b", "hf", "--keep", "channel", "--no-progress", "-o", out)
    r = cli(*args, *map(str, extra))
    assert r.returncode == 0, r.stderr
    return r


def computed_tokens(stderr: str) -> int:
    return int(re.search(r"computed tokens\s*│\s*([\d,]+)", stderr).group(1).replace(",", ""))


# -- the key, without a model --------------------------------------------------------------------------
def test_the_row_key_is_the_content_not_the_place_or_kept_columns(tmp_path):
    r = LabelLogprobs(load_questions(QS), keep=("channel",), image_root=str(tmp_path))
    rec = {"id": "a", "state": "hello", "channel": "email"}
    k = row_key("job", r.parse_row(0, rec))
    assert k == row_key("job", r.parse_row(7, {**rec, "channel": "chat"}))  # other place, other kept value
    assert k != row_key("other job", r.parse_row(0, rec))
    for changed in ({"state": "hello!"}, {"id": "b"}, {"state": [{"role": "user", "content": "hello"}]}):
        assert row_key("job", r.parse_row(0, {**rec, **changed})) != k, changed
    own = LabelLogprobs(None, keep=("channel",))  # each row's own questions are its content
    q = {"q": {"type": "noul", "instructions": "Is it a greeting?"}}
    q2 = {"q": {"type": "noul", "instructions": "Is it a question?"}}
    assert row_key("job", own.parse_row(0, {**rec, "questions": q})) != row_key(
        "job", own.parse_row(0, {**rec, "questions": q2})
    )
    for name, colour in (("a.png", "red"), ("b.png", "blue")):  # an image by its bytes, not its name
        Image.new("RGB", (8, 8), colour).save(tmp_path / name)
    img = row_key("job", r.parse_row(0, {**rec, "image": "a.png"}))
    assert img != k and img != row_key("job", r.parse_row(0, {**rec, "image": "b.png"}))
    shutil.copy(tmp_path / "b.png", tmp_path / "a.png")
    assert row_key("job", r.parse_row(0, {**rec, "image": "a.png"})) == row_key(
        "job", r.parse_row(0, {**rec, "image": "b.png"})
    )
    assert row_key("job", r.unreadable(0, "not JSON")) is None  # a row error is never copied


def test_the_job_key_covers_every_option_that_changes_a_number_and_nothing_else():
    base = {"model content": {"files": ["x"]}, "backend": "hf", "dtype": "auto", "device": "cpu",
            "readout": "label-logprobs", "chunk_rows": 2048, "limit": None, "keep": []}  # fmt: skip
    k = job_key(base)
    for same in ({"chunk_rows": 3}, {"limit": 5}, {"keep": ["channel"]}, {"tokenizer": "X"}, {"reused": [1]}):
        assert job_key({**base, **same}) == k, same
    # the readout's manifest entries (system prompt, calibration, debias order, the prompt layout of
    # issue 46 once merged) and the engine's resume key (backend, dtype, device) each change it
    for flip in ({"model content": {"files": ["y"]}}, {"backend": "sglang"}, {"dtype": "bfloat16"},
                 {"device": "cuda"}, {"system_prompt_sha256": "ab"}, {"debias_order": 2},
                 {"calibration_sha256": "cd"}, {"layout": "transcript"}):  # fmt: skip
        assert job_key({**base, **flip}) != k, flip


# -- end to end (hf, the tiny model) -------------------------------------------------------------------
@pytest.fixture(scope="module")
def nights(tiny_model, tmp_path_factory):
    d = tmp_path_factory.mktemp("nights")
    one, two = write_jsonl(d / "one.jsonl", TICKETS), write_jsonl(d / "two.jsonl", night2())
    run(one, d / "one.parquet", tiny_model, "--chunk-rows", "3")
    full = run(two, d / "full.parquet", tiny_model)
    return d, full


def test_a_reused_output_equals_a_full_recompute(nights, tiny_model):
    d, full = nights
    r = run(d / "two.jsonl", d / "inc.parquet", tiny_model, "--reuse", d / "one.parquet", "--chunk-rows", "4")
    assert "reused 7 · computed 2" in r.stderr
    inc, want = pl.read_parquet(d / "inc.parquet"), pl.read_parquet(d / "full.parquet")
    assert inc.select(ANSWERS).equals(want.select(ANSWERS))
    assert inc["channel"].to_list() == want["channel"].to_list()  # the kept values are tonight's
    assert computed_tokens(r.stderr) < computed_tokens(full.stderr) / 3  # 2 of 9 rows computed
    doc = json.loads(pq.read_schema(d / "inc.parquet").metadata[b"openjev_batch.manifest"])
    sha = hashlib.sha256((d / "one.parquet").read_bytes()).hexdigest()
    assert doc["manifest"]["reused"] == [{"file": str(d / "one.parquet"), "sha256": sha, "rows": 7}]


def test_resume_with_reuse_equals_the_full_run(nights, tiny_model):
    d, _ = nights
    out = d / "resumed.parquet"
    args = ("run", d / "two.jsonl", "-q", QS, "-m", tiny_model, "-b", "hf", "--keep", "channel",
            "--no-progress", "-o", out, "--reuse", d / "one.parquet", "--chunk-rows", "1")  # fmt: skip
    p = start_cli(*args)
    wait_parts(d / "resumed.parquet.partial", p, n=3)
    p.kill()
    p.communicate()
    r = cli(*args, "--resume")
    assert r.returncode == 0, r.stderr
    assert "chunks resumed" in r.stderr and "reused 7 · computed 2" in r.stderr  # counted across the parts
    want = pl.read_parquet(d / "full.parquet")
    assert pl.read_parquet(out).select(ANSWERS).equals(want.select(ANSWERS))


def test_a_jsonl_output_is_reused_and_a_csv_one_is_said_why_not(nights, tiny_model):
    d, _ = nights
    run(d / "one.jsonl", d / "one.jsonl.out.jsonl", tiny_model)
    run(d / "one.jsonl", d / "one.csv", tiny_model)
    job = d / "job.yaml"  # the earlier outputs as a job file's list, as a nightly job keeps them
    job.write_text(f"reuse:\n  - {d / 'one.csv'}\n  - {d / 'one.jsonl.out.jsonl'}\n")
    r = run(d / "two.jsonl", d / "j.parquet", tiny_model, "--config", job)
    assert "reused 7 · computed 2" in r.stderr
    assert f"note: nothing reused from {d / 'one.csv'}: it is not a Parquet or JSONL output" in r.stderr
    want = pl.read_parquet(d / "full.parquet")
    assert pl.read_parquet(d / "j.parquet").select(ANSWERS).equals(want.select(ANSWERS))


def _other_model(tiny_model, d):
    other = d / "other-model"
    if not other.exists():
        shutil.copytree(tiny_model, other)
        cfg = json.loads((other / "config.json").read_text())
        (other / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": 1e-5}))
    return other


def _other_questions(d):
    q = d / "q2.yaml"
    q.write_text(QS.read_text().replace("best describes the main issue", "best names the main issue"))
    return q


FLIPS = {  # what changes, the extra arguments, what the note names
    "model": (lambda m, d: ("-m", _other_model(m, d)), "model content"),
    "questions": (lambda m, d: ("-q", _other_questions(d)), "questions_sha256"),
    "system prompt": (lambda m, d: ("--system-prompt", "Answer tersely."), "system_prompt_sha256"),
    "debias order": (lambda m, d: ("--debias-order", "2"), "debias_order"),
    "dtype": (lambda m, d: ("--dtype", "bfloat16"), "dtype"),
}


@pytest.mark.parametrize("flip", list(FLIPS))
def test_nothing_is_reused_across_a_changed_model_questions_or_option(flip, nights, tiny_model):
    d, _ = nights
    extra, named = FLIPS[flip]
    out = d / f"flip-{flip.replace(' ', '-')}.parquet"
    r = run(d / "one.jsonl", out, tiny_model, "--reuse", d / "one.parquet", *extra(tiny_model, d))
    assert "reused 0 · computed 8" in r.stderr
    note = re.search(r"note: nothing reused from .*one\.parquet: it was made by another model or with other options "
                     r"\(differs in: ([^)]*)\)", r.stderr)  # fmt: skip
    assert note is not None and named in note.group(1).split(", "), r.stderr


def test_the_python_api_reuses_a_returned_table(tiny_model):
    def frame(rows):  # a conversation as its JSON text, as a DataFrame column holds it (one type)
        return pl.DataFrame([{**r, "state": r["state"] if isinstance(r["state"], str) else json.dumps(r["state"])}
                             for r in rows])  # fmt: skip

    df1, df2 = frame(TICKETS), frame(night2())
    with ob.Classifier(str(tiny_model), backend="hf", device="cpu") as clf:
        first = clf.run(df1, QS, keep="channel")
        full = clf.run(df2, QS, keep="channel")
        assert clf.last_summary.reused_rows is None  # none asked for
        inc = clf.run(df2, QS, keep="channel", reuse=first)
        s = clf.last_summary
        assert (s.rows, s.reused_rows, s.reuse_notes) == (9, 7, ())
        assert inc.select(ANSWERS).equals(full.select(ANSWERS))
        again = clf.run(df2, QS, keep="channel", reuse=[inc.drop("answer_key")])
        assert clf.last_summary.reused_rows == 0 and "no answer_key column" in clf.last_summary.reuse_notes[0]
        assert again.select(ANSWERS).equals(full.select(ANSWERS))
