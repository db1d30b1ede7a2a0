"""`openjev-batch eval`: metrics against hand-computed values, benchmark conversion, reproducible sampling,
temperature scaling, and the hand-written MMLU-Pro fixture end to end on the tiny model."""

import hashlib
import json
import math
import re

import numpy as np
import polars as pl
import pytest
from conftest import EXAMPLES, ROOT, cli, start_cli, wait_parts

from openjev_batch.evaluation import build, tasks
from openjev_batch.evaluation import metrics as mx
from openjev_batch.evaluation import run as er

FIX = ROOT / "evals" / "fixtures"
TEST, DEV = FIX / "mmlu_pro_test.jsonl", FIX / "mmlu_pro_validation.jsonl"


def test_wilson_interval_hand_computed():
    # 7/10: p = .7, z² = 3.841459; centre (.7 + .192073)/1.384146 = .644483, half 1.416013·√(.021 + .009604)
    assert mx.wilson(7, 10) == pytest.approx((0.396778, 0.892209), abs=1e-6)
    assert mx.wilson(0, 10) == pytest.approx((0.0, 3.841459 / 13.841459), abs=1e-6)  # upper = z²/(n + z²)
    assert mx.wilson(10, 10) == pytest.approx((10 / 13.841459, 1.0), abs=1e-6)
    assert mx.wilson(0, 0) == (0.0, 1.0)


# Five yes/no answers (P = [p_true, p_false], gold 0 = true): predictions true, true, false, true, true
BIN_P = np.array([[0.95, 0.05], [0.95, 0.05], [0.38, 0.62], [0.62, 0.38], [0.62, 0.38]])
BIN_Y = np.array([0, 1, 1, 0, 1])


def test_binary_brier_ece_nll_hand_computed():
    m = mx.metrics(BIN_P, BIN_Y, binary=True)
    assert (m["n"], m["correct"], m["accuracy"]) == (5, 3, 0.6)
    # Brier: (.05² + .95² + .38² + .38² + .62²)/5 = 1.5782/5
    assert m["brier"] == pytest.approx(0.31564, abs=1e-12)
    # top-label confidences .95 .95 .62 .62 .62: bin (14/15, 1] n=2 acc 1/2 → |.5 − .95| = .45;
    # bin (9/15, 10/15] n=3 acc 2/3 → |.6667 − .62| = .04667; ECE = 2/5·.45 + 3/5·.04667 = .208
    assert m["ece"] == pytest.approx(0.208, abs=1e-12)
    full = [b for b in m["bins"] if b["n"]]
    assert [(b["lo"], b["n"]) for b in full] == [(9 / 15, 3), (14 / 15, 2)]
    # over p_true: .95 ×2 (1 of 2 true: .45), .38 (0 true: .38), .62 ×2 (1 of 2 true: .12) → 1.52/5
    assert m["ece_p_true"] == pytest.approx(0.304, abs=1e-12)
    assert m["nll"] == pytest.approx(-(math.log(0.95 * 0.05 * 0.62 * 0.62 * 0.38)) / 5, abs=1e-12)
    assert m["mean_p_answer_right"] == pytest.approx((0.95 + 0.62 + 0.62) / 3)
    assert m["mean_p_answer_wrong"] == pytest.approx((0.95 + 0.62) / 2)


def test_bins_are_right_closed():
    # bins ((m−1)/15, m/15]: an edge m/15 belongs to bin m (0-based m−1), 0 goes to the first bin
    _, bins = mx.reliability(np.array([0.6, 0.2, 1.0, 0.0, 1 / 15]), np.ones(5))
    assert [(round(b["hi"] * 15), b["n"]) for b in bins if b["n"]] == [(1, 2), (3, 1), (9, 1), (15, 1)]


def test_multiclass_brier_on_ragged_options():
    P = mx.pad([[0.7, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]])
    m = mx.metrics(P, np.array([0, 2]), binary=False)
    # (.3² + .2² + .1²) = .14 and (3·.25² + .75²) = .75 → mean .445
    assert m["brier"] == pytest.approx(0.445, abs=1e-12)
    assert m["accuracy"] == 0.5  # a uniform row answers its first option (as the product does), not C


