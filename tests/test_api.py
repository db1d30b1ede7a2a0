"""The Python API on the tiny model: DataFrames in, the CLI's output out, one engine across calls."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from conftest import cli, write_jsonl

import openjev_batch as ob
from openjev_batch.errors import ConfigError

Q = {
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    "kind": {"type": "choice", "instructions": "Kind?", "criteria": {"billing": None, "bug": "a defect"}},
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "mid", "high"]},
}
ROWS = [
    {"id": "t1", "state": "I want my money back for order 7.", "channel": "mail"},
    {"id": "t2", "state": [{"role": "user", "content": "The app crashes on start"}], "channel": "chat"},
    {"id": "t3", "state": "Invoice is wrong, twice", "channel": "mail"},
    {"id": "t4", "state": "", "channel": "chat"},  # a bad row: an error cell, not an exception
]


@pytest.fixture(scope="module")
def clf(tiny_model):
    with ob.Classifier(str(tiny_model), backend="hf", device="cpu") as c:
        yield c


def test_polars_matches_the_cli(clf, tiny_model, tmp_path):
    p = write_jsonl(tmp_path / "in.jsonl", ROWS)
    qf = tmp_path / "q.json"
    qf.write_text(json.dumps(Q))
    out = tmp_path / "o.parquet"
    r = cli("run", p, "-q", qf, "-o", out, "-m", tiny_model, "-b", "hf", "--keep", "channel", "--no-progress")
    assert r.returncode == 3, r.stderr  # t4 has an error
    want = pl.read_parquet(out)
    df = pl.DataFrame(
        {"id": [r["id"] for r in ROWS], "state": [json.dumps(r["state"]) if isinstance(r["state"], list)
                                                   else r["state"] for r in ROWS],
         "channel": [r["channel"] for r in ROWS]}
    )  # fmt: skip
    got = clf.run(df, Q, keep="channel")
    assert isinstance(got, pl.DataFrame)
    assert got.columns == want.columns and got.dtypes == want.dtypes
    assert got.equals(want)
    assert got.filter(pl.col("id") == "t4")["error"].to_list() == ["row t4: state: empty conversation"] * 3
    s = clf.last_summary
    assert (s.rows, s.questions, s.answered, s.errors) == (4, 12, 9, 3)
    assert 0 < s.cache_hit_rate < 1
    # last_summary.answers as the Summary's docstring and the README say (a new-user trial found its nested
    # tuples documented nowhere): per question id in first-seen order, one (option, rows that got it, their
    # mean confidence, None when none did) per option, in the question's option order
    assert "`answers`" in type(s).__doc__ and "(option, rows, mean_confidence)" in type(s).__doc__
    ok = got.filter(pl.col("error").is_null())
    assert list(s.answers) == ["refund", "kind", "urgency"]
    for q, entries in s.answers.items():
        mine = ok.filter(pl.col("question_id") == q)
        assert [o for o, _, _ in entries] == mine["options"][0].to_list()
        for option, n, conf in entries:
            chose = mine.filter(pl.col("answer") == option)
            assert n == chose.height
            assert conf is None if n == 0 else conf == pytest.approx(chose["confidence"].mean(), abs=1e-9)


def test_pandas_and_dicts_and_one_engine_across_calls(clf):
    backend = clf.backend
    pdf = pd.DataFrame({"id": [10, 11], "state": ["refund please", "it is broken"], "src": ["a", "b"]})
    got = clf.run(pdf, Q, keep="all")
    # integer ids come back as integers (issue 26: they came back as strings)
    assert isinstance(got, pd.DataFrame) and list(got["id"]) == [10, 10, 10, 11, 11, 11]
    assert got["id"].dtype == pdf["id"].dtype
    assert list(got["src"]) == ["a"] * 3 + ["b"] * 3 and got["error"].isna().all()
    for probs, answer, options in zip(got["probs"], got["answer"], got["options"], strict=True):
        assert abs(sum(probs) - 1) < 1e-9 and answer == options[max(range(len(probs)), key=probs.__getitem__)]
    # per-row questions from an iterable of dicts; same numbers as the shared map for the same row
    dicts = [{"id": 10, "state": "refund please", "questions": Q}, {"id": "x", "state": "hm"}]
    got2 = clf.run(dicts)
    assert isinstance(got2, pl.DataFrame) and clf.backend is backend  # no reload
    assert got2["probs"].to_list()[:3] == [list(p) for p in got["probs"][:3]]
    assert got2["error"].to_list()[3].startswith("row x: questions: missing")
    assert clf.run(dicts, limit=1, output="arrow").num_rows == 3


def test_refusals(clf):
    with pytest.raises(ConfigError, match="questions.bad.type: unknown question type 'rank'"):
        clf.run([{"state": "x"}], {"bad": {"type": "rank", "instructions": "?"}})
    with pytest.raises(ConfigError, match="keep column.*not in the data: nope"):
        clf.run(pl.DataFrame({"state": ["x"]}), Q, keep="nope")
    with pytest.raises(
        ConfigError, match="keep column.*not in the data: nope"
    ):  # a list: its first rows' keys
        clf.run([{"state": "x", "c": 1}, {"state": "y"}], Q, keep="c,nope")
    with pytest.raises(ConfigError, match="data has column\\(s\\) 'state' twice"):  # hostile trial
        clf.run(pa.table([["a"], ["b"]], names=["state", "state"]), Q)
    with pytest.raises(ConfigError, match="keep: --keep column.s. score clash with output columns"):
        clf.run(pl.DataFrame({"state": ["x"], "score": [1]}), Q, keep=["score"])
    with pytest.raises(
        ConfigError, match=r"^the hf backend does not read --tp-size \(sglang only\); drop it$"
    ):
        ob.Classifier("m", backend="hf", tp_size=2)
    with pytest.raises(
        ConfigError, match=r"^the sglang backend does not read --batch-tokens \(hf only\); drop it$"
    ):
        ob.Classifier("m", backend="sglang", readout="classifier-head", batch_tokens=5)
    with pytest.raises(ConfigError, match="did you mean smollm2-135m"):
        ob.Classifier("smollm2", backend="hf")


def test_readme_example_runs(tiny_model, monkeypatch, capsys):
    """The README's Python API example, run as written (the tiny model in place of smollm2-135m)."""
    from conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Python API", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    ns: dict = {}
    exec(compile(block.replace('"smollm2-135m"', repr(str(tiny_model))), "README", "exec"), ns)
    assert isinstance(ns["out"], pl.DataFrame) and ns["out"].height == 2
    assert isinstance(ns["more"], pd.DataFrame) and len(ns["more"]) == 3
    assert "refund" in capsys.readouterr().out


