"""Issue 32.1: `calibrate` fits per-question temperatures and abstain thresholds on labelled rows and writes
calibration.json; `run --calibration` applies them (calibrated probs, raw_probs kept, abstain), the file is in
the manifest and the --resume key, and a file for other questions is refused at start."""

import json
import re
import warnings

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import EXAMPLES, cli

from openjev_batch.errors import ConfigError
from openjev_batch.evaluation.calibration_fit import fit
from openjev_batch.evaluation.metrics import wilson
from openjev_batch.pipeline.output.manifest import KEY
from openjev_batch.readouts.label_logprobs.calibration import apply, load_calibration, scaled


def _records(n=200, seed=0):
    """An overconfident 2-way question: p(top) near 0.95 always, right 70 % of the time, more often when p is
    higher (so a threshold can buy precision)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        p = rng.uniform(0.8, 0.999)
        right = rng.uniform() < (p - 0.8) / 0.2 * 0.6 + 0.4
        pred = int(rng.integers(2))
        gold = pred if right else 1 - pred
        probs = (p, 1 - p) if pred == 0 else (1 - p, p)
        out.append({"qid": "s", "type": "choice", "options": ("neg", "pos"), "probs": probs, "gold": gold})
    return out


def test_fit_softens_overconfidence_and_meets_the_target_precision():
    doc = fit(_records(), precision=0.8)
    e = doc["questions"]["s"]
    assert e["temperature"] > 1.5  # 95 % confident, 70 % right: the fit flattens
    assert e["target_met"] and e["selective_accuracy"] >= 0.8 and 0 < e["coverage"] < 1
    assert len(e["curve"]) == 10 and e["curve"][-1]["coverage"] == 1.0
    # the curve falls as coverage grows (most confident first), ending at the overall accuracy
    assert e["curve"][0]["accuracy"] > e["curve"][-1]["accuracy"] == pytest.approx(e["accuracy"])
    cov = fit(_records(), coverage=0.5)["questions"]["s"]
    assert 0.5 <= cov["coverage"] < 0.6
    assert fit(_records(), precision=1.01)["questions"]["s"]["target_met"] is False  # abstain on everything


def test_apply_scales_and_abstains(tmp_path):
    from openjev_batch.readouts.label_logprobs.answer import read_out
    from openjev_batch.readouts.label_logprobs.questions import QuestionSpec

    f = tmp_path / "c.json"
    f.write_text(json.dumps(fit(_records(), precision=0.8)))
    cal = load_calibration(f)
    q = QuestionSpec("s", "choice", "?", ("neg", "pos"), (None, None))
    a = read_out(q, [np.log(0.9), np.log(0.1)])
    e = cal.entry("s", "choice", ("neg", "pos"))
    c, abstain = apply(e, a)
    assert c.probs == pytest.approx(scaled((0.9, 0.1), e.temperature)) and c.probs[0] < 0.9
    assert c.answer == "neg" and abstain == (c.probs[0] < e.abstain_below)
    with pytest.raises(ValueError, match="no entry for this question"):
        cal.entry("other", "choice", ("neg", "pos"))
    with pytest.raises(ValueError, match="fitted on a choice question with options"):
        cal.entry("s", "choice", ("a", "b"))
    f.write_text(json.dumps({"format": "x"}))
    with pytest.raises(ConfigError, match="not a calibration file"):
        load_calibration(f)


def test_calibrate_then_run_with_calibration(tiny_model, tmp_path):
    src, qs = EXAMPLES / "sst2_sample.jsonl", EXAMPLES / "sst2_questions.yaml"
    run = ("-m", tiny_model, "-b", "hf", "--no-progress")
    labelled = tmp_path / "labelled.parquet"
    r = cli("run", src, "-q", qs, "-o", labelled, "--keep", "label", *run)
    assert r.returncode == 0, r.stderr
    cal = tmp_path / "calibration.json"
    r = cli("calibrate", labelled, "--gold", "label", "-o", cal, "--target-coverage", "0.5", "--min-kept", "5")
    assert r.returncode == 0, r.stderr
    assert "sentiment: n=20" in r.stdout and "coverage" in r.stdout
    doc = json.loads(cal.read_text())
    assert doc["questions"]["sentiment"]["options"] == ["negative", "positive"]
    out = tmp_path / "cal.parquet"
    r = cli("run", src, "-q", qs, "-o", out, "--calibration", cal, *run)
    assert r.returncode == 0, r.stderr
    t, raw = pq.read_table(out).to_pylist(), pq.read_table(labelled).to_pylist()
    T = doc["questions"]["sentiment"]["temperature"]
    for a, b in zip(t, raw, strict=True):
        assert a["raw_probs"] == pytest.approx(b["probs"])  # the raw distribution is kept
        assert a["probs"] == pytest.approx(scaled(tuple(b["probs"]), T))
        assert isinstance(a["abstain"], bool)
    assert 0 < sum(a["abstain"] for a in t) < len(t)  # half kept, at the fitted threshold
    # issue 42.1: the summary counts the abstentions (per question and per option) and names the file
    n_ab = sum(a["abstain"] for a in t)
    assert re.search(rf"abstained \(sentiment\)\s*│\s*{n_ab} \({n_ab / 20:.1%}\)", r.stderr), r.stderr
    # issue 48.14: the threshold and T are said on the line, not only when more than half abstained
    tau = doc["questions"]["sentiment"]["abstain_below"]
    assert f"(top calibrated probability below {tau:.3f}, T = {T:.3f})" in " ".join(r.stderr.split()), r.stderr
    # issue 48.13: the wall time is the job's, and the time since the command started is said beside it
    said = " ".join(r.stderr.split())
    assert re.search(r"wall time │ [0-9.]+ s \(the job: model load to output\)", said), r.stderr
    assert re.search(r"since the command started │ [0-9.]+ s \(imports and model lookup too\)", said), r.stderr
    sha = load_calibration(cal).sha256
    assert re.search(rf"calibration\s*│\s*{re.escape(str(cal))} \(sha256 {sha[:16]}\)", r.stderr), r.stderr
    table = r.stderr[r.stderr.index("answers"):]
    assert re.search(r"option\s*┃\s*rows\s*┃\s*share\s*┃\s*mean confidence\s*┃\s*abstained", table), table
    for opt in ("negative", "positive"):
        got = [a for a in t if a["answer"] == opt]
        assert re.search(rf"{opt}\s*│\s*{len(got)}\s*│.*│\s*{sum(a['abstain'] for a in got)}\s*│", table), table
    assert ("warning: question" in r.stderr) == (n_ab > 10), r.stderr  # more than half: a warning line
    manifest = json.loads(pq.read_schema(out).metadata[KEY])["manifest"]
    assert json.dumps(manifest).count(sha) == 1 and manifest["calibration_file"] == str(cal.absolute())
    # another calibration file is another job: --resume refuses to mix them
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**doc, "target": {"coverage": 0.9}}))
    r = cli("run", src, "-q", qs, "-o", out, "--calibration", other, "--resume", *run)
    assert r.returncode == 4 and "calibration" in r.stderr, r.stderr
    # issue 42.1: a missed target (20 labelled rows, fewer than --min-kept 30) abstains on every row: the run
    # exits 0 as before, and its summary and a `warning:` line a log grep finds say so
    missed = tmp_path / "missed.json"
    r = cli("calibrate", labelled, "--gold", "label", "-o", missed, "--target-precision", "0.9")
    assert r.returncode == 0 and "warning: calibrate: question 'sentiment': target not met" in r.stderr, r.stderr
    all_out = tmp_path / "all.parquet"
    r = cli("run", src, "-q", qs, "-o", all_out, "--calibration", missed, *run)
    assert r.returncode == 0, r.stderr
    assert all(a["abstain"] for a in pq.read_table(all_out).to_pylist())
    assert re.search(r"abstained \(sentiment\)\s*│\s*20 \(100.0%\)", r.stderr), r.stderr
    assert re.search(rf"^warning: question 'sentiment' abstained on 20 of 20 answered rows \(100%\) under the "
                     rf"calibration file {re.escape(str(missed))}, abstain_below 1.000: its calibration target was "
                     "not met", r.stderr, re.M), r.stderr  # fmt: skip
    # the same file under another path is the same job: --resume finds it finished
    moved = tmp_path / "moved.json"
    moved.write_bytes(missed.read_bytes())
    r = cli("run", src, "-q", qs, "-o", all_out, "--calibration", moved, "--resume", *run)
    assert r.returncode == 0 and "nothing to do" in r.stderr, r.stderr
    # a file for other questions: refused at start, nothing written
    r = cli("run", src, "-q", EXAMPLES / "ticket_questions.yaml", "-o", tmp_path / "x.parquet",
            "--calibration", cal, *run)  # fmt: skip
    assert r.returncode == 4 and "question 'refund_request': the calibration file has no entry" in r.stderr
    assert not (tmp_path / "x.parquet").exists()


def test_python_api_takes_a_calibration_file(tiny_model, tmp_path):
    from openjev_batch import Classifier

    recs = [{**r, "qid": "sentiment", "options": ("negative", "positive")} for r in _records(40)]
    cal = tmp_path / "c.json"
    cal.write_text(json.dumps(fit(recs, precision=0.8)))
    qs = EXAMPLES / "sst2_questions.yaml"
    with Classifier(tiny_model, "hf", device="cpu", calibration=cal) as clf:
        df = clf.run(["great film", "dull"], qs)
        assert [type(x) for x in df["abstain"].to_list()] == [bool, bool]
        assert len(df["raw_probs"].to_list()[0]) == 2
        with pytest.raises(ConfigError, match="question 'refund_request'"):
            clf.run(["x"], EXAMPLES / "ticket_questions.yaml")
    # a missed target (abstain_below 1) abstains on every row: the API warns as the CLI's `warning:` line does
    # (it was the CLI's alone), and says nothing when fewer than half abstain
    doc = json.loads(cal.read_text())
    doc["questions"]["sentiment"]["abstain_below"] = 1.0
    missed = tmp_path / "missed.json"
    missed.write_text(json.dumps(doc))
    with Classifier(tiny_model, "hf", device="cpu", calibration=missed) as clf:
        with pytest.warns(UserWarning, match=r"question 'sentiment' abstained on 2 of 2 answered rows \(100%\) under "
                          r"the calibration file .*missed.json, abstain_below 1.000: its calibration target"):  # fmt: skip
            assert clf.run(["great film", "dull"], qs)["abstain"].to_list() == [True, True]
    doc["questions"]["sentiment"]["abstain_below"] = 0.0
    missed.write_text(json.dumps(doc))
    with Classifier(tiny_model, "hf", device="cpu", calibration=missed) as clf, warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert clf.run(["great film", "dull"], qs)["abstain"].to_list() == [False, False]
    assert not [x for x in w if "abstained" in str(x.message)], [str(x.message) for x in w]


def test_per_row_option_texts_fit_one_entry_by_option_count(tmp_path):
    """An eval folder's question `answer` has other option texts on every row (MMLU): its entry holds the
    option count, and applies to any options of that many."""
    recs = [{**r, "options": (f"x{i}", f"y{i}")} for i, r in enumerate(_records(60))]
    doc = fit(recs, precision=0.8)
    assert doc["questions"]["s"]["options"] is None and doc["questions"]["s"]["n_options"] == 2
    f = tmp_path / "c.json"
    f.write_text(json.dumps(doc))
    cal = load_calibration(f)
    assert cal.entry("s", "choice", ("any", "two")).temperature == doc["questions"]["s"]["temperature"]
    with pytest.raises(ValueError, match="fitted on a choice question with 2 options"):
        cal.entry("s", "choice", ("a", "b", "c"))
    with pytest.raises(ConfigError, match="2 option count"):
        fit([*recs, {**recs[0], "options": ("a", "b", "c"), "probs": (0.5, 0.3, 0.2)}], precision=0.8)


def test_hostile_calibration_inputs_are_one_line_errors(tmp_path):
    """A hostile trial: a FIFO as --calibration blocked the job forever, a labelled file whose probs do not
    match its options ended in an IndexError traceback (NaN probs were fitted silently), and `calibrate -o`
    over its own input replaced the labelled data."""
    import os

    import pyarrow as pa

    from openjev_batch.evaluation.calibration_labelled import read_labelled

    fifo = tmp_path / "cal.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_calibration(fifo)  # returns at once: nothing opens the pipe
    base = {"id": "r", "question_id": "q", "type": "choice", "options": ["a", "b", "c"], "gold": "a", "error": None}
    for probs in ([0.5, 0.5], [float("nan")] * 3, [-0.5, 1.2, 0.3], [0.0, 0.0, 0.0]):
        f = tmp_path / "lab.parquet"
        pq.write_table(pa.Table.from_pylist([{**base, "probs": probs}]), f)
        with pytest.raises(ConfigError, match="is not a distribution over its 3 options"):
            read_labelled(f, "gold")
    f = tmp_path / "lab.json"
    f.write_text(json.dumps([{**base, "probs": [0.7, 0.2, 0.1]}]))
    r = cli("calibrate", f, "--gold", "gold", "-o", f)
    assert r.returncode == 4 and "would destroy it" in r.stderr
    assert json.loads(f.read_text())[0]["probs"] == [0.7, 0.2, 0.1]  # the labelled data is still there
    d = tmp_path / "d.json"  # a folder: an IsADirectoryError traceback, and d.json.tmp left behind
    d.mkdir()
    r = cli("calibrate", f, "--gold", "gold", "-o", d)
    assert r.returncode == 4 and "is a folder" in r.stderr and not (tmp_path / "d.json.tmp").exists(), r.stderr


def _multi_records(n=60, seed=1):
    """A 3-label multi question: a label is gold more often the higher its P(yes)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        p = tuple(float(x) for x in rng.uniform(0, 1, 3))
        gold = frozenset(k for k in range(3) if rng.uniform() < p[k] ** 2)
        out.append({"qid": "m", "type": "multi", "options": ("a", "b", "c"), "probs": p, "gold": gold})
    return out


