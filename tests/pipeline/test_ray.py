"""Ray Data scale-out on a local CPU cluster: the same output file as the single-machine run, rows that share
a prefix scored on one engine, resume after an interrupt, and the single-machine path never imports Ray."""

import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from conftest import ROOT, cli, sglang_cpu_env, write_jsonl

ray = pytest.importorskip("ray")

from openjev_batch.config import build_config  # noqa: E402
from openjev_batch.pipeline.job import run_job, run_job_ray  # noqa: E402
from openjev_batch.pipeline.progress import Progress  # noqa: E402
from openjev_batch.pipeline.runners.ray import RayOptions  # noqa: E402
from openjev_batch.pipeline.runners.ray.staging import STAGE_DIR, read_stage  # noqa: E402

CONVS = [
    "My card was charged twice for one order, please fix it.",
    "The app crashes on login since the last update.",
    [{"role": "user", "content": "Where is my package?"}, {"role": "assistant", "content": "Let me check."}],
    "Please delete my account and all of my data.",
]
QSETS = [
    {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}},
    {
        "category": {
            "type": "choice",
            "instructions": "Which category fits?",
            "criteria": {"billing": None, "bug": "a software fault", "shipping": None},
        },
        "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high"]},
    },
    {
        "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
        "category": {
            "type": "choice",
            "instructions": "Which category?",
            "criteria": {"billing": None, "bug": None},
        },
    },
]
# 14 rows: 4 conversations asked 3 question sets (rows 4 apart share their whole prefix), kept values of
# mixed types, a row with one bad question, a duplicate id, a bool id and an unreadable line (ids null).
ROWS = [
    {
        "id": f"r{i}",
        "state": CONVS[i % 4],
        "questions": QSETS[i % 3],
        "channel": ["mail", "chat", None][i % 3],
    }
    for i in range(10)
] + [
    {
        "id": "bad-q",
        "state": "x",
        "channel": "mail",
        "questions": {
            "urgency": {"type": "score", "instructions": "?", "criteria": ["only one"]},
            "ok": {"type": "noul", "instructions": "Is it fine?"},
        },
    },
    {"id": "r1", "state": "a duplicate id", "channel": "chat", "questions": QSETS[0]},
    {"id": True, "state": "an id that is no id", "channel": "mail", "questions": QSETS[1]},  # id null
    "{not json",  # an unreadable line: id null too, and not a duplicate of the row above
]


@pytest.fixture(scope="module")
def job(tiny_model, hf_backend, tmp_path_factory):
    """The input and the single-machine reference run (2 input chunks: prefixes recur across them)."""
    d = tmp_path_factory.mktemp("scaleout")
    inp = write_jsonl(d / "in.jsonl", ROWS)
    cfg = build_config(
        input=inp,
        output=d / "ref.parquet",
        model=str(tiny_model),
        backend="hf",
        device="cpu",
        keep=("channel",),
        chunk_rows=8,
        progress=False,
    )
    return cfg, run_job(cfg, backend=hf_backend)


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module: 8 logical CPUs on this 2-core machine (with 2 logical CPUs,
    two 1-CPU actors starve the read task and the job hangs). The sglang CPU environment is set first so
    the actors and sglang's subprocesses inherit it."""
    os.environ.update(sglang_cpu_env())
    ray.init(num_cpus=8, num_gpus=1, include_dashboard=False, logging_level="warning")  # a logical GPU
    yield
    ray.shutdown()


def _same_file(a, b) -> None:
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.schema == tb.schema
    assert ta.to_pylist() == tb.to_pylist()  # every value, probs bit for bit, in input order


def test_cli_ray_two_workers_writes_the_single_machine_file(job, tmp_path):
    cfg, ref = job
    out = tmp_path / "out.parquet"
    r = cli(
        "run", cfg.input, "-o", out, "-m", cfg.model, "-b", "hf", "--device", "cpu", "--keep", "channel",
        "--chunk-rows", "8", "--no-progress", "--ray", "--workers", "2",
    )  # fmt: skip
    assert r.returncode == 3, r.stderr  # exit code of a run with row errors, as without --ray
    assert "cache hit rate" in r.stderr
    _same_file(out, cfg.output)
    assert not out.with_name(out.name + ".partial").exists()


@pytest.fixture(scope="module")
def last_night(job, hf_backend, tmp_path_factory):
    """Last night's output (single machine, other chunking) of the input with r3 edited and r6 new tonight;
    it carries the answer keys `--reuse` copies by."""
    cfg, _ = job
    d = tmp_path_factory.mktemp("last-night")
    rows = [dict(r) if isinstance(r, dict) else r for r in ROWS]
    rows[3]["state"] = "Please close my account."
    del rows[6]
    last = cfg.model_copy(update={"input": write_jsonl(d / "in.jsonl", rows), "output": d / "last.parquet",
                                  "chunk_rows": 5})  # fmt: skip
    run_job(last, backend=hf_backend)
    return last.output