def test_wrong_argument_types_are_config_errors(clf):
    """Found by the break-it pass: these raised TypeError, or iterated a path's characters into row errors."""
    for data in ("tickets.jsonl", {"state": ["x"]}, 5):
        with pytest.raises(ConfigError, match="data must be a DataFrame"):
            clf.run(data, Q)
    with pytest.raises(ConfigError, match="keep must be a column name"):
        clf.run([{"state": "x"}], Q, keep=5)
    with pytest.raises(ConfigError, match="limit must be an integer"):
        clf.run([{"state": "x"}], Q, limit="3")
    # generators still work
    out = clf.run(({"state": "x", "c": 1} for _ in range(2)), Q, keep=(k for k in ["c"]))
    assert out["c"].to_list() == [1] * 2 * len(Q)


def test_classifier_head_readout_matches_classify(tiny_classifier, tmp_path):
    """`Classifier(..., readout="classifier-head")` is `openjev-batch classify` from Python: the same
    columns, types and values (p_<label> per label, kept columns), the same refusals."""
    from conftest import EXAMPLES

    src = EXAMPLES / "nli" / "rte_sample.jsonl"
    rows = [json.loads(line) for line in src.read_text().splitlines()][:6]
    rows.append({"id": "no-text", "premise": "only a premise"})  # a row error, not an exception
    p = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.parquet"
    r = cli("classify", p, "-o", out, "-m", tiny_classifier, "-b", "hf", "--keep", "gold", "--no-progress")
    assert r.returncode == 3, r.stderr
    want = pl.read_parquet(out)
    df = pl.DataFrame({k: [row.get(k) for row in rows] for k in ("id", "premise", "hypothesis", "gold")})
    with ob.Classifier(str(tiny_classifier), backend="hf", device="cpu", readout="classifier-head") as nli:
        got = nli.run(df, keep="gold")
        assert isinstance(got, pl.DataFrame) and got.columns == want.columns and got.dtypes == want.dtypes
        assert got.equals(want)
        assert want.columns[:4] == ["id", "logits", "probs", "label"] and "p_entailment" in want.columns
        s = nli.last_summary
        assert (s.rows, s.answered, s.errors) == (7, 6, 1)
        assert nli.run(df, keep="all").columns == want.columns  # gold is the one non-input column
        texts = nli.run([{"id": "t", "text": "a plain text row"}], output="arrow")
        assert texts.num_rows == 1 and texts.column("error").to_pylist() == [None]
        templ = nli.run(df.head(1), template="{premise} => {hypothesis}", output="pandas")
        assert templ["label"].notna().all() and templ["prompt_tokens"][0] != want["prompt_tokens"][0]
        # the questions go through the readout's options, the CLI's door: refused as `classify -q` is
        with pytest.raises(ConfigError, match=r"--questions is for run \(label-logprobs\), not for classify"):
            nli.run(df, Q)
        with pytest.raises(ConfigError, match="needs \\{hypothesis\\} exactly once"):
            nli.run(df, template="{premise}")
        with pytest.raises(ConfigError, match="clash with output columns"):
            nli.run(df.with_columns(pl.col("gold").alias("label")), keep="label")
    with pytest.raises(ConfigError, match="this Classifier is closed"):  # hostile trial: AttributeError
        nli.run(df)
    # the one-shot run passes template= to the run (hostile trial: "template: Extra inputs are not permitted")
    one = ob.run(df.head(1), model=str(tiny_classifier), backend="hf", readout="classifier-head",
                 template="{premise} => {hypothesis}", output="pandas")  # fmt: skip
    assert one["prompt_tokens"][0] == templ["prompt_tokens"][0]
    with pytest.raises(ConfigError, match="unknown readout 'nli'"):
        ob.Classifier(str(tiny_classifier), backend="hf", readout="nli")