def test_calibrate_fits_a_multi_questions_threshold(tmp_path):
    """Issue 32.3: "a calibration file may set" a multi question's threshold: `calibrate` fits it (calibration
    _multi.py) instead of skipping multi rows; the file loads and the threshold is what `run` applies."""
    recs = _multi_records()
    pairs = [(p, k in r["gold"]) for r in recs for k, p in enumerate(r["probs"])]
    e = fit(recs, precision=0.7)["questions"]["m"]
    assert e["type"] == "multi" and e["options"] == ["a", "b", "c"] and "temperature" not in e
    chosen = [g for p, g in pairs if p >= e["threshold"]]
    assert e["target_met"] and e["precision"] == pytest.approx(sum(chosen) / len(chosen))
    # met on the Wilson lower bound of ≥ 30 chosen labels (issue 42.2), not on the point estimate
    assert e["kept"] == len(chosen) >= 30 and wilson(sum(chosen), len(chosen))[0] >= 0.7
    assert e["ci95"] == pytest.approx(list(wilson(sum(chosen), len(chosen))))
    # the most labels that keep the bound: one more (the next lower P(yes)) falls below it
    nxt = max(p for p, _ in pairs if p < e["threshold"])
    more = [g for p, g in pairs if p >= nxt]
    assert wilson(sum(more), len(more))[0] < 0.7
    # 0.8 is reached by a few labels, but never with 30 chosen and a lower bound at 0.8
    assert fit(recs, precision=0.8)["questions"]["m"]["target_met"] is False
    cov = fit(recs, coverage=0.5)["questions"]["m"]
    assert cov["recall"] >= 0.5 and cov["target_met"]
    assert [c["threshold"] for c in cov["curve"]][:2] == [0.1, 0.2] and len(cov["curve"]) == 9
    bad = fit(recs, precision=1.01)["questions"]["m"]
    assert bad["target_met"] is False and bad["threshold"] == 1.0
    f = tmp_path / "c.json"
    f.write_text(json.dumps(fit(recs, precision=0.7)))
    assert load_calibration(f).entry("m", "multi", ("a", "b", "c")).threshold == e["threshold"]