def test_temperature_fit_has_the_closed_form_optimum():
    # ten answers all at p = .9, 7 right: NLL is least where sigmoid(ln 9 / T) = .7 → T = ln 9 / ln(7/3)
    P = np.tile([0.9, 0.1], (10, 1))
    y = np.array([0] * 7 + [1] * 3)
    t = mx.fit_temperature(P, y)
    assert t == pytest.approx(math.log(9) / math.log(7 / 3), rel=1e-6)
    assert mx.scale(P, t)[0, 0] == pytest.approx(0.7, abs=1e-6)
    assert mx.scale(mx.pad([[0.5, 0.3, 0.2], [1.0]]), 2.0)[1].tolist() == [1.0, 0.0, 0.0]  # padding stays 0


def test_temperature_of_answers_pointing_the_wrong_way_is_flagged_at_the_bound():
    # confident and mostly wrong: NLL keeps falling as T grows, so the fit ends at the search bound
    recs = [
        {"id": str(i), "error": None, "type": "noul", "probs": [0.9, 0.1], "gold": int(i % 10 < 8),
         "label_mass": 1.0, "confidence": 0.5, "answer": "true", "category": "all"}
        for i in range(200)
    ]  # fmt: skip
    t = mx.score(recs, calibrate=0.5)["temperature"]
    assert t["T"] == pytest.approx(mx.T_MAX, rel=1e-3) and t["at_search_bound"] is True


def test_mmlu_pro_fixture_conversion_and_fewshot_block():
    items, fmt = tasks.to_items(tasks.read_records(TEST))
    assert fmt == "mmlu-pro" and len(items) == 8
    dup = next(it for it in items if it.id == "103")
    assert build.option_names(dup.options) == ["10", "16", "25", "32", "64", "32 (2)"] and dup.gold == 3
    dev, _ = tasks.to_items(tasks.read_records(DEV))
    blocks = build.fewshot_blocks({"math", "history"}, dev, 2)
    assert blocks["math"] == (
        "The following are multiple choice questions (with answers) about math.\n\n"
        "Question: What is 3 plus 4?\nOptions:\nA. 5\nB. 6\nC. 7\nD. 8\nAnswer: C\n\n"
        "Question: What is 10 divided by 2?\nOptions:\nA. 2\nB. 5\nC. 8\nD. 20\nAnswer: B"
    )
    assert blocks["history"].count("Question:") == 1  # only one dev row in that category
    rows = build.build_rows(items, build.fewshot_blocks({"math", "biology", "history"}, None, 0))
    r = rows[0]
    assert r["state"] == "The following is a multiple choice question about math."
    assert r["questions"]["answer"]["criteria"] == dict.fromkeys(["54", "56", "58", "64", "48", "72", "49",
                                                                  "63", "65", "57"])  # fmt: skip
    assert (r["gold"], r["category"]) == (1, "math")
    with pytest.raises(ValueError, match="disagrees with answer_index"):
        tasks.to_items([{"question_id": 1, "question": "q", "options": ["a", "b"], "answer": "A",
                      "answer_index": 1, "category": "c"}])  # fmt: skip


def test_mmlu_and_boolq_formats():
    recs = [{"question": f"q{i}", "subject": s, "choices": ["w", "x", "", "x"], "answer": 1}
            for i, s in enumerate(["anatomy", "anatomy", "virology"])]  # fmt: skip
    items, fmt = tasks.to_items(recs)
    assert fmt == "mmlu" and [it.id for it in items] == ["anatomy-0000", "anatomy-0001", "virology-0000"]
    assert build.option_names(items[0].options) == ["w", "x", "(empty)", "x (2)"]
    assert build.fewshot_blocks({"high_school_biology"}, None, 0)["high_school_biology"].endswith(
        "about high school biology."
    )
    b, fmt = tasks.to_items([{"question": "is water wet", "passage": "Water.", "answer": False}])
    assert fmt == "boolq" and b[0].gold == 1 and b[0].question["instructions"] == "Is water wet?"
    n, fmt = tasks.to_items(tasks.read_records(EXAMPLES / "boolq_sample.jsonl"))
    assert fmt == "noul" and len(n) == 20 and n[0].id == "boolq-val-00000" and n[0].gold == 1


