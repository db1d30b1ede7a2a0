"""pipeline/compare.py and `openjev-batch compare`: what moved between two outputs, per question (outputs
written here as `run` and `classify` write them; no model)."""

import json

import polars as pl
import pytest
from conftest import cli
from scipy.stats import chi2_contingency

from openjev_batch.pipeline.compare import compare
from openjev_batch.pipeline.drift import psi

CAT = ["billing", "outage", "other"]


def run_output(path, answers: dict[str, str], conf=0.5, abstain=None, errors=(), multi=None):
    """A `run` output: one `category` choice record per row (and a `tags` multi record where `multi` gives
    the row's chosen labels)."""
    recs = []
    for rid, a in answers.items():
        err = f"row {rid}: broken" if rid in errors else None
        recs.append({"id": rid, "question_id": "category", "type": "choice", "options": CAT,
                     "answer": None if err else a, "confidence": conf, "label_mass": 0.9, "error": err,
                     "chosen": None, "abstain": None if abstain is None else rid in abstain})  # fmt: skip
        if multi is not None:
            recs.append({"id": rid, "question_id": "tags", "type": "multi", "options": ["a", "b"], "answer": None,
                         "confidence": None, "label_mass": None, "error": None, "chosen": multi[rid],
                         "abstain": None})  # fmt: skip
    pl.DataFrame(recs, schema_overrides={"abstain": pl.Boolean}).write_parquet(path)
    return path


def test_shares_statistics_and_changed_rows_per_question(tmp_path):
    old_ans = {f"r{i}": "billing" if i < 6 else "outage" for i in range(10)}
    new_ans = {**old_ans, "r0": "other", "r1": "outage", "r10": "billing"}  # 2 changed, 1 new row
    old = run_output(tmp_path / "old.parquet", old_ans, conf=0.8, abstain={"r9"},
                     multi={r: ["a"] for r in old_ans})  # fmt: skip
    new = run_output(tmp_path / "new.parquet", new_ans, conf=0.6, abstain={"r8", "r9"}, errors={"r2"},
                     multi={r: ["a", "b"] if r == "r3" else ["a"] for r in new_ans})  # fmt: skip
    c = compare(old, new)
    cat, tags = c.questions
    assert (cat.question, tags.question) == ("category", "tags")
    d = cat.drift
    assert d.options == ("billing", "outage", "other")
    assert d.old == (6, 4, 0) and d.new == (4, 5, 1)  # r2's error is no answer; r10 is billing
    assert d.psi == pytest.approx(psi([6, 4, 0], [4, 5, 1]))
    assert d.p_value == pytest.approx(chi2_contingency([[6, 4, 0], [4, 5, 1]], correction=False).pvalue)
    assert cat.answered == (10, 10) and cat.common == 9  # r2 errored in new, r10 only in new
    assert (cat.changed, cat.changed_ids) == (2, ("r0", "r1"))
    assert cat.confidence == (pytest.approx(0.8), pytest.approx(0.6))
    assert cat.abstain_rate == (pytest.approx(0.1), pytest.approx(0.2))
    assert tags.drift.old == (10, 0) and tags.drift.new == (11, 1)  # chosen labels, counted each
    assert (tags.changed, tags.changed_ids) == (1, ("r3",))
    doc = c.to_dict()
    assert doc["questions"][0]["drift"]["old_share"] == [0.6, 0.4, 0.0]
    assert json.dumps(doc, allow_nan=False)


def test_a_classify_output_is_the_question_label(tmp_path):
    def out(path, labels):
        pl.DataFrame({"id": [str(i) for i in range(len(labels))], "label": labels,
                      "confidence": [0.5] * len(labels), "error": [None] * len(labels)},
                     schema_overrides={"error": pl.String}).write_parquet(path)  # fmt: skip
        return path

    c = compare(out(tmp_path / "a.parquet", ["yes", "yes", "no"]), out(tmp_path / "b.parquet", ["no", "no", "no"]))
    (q,) = c.questions
    # no options column: the labels in the order the new output, then the old one, first gives them
    assert q.question == "label" and q.drift.options == ("no", "yes")
    assert q.drift.old == (1, 2) and q.drift.new == (3, 0)
    assert q.changed == 2 and c.drifted() == ["label"]


def test_the_command_exits_5_over_max_drift_with_table_json_and_plot(tmp_path):
    old = run_output(tmp_path / "old.parquet", {f"r{i}": "billing" if i < 9 else "outage" for i in range(10)})
    new = run_output(tmp_path / "new.parquet", {f"r{i}": "billing" if i < 3 else "outage" for i in range(10)})
    r = cli("compare", old, new, "--plot", tmp_path / "p.png")
    assert r.returncode == 5, r.stderr
    assert "category" in r.stdout and "billing" in r.stdout and "answer changed: 6" in r.stdout
    assert "moved more than --max-drift 0.25" in r.stderr
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    r = cli("compare", old, new, "--json", "--max-drift", "100")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["drifted"] == [] and doc["questions"][0]["drift"]["old"] == [9, 1, 0]
    assert doc["questions"][0]["changed"] == 6
    assert cli("compare", old, old).returncode == 0
    bad = tmp_path / "x.parquet"
    bad.write_bytes(b"not parquet")
    r = cli("compare", old, bad)
    assert r.returncode == 4 and "cannot be read as an output" in r.stderr and "Traceback" not in r.stderr
