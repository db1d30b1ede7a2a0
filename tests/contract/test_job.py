"""The contract of a job, whatever runs it: readout (label-logprobs, classifier-head) × runner (local
`run_job`, the Python API `Classifier.run`, Ray `run_job_ray`) give the same table and counts, resume each
other's partial output, and refuse the same things with the same errors. All of them are the one loop
(pipeline/loop.py) with another runner, source or sink plugged in; this file is what holds them to it.

A handful of rows, input chunks of 3, one local Ray cluster for the module, one engine actor."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_jsonl

import openjev_batch as ob
from openjev_batch.config import build_config
from openjev_batch.errors import ConfigError, InputFileError, OutputBusyError
from openjev_batch.pipeline.job import run_job, run_job_ray

NOUL = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
TWO = {
    **NOUL,
    "kind": {
        "type": "choice",
        "instructions": "Which kind?",
        "criteria": {"billing": None, "bug": "a defect"},
    },
}
# label-logprobs: answered rows, a row with one bad question, an empty conversation, a duplicate id
LABEL_ROWS = [
    {"id": "t1", "state": "I want my money back for order 7.", "questions": TWO, "channel": "mail"},
    {"id": "t2", "state": "The app crashes on start.", "questions": NOUL, "channel": "chat"},
    {"id": "t3", "state": "Invoice is wrong, twice.", "questions": TWO, "channel": None},
    {"id": "t4", "state": "", "questions": NOUL, "channel": "chat"},
    {
        "id": "t5",
        "state": "Where is my parcel?",
        "channel": "mail",
        "questions": {**NOUL, "u": {"type": "score", "instructions": "?", "criteria": ["only one"]}},
    },
    {"id": "t1", "state": "a duplicate id", "questions": NOUL, "channel": "mail"},
    {
        "id": "t7",
        "state": [{"role": "user", "content": "Cancel my plan."}],
        "questions": TWO,
        "channel": "chat",
    },
]
PREMISES = ["A man is eating pasta.", "The cat sat on the mat.", "Prices rose 3% in May."]
# classifier-head: premise + hypothesis rows, a row without its hypothesis, a duplicate id
HEAD_ROWS = [
    {"id": f"c{i}", "premise": PREMISES[i % 3], "hypothesis": f"Claim {i}.", "gold": ["x", "y"][i % 2]}
    for i in range(6)
] + [{"id": "bad", "premise": "only a premise", "gold": "x"}, {"id": "c1", "text": "dup", "gold": "y"}]


@dataclass
class Case:
    readout: str
    cfg: object  # the local reference job's RunConfig (its output written)
    model: str
    backend: object  # the session's hf backend for this readout
    summary: object
    table: pa.Table
    float_tol: float  # 0: bit for bit; else the hf classifier's batch noise (another padded batch shape)


@pytest.fixture(scope="module", params=["label-logprobs", "classifier-head"])
def case(request, tmp_path_factory) -> Case:
    """The input and the local reference run of one readout (3 input chunks)."""
    label = request.param == "label-logprobs"
    model = str(request.getfixturevalue("tiny_model" if label else "tiny_classifier"))
    backend = request.getfixturevalue("hf_backend" if label else "hf_cls")
    d = tmp_path_factory.mktemp(request.param)
    inp = write_jsonl(d / "in.jsonl", LABEL_ROWS if label else HEAD_ROWS)
    cfg = build_config(
        input=inp, output=d / "ref.parquet", model=model, backend="hf", readout=request.param, device="cpu",
        keep=("channel",) if label else ("gold",), chunk_rows=3, progress=False,
    )  # fmt: skip
    s = run_job(cfg, backend=backend)
    # classifier-head: logits of rows batched with other rows (Ray buckets, the API's one chunk) move by
    # float32 noise (1.1e-6 measured, tests/test_golden.py); label-logprobs is exact
    return Case(request.param, cfg, model, backend, s, pq.read_table(cfg.output), 0 if label else 1e-5)


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module (8 logical CPUs: with 2, the actors starve the read task)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=8, include_dashboard=False, logging_level="warning")
    yield
    ray.shutdown()


def _same(case: Case, got: pa.Table) -> None:
    """`got` is the reference table: columns, types and every value, in input order."""
    want = case.table
    assert got.schema.names == want.schema.names
    assert [f.type for f in got.schema] == [f.type for f in want.schema]
    if not case.float_tol:
        assert got.to_pylist() == want.to_pylist()
        return
    floats = {"probs", "logits", "confidence"} | {n for n in want.schema.names if n.startswith("p_")}
    for a, b in zip(got.to_pylist(), want.to_pylist(), strict=True):
        assert {k: v for k, v in a.items() if k not in floats} == {
            k: v for k, v in b.items() if k not in floats
        }
        for k in floats:
            assert (a[k] is None) == (b[k] is None), k
            if b[k] is not None:
                assert a[k] == pytest.approx(b[k], abs=case.float_tol), k


def _same_counts(case: Case, a, b) -> None:
    keys = ("rows", "questions", "answered", "errors", "prefix_tokens", "branch_tokens", "cached_tokens")
    assert [getattr(a, k) for k in keys] == [getattr(b, k) for k in keys]
    # per question, per option: rows, and their mean confidence (to the readout's float tolerance)
    assert {q: [o[:2] for o in v] for q, v in a.answers.items()} == {
        q: [o[:2] for o in v] for q, v in b.answers.items()
    }
    for q, v in b.answers.items():
        assert [o[2] for o in a.answers[q]] == [None if c is None else pytest.approx(c, abs=case.float_tol)
                                                for _, _, c in v]  # fmt: skip
    assert sorted(e[:2] for e in a.top_errors) == sorted(e[:2] for e in b.top_errors)


def _stop_after_first_part(cfg):
    """An on_progress that stops the job (as Ctrl-C does) once a part of it is on disk."""
    partial = cfg.output.with_name(cfg.output.name + ".partial")

    def stop(branches: int, tokens: int) -> None:
        if any(partial.glob("part-*.parquet")):
            raise KeyboardInterrupt

    return stop


def test_reference_counts(case):
    s = case.summary
    want = (7, 11, 8, 3) if case.readout == "label-logprobs" else (8, 8, 6, 2)
    assert (s.rows, s.questions, s.answered, s.errors) == want
    assert s.resumed_chunks == ()


def test_the_api_gives_the_local_table(case):
    rows = LABEL_ROWS if case.readout == "label-logprobs" else HEAD_ROWS
    with ob.Classifier(case.model, backend="hf", readout=case.readout, device="cpu") as clf:
        got = clf.run(rows, keep=case.cfg.keep, output="arrow")
        s = clf.last_summary
    _same(case, got)
    _same_counts(case, s, case.summary)


def test_ray_gives_the_local_table(case, cluster, tmp_path):
    s = run_job_ray(case.cfg.model_copy(update={"output": tmp_path / "ray.parquet"}))
    _same(case, pq.read_table(tmp_path / "ray.parquet"))
    _same_counts(case, s, case.summary)
    assert s.workers == 1 and s.buckets >= 3 and s.resumed_rows == 0 and s.resumed_chunks == ()


def test_a_local_partial_resumes_on_ray(case, cluster, tmp_path):
    cfg = case.cfg.model_copy(update={"output": tmp_path / "o.parquet"})
    with pytest.raises(KeyboardInterrupt):
        run_job(cfg, backend=case.backend, on_progress=_stop_after_first_part(cfg))
    assert not cfg.output.exists()
    s = run_job_ray(cfg.model_copy(update={"resume": True}))
    _same(case, pq.read_table(cfg.output))
    _same_counts(case, s, case.summary)
    assert s.resumed_chunks == (0,) and s.resumed_rows == 3  # the finished chunk, not run again


def test_a_ray_partial_resumes_locally(case, cluster, tmp_path):
    """Ray stopped after its first bucket: the local runner takes over OUT.partial (the staged rows are
    Ray's own crash safety: the local runner scores those rows again) and writes the reference file.
    One readout: the staging does not depend on it, and a Ray start is the slow part of this file."""
    if case.readout != "label-logprobs":
        pytest.skip("the Ray staging is the same for every readout; label-logprobs covers it")
    cfg = case.cfg.model_copy(update={"output": tmp_path / "o.parquet"})

    def stop(branches: int, tokens: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_job_ray(cfg, on_progress=stop)
    partial = cfg.output.with_name(cfg.output.name + ".partial")
    assert not cfg.output.exists() and any((partial / "ray").glob("r*.parquet"))  # kept for --resume
    s = run_job(cfg.model_copy(update={"resume": True}), backend=case.backend)
    _same(case, pq.read_table(cfg.output))
    _same_counts(case, s, case.summary)
    assert not partial.exists()


def _runners(case):
    """The file runners, each as a function of a config."""
    return {
        "local": lambda cfg: run_job(cfg, backend=case.backend),
        "ray": lambda cfg: run_job_ray(cfg),
    }


def test_every_runner_refuses_another_jobs_partial_and_a_changed_input(case, cluster, tmp_path):
    cfg = case.cfg.model_copy(update={"output": tmp_path / "o.parquet"})
    with pytest.raises(KeyboardInterrupt):
        run_job(cfg, backend=case.backend, on_progress=_stop_after_first_part(cfg))
    partial = cfg.output.with_name(cfg.output.name + ".partial")
    before = sorted(p.name for p in partial.iterdir())
    other = cfg.model_copy(update={"resume": True, "chunk_rows": 4})  # another job's resume key
    for name, run in _runners(case).items():
        with pytest.raises(ConfigError, match=r"was made by a different job \(differs in: chunk_rows\)"):
            run(other)
        assert sorted(p.name for p in partial.iterdir()) == before, name  # nothing deleted or written
    rows = LABEL_ROWS if case.readout == "label-logprobs" else HEAD_ROWS
    edited = write_jsonl(tmp_path / "edited.jsonl", [{**rows[0], "id": "zz"}, *rows[1:]])  # another chunk 0
    changed = cfg.model_copy(update={"resume": True, "input": edited})
    for name, run in _runners(case).items():
        with pytest.raises(ConfigError, match="--resume: the input changed since"):
            run(changed)
        assert any(partial.glob("part-*.parquet")), name  # the partial stays for the right input


def test_every_runner_refuses_a_held_output_and_a_missing_keep_column(case, cluster, tmp_path):
    from openjev_batch.pipeline.output.lock import acquire

    cfg = case.cfg.model_copy(update={"output": tmp_path / "o.parquet"})
    fd = acquire(cfg.output)  # another job writing this output
    try:
        for name, run in _runners(case).items():
            with pytest.raises(OutputBusyError):
                run(cfg)
            assert not cfg.output.with_name(cfg.output.name + ".partial").exists(), name
    finally:
        os.close(fd)
    missing = cfg.model_copy(update={"keep": ("nope",)})
    for run in _runners(case).values():
        with pytest.raises(InputFileError, match="--keep column"):
            run(missing)
    rows = LABEL_ROWS if case.readout == "label-logprobs" else HEAD_ROWS
    with ob.Classifier(case.model, backend="hf", readout=case.readout, device="cpu") as clf:
        with pytest.raises(ConfigError, match="keep column"):
            clf.run(pa.Table.from_pylist([{k: v for k, v in r.items() if k != "questions"} for r in rows[:2]]),
                    NOUL if case.readout == "label-logprobs" else None, keep="nope")  # fmt: skip


def test_eval_on_ray_gives_the_local_predictions_and_report(tiny_model, hf_backend, cluster, tmp_path):
    """`eval --ray` is the eval job with the Ray runner: the predictions and scores of the local eval."""
    from conftest import ROOT

    from openjev_batch.evaluation import run as er
    from openjev_batch.pipeline.runners.ray import RayOptions

    fix = ROOT / "evals" / "fixtures"
    base = dict(input=fix / "mmlu_pro_test.jsonl", dev=fix / "mmlu_pro_validation.jsonl", shots=1,
                model=str(tiny_model), backend="hf", device="cpu", chunk_rows=3, progress=False)  # fmt: skip
    local = er.run_eval(er.build_eval_config(**base, output_dir=tmp_path / "local"), backend=hf_backend)
    on_ray = er.run_eval(er.build_eval_config(**base, output_dir=tmp_path / "ray"), ray=RayOptions())
    a, b = (pq.read_table(tmp_path / d / "predictions.parquet") for d in ("local", "ray"))
    assert a.schema == b.schema and a.to_pylist() == b.to_pylist() and a.num_rows == 8
    assert [on_ray[k] for k in ("overall", "categories")] == [local[k] for k in ("overall", "categories")]
    with pytest.raises(ConfigError, match="pass no backend"):
        er.run_eval(
            er.build_eval_config(**base, output_dir=tmp_path / "both"), backend=hf_backend, ray=RayOptions()
        )


def test_eval_cli_takes_the_ray_options(tiny_model, tmp_path):
    from conftest import ROOT, cli

    r = cli("eval", ROOT / "evals" / "fixtures" / "mmlu_pro_test.jsonl", "-o", tmp_path / "ev", "-m", tiny_model,
            "-b", "hf", "--workers", "2", "--no-progress")  # fmt: skip
    assert r.returncode == 4 and "--ray-address, --workers and --gpus-per-worker need --ray" in r.stderr