@pytest.mark.parametrize(
    "rec, message",
    [
        ({"question": None, "passage": "Water.", "answer": True}, "row 0 (boolq): question: expected text, got null"),
        ({"question": "is it", "passage": 7, "answer": True}, "row 0 (boolq): passage: expected text, got a number (7)"),
        ({"question": 3, "subject": "a", "choices": ["x", "y"], "answer": 0}, "row 0 (mmlu): question: expected text, got a number (3)"),
        ({"question": "q", "subject": "a", "choices": "ab", "answer": 0}, "row 0 (mmlu): choices: expected a list of options, got text"),
        ({"question_id": 1, "question": None, "options": ["a", "b"], "answer": "A", "category": "c"},
         "row 0 (mmlu-pro): question: expected text, got null"),
    ],
)  # fmt: skip
def test_a_benchmark_row_with_a_null_or_mistyped_field_is_a_one_line_error(tmp_path, tiny_model, rec, message):
    """Issue 34.17/18: a null or non-string question or passage ended `eval` in an AttributeError traceback
    (build.py `.strip()`, tasks.py `.split()`); MMLU's `"choices": "ab"` was read as the options a and b."""
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    r = cli("eval", path, "-o", tmp_path / "ev", "-m", tiny_model, "-b", "hf", "--no-progress")
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
    assert message in " ".join(r.stderr.split()), r.stderr


def test_a_benchmark_row_missing_a_column_names_it_in_words():
    """Issue 42: a later row without MMLU's `subject` was `row 1 (mmlu): KeyError: 'subject'`."""
    ok = {"question": "q", "subject": "s", "choices": ["x", "y"], "answer": 0}
    with pytest.raises(ValueError) as e:
        tasks.to_items([ok, {k: v for k, v in ok.items() if k != "subject"}])
    assert str(e.value) == "row 1 (mmlu): no 'subject' field (format mmlu needs it)"


def test_sample_is_seeded_nested_and_in_file_order():
    items, _ = tasks.to_items(tasks.read_records(TEST))
    ids = [it.id for it in items]
    s3 = [it.id for it in tasks.sample(items, 3, 42)]
    assert s3 == [it.id for it in tasks.sample(list(reversed(items)), 3, 42)][::-1]  # file order kept
    assert s3 == sorted(s3, key=ids.index) and len(set(s3)) == 3
    # the documented definition: the N lowest sha256("<seed>:<id>")
    assert set(s3) == set(sorted(ids, key=lambda i: hashlib.sha256(f"42:{i}".encode()).digest())[:3])
    assert set(tasks.sample(items, 2, 42)) < set(tasks.sample(items, 3, 42))
    assert s3 != [it.id for it in tasks.sample(items, 3, 7)]
    assert tasks.sample(items, None, 42) == items


