"""`openjev-batch eval` over a classifier head (formats nli / text-classification): gold labels matched to the
checkpoint's id2label, the job run with the classifier-head readout (the same probabilities as `classify`),
scored over the head's softmax, and the prompt options that do not apply refused. One tiny random 3-label
Qwen3 classifier (tests/tiny.py) over real CommitmentBank text (examples/nli)."""

import json

import numpy as np
import polars as pl
import pytest
from conftest import EXAMPLES, cli, write_jsonl
from tiny import ID2LABEL

from openjev_batch.evaluation import run as er
from openjev_batch.evaluation import tasks
from openjev_batch.evaluation.metrics import wilson

LABELS = tuple(ID2LABEL.values())  # contradiction, entailment, neutral
CB = EXAMPLES / "nli" / "cb_sample.jsonl"


def no_labels():
    raise AssertionError("labels asked for a label-logprobs format")


def test_gold_labels_by_name_any_case_or_model_index():
    recs = [
        {"premise": "p", "hypothesis": "h", "label": "Entailment"},
        {"premise": "p", "hypothesis": "h2", "label": " NEUTRAL "},
        {"premise": "p", "hypothesis": "h3", "label": 0},
    ]
    items, fmt = tasks.to_items(recs, labels=lambda: LABELS)
    assert fmt == "nli" and tasks.TASKS[fmt].readout == "classifier-head"
    assert [(it.gold, it.category) for it in items] == [
        (1, "entailment"),
        (2, "neutral"),
        (0, "contradiction"),
    ]
    assert items[0].fields == {"premise": "p", "hypothesis": "h"} and items[0].options == LABELS
    text, fmt = tasks.to_items([{"text": "great film", "gold": "neutral"}], labels=lambda: LABELS)
    assert fmt == "text-classification" and text[0].fields == {"text": "great film"} and text[0].gold == 2
    for bad, why in (
        ("not_entailment", "gold label 'not_entailment' (column label) is not one of the model's labels "
                           "(contradiction, entailment, neutral)"),
        (3, "gold label 3 (column label)"),
        (True, "gold label True"),  # a bool is no index
    ):  # fmt: skip
        with pytest.raises(ValueError, match=r"row 1 \(nli\): " + _re(why)):
            tasks.to_items([recs[0], {**recs[1], "label": bad}], labels=lambda: LABELS)
    with pytest.raises(ValueError, match="both label and gold columns"):
        tasks.to_items([{**recs[0], "gold": "entailment"}], labels=lambda: LABELS)
    with pytest.raises(ValueError, match="no gold label: give it in a label"):
        tasks.to_items([{"premise": "p", "hypothesis": "h"}], labels=lambda: LABELS)
    # the model's labels are read only for a classifier-head format
    mmlu = {"question": "q", "subject": "s", "choices": ["a", "b"], "answer": 1}
    assert tasks.to_items([mmlu], labels=no_labels)[1] == "mmlu"


def _re(s: str) -> str:
    import re

    return re.escape(s)