def test_multi_gold_forms_and_bad_rows(tmp_path):
    """A multi gold is a list of labels (names in any case or indices), its JSON text (a CSV output), or
    names separated by commas; [] is a row with no label; an unknown label or bad P(yes) names the row."""
    import pyarrow as pa

    from openjev_batch.evaluation.calibration_labelled import read_labelled

    base = {"id": "r", "question_id": "m", "type": "multi", "options": ["a", "b", "c"], "probs": [0.9, 0.2, 0.6],
            "error": None}  # fmt: skip
    f = tmp_path / "lab.parquet"
    golds = [["A", "c"], '["a", 2]', "a, c", [], "[]"]
    pq.write_table(pa.Table.from_pylist([{**base, "g": json.dumps(g) if isinstance(g, list) else g}
                                         for g in golds]), f)  # fmt: skip
    assert [r["gold"] for r in read_labelled(f, "g")] == [{0, 2}] * 3 + [set()] * 2
    for g, match in (("a, d", "gold label 'd' is not one of a, b, c"), ("[a", "is not a JSON list"),
                     ('{"a": 1}', "gold label '{\"a\": 1}' is not one")):  # fmt: skip
        pq.write_table(pa.Table.from_pylist([{**base, "g": g}]), f)
        with pytest.raises(ConfigError, match=re.escape(match)):
            read_labelled(f, "g")
    pq.write_table(pa.Table.from_pylist([{**base, "probs": [0.9, 1.2, 0.1], "g": "a"}]), f)
    with pytest.raises(ConfigError, match="are not one P\\(yes\\) per label of its 3"):
        read_labelled(f, "g")