def test_eval_mmlu_pro_fixture_end_to_end(tiny_model, tmp_path):
    out = tmp_path / "ev"
    r = cli(
        "eval", TEST, "-o", out, "-m", tiny_model, "-b", "hf", "--shots", "2", "--dev", DEV, "--no-progress"
    )
    assert r.returncode == 0, r.stderr
    assert "per category" in r.stdout and "overall" in r.stdout and "ECE" in r.stdout
    rep = json.loads((out / "report.json").read_text())
    df = pl.read_parquet(out / "predictions.parquet")
    assert (
        df.height == 8
        and df["error"].null_count() == 8
        and df["question_id"].unique().to_list() == ["answer"]
    )
    # the report's numbers are those of the per-question output
    hits = [max(range(len(p)), key=p.__getitem__) == g for p, g in zip(df["probs"], df["gold"], strict=True)]
    assert rep["overall"]["correct"] == sum(hits) and rep["overall"]["ci95"] == list(mx.wilson(sum(hits), 8))
    assert {c: v["n"] for c, v in rep["categories"].items()} == {"biology": 3, "history": 2, "math": 3}
    assert rep["mean_label_mass"] == pytest.approx(df["label_mass"].mean())
    assert rep["dataset"]["shots_short"] == ["history"] and rep["run"]["backend"] == "hf"
    # one few-shot prefix per category, computed once, in its first branch: computed = Σ(branch − cached)
    prefixes = df.group_by("category").agg(
        pl.col("prefix_tokens").n_unique().alias("k"), (pl.col("cached_tokens") == 0).sum().alias("computed")
    )
    assert prefixes["k"].to_list() == [1, 1, 1] and prefixes["computed"].to_list() == [1, 1, 1]
    assert ((df["cached_tokens"] == 0) | (df["cached_tokens"] == df["prefix_tokens"])).all()
    assert rep["run"]["computed_tokens"] == (df["branch_tokens"] - df["cached_tokens"]).sum()
    assert (out / "reliability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| biology | 3 |" in (out / "report.md").read_text()
    bad = cli("eval", TEST, "-o", tmp_path / "bad", "-m", tiny_model, "-b", "hf", "--shots", "2")
    assert bad.returncode == 4 and "--shots needs --dev" in bad.stderr


def test_eval_yes_no_sample_is_reproducible_with_temperature(tiny_model, hf_backend, tmp_path):
    def run(out: str, seed: int = 3):
        cfg = er.build_eval_config(
            input=EXAMPLES / "boolq_sample.jsonl", output_dir=tmp_path / out, model=str(tiny_model),
            backend="hf", progress=False, sample=10, seed=seed, calibrate=0.5,
        )  # fmt: skip
        return er.run_eval(cfg, backend=hf_backend)

    a, b = run("a"), run("b")
    run("c", seed=4)
    ids = [
        pl.read_parquet(d / "predictions.parquet")["id"].to_list() for d in (tmp_path / "a", tmp_path / "c")
    ]
    assert len(ids[0]) == 10 and ids[0] != ids[1]
    assert [a[k] for k in ("overall", "temperature", "categories")] == [
        b[k] for k in ("overall", "temperature", "categories")
    ]
    assert a["kind"] == "yes/no" and "ece_p_true" in a["overall"] and len(a["overall"]["bins"]) == 15
    t = a["temperature"]
    assert (t["n_fit"], t["n_eval"]) == (5, 5) and t["T"] > 0
    assert t["after"]["accuracy"] == t["before"]["accuracy"]  # scaling never changes the argmax
    # re-scoring the folder without a model gives the same numbers
    assert er.rescore(tmp_path / "a")["overall"] == a["overall"]


def test_eval_refuses_a_used_folder_and_resumes_with_per_sample_columns(tiny_model, hf_backend, tmp_path):
    """lm-eval-style habits: a non-empty output folder is refused without --force; --resume continues the
    unfinished job (or re-scores a finished one); predictions.parquet logs `prediction` and `correct`."""
    out = tmp_path / "ev"
    base = dict(input=TEST, output_dir=out, model=str(tiny_model), backend="hf", progress=False)
    rep = er.run_eval(er.build_eval_config(**base), backend=hf_backend)
    df = pl.read_parquet(out / "predictions.parquet")
    pred = [max(range(len(p)), key=p.__getitem__) for p in df["probs"]]
    assert df["prediction"].to_list() == pred
    assert df["correct"].to_list() == [p == g for p, g in zip(pred, df["gold"], strict=True)]
    assert rep["overall"]["correct"] == sum(df["correct"])
    with pytest.raises(er.ConfigError, match="is not empty; pass --force to overwrite it or --resume"):
        er.run_eval(er.build_eval_config(**base), backend=hf_backend)
    again = er.run_eval(er.build_eval_config(**base, resume=True), backend=hf_backend)
    assert again["overall"] == rep["overall"]  # finished: re-scored, not run again
    with pytest.raises(er.ConfigError, match="holds another job .differs in model: "):  # not this job
        er.run_eval(er.build_eval_config(**{**base, "model": str(tiny_model) + "-other"}, resume=True))
    assert pl.read_parquet(out / "predictions.parquet").equals(df)
    forced = er.run_eval(er.build_eval_config(**base, force=True), backend=hf_backend)
    assert forced["overall"] == rep["overall"]

    # an interrupted job: --resume continues its partial; the same predictions as a run in one go
    cut = tmp_path / "cut"

    # one-row chunks, stopped in the second: the first chunk's part is on disk (a job that wrote nothing
    # leaves no partial, pipeline/output/store.py), so there is a partial to continue
    seen = []

    def stop(*_):
        seen.append(1)
        if len(seen) > 1:
            raise KeyboardInterrupt

    small = {**base, "output_dir": cut, "chunk_rows": 1}
    job = er.build_eval_config(**small)
    with pytest.raises(KeyboardInterrupt):
        er.run_eval(job, backend=hf_backend, on_progress=stop)
    assert (cut / "predictions.parquet.partial").exists() and not (cut / "predictions.parquet").exists()
    with pytest.raises(er.ConfigError, match="is not empty"):
        er.run_eval(job, backend=hf_backend)
    done = er.run_eval(er.build_eval_config(**small, resume=True), backend=hf_backend)
    assert done["overall"] == rep["overall"]
    # the same predictions, but cached_tokens: one-row chunks compute the shared few-shot prefix in each chunk
    # (hf keeps a prefix's cache within a window), where one go reuses it (issue 34.8: cached = what an earlier
    # pass computed); every record of a resumed one-row-chunk job computed its whole prompt
    got = pl.read_parquet(cut / "predictions.parquet")
    assert got.drop("cached_tokens").equals(df.drop("cached_tokens"))
    assert got["cached_tokens"].to_list() == [0] * got.height and df["cached_tokens"].max() > 0
    with pytest.raises(er.ConfigError, match="--force starts again, --resume continues"):
        er.build_eval_config(**base, force=True, resume=True)


def test_eval_sigterm_keeps_the_partial_and_resumes(tiny_model, tmp_path):
    """A scheduler's SIGTERM stops `eval` as it stops `run`: a message, exit 143, the finished chunks kept,
    and `eval --resume` finishes with the same predictions as a run in one go (#16)."""
    import signal

    lines = TEST.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(x) for x in lines]
    big = tmp_path / "big.jsonl"  # 160 questions, one-row chunks: many parts before the job could end
    big.write_text(
        "".join(
            json.dumps({**r, "question_id": 1000 * k + r["question_id"]}) + "\n"
            for k in range(20)
            for r in rows
        )
    )
    out = tmp_path / "ev"
    partial = out / "predictions.parquet.partial"
    args = ["eval", big, "-o", out, "-m", tiny_model, "-b", "hf", "--chunk-rows", "1", "--no-progress"]
    p = start_cli(*args)
    wait_parts(partial, p, 2, timeout=300)
    p.send_signal(signal.SIGTERM)
    _, stderr = p.communicate(timeout=120)
    assert p.returncode == 143, stderr
    assert "terminated (SIGTERM)" in stderr and "--resume" in stderr and "Traceback" not in stderr
    assert not (out / "predictions.parquet").exists() and len(list(partial.glob("part-*.parquet"))) >= 2
    r = cli(*args, "--resume")
    assert r.returncode == 0, r.stderr
    whole = cli(*[str(a).replace(str(out), str(tmp_path / "whole")) for a in args])
    assert whole.returncode == 0, whole.stderr
    a = pl.read_parquet(out / "predictions.parquet").sort("id")
    b = pl.read_parquet(tmp_path / "whole" / "predictions.parquet").sort("id")
    assert a.height == 160 and a.select("id", "probs").equals(b.select("id", "probs"))