TICKETS = {"state": ["Refund me now", "Love it", "Where is my parcel"], "channel": ["mail", "chat", "web"]}
ONE_Q = {"refund": Q["refund"]}


def test_output_joins_back_to_the_input(clf):
    """Issue 26: a filtered frame without `id` comes back joinable to its input (pandas: by the index, each
    output row with its input row's label; polars, which has no index: by the position in `id`)."""
    pdf = pd.DataFrame(TICKETS)
    kept = pdf[pdf.channel != "mail"]  # index 1, 2
    got = clf.run(kept, ONE_Q, keep="channel")
    assert list(got.index) == [1, 2]
    assert list(got["channel"]) == list(pdf.loc[got.index, "channel"])  # the join pairs the right rows
    pldf = pl.DataFrame(TICKETS).filter(pl.col("channel") != "mail")
    got_pl = clf.run(pldf, ONE_Q, keep="channel")
    assert got_pl["id"].to_list() == ["0", "1"]  # positions in the frame given
    back = pldf.with_row_index("pos").join(got_pl.with_columns(pl.col("id").cast(pl.UInt32)), left_on="pos",
                                           right_on="id")  # fmt: skip
    assert back["channel"].to_list() == back["channel_right"].to_list()
    assert [list(p) for p in got["probs"]] == got_pl["probs"].to_list()


def test_a_frame_with_an_id_column_keeps_its_index(clf):
    """Hostile trial: with an `id` column the index was dropped (0, 1, … after a filter), so `out.join(df)`
    paired the wrong rows; each id now names its input row's label. Ids that repeat leave a fresh index."""
    pdf = pd.DataFrame({"id": ["a", "b", "c"], **TICKETS}, index=[10, 20, 30])
    kept = pdf[pdf.id != "a"]
    got = clf.run(kept, ONE_Q)
    assert list(got.index) == [20, 30] and list(got["id"]) == ["b", "c"]
    back = got.merge(pdf, left_index=True, right_index=True, suffixes=("", "_in"))
    assert list(back["id_in"]) == ["b", "c"]  # the README's join pairs the right rows
    ints = clf.run(pd.DataFrame({"id": [5, 6], "state": ["x", "y"]}, index=["p", "q"]), ONE_Q)
    assert list(ints.index) == ["p", "q"] and list(ints["id"]) == [5, 6]
    twice = clf.run(pd.DataFrame({"id": ["a", "a", "b"], "state": ["x", "y", "z"]}, index=[3, 4, 5]), ONE_Q)
    # issue 34.13: the duplicate's error row keeps its own label (a fresh 0, 1, 2 gave it another row's)
    assert list(twice.index) == [3, 4, 5] and twice["error"].notna().tolist() == [False, True, False]


@pytest.mark.parametrize(
    "ids",
    [pd.array([30, None, 10], dtype="Int64"), [30.0, float("nan"), 10.0], ["k30", None, "k10"]],
    ids=["Int64", "float-nan", "object-none"],
)
def test_a_null_id_keeps_every_row_on_its_own_label(clf, ids):
    """Issue 34.13: a null id with a non-default index gave the index 0, 1, 2 (the null row's id, its
    position, named no input row), so the README's `merge(left_index=True, right_index=True)` paired id 30
    with s10, silently. Each output row now has its input row's label, whatever the ids."""
    df = pd.DataFrame({"id": ids, "state": ["s30", "sNULL", "s10"]}, index=[2, 1, 0])
    got = clf.run(df, ONE_Q, keep="state")
    assert list(got.index) == [2, 1, 0]
    back = got.merge(df, left_index=True, right_index=True, suffixes=("", "_in"))
    assert list(back["state"]) == list(back["state_in"]) == ["s30", "sNULL", "s10"]
    assert [str(i) for i in back["id"][[2, 0]]] == [str(i) for i in df["id"][[2, 0]]]