def test_calibrate_then_run_a_multi_question(tiny_model, tmp_path):
    """The real CLI: run a multi question with a kept gold list, calibrate it, run with the file: `chosen` is
    the labels at or above the fitted threshold (the file's, not the question's 0.5)."""
    from conftest import write_jsonl

    labels = {"billing": "Money.", "outage": None, "login": "Signing in."}
    qs = tmp_path / "q.json"
    qs.write_text(json.dumps({"m": {"type": "multi", "instructions": "Which topics?", "criteria": labels}}))
    texts = ["charged twice", "site down", "cannot log in", "refund and login", "all broken", "hello"]
    golds = [["billing"], ["outage"], ["login"], ["billing", "login"], ["outage", "login"], []]
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": f"r{i}", "state": t, "gold": g}
                                               for i, (t, g) in enumerate(zip(texts, golds, strict=True))])  # fmt: skip
    run = ("-q", qs, "-m", tiny_model, "-b", "hf", "--no-progress")
    labelled, cal, out = tmp_path / "lab.parquet", tmp_path / "cal.json", tmp_path / "out.parquet"
    r = cli("run", src, "-o", labelled, "--keep", "gold", *run)
    assert r.returncode == 0, r.stderr
    # issue 42.3: the multi table counts rows ("share" divided by all chosen labels: 60 of 60 rows showed 16 %)
    # under headers that say what the columns hold
    table = r.stderr[r.stderr.index("labels chosen (multi questions)"):]
    assert re.search(r"question\s*┃\s*label\s*┃\s*rows choosing it\s*┃\s*share of rows\s*┃\s*mean P\(yes\) when chosen",
                     table), table  # fmt: skip
    lab_rows = pq.read_table(labelled).to_pylist()
    for label in labels:
        picked = [r["probs"][r["options"].index(label)] for r in lab_rows if label in r["chosen"]]
        mean = "–" if not picked else f"{sum(picked) / len(picked):.2f}"
        assert re.search(rf"{label}\s*│\s*{len(picked)}\s*│\s*{len(picked) / 6:.0%}\s*│\s*{re.escape(mean)}", table), table
    assert "mean confidence" not in table
    r = cli("calibrate", labelled, "--gold", "gold", "-o", cal, "--target-coverage", "0.5", "--min-kept", "1")
    assert r.returncode == 0, r.stderr
    assert "m: multi, n=6 rows, 7 gold labels" in r.stdout and "recall" in r.stdout
    th = json.loads(cal.read_text())["questions"]["m"]["threshold"]
    r = cli("run", src, "-o", out, "--calibration", cal, *run)
    assert r.returncode == 0, r.stderr
    rows = pq.read_table(out).to_pylist()
    assert [r["probs"] for r in rows] == [r["probs"] for r in pq.read_table(labelled).to_pylist()]
    assert [r["chosen"] for r in rows] == [[o for o, p in zip(r["options"], r["probs"], strict=True) if p >= th]
                                            for r in rows]  # fmt: skip
    recall = sum(o in g for r, g in zip(rows, golds, strict=True) for o in r["chosen"]) / 7
    assert recall >= 0.5


def test_calibrate_one_question_of_several_and_let_the_rest_run_raw(tmp_path):
    """A run with 3 questions and a gold column for one (new-user trial): `calibrate` refused every row of the
    others ("gold 'yes' is not an option"), and the file then refused the run's other questions with no word
    of how to let them through. `--question` fits the one, `--unfitted raw` lets the others run raw."""
    rows = []
    for i, r in enumerate(_records(40)):
        p_yes = r["probs"][0]
        gold = "yes" if r["gold"] == 0 else "no"
        rows.append({"id": f"r{i}", "question_id": "refund", "type": "noul", "options": ["yes", "no"],
                     "probs": [p_yes, 1 - p_yes], "gold": gold, "error": None})
        rows.append({"id": f"r{i}", "question_id": "topic", "type": "choice", "options": ["billing", "bug"],
                     "probs": [0.6, 0.4], "gold": gold, "error": None})  # fmt: skip
    lab, cal = tmp_path / "lab.json", tmp_path / "cal.json"
    lab.write_text(json.dumps(rows))
    r = cli("calibrate", lab, "--gold", "gold", "-o", cal)
    assert r.returncode == 4 and "question 'topic'" in r.stderr and "--question ID" in r.stderr, r.stderr
    r = cli("calibrate", lab, "--gold", "gold", "--question", "nope", "-o", cal)
    assert r.returncode == 4 and "--question nope: not in" in r.stderr and "refund, topic" in r.stderr, r.stderr
    r = cli("calibrate", lab, "--gold", "gold", "--question", "refund", "--unfitted", "raw", "-o", cal)
    assert r.returncode == 0, r.stderr
    doc = json.loads(cal.read_text())
    assert list(doc["questions"]) == ["refund"] and doc["unfitted"] == "raw"
    assert load_calibration(cal).entry("topic", "choice", ("billing", "bug")) is None
    r = cli("calibrate", lab, "--gold", "gold", "--question", "refund", "-o", cal)
    assert r.returncode == 0 and json.loads(cal.read_text())["unfitted"] == "error"
    with pytest.raises(ValueError, match=r'--unfitted raw`, or with "unfitted": "raw"'):
        load_calibration(cal).entry("topic", "choice", ("billing", "bug"))


@pytest.mark.parametrize(
    "change,match",
    [
        ({"temperature": 1e-320}, r"temperature must be in \[0.001, 1000\]"),  # NaN probs, exit 0
        ({"temperature": int("1" + "0" * 400)}, r"temperature must be in .*got 1000000"),  # OverflowError
        ({"abstain_below": int("1" + "0" * 400)}, "abstain_below must be in"),
        ({"temperature": True}, "temperature must be in"),  # was T = 1
        ({"temperature": "1.5"}, "temperature must be in"),  # a string holding a number
        ({"options": None, "n_options": 1e999}, "n_options must be an integer 2–64"),  # OverflowError
        ({"options": None, "n_options": "2"}, "n_options must be an integer 2–64"),
    ],
)
def test_hand_edited_calibration_numbers_are_refused_in_one_line(tmp_path, change, match):
    """A hostile trial: a subnormal temperature gave NaN probabilities with exit 0 (never abstaining), and
    401-digit numbers or an infinite n_options ended in an OverflowError traceback."""
    entry = {"type": "noul", "options": ["true", "false"], "temperature": 1.5, "abstain_below": 0.5, **change}
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"format": "openjev-calibration/1", "questions": {"refund": entry}}))
    with pytest.raises(ConfigError, match=match):
        load_calibration(f)