def test_eval_output_folder_that_cannot_be_made_is_a_job_error(tiny_model, tmp_path):
    """Hostile trial: `eval -o afile/sub` gave rc 1 and a traceback (NotADirectoryError from mkdir)."""
    (tmp_path / "afile").write_text("x")
    r = cli("eval", TEST, "-o", tmp_path / "afile" / "sub", "-m", tiny_model, "-b", "hf", "--no-progress")
    assert r.returncode == 4 and "afile/sub: not a directory" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_eval_resume_refuses_another_job_naming_what_changed(tiny_model, tmp_path):
    """`eval --resume` of a finished folder with another --sample, seed, shots or format recomputed and
    overwrote the report (issue 26): refused with exit 4, naming the change, the folder left as it was."""
    out = tmp_path / "ev"
    args = ["eval", TEST, "-o", out, "-m", tiny_model, "-b", "hf", "--no-progress"]
    assert cli(*args, "--sample", "5").returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for more, named in (
        (["--sample", "4"], "sample: 5 → 4"),
        (["--sample", "5", "--seed", "7"], "seed: 42 → 7"),
        (["--sample", "5", "--shots", "1", "--dev", DEV], "shots: 0 → 1"),
        (["--sample", "5", "--system-prompt", "Be brief."], "system_prompt sha256"),
        (["--sample", "5", "--dtype", "bfloat16"], "dtype"),
        ([], "sample: 5 → not given"),  # an option left out was printed as Python's `None`
    ):
        r = cli(*args, *more, "--resume")
        assert r.returncode == 4, (more, r.stdout, r.stderr)
        said = " ".join(r.stderr.split())  # rich wraps long messages
        assert "holds another job" in said and named in said and "None" not in said, (more, r.stderr)
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    same = cli(*args, "--sample", "5", "--resume")  # the same job: re-scored, not run again
    assert same.returncode == 0, same.stderr
    assert (out / "predictions.parquet").read_bytes() == before["predictions.parquet"]