def _answers(path) -> list[dict]:
    """Every column but the token counts (how a row was batched: a copied row keeps last night's)."""
    t = pq.read_table(path)
    return t.drop_columns([c for c in t.column_names if c.endswith("_tokens")]).to_pylist()


# tonight: r3 and r6 computed, and the 4 rows with a row error (never copied); the other 8 rows copied
REUSED = 8


def test_cli_ray_reuse_equals_a_full_recompute(job, last_night, tmp_path):
    """`--reuse` on Ray: the loop takes the copied rows out of each chunk before the runner sees it (the
    chunks have gaps), and merges them back in input order."""
    cfg, _ = job
    out = tmp_path / "out.parquet"
    r = cli(
        "run", cfg.input, "-o", out, "-m", cfg.model, "-b", "hf", "--device", "cpu", "--keep", "channel",
        "--chunk-rows", "8", "--no-progress", "--ray", "--workers", "2", "--reuse", last_night,
    )  # fmt: skip
    assert r.returncode == 3, r.stderr  # the row errors, as without --reuse
    assert f"reused {REUSED} · computed {14 - REUSED}" in r.stderr
    assert _answers(out) == _answers(cfg.output)


@pytest.mark.parametrize("grouping", ["blocks", "groupby"])
def test_ray_equals_single_machine_and_keeps_prefixes_together(job, cluster, tmp_path, grouping):
    cfg, ref = job
    out = tmp_path / "ray.parquet"
    s = run_job_ray(
        cfg.model_copy(update={"output": out}), RayOptions(workers=2, bucket_rows=4, grouping=grouping)
    )
    _same_file(out, cfg.output)
    assert (s.rows, s.questions, s.answered, s.errors) == (14, 21, 17, 4)
    assert (s.rows, s.questions, s.answered, s.errors) == (ref.rows, ref.questions, ref.answered, ref.errors)
    assert (s.prefix_tokens, s.branch_tokens, s.cached_tokens) == (
        ref.prefix_tokens,
        ref.branch_tokens,
        ref.cached_tokens,
    )
    # Locality: a prefix is prefilled once per input chunk in both runs (the hf backend prefills every prefix
    # change in a window, counted in its first branch: cached 0). Scattered rows would prefill a prefix on
    # each engine that saw it, and count fewer cached tokens.
    assert s.warm_tokens == ref.warm_tokens == 0
    assert s.workers == 2 and 2 <= s.buckets <= 14
    for rec in pq.read_table(out).to_pylist():
        if rec["error"] is None:
            assert rec["cached_tokens"] in (0, rec["prefix_tokens"]) and rec["prefix_tokens"] > 0


def test_ray_engine_actors_that_reserve_a_gpu(job, cluster, tmp_path):
    """Regression (found on the H200): Ray 2.60's map_batches refuses batch_size=None when the engine actors
    request GPUs. The cluster declares one logical GPU; the hf backend on the CPU ignores it."""
    cfg, _ = job
    out = tmp_path / "gpu.parquet"
    s = run_job_ray(cfg.model_copy(update={"output": out}), RayOptions(workers=2, gpus_per_worker=0.5))
    _same_file(out, cfg.output)
    assert s.workers == 2