def test_eval_nli_cli_scores_the_classify_probabilities(tiny_classifier, tmp_path):
    rows = [json.loads(x) for x in CB.read_text().splitlines()[:12]]
    rows[1]["gold"] = rows[1]["gold"].upper()  # a name in another case
    rows[2]["gold"] = LABELS.index(rows[2]["gold"])  # the model's index
    bench = write_jsonl(tmp_path / "cb.jsonl", rows)
    out = tmp_path / "ev"
    r = cli("eval", bench, "-o", out, "-m", tiny_classifier, "-b", "hf", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "answers chosen" in r.stdout and "per category" in r.stdout
    rep = json.loads((out / "report.json").read_text())
    df = pl.read_parquet(out / "predictions.parquet")
    gold = [LABELS.index(str(g).lower()) if isinstance(g, str) else g for g in (x["gold"] for x in rows)]
    assert df["id"].to_list() == [x["id"] for x in rows] and df["gold"].to_list() == gold
    assert df["category"].to_list() == [LABELS[g] for g in gold]
    pred = [int(np.argmax(p)) for p in df["probs"]]
    assert df["prediction"].to_list() == pred and df["label"].to_list() == [LABELS[p] for p in pred]
    assert df["correct"].to_list() == [p == g for p, g in zip(pred, gold, strict=True)]
    k = int(df["correct"].sum())
    o = rep["overall"]
    assert (o["n"], o["correct"], o["accuracy"]) == (12, k, k / 12) and o["ci95"] == list(wilson(k, 12))
    assert rep["kind"] == "classification" and rep["dataset"]["labels"] == list(LABELS)
    assert list(rep["predicted_share"]) == list(LABELS)  # every label, a never-predicted one too
    assert sum(rep["predicted_share"].values()) == pytest.approx(1.0)
    for c, v in rep["categories"].items():  # per gold label
        sel = df.filter(pl.col("category") == c)
        assert (v["n"], v["correct"]) == (sel.height, int(sel["correct"].sum()))
    assert df["prompt"][0] == f"Premise: {rows[0]['premise']}\nHypothesis: {rows[0]['hypothesis']}"
    assert (out / "reliability.png").read_bytes()[:4] == b"\x89PNG"
    assert "labels contradiction, entailment, neutral" in (out / "report.md").read_text()
    # the same rows through `classify`: the same probabilities
    cls = tmp_path / "cls.parquet"
    c = cli("classify", bench, "-o", cls, "-m", tiny_classifier, "-b", "hf", "--no-progress")
    assert c.returncode == 0, c.stderr
    want = pl.read_parquet(cls)
    assert want["id"].to_list() == df["id"].to_list()
    for a, b in zip(df["probs"], want["probs"], strict=True):
        assert np.allclose(a.to_list(), b.to_list(), rtol=0, atol=1e-6)


def test_eval_classifier_refuses_prompt_options_and_unknown_labels(tiny_classifier, tiny_model, tmp_path):
    out = tmp_path / "ev"
    base = ["eval", CB, "-o", out, "-m", tiny_classifier, "-b", "hf", "--no-progress"]
    for more, named in (
        (["--shots", "1", "--dev", CB], "--shots/--dev: format nli is scored by a classifier head"),
        (["--system-prompt", "Be brief."], "--system-prompt: format nli is scored by a classifier head"),
    ):
        r = cli(*base, *more)
        assert r.returncode == 4 and named in " ".join(r.stderr.split()), (more, r.stderr)
    rte = cli("eval", EXAMPLES / "nli" / "rte_sample.jsonl", *base[2:])
    msg = " ".join(rte.stderr.split())
    assert rte.returncode == 4 and "gold label 'not_entailment'" in msg, rte.stderr
    assert "(contradiction, entailment, neutral)" in msg
    causal = cli("eval", CB, "-o", out, "-m", tiny_model, "-b", "hf", "--no-progress")
    msg = " ".join(causal.stderr.split())
    assert causal.returncode == 4 and "format nli: it is scored by a classifier head" in msg, causal.stderr
    assert "not a sequence classifier" in msg and "Traceback" not in causal.stderr
    assert not out.exists()  # refused before the folder is made


def test_eval_classifier_api_sample_calibrate_resume_dry_run(tiny_classifier, hf_cls, tmp_path):
    texts = [{"id": f"t{i}", "text": f"review number {i}: {'good' if i % 2 else 'bad'}",
              "label": LABELS[i % 3]} for i in range(16)]  # fmt: skip
    bench = write_jsonl(tmp_path / "text.jsonl", texts)
    base = dict(input=bench, output_dir=tmp_path / "ev", model=str(tiny_classifier), backend="hf",
                progress=False, sample=10, calibrate=0.5)  # fmt: skip
    rep = er.run_eval(er.build_eval_config(**base), backend=hf_cls)
    df = pl.read_parquet(tmp_path / "ev" / "predictions.parquet")
    assert rep["dataset"]["format"] == "text-classification" and df.height == 10 == rep["overall"]["n"]
    assert (
        "question_id" not in df.columns and df["prompt"].to_list()[0] == texts[int(df["id"][0][1:])]["text"]
    )
    t = rep["temperature"]
    assert (t["n_fit"], t["n_eval"]) == (5, 5) and t["after"]["accuracy"] == t["before"]["accuracy"]
    assert rep["mean_label_mass"] is None and rep["mean_confidence_right"] is None  # not a logprobs readout
    again = er.run_eval(er.build_eval_config(**base, resume=True), backend=hf_cls)  # finished: re-scored
    assert again["overall"] == rep["overall"] and er.rescore(tmp_path / "ev")["overall"] == rep["overall"]
    plan = er.dry_run(er.build_eval_config(**{**base, "output_dir": tmp_path / "none"}))
    assert plan.rows == 10 and not (tmp_path / "none").exists()
    shown = er.show_prompt(er.build_eval_config(**{**base, "output_dir": tmp_path / "none"}), 2)
    assert shown.count("═══ row") == 2