def test_eval_resume_refuses_predictions_of_other_weights_under_the_same_path(
    qwen3_tok_dir, tiny_model, hf_backend, tmp_path
):
    """eval_job.json names the model by path, so weights swapped under it were re-scored as if they had
    made the finished predictions; the manifest the predictions carry names it by content (issue 24)."""
    import shutil

    from tiny import make_tiny_qwen3

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    out = tmp_path / "ev"
    base = dict(input=TEST, output_dir=out, model=str(model), backend="hf", progress=False, sample=3)
    er.run_eval(er.build_eval_config(**base), backend=hf_backend)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    other = make_tiny_qwen3(qwen3_tok_dir, tmp_path / "other", seed=1)
    shutil.copy(other / "model.safetensors", model / "model.safetensors")
    with pytest.raises(er.ConfigError, match=r"was made by another job \(differs in model content\)"):
        er.run_eval(er.build_eval_config(**base, resume=True), backend=hf_backend)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_eval_answers_chosen_lists_never_chosen_options(tiny_model, hf_backend, tmp_path):
    """'answers chosen' left out the options nobody picked (issue 26): every letter is listed, 0 included,
    in the summary and report.md."""
    from openjev_batch.evaluation.report import summary_rows

    rep = er.run_eval(
        er.build_eval_config(input=TEST, output_dir=tmp_path / "ev", model=str(tiny_model), backend="hf",
                             progress=False),
        backend=hf_backend,
    )  # fmt: skip
    share = rep["predicted_share"]
    assert len(share) == 10 and 0.0 in share.values()  # 10 options in the fixture; the tiny model skips some
    line = dict(summary_rows(rep))["answers chosen"]
    assert line.count("%") == 10
    zero = next(k for k, v in share.items() if v == 0)
    assert f"{zero} 0.0 % (0)" in line
    assert f"| answers chosen | {line} |" in (tmp_path / "ev" / "report.md").read_text()