@pytest.mark.parametrize(
    "content,match",
    [
        ('id,question_id,type,options,probs,label\na,q,noul,"[""true"",""false""]",oops,true\n',
         r"row 'a': not a `run` output's record \(a cell is not JSON \(Expecting value\)\)"),
        ('[{"question_id": "q", "options": ["a", "b"], "probs": [0.5, 0.5], "label": "a"}]',
         "needs question_id, type, options and probs"),
        ("[1, 2]", r"not a `run` output \(a list of records\)"),
        ('[{"id": "a", "question_id": "q", "type": "choice", "options": ["a", "b"], "probs": [0.5, 0.5], '
         '"label": "a"}, 5]', r"a list of records"),
        ("[" * 100_000 + "]" * 100_000, "cannot read"),
        ('[{"id": "a", "question_id": ["q"], "type": "choice", "options": ["a", "b"], "probs": [0.5, 0.5], '
         '"label": "a"}]', "question_id and type must be text"),
        ('[{"id": "a", "question_id": "q", "type": "choice", "options": null, "probs": [0.5, 0.5], "label": "a"}]',
         r"row 'a': not a `run` output's record \(a value of the wrong kind \(options and probs are lists"),
    ],
)  # fmt: skip
def test_damaged_labelled_files_are_one_line_errors(tmp_path, content, match):
    """A hostile trial: a cell that is not JSON, a missing `type`, a list of numbers, a record that is a
    number, 100,000 brackets, a list for a question id and null options each ended `calibrate` in a traceback."""
    from openjev_batch.evaluation.calibration_labelled import read_labelled

    f = tmp_path / ("lab.csv" if content.startswith("id,") else "lab.json")
    f.write_text(content)
    with pytest.raises(ConfigError, match=match):
        read_labelled(f, "label")


def test_the_curve_says_when_the_temperature_is_at_the_fits_upper_bound():
    """A new-user trial read `T=20.000` with no word that the fit stopped at its bound: the probabilities
    carry no signal. Confident answers right half the time on a 2-way question flatten to uniform."""
    from openjev_batch.evaluation.calibration_fit import curve_table

    flat = [{**r, "gold": i % 2, "probs": (0.99, 0.01)} for i, r in enumerate(_records(40))]
    table = curve_table(fit(flat, precision=0.8))
    assert "T=20.000" in table and "T at the fit's upper bound (20)" in table, table
    assert "upper bound" not in curve_table(fit(_records(), precision=0.8))