def test_ray_interrupted_then_resumed_equals_uninterrupted(job, cluster, tmp_path):
    cfg, _ = job
    out = tmp_path / "ray.parquet"
    rcfg = cfg.model_copy(update={"output": out})

    def stop(branches: int, tokens: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_job_ray(rcfg, RayOptions(workers=2, bucket_rows=4), on_progress=stop)
    stage = out.with_name(out.name + ".partial") / STAGE_DIR
    staged = set(read_stage(stage, ["_pos"]).column("_pos").to_pylist())
    assert not out.exists() and 0 < len(staged) < 14
    live = (
        Progress()
    )  # the live counts (#20): rows counted up front, staged rows done, the rest as they arrive
    s = run_job_ray(
        rcfg.model_copy(update={"resume": True}), RayOptions(workers=2, bucket_rows=4), progress=live
    )
    assert s.resumed_rows == len(staged)
    assert (live.total_rows, live.rows_done, live.resumed_rows) == (14, 14, len(staged))
    assert live.records_done == live.total_records == s.questions
    _same_file(out, cfg.output)
    assert not stage.parent.exists()


def test_ray_reuse_interrupted_then_resumed_equals_a_full_recompute(job, last_night, cluster, tmp_path):
    """An interrupted Ray job with `--reuse`, resumed: its staged rows are placed by position in chunks
    with gaps, and the copied rows are neither run nor counted as resumed."""
    cfg, _ = job
    out = tmp_path / "ray.parquet"
    rcfg = cfg.model_copy(update={"output": out, "reuse": (last_night,)})

    def stop(branches: int, tokens: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_job_ray(rcfg, RayOptions(workers=2, bucket_rows=1), on_progress=stop)
    staged = set(
        read_stage(out.with_name(out.name + ".partial") / STAGE_DIR, ["_pos"]).column("_pos").to_pylist()
    )
    assert 0 < len(staged) < 14 - REUSED
    s = run_job_ray(rcfg.model_copy(update={"resume": True}), RayOptions(workers=2, bucket_rows=1))
    assert (s.reused_rows, s.resumed_rows, s.shipped_rows) == (REUSED, len(staged), 14 - REUSED - len(staged))
    assert _answers(out) == _answers(cfg.output)


def test_single_machine_path_does_not_import_ray():
    code = (
        "import sys, openjev_batch.cli, openjev_batch.pipeline.job, openjev_batch.pipeline.runners.ray; "
        "sys.exit(any(m == 'ray' or m.startswith('ray.') for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


@pytest.mark.sglang
def test_ray_sglang_engines_reuse_each_prefix(job, cluster, sglang_backend, tmp_path):
    """Two actors with the real CPU sglang.Engine: the answers of the single-machine sglang run, and each
    prefix (per input chunk) computed by one engine only. The backend prefills a prefix with its first
    branch, so that branch alone may miss the radix cache; every other branch of the prefix hits it."""
    cfg, _ = job
    scfg = cfg.model_copy(update={"backend": "sglang", "engine_args": {"max_total_tokens": 65_536}})
    ref = run_job(scfg.model_copy(update={"output": tmp_path / "ref.parquet"}), backend=sglang_backend)
    out = tmp_path / "ray.parquet"
    s = run_job_ray(scfg.model_copy(update={"output": out}), RayOptions(workers=2, bucket_rows=4))
    a, b = pq.read_table(tmp_path / "ref.parquet").to_pylist(), pq.read_table(out).to_pylist()
    assert (s.answered, s.errors) == (ref.answered, ref.errors) == (17, 4)
    assert [(r["id"], r["question_id"], r["answer"], r["error"]) for r in a] == [
        (r["id"], r["question_id"], r["answer"], r["error"]) for r in b
    ]
    index = {  # first row of an id (the answered one); the unreadable line has none
        r["id"]: i for i, r in reversed(list(enumerate(ROWS))) if isinstance(r, dict)
    }
    seen_rows, groups, missed = set(), set(), 0
    for x, y in zip(a, b, strict=True):
        if y["error"] is not None:
            continue
        assert max(abs(p - q) for p, q in zip(x["probs"], y["probs"], strict=True)) <= 1e-5
        assert y["branch_tokens"] == x["branch_tokens"]
        row = index[y["id"]]
        groups.add((str(ROWS[row]["state"]), row // cfg.chunk_rows))  # a prefix within an input chunk
        if y["cached_tokens"] < y["prefix_tokens"]:
            missed += 1
            assert row not in seen_rows, (y, "only the first branch of a row may miss the cache")
        seen_rows.add(row)
    assert 0 < missed <= len(groups)  # scattered rows would miss once per engine that saw their prefix


def test_ray_classify_equals_single_machine(cluster, tiny_classifier, hf_cls, tmp_path):
    """The classifier-head readout through the same Ray runner: the single-machine file (logits to the
    hf classifier's batch noise), row errors in place, the same counts and token totals."""
    premises = ["A man is eating pasta.", "The cat sat on the mat.", "Prices rose 3% in May."]
    rows = [
        {"id": f"c{i}", "premise": premises[i % 3], "hypothesis": f"Claim {i}.", "gold": ["x", "y"][i % 2]}
        for i in range(10)
    ] + [{"id": "bad", "premise": "only a premise"}, "{not json", {"id": "c1", "text": "dup"}]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    cfg = build_config(
        input=src, output=tmp_path / "ref.parquet", model=str(tiny_classifier), backend="hf",
        readout="classifier-head", device="cpu", keep=("gold",), chunk_rows=6, progress=False,
    )  # fmt: skip
    ref = run_job(cfg, backend=hf_cls)
    out = tmp_path / "ray.parquet"
    s = run_job_ray(cfg.model_copy(update={"output": out}), RayOptions(workers=2, bucket_rows=2))
    a, b = pq.read_table(cfg.output), pq.read_table(out)
    assert a.schema == b.schema
    key = ("id", "label", "gold", "prompt_tokens", "error")
    assert [tuple(r[k] for k in key) for r in a.to_pylist()] == [
        tuple(r[k] for k in key) for r in b.to_pylist()
    ]
    assert [r["probs"] for r in b.to_pylist()] == [
        None if r["probs"] is None else pytest.approx(r["probs"], abs=1e-5) for r in a.to_pylist()
    ]
    assert (s.rows, s.questions, s.answered, s.errors) == (ref.rows, ref.questions, ref.answered, ref.errors)
    assert (s.rows, s.answered, s.errors) == (13, 10, 3)
    assert s.branch_tokens == ref.branch_tokens and 0 < s.unique_tokens < s.branch_tokens