def test_eval_logs_the_exact_prompt_and_takes_lm_eval_options(tiny_model, tmp_path):
    """lm-eval habits (issue 26): `--limit N` (the first N questions), `--system-prompt`, `--show-prompt`
    (no -o, nothing written), and predictions.parquet's `prompt`: the ids the job sends, decoded."""
    from transformers import AutoTokenizer

    from openjev_batch import readouts
    from openjev_batch.pipeline.input.read import job_rows

    out = tmp_path / "ev"
    args = ["eval", TEST, "-m", tiny_model, "-b", "hf", "--no-progress", "--system-prompt", "Be brief."]
    shown = cli(*args, "--show-prompt", "1", "--limit", "3")
    assert shown.returncode == 0, shown.stderr
    assert "Be brief." in shown.stdout and shown.stdout.count("═══ row") == 1 and not out.exists()
    r = cli(*args, "-o", out, "--limit", "3")
    assert r.returncode == 0, r.stderr
    df = pl.read_parquet(out / "predictions.parquet")
    first3 = [str(json.loads(x)["question_id"]) for x in TEST.read_text().splitlines()[:3]]
    assert df["id"].to_list() == first3
    rep = json.loads((out / "report.json").read_text())
    assert rep["dataset"]["limit"] == 3 and rep["run"]["tokenization"].startswith("text-slots-natural-cut/1")
    assert rep["run"]["openjev_batch"]
    # the prompt column is the decode of the ids the job builds for the row (prefix + suffix)
    cfg = er.build_eval_config(input=TEST, output_dir=out, model=str(tiny_model), backend="hf",
                               system_prompt="Be brief.")  # fmt: skip
    job = cfg.job(out / "questions.jsonl", out / "predictions.parquet")
    readout = readouts.build(job.readout, job)
    tok = AutoTokenizer.from_pretrained(tiny_model)
    row = next(job_rows(job, readout)[0])[0]
    rp, _ = readout.prompter(tok).build(row)
    want = tok.decode(list(rp.prefix) + list(rp.branches[0].suffix))
    got = df.filter(pl.col("id") == row.id)["prompt"].item()
    assert got == want and got.count("Be brief.") == 1 and got.endswith("Answer:")
    assert "<|im_start|>" in got  # markup decoded with its control tokens, as the model reads it


COMMITTED = ROOT / "evals" / "results" / "mmlu-test-s1000-0shot_smollm2-135m_hf-cpu"