def _chance_rows(n=300, sure=20, seed=3):
    """A labelled 2-way output at chance, but for its `sure` most confident rows, which are all right: a
    precision target is "met" on them alone unless a minimum of kept answers is asked for."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        p = 0.99 if i < sure else float(rng.uniform(0.5, 0.9))
        pred = int(rng.integers(2))
        gold = pred if i < sure or rng.uniform() < 0.5 else 1 - pred
        probs = [p, 1 - p] if pred == 0 else [1 - p, p]
        rows.append({"id": f"r{i}", "question_id": "q", "type": "choice", "options": ["neg", "pos"],
                     "probs": probs, "gold": ["neg", "pos"][gold], "error": None})  # fmt: skip
    return rows


def test_calibrate_on_a_chance_level_file_never_meets_a_target_on_few_answers(tmp_path):
    """Issue 42.2: on a model at chance `calibrate --target-precision 0.9` printed "coverage 0%, selective
    accuracy 100.0%" and wrote "target_met": true on 1 row of 300; the run then abstained on every row. A
    target is met only on ≥ --min-kept answers whose Wilson lower bound reaches it; a missed one says every
    row will abstain and what the data supports, in the file, the table and a `warning:` line."""
    lab, cal = tmp_path / "lab.json", tmp_path / "cal.json"
    lab.write_text(json.dumps(_chance_rows()))
    r = cli("calibrate", lab, "--gold", "gold", "-o", cal, "--target-precision", "0.9")
    assert r.returncode == 0, r.stderr
    e = json.loads(cal.read_text())["questions"]["q"]
    assert e["target_met"] is False and e["abstain_below"] == 1.0 and e["kept"] == 0 and e["n"] == 300
    assert "every row of this question will abstain" in e["note"]
    supported = float(re.search(r"--target-precision (0\.\d\d)", e["note"]).group(1))
    assert 0.3 < supported < 0.9
    assert "target precision 0.9 on ≥ 30 kept answers: target not met: every row of this question will abstain" in r.stdout
    assert re.search(r"^warning: calibrate: question 'q': target not met: every row", r.stderr, re.M), r.stderr
    assert json.loads(cal.read_text())["target"] == {"precision": 0.9, "min_kept": 30}
    # the 20 sure rows alone meet 0.9 when 20 answers may be promised: the counts say how many were kept
    r = cli("calibrate", lab, "--gold", "gold", "-o", cal, "--target-precision", "0.8", "--min-kept", "20")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    e = json.loads(cal.read_text())["questions"]["q"]
    k, acc = e["kept"], e["selective_accuracy"]
    lo, hi = wilson(round(acc * k), k)
    assert e["target_met"] and k >= 20 and e["ci95"] == pytest.approx([lo, hi]) and lo >= 0.8
    assert f"kept {k}/300 ({k / 300:.0%}), selective accuracy {acc:.1%} (95% CI {lo:.1%}–{hi:.1%})" in r.stdout
    # the supported precision is met when asked for
    r = cli("calibrate", lab, "--gold", "gold", "-o", cal, "--target-precision", str(supported))
    assert r.returncode == 0 and json.loads(cal.read_text())["questions"]["q"]["target_met"], r.stdout
    # a coverage target keeping fewer than the minimum is missed too
    d = fit([{**rr, "qid": "q", "options": ("neg", "pos"), "gold": ["neg", "pos"].index(rr["gold"])}
             for rr in _chance_rows(40)], coverage=0.5)["questions"]["q"]  # fmt: skip
    assert d["target_met"] is False and "fewer than --min-kept 30" in d["note"]


def test_calibrate_holdout_scores_the_rows_it_did_not_fit_on(tmp_path):
    """Issue 42.2: `calibrate` printed no ECE, Brier or held-out check. `--holdout F` fits on the other rows
    (a seeded split by row id) and scores the held-out share: its figures are those of the fitted T and τ
    on exactly those rows."""
    from openjev_batch.evaluation.metrics import metrics, scale

    recs = [{**r, "id": f"r{i}"} for i, r in enumerate(_records(300))]
    doc = fit(recs, precision=0.8, holdout=0.25)
    e, h = doc["questions"]["s"], doc["questions"]["s"]["holdout"]
    assert doc["holdout"]["share"] == 0.25 and h["n"] == 75 and e["n"] == 225
    assert fit(recs, precision=0.8, holdout=0.25) == doc  # the same split every time
    fit_only = fit(recs, precision=0.8)["questions"]["s"]
    assert fit_only["n"] == 300 and "holdout" not in fit_only
    # the held-out rows are not fitted on: the fit on the rest gives the entry's T; its figures recomputed
    from openjev_batch.evaluation.calibration_fit import _split

    train, held = _split("s", recs, 0.25)
    assert len(held) == 75 and not {r["id"] for r in train} & {r["id"] for r in held}
    assert fit(train, precision=0.8)["questions"]["s"]["temperature"] == pytest.approx(e["temperature"])
    P, y = np.array([r["probs"] for r in held]), np.array([r["gold"] for r in held])
    cal = scale(P, e["temperature"])
    m = metrics(cal, y, binary=False)
    assert h["ece"] == pytest.approx(m["ece"]) and h["brier"] == pytest.approx(m["brier"])
    kept = cal.max(1) >= e["abstain_below"]
    right = cal.argmax(1) == y
    assert h["kept"] == kept.sum() and h["coverage"] == pytest.approx(kept.mean())
    assert h["selective_accuracy"] == pytest.approx(right[kept].mean())
    # the CLI prints the fit's figures and the held-out ones beside them
    lab, out = tmp_path / "lab.json", tmp_path / "cal.json"
    lab.write_text(json.dumps([{"id": r["id"], "question_id": "s", "type": "choice", "options": ["neg", "pos"],
                                "probs": list(r["probs"]), "gold": r["gold"], "error": None} for r in recs]))  # fmt: skip
    r = cli("calibrate", lab, "--gold", "gold", "-o", out, "--target-precision", "0.8", "--holdout", "0.25")
    assert r.returncode == 0, r.stderr
    assert re.search(r"s: n=225, T=\S+, accuracy \S+; ECE \S+, Brier \S+ \(uncalibrated: ECE", r.stdout), r.stdout
    assert re.search(r"held out \(75 rows, not fitted on\): accuracy \S+; ECE \S+, Brier \S+ .*; kept \d+/75", r.stdout)
    assert json.loads(out.read_text())["questions"]["s"]["holdout"]["n"] == 75
    r = cli("calibrate", lab, "--gold", "gold", "-o", out, "--holdout", "1.5")
    assert r.returncode == 4 and "--holdout must be between 0 and 1" in r.stderr, r.stderr
    # multi questions: precision and recall of the fitted threshold on the held-out rows
    m = fit([{**r, "id": f"m{i}"} for i, r in enumerate(_multi_records(200))], precision=0.6, holdout=0.3)
    hm = m["questions"]["m"]["holdout"]
    assert hm["n"] == 60 and hm["decisions"] == 180 and 0 <= hm["ece"] <= 1 and hm["precision"] is not None


def test_an_integer_gold_on_number_named_options_is_read_as_a_name(tmp_path):
    """Issue 42.7: options named "1".."4" and an integer gold 1 meant option "1", but was read as index 1
    (option "2"): the labels shifted silently. A number is a name on such options, one that names none is
    refused; an eval folder's `gold` stays an index (what eval writes)."""
    import pyarrow as pa

    from openjev_batch.evaluation.calibration_labelled import read_labelled

    base = {"id": "r", "question_id": "q", "type": "score", "options": ["1", "2", "3", "4"],
            "probs": [0.1, 0.2, 0.3, 0.4], "error": None}  # fmt: skip
    f = tmp_path / "lab.parquet"
    pq.write_table(pa.Table.from_pylist([{**base, "g": g} for g in (1, 4, 2)]), f)
    assert [r["gold"] for r in read_labelled(f, "g")] == [0, 3, 1]
    pq.write_table(pa.Table.from_pylist([{**base, "g": 0}]), f)
    with pytest.raises(ConfigError, match=r"gold 0 is ambiguous: options named by numbers \(1, 2, 3, 4\)"):
        read_labelled(f, "g")
    j = tmp_path / "lab.json"  # a JSON run output: the same
    j.write_text(json.dumps([{**base, "g": 1}]))
    assert read_labelled(j, "g")[0]["gold"] == 0
    # options named otherwise: an integer is still the option's index
    j.write_text(json.dumps([{**base, "options": ["a", "b", "c", "d"], "g": 1}]))
    assert read_labelled(j, "g")[0]["gold"] == 1
    folder = tmp_path / "eval"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist([{**base, "gold": 1}]), folder / "predictions.parquet")
    assert read_labelled(folder, "gold")[0]["gold"] == 1  # eval's gold: the index of MMLU's option texts