def test_integer_ids_keep_their_type(clf):
    """Issue 26: an integer `id` column comes back with its dtype (it came back as strings)."""
    pdf = pd.DataFrame({"id": [7, 8], "state": ["x", "y"]})
    got = clf.run(pdf, ONE_Q)
    assert list(got["id"]) == [7, 8] and got["id"].dtype == pdf["id"].dtype
    pldf = pl.DataFrame({"id": [7, 8], "state": ["x", "y"]}, schema={"id": pl.Int32, "state": pl.String})
    got_pl = clf.run(pldf, ONE_Q)
    assert got_pl["id"].to_list() == [7, 8] and got_pl.schema["id"] == pl.Int32
    strings = clf.run(pl.DataFrame({"id": ["a"], "state": ["x"]}), ONE_Q)
    assert strings["id"].to_list() == ["a"]  # string ids stay strings
    # float ids (integral: 1.0 counts as 1) come back as floats, so `merge(on="id")` joins (they came back "7")
    floats = clf.run(pd.DataFrame({"id": [7.0, 8.0, 1.5], "state": ["x", "y", "z"]}), ONE_Q)
    assert floats["id"].dtype == "float64" and list(floats["id"][:2]) == [7.0, 8.0]
    assert floats["id"].isna().tolist()[2] and floats["error"].notna().tolist() == [False, False, True]


def test_a_series_or_a_list_of_strings_is_the_texts(clf):
    """Issue 26: a Series or a list[str] was iterated into one error row each; it is the `state` texts."""
    ref = clf.run(pd.DataFrame(TICKETS), ONE_Q)
    series = pd.Series(TICKETS["state"], index=[10, 20, 30])
    got = clf.run(series, ONE_Q)
    assert isinstance(got, pd.DataFrame) and list(got.index) == [10, 20, 30]  # the Series' index kept
    assert got["error"].isna().all() and [list(p) for p in got["probs"]] == [list(p) for p in ref["probs"]]
    got_pl = clf.run(pl.Series(TICKETS["state"]), ONE_Q)
    assert isinstance(got_pl, pl.DataFrame) and got_pl["error"].is_null().all()
    assert got_pl["probs"].to_list() == [list(p) for p in ref["probs"]]
    texts = clf.run(TICKETS["state"], ONE_Q)
    assert isinstance(texts, pl.DataFrame) and texts["probs"].to_list() == got_pl["probs"].to_list()
    arr = clf.run(np.array(TICKETS["state"]), ONE_Q)  # a numpy array of texts, as a list is
    assert arr["error"].is_null().all() and arr["probs"].to_list() == got_pl["probs"].to_list()


def test_system_prompt_has_the_cli_limit(tiny_model):
    """Issue 26: `Classifier(system_prompt=…)` is validated as `run --system-prompt` (256 KiB), before the
    model loads."""
    with pytest.raises(ConfigError, match="--system-prompt is 262,145 bytes, limit 262,144"):
        ob.Classifier(str(tiny_model), backend="hf", device="cpu", system_prompt="x" * (256 * 1024 + 1))


def test_limit_converts_only_the_rows_asked_for(clf, monkeypatch):
    """Issue 34.18: `limit=` converted the whole frame to Arrow first (a 10M-row frame: 18.8 s, +1.4 GB for
    10 rows). The data handed to the conversion (frames.records_of) is watched: the first `limit` rows."""
    from openjev_batch.pipeline.input import frames, source

    seen = []
    real = frames.records_of

    def records_of(data, kind, chunk_rows):
        seen.append(len(data))
        return real(data, kind, chunk_rows)

    monkeypatch.setattr(source, "records_of", records_of)  # where FrameSource looks it up
    df = pd.DataFrame({"state": [f"text {i}" for i in range(500)]}, index=range(1000, 1500))
    got = clf.run(df, ONE_Q, limit=3)
    assert seen == [3] and list(got.index) == [1000, 1001, 1002]
    got_pl = clf.run(pl.from_pandas(df), ONE_Q, limit=2)
    assert seen == [3, 2] and got_pl["id"].to_list() == ["0", "1"]


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"bogus": 1}, "bogus: Extra inputs are not permitted"),
        ({"threads": "two"}, "threads must be an integer from 1 to 1024, got 'two'"),
        ({"batch_tokens": 1.5}, "hf.batch_tokens: Input should be a valid integer"),
        ({"keep": 5}, "keep: Input should be a valid tuple"),
    ],
)
def test_an_option_of_an_unknown_name_or_a_wrong_type_is_refused_before_the_model_loads(tmp_path, kw, message):
    """Issue 34.18 (confirmed): the API's options are checked by name and type, one ConfigError, before any
    model loads (the model here is a folder that does not exist)."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        ob.Classifier(str(tmp_path / "no-model"), backend="hf", **kw)