@pytest.mark.slow
def test_committed_eval_results_reproduce(tmp_path):
    """The committed eval runs reproduce (issue 26: after the tokenization change 704445d they differed by
    up to 0.020): 4 questions of the committed MMLU run (their questions.jsonl rows, as eval built them,
    in evals/fixtures), re-scored by `run` with the run's model, backend and dtype, give its probabilities
    within 1e-4 and the very prompt text it logged. A change of the prompt's ids fails here: re-run the
    evals (evals/run_real.sh) and bump TOKENIZATION."""
    from openjev_batch.config import build_config
    from openjev_batch.evaluation.samples import prompt_texts
    from openjev_batch.packaged_models import resolve_model
    from openjev_batch.readouts.label_logprobs.prompt import TOKENIZATION, tokenization

    ran = json.loads((COMMITTED / "report.json").read_text())["run"]
    assert ran["tokenization"] == tokenization(1) and ran["tokenization"].startswith(TOKENIZATION)
    sample = FIX / "mmlu_committed_sample.jsonl"
    out = tmp_path / "again.parquet"
    r = cli("run", sample, "-o", out, "-m", ran["model"], "-b", ran["backend"], "--device", ran["device"],
            "--dtype", ran["dtype"], "--keep", "gold,category", "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    again = pl.read_parquet(out)
    ids = again["id"].to_list()
    committed = pl.read_parquet(COMMITTED / "predictions.parquet").filter(pl.col("id").is_in(ids))
    committed = committed.sort(pl.col("id").map_elements(ids.index, return_dtype=pl.Int64))
    assert len(ids) == 4 and committed["id"].to_list() == ids
    assert again["answer"].to_list() == committed["answer"].to_list()
    for a, b in zip(again["probs"], committed["probs"], strict=True):
        assert np.allclose(a.to_list(), b.to_list(), rtol=0, atol=1e-4), (a, b)
    job = build_config(input=sample, output=tmp_path / "p.parquet", model=resolve_model(ran["model"]),
                       backend="hf", keep=("gold", "category"))  # fmt: skip
    prompts, _ = prompt_texts(job)
    assert [prompts[(i, "answer")] for i in ids] == committed["prompt"].to_list()


@pytest.mark.parametrize(
    "rec, message",
    [
        ({"question": "q", "subject": None, "choices": ["x", "y"], "answer": 0}, "subject: expected text, got null"),
        ({"question": "q", "subject": "a", "choices": ["x", None], "answer": 0}, "choices: option 2 is null, not text"),
        ({"question": "q", "subject": "a", "choices": ["x", True], "answer": 0}, "choices: option 2 is true, not text"),
        ({"question_id": 1, "question": "q", "options": ["a", None], "answer": "A", "category": "c"},
         "options: option 2 is null, not text"),
        ({"question_id": 1, "question": "q", "options": ["a", "b"], "answer": "A", "category": None},
         "category: expected text, got null"),
        ({"question_id": None, "question": "q", "options": ["a", "b"], "answer": "A", "category": "c"},
         "question_id: expected text, got null"),
    ],
)  # fmt: skip
def test_a_null_option_or_subject_is_refused_not_named_none(rec, message):
    """Issue 42.7: `eval` turned a null choice into the option "None" and a null subject into the category
    "None" (one category for every null). Each is refused naming the column; a number stays its text."""
    with pytest.raises(ValueError, match=re.escape(message)):
        tasks.to_items([rec])
    items, _ = tasks.to_items([{"question": "q", "subject": "a", "choices": [4, 2.5], "answer": 0}])
    assert items[0].options == ("4", "2.5")


def test_a_stopped_sampled_eval_keeps_its_chunks_and_resumes_to_the_same_predictions(tiny_model, tmp_path):
    """Issue 48.11: `eval --sample 1000` was one chunk (the readout's 2,048 rows), so a stop after 4 of ~40
    minutes kept nothing ("interrupted: nothing written"). Without --chunk-rows, eval's chunk is a 20th of its
    questions (at least 32): Ctrl-C after the first chunk keeps it, and `--resume` ends with the predictions of
    a run in one go."""
    import signal

    assert [er.eval_chunk_rows(n, 2048) for n in (10, 150, 1000, 14_042, 100_000)] == [32, 32, 50, 703, 2048]
    rows = [json.loads(x) for x in TEST.read_text(encoding="utf-8").splitlines()]
    big = tmp_path / "big.jsonl"  # 160 questions
    big.write_text("".join(json.dumps({**r, "question_id": 1000 * k + r["question_id"]}) + "\n"
                           for k in range(20) for r in rows))  # fmt: skip
    out, whole = tmp_path / "ev", tmp_path / "whole"
    args = ["eval", big, "-m", tiny_model, "-b", "hf", "--sample", "150", "--seed", "7", "--no-progress"]
    p = start_cli(*args, "-o", out)
    wait_parts(out / "predictions.parquet.partial", p, 1, timeout=300)
    p.send_signal(signal.SIGINT)
    _, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, stderr
    assert "interrupted: finished chunks are kept in" in stderr and "Traceback" not in stderr, stderr
    assert not (out / "predictions.parquet").exists()
    r = cli(*args, "-o", out, "--resume")
    assert r.returncode == 0, r.stderr
    r = cli(*args, "-o", whole)
    assert r.returncode == 0, r.stderr
    a = pl.read_parquet(out / "predictions.parquet").sort("id")
    b = pl.read_parquet(whole / "predictions.parquet").sort("id")
    assert a.height == 150 and a.select("id", "probs", "answer").equals(b.select("id", "probs", "answer"))


def test_a_benchmark_answer_that_is_no_index_is_one_plain_line(tmp_path):
    """Issue 48.8: an MMLU row with `answer: null` stopped eval with "int() argument must be a string, a
    bytes-like object or a real number, not 'NoneType'"; it names the row, the column and what it holds."""
    row = {"question": "2+2?", "subject": "math", "choices": ["3", "4", "5", "6"], "answer": None}
    bench = tmp_path / "mmlu.jsonl"
    bench.write_text(json.dumps(row) + "\n")
    r = cli("eval", bench, "-o", tmp_path / "ev", "-m", "M", "-b", "hf", "--format", "mmlu")
    assert r.returncode == 4 and "int()" not in r.stderr and "NoneType" not in r.stderr, r.stderr
    assert "row 0 (mmlu): answer: expected the correct option's index (0, 1, …), got null" in r.stderr, r.stderr
    assert [tasks._index(v, "answer") for v in (1, 2.0, "3")] == [1, 2, 3]