def test_a_calibration_file_with_a_question_twice_is_refused(tmp_path):
    """Issue 42.7: JSON keeps the last of a repeated key, so a file with a question written twice was
    calibrated by the second entry without a word. It is refused in one line naming the key."""
    def entry(t):
        return json.dumps({"type": "noul", "options": ["true", "false"], "temperature": t, "abstain_below": 0.5})

    f = tmp_path / "c.json"
    head = '{"format": "openjev-calibration/1", "questions": '
    f.write_text(head + f'{{"refund": {entry(1.5)}, "refund": {entry(3.0)}}}}}')
    with pytest.raises(ConfigError, match=r"c.json: duplicate key 'refund' in a JSON object \(a question written twice\?\)"):
        load_calibration(f)
    f.write_text(head + f'{{"refund": {entry(1.5)}}}}}')
    assert load_calibration(f).entries["refund"].temperature == 1.5 and load_calibration(f).path == str(f)


def test_an_eval_folder_needs_no_gold_option_and_a_file_does(tmp_path):
    """A trial: `calibrate boolq_run -o x.json` on an eval folder stopped at click's "Missing option '--gold'",
    though the folder names its gold column (`gold`, the option's index). A folder's is the default; a file's
    column is whatever its run kept, so a file without --gold is one line saying so."""
    import pyarrow as pa

    recs = _records(60)
    rows = [{"id": str(i), "question_id": r["qid"], "type": r["type"], "options": list(r["options"]),
             "probs": list(r["probs"]), "error": None, "gold": r["gold"]} for i, r in enumerate(recs)]  # fmt: skip
    folder = tmp_path / "eval_run"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), folder / "predictions.parquet")
    plain, named = tmp_path / "plain.json", tmp_path / "named.json"
    r = cli("calibrate", folder, "-o", plain, "--min-kept", "5")
    assert r.returncode == 0, r.stderr
    r = cli("calibrate", folder, "--gold", "gold", "-o", named, "--min-kept", "5")
    assert r.returncode == 0, r.stderr
    a, b = json.loads(plain.read_text())["questions"], json.loads(named.read_text())["questions"]
    assert a == b and a["s"]["n"] == 60
    r = cli("calibrate", folder / "predictions.parquet", "-o", plain)
    assert r.returncode == 4 and r.stderr.strip().splitlines() == [
        f"error: calibrate: give --gold COL, the column of {folder / 'predictions.parquet'} that holds the gold answers"
    ], r.stderr


def test_a_raw_file_that_calibrates_none_of_the_questions_says_so(tiny_model, tmp_path):
    """A trial ran the tickets under a file fitted on `sentiment` alone, written with `--unfitted raw`: the
    summary named the file, and nothing said that no question was calibrated (`raw_probs` equal to `probs`,
    `abstain` null). The calibration row names the questions answered uncalibrated, and when that is all of
    them a warning says so."""
    doc = fit(_records(), precision=0.8)  # question "s": not one the tickets ask
    doc["unfitted"] = "raw"
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(doc))
    args = ("-q", EXAMPLES / "ticket_questions.yaml", "-m", tiny_model, "-b", "hf", "--no-progress", "--limit", "2")
    r = cli("run", EXAMPLES / "tickets.jsonl", "-o", tmp_path / "o.parquet", "--calibration", cal, *args)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stderr.split())
    assert "uncalibrated (no entry): refund_request, category, urgency" in text.replace(" │ ", " "), r.stderr
    assert (f"warning: the calibration file {cal} has no entry for any of the 3 questions answered: every answer "
            "is uncalibrated, as its `unfitted: raw` allows") in text, r.stderr  # fmt: skip


def test_gold_names_differing_in_case_are_two_options_and_a_float_index_is_an_index(tmp_path):
    """Hostile trial: options "X" and "x" (run and serve take them as two) and a gold alternating between them:
    calibrate matched "x" to "X" (case-insensitively, first), read 100 % right answers as 54 % and wrote a
    threshold that abstains on every row, exit 0. An exact name decides first; a gold matching several options
    only without case is refused. A gold of 1.0 (an integer column with nulls) is the index 1."""
    rows = []
    for i in range(60):
        g = i % 2
        rows.append({"id": f"r{i}", "question_id": "c", "type": "choice", "options": ["X", "x"],
                     "probs": [0.9, 0.1] if g == 0 else [0.1, 0.9], "gold": ["X", "x"][g], "error": None,
                     "idx": float(g)})  # fmt: skip
    lab, cal = tmp_path / "lab.json", tmp_path / "cal.json"
    lab.write_text(json.dumps(rows))
    for gold in ("gold", "idx"):
        r = cli("calibrate", lab, "--gold", gold, "-o", cal, "--min-kept", "5")
        assert r.returncode == 0, r.stderr
        assert json.loads(cal.read_text())["questions"]["c"]["accuracy"] == 1.0
    for row in rows:  # two options equal but for case, and a gold matching both only without case
        row["options"] = ["Yes", "YES"]
    rows[0]["gold"] = "yes"
    lab.write_text(json.dumps(rows))
    r = cli("calibrate", lab, "--gold", "gold", "-o", cal)
    assert r.returncode == 4 and "gold 'yes' matches options Yes, YES but none exactly" in r.stderr, r.stderr


