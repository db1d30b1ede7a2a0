"""A finished output says what made it (issue 24): the job's manifest in the Parquet metadata or, beside a
text output, in OUT.manifest.json; `--resume` of a finished output reads it (the real CLI, tiny model)."""

import hashlib
import json

import pyarrow.parquet as pq
import pytest
from conftest import ROOT, cli, write_jsonl

from openjev_batch.pipeline.output.manifest import KEY, confirm_finished
from openjev_batch.pipeline.output.store import OutputStore

Q = {"u": {"type": "noul", "instructions": "Urgent?"}}
ROWS = [{"id": f"r{i}", "state": f"ticket number {i}", "questions": Q, "team": i % 2} for i in range(5)]


@pytest.fixture(scope="module")
def done(tiny_model, tmp_path_factory):
    """One finished job per output kind: (input, args, {suffix: output}) with the same options."""
    d = tmp_path_factory.mktemp("finished")
    inp = write_jsonl(d / "in.jsonl", ROWS)
    args = ["-m", tiny_model, "-b", "hf", "--chunk-rows", "2", "--keep", "team", "--no-progress"]
    outs = {}
    for suffix in ("parquet", "jsonl"):
        out = d / f"o.{suffix}"
        r = cli("run", inp, "-o", out, *args)
        assert r.returncode == 0, r.stderr
        outs[suffix] = out
    return inp, args, outs


def test_the_parquet_output_holds_the_jobs_manifest(done):
    inp, _, outs = done
    doc = json.loads(pq.read_schema(outs["parquet"]).metadata[KEY])
    m = doc["manifest"]
    assert m["backend"] == "hf" and m["chunk_rows"] == 2 and m["keep"] == ["team"] and m["limit"] is None
    assert m["model content"]  # the model by content (checkpoint/weights.py)
    assert "job_id" not in m  # named the parts, which are gone
    # the input by content: the sha256 of every byte the reader read, i.e. of the whole JSONL file
    assert doc["input_sha256"] == hashlib.sha256(inp.read_bytes()).hexdigest()
    assert (doc["rows"], doc["records"]) == (5, 5)
    assert pq.read_table(outs["parquet"]).num_rows == 5  # the rows themselves are unchanged by it


def test_a_jsonl_output_has_a_sidecar_describing_it(done):
    _, _, outs = done
    out = outs["jsonl"]
    side = out.with_name("o.jsonl.manifest.json")
    doc = json.loads(side.read_text())
    parquet = json.loads(pq.read_schema(outs["parquet"]).metadata[KEY])
    assert doc["manifest"] == parquet["manifest"]  # the same job, whatever the output format
    assert doc["input_sha256"] == parquet["input_sha256"]
    assert doc["output"] == {
        "bytes": out.stat().st_size,
        "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
    }
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["id"] for x in lines] == [f"r{i}" for i in range(5)]  # the output holds rows only
    assert not any("manifest" in x or "model content" in x for x in lines)


def test_resume_of_a_finished_output_of_the_same_job_has_nothing_to_do(done):
    inp, args, outs = done
    for out in outs.values():
        before = (out.read_bytes(), out.stat().st_mtime_ns)
        r = cli("run", inp, "-o", out, *args, "--resume")
        assert r.returncode == 0, r.stderr
        assert "is finished: this job made it from this input" in r.stderr and "nothing to do" in r.stderr
        assert r.stdout == ""  # no summary: nothing ran
        assert (out.read_bytes(), out.stat().st_mtime_ns) == before
        left = sorted(p.name for p in out.parent.iterdir() if p.name.startswith(out.name))
        assert left == sorted([out.name] + ([f"{out.name}.manifest.json"] if out.suffix == ".jsonl" else []))


def test_resume_of_a_finished_output_with_another_option_or_input_is_refused(done, tmp_path):
    inp, args, outs = done
    for out in outs.values():
        before = out.read_bytes()
        r = cli("run", inp, "-o", out, *args, "--chunk-rows", "3", "--resume")
        assert r.returncode == 4, r.stderr
        err = " ".join(r.stderr.split())
        assert f"{out.name} was made by a different job (differs in: chunk_rows)" in err, err
        assert out.read_bytes() == before and not out.with_name(out.name + ".partial").exists()
    other = write_jsonl(tmp_path / "in.jsonl", ROWS[:4] + [{**ROWS[4], "state": "edited"}])
    r = cli("run", other, "-o", outs["parquet"], *args, "--resume")
    assert r.returncode == 4 and "the input changed since" in " ".join(r.stderr.split()), r.stderr


def test_stdout_output_carries_no_manifest(tiny_model, tmp_path):
    inp = write_jsonl(tmp_path / "in.jsonl", ROWS[:2])
    r = cli("run", inp, "-o", "-", "-m", tiny_model, "-b", "hf", "--no-progress")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["id"] for x in lines] == ["r0", "r1"] and all("error" in x for x in lines)
    assert "openjev_batch" not in r.stdout and "model content" not in r.stdout
    assert not (ROOT / "-.manifest.json").exists()  # the command's folder: nothing beside "-"


def test_a_sidecar_that_is_not_ours_is_refused_and_left(tmp_path):
    out = tmp_path / "o.jsonl"
    side = tmp_path / "o.jsonl.manifest.json"
    side.write_text('{"mine": 1}\n')
    with pytest.raises(Exception, match="is not a manifest of openjev-batch"):
        OutputStore(out)
    assert side.read_text() == '{"mine": 1}\n' and sorted(p.name for p in tmp_path.iterdir()) == [side.name]


def test_a_sidecar_beside_a_changed_output_is_not_taken_for_it(tmp_path):
    """An output edited after its job (or replaced by another file) no longer matches its sidecar: resume
    refuses instead of saying there is nothing to do."""
    from openjev_batch.errors import ConfigError

    out = tmp_path / "o.jsonl"
    with OutputStore(out, manifest={"m": 1}) as s:
        s.begin_chunk(0, 1, 1, "aa")
        s.write(0, [{**dict.fromkeys(s.schema.names), "id": "r0", "error": "x"}])
        s.close()
    out.write_text(out.read_text().replace('"r0"', '"r9"'))
    with pytest.raises(ConfigError, match="changed since its job wrote it"):
        confirm_finished(out, {"m": 1, "keep": []}, iter(["aa"]))


def test_resume_compares_the_tokenizer_once_the_model_has_loaded(tmp_path):
    """Issue 34.2: the manifest names the tokenizer class, known once the model loaded (`amend`); a resume
    opens the partial without it, then refuses when this run's tokenizer is another (its tokens differ)."""
    from openjev_batch.errors import ConfigError

    out = tmp_path / "o.parquet"
    with OutputStore(out, manifest={"m": 1}) as s:
        s.amend("tokenizer", "Qwen2Tokenizer")
        s.begin_chunk(0, 1, 1, "aa")
        s.write(0, [{**dict.fromkeys(s.schema.names), "id": "r0", "error": "x"}])
    with OutputStore(out, manifest={"m": 1}, resume=True) as s:  # the same job: continued
        s.amend("tokenizer", "Qwen2Tokenizer")
    with OutputStore(out, manifest={"m": 1}, resume=True) as s, pytest.raises(ConfigError, match="tokenizer"):
        s.amend("tokenizer", "TokenizersBackend")