def test_a_calibration_records_its_debias_order_and_refuses_another(tiny_model, tmp_path):
    """Issue 48.4: a calibration fitted on answers without debiasing was applied to a `--debias-order 2` run
    without a word: averaged orders are flatter, so its temperature meant nothing there. `calibrate` records
    the order from the labelled output's manifest; `run --calibration` refuses another, naming both."""
    src, qs = EXAMPLES / "sst2_sample.jsonl", EXAMPLES / "sst2_questions.yaml"
    run = ("-m", tiny_model, "-b", "hf", "--no-progress")
    fit = ("--gold", "label", "--target-coverage", "0.5", "--min-kept", "5")
    plain, debiased = tmp_path / "plain.parquet", tmp_path / "debiased.parquet"
    assert cli("run", src, "-q", qs, "-o", plain, "--keep", "label", *run).returncode == 0
    r = cli("run", src, "-q", qs, "-o", debiased, "--keep", "label", "--debias-order", "2", *run)
    assert r.returncode == 0, r.stderr
    cal1, cal2 = tmp_path / "cal1.json", tmp_path / "cal2.json"
    assert cli("calibrate", plain, *fit, "-o", cal1).returncode == 0
    assert cli("calibrate", debiased, *fit, "-o", cal2).returncode == 0
    assert json.loads(cal1.read_text())["debias_order"] == 1 and json.loads(cal2.read_text())["debias_order"] == 2
    out = tmp_path / "out.parquet"
    r = cli("run", src, "-q", qs, "-o", out, "--calibration", cal1, "--debias-order", "2", *run)
    assert r.returncode == 4 and not out.exists(), r.stderr
    assert " ".join(r.stderr.split()) == (
        f"error: --calibration {cal1}: fitted on answers of --debias-order 1, this job asks --debias-order 2: "
        "averaging option orders changes the probabilities its temperatures and thresholds were fitted on; run "
        "with --debias-order 1, or calibrate the output of a run with --debias-order 2"
    )
    r = cli("run", src, "-q", qs, "-o", out, "--calibration", cal2, "--debias-order", "2", *run)
    assert r.returncode == 0 and pq.read_table(out).num_rows == 20, r.stderr
    # a file that records none (hand-made, or written before the field) is applied as before
    doc = json.loads(cal1.read_text())
    del doc["debias_order"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    r = cli("run", src, "-q", qs, "-o", out, "--calibration", tmp_path / "old.json", "--debias-order", "2", *run)
    assert r.returncode == 0, r.stderr
    with pytest.raises(ConfigError, match="debias_order: Input should be a valid integer"):
        (tmp_path / "bad.json").write_text(json.dumps({**doc, "debias_order": "2"}))
        load_calibration(tmp_path / "bad.json")


def test_calibration_messages_are_plain_lines_and_a_dry_run_says_what_a_raw_file_misses(tiny_model, tmp_path):
    """Attack trial (issue 48.7–8): a calibration question id holding a newline printed raw over two lines, a
    missing temperature read `(…) ('temperature')`, calibrate on a gold column of names and indices read
    "Column(/gold) changed from string to number", and `--dry-run` under a raw file that calibrates none of the
    questions said nothing (the run said it only at its end)."""
    src, qs = EXAMPLES / "sst2_sample.jsonl", EXAMPLES / "sst2_questions.yaml"
    entry = {"type": "choice", "options": ["negative", "positive"], "abstain_below": 0.5}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "openjev-calibration/1", "questions": {"a\nforged": entry}}))
    dry = ("run", src, "-q", qs, "-m", tiny_model, "-b", "hf", "--dry-run", "--limit", "2")
    r = cli(*dry, "--calibration", bad)
    assert r.returncode == 4 and r.stderr.startswith("--dry-run: planning every row") and r.stderr.count("\n") == 2
    assert r.stderr.splitlines(keepends=True)[1] == (f"error: --calibration {bad}: questions.a\\nforged: temperature: missing (an entry needs "
                        "type, options, temperature and abstain_below (multi: threshold))\n")  # fmt: skip
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps({"format": "openjev-calibration/1", "unfitted": "raw",
                               "questions": {"other": {**entry, "temperature": 1.2}}}))  # fmt: skip
    r = cli(*dry, "--calibration", raw)
    assert r.returncode == 0, r.stderr
    assert (f"warning: --calibration {raw}: no entry for any of the 1 questions (sentiment): every answer will be "
            "uncalibrated, as its `unfitted: raw` allows") in " ".join(r.stderr.split()), r.stderr  # fmt: skip
    rows = [{"id": str(i), "question_id": "q", "type": "choice", "options": ["a", "b"], "probs": [0.8, 0.2],
             "gold": "a" if i % 2 else 1} for i in range(40)]  # fmt: skip
    lab = tmp_path / "mixed.jsonl"
    lab.write_text("".join(json.dumps(x) + "\n" for x in rows))
    r = cli("calibrate", lab, "--gold", "gold", "-o", tmp_path / "c.json", "--min-kept", "5")
    assert r.returncode == 0 and "q: n=40" in r.stdout, r.stderr


def test_the_file_is_one_model_the_writer_builds_and_the_reader_validates(tmp_path):
    """Issue 49.3: `CalibrationFile` is the format. The fit's entry splits into the applied fields and its
    `report`; the file keeps them side by side as `calibrate` always wrote them; a top-level field a later
    writer adds is kept, not refused; a missing applied field is one line naming it (was `(…) ('temperature')`)."""
    from openjev_batch.readouts.label_logprobs.calibration import CalibrationFile

    doc = fit(_records(), precision=0.8, unfitted="raw")
    assert list(doc) == ["format", "unfitted", "target", "questions"] and doc["unfitted"] == "raw"
    assert list(doc["questions"]["s"])[:4] == ["type", "options", "temperature", "abstain_below"]
    model = CalibrationFile.model_validate(doc)
    e = model.questions["s"]
    assert e.options == ("neg", "pos") and e.temperature == doc["questions"]["s"]["temperature"]
    assert e.report["kept"] == doc["questions"]["s"]["kept"] and "temperature" not in e.report
    assert model.document() == doc  # what the reader validates is what the writer wrote
    f = tmp_path / "c.json"
    f.write_text(json.dumps({**doc, "debias_order": 2}))
    cal = load_calibration(f)
    assert cal.entries["s"] == e and cal.unfitted == "raw"
    bad = {**doc, "questions": {"refund": {"type": "noul", "options": ["true", "false"], "abstain_below": 0.5}}}
    f.write_text(json.dumps(bad))
    with pytest.raises(ConfigError) as err:
        load_calibration(f)
    assert str(err.value) == (f"--calibration {f}: questions.refund: temperature: missing (an entry needs type, "
                              "options, temperature and abstain_below (multi: threshold))")  # fmt: skip
