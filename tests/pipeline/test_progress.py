"""Progress that tells the truth (issue #20): counts move as branches finish inside a window, totals are
known up front; a resumed job's summary counts the whole job; the answer distribution at the end."""

from __future__ import annotations

import re

import polars as pl
import pytest
from conftest import EXAMPLES, cli, write_jsonl

from openjev_batch.config import build_config
from openjev_batch.pipeline.job import run_job
from openjev_batch.pipeline.progress import Progress
from openjev_batch.readouts.label_logprobs.answer import confidence

Q = {"u": {"type": "noul", "instructions": "Urgent?"},
     "k": {"type": "choice", "instructions": "Kind?", "criteria": {"a": None, "b": None, "c": None}}}  # fmt: skip


def _rows(n: int) -> list[dict]:
    return [{"id": f"r{i}", "state": f"ticket number {i}: it broke", "questions": Q} for i in range(n)]


def test_progress_moves_per_row_inside_one_window(hf_backend, tmp_path):
    """Six rows in one window: the hf backend reports each row as it finishes, so the counts move six
    times before the window ends (the old bar moved once per window: a 200-question eval read 0 for 26
    minutes). The row error and its two records are counted too; every total matches the summary."""
    rows = [*_rows(6), {"id": "bad", "state": "", "questions": Q}]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    seen, windows = [], []
    live = Progress(listener=lambda p: seen.append((p.records_done, p.rows_done, p.total_records)))
    cfg = build_config(input=src, output=tmp_path / "o.parquet", model="-", backend="hf", progress=False)
    s = run_job(cfg, backend=hf_backend, on_progress=lambda n, t: windows.append(n), progress=live)
    assert windows == [12]  # one window for the six good rows
    assert live.total_rows == 7  # counted before the job
    # one event for the chunk read (7 rows need 14 records), one per row as hf finishes it, one for the
    # row error at the end of the chunk
    assert seen == [(0, 0, 14), *[(2 * k, k, 14) for k in range(1, 7)], (14, 7, 14)]
    assert (live.records_done, live.rows_done, live.branches_done) == (s.questions, s.rows, 12) == (14, 7, 12)
    assert (live.tokens, live.cached, live.warm) == (s.branch_tokens, s.cached_tokens, s.warm_tokens)
    assert live.hit_rate() == pytest.approx(s.cache_hit_rate)
    assert re.fullmatch(r"14/14 questions · 7/7 rows · [0-9,]+ tok/s · cache -?[0-9]+%", live.text())


def test_cli_progress_line_and_answer_distribution(tiny_model, tmp_path):
    """The CLI's bar ends on the whole job's counts, and the run ends with each question's answer
    distribution: rows per option and their mean confidence, as in the output file."""
    src = write_jsonl(tmp_path / "in.jsonl", _rows(5))
    out = tmp_path / "o.parquet"
    r = cli("run", src, "-m", tiny_model, "-b", "hf", "-o", out)
    assert r.returncode == 0, r.stderr
    assert re.search(r"10/10 questions · 5/5 rows · [0-9,]+ tok/s · cache", r.stderr), r.stderr
    df = pl.read_parquet(out)
    table = r.stderr[r.stderr.index("answers") :]
    for qid, opts in (("u", ["true", "false"]), ("k", ["a", "b", "c"])):
        sub = df.filter(pl.col("question_id") == qid)
        for i, opt in enumerate(opts):
            got = sub.filter(pl.col("answer") == opt)
            conf = "–" if got.height == 0 else f"{got['confidence'].mean():.2f}"
            share = f"{got.height / sub.height:.0%}"
            cells = rf"{qid if i == 0 else ''}\s*│\s*{opt}\s*│\s*{got.height}\s*│\s*{share}\s*│\s*{conf}"
            assert re.search(cells, table), (qid, opt, table)
    # a job refused at once prints its error alone: no empty bar above it (the new-user trial saw one)
    r = cli("run", tmp_path / "missing.jsonl", "-m", tiny_model, "-b", "hf", "-o", tmp_path / "m.parquet")
    assert r.returncode == 4 and "error:" in r.stderr
    assert "prefill" not in r.stderr and "0 questions" not in r.stderr, r.stderr


def test_answers_of_different_questions_under_one_id_are_counted_apart(hf_backend, tmp_path):
    """Per-row questions may reuse an id for another question (hostile trial: a noul `q` and a choice `q`
    with options true/x were summed into one `true` count, `x` never listed): each variant is its own entry."""
    noul = {"q": {"type": "noul", "instructions": "Urgent?"}}
    choice = {"q": {"type": "choice", "instructions": "Which?", "criteria": {"true": None, "x": None}}}
    rows = [{"id": f"n{i}", "state": f"t {i}", "questions": noul} for i in range(3)]
    rows += [{"id": f"c{i}", "state": f"t {i}", "questions": choice} for i in range(2)]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    cfg = build_config(input=src, output=tmp_path / "o.parquet", model="-", backend="hf", progress=False)
    s = run_job(cfg, backend=hf_backend)
    assert list(s.answers) == ["q (noul: true, false)", "q (choice: true, x)"]
    assert [o for o, *_ in s.answers["q (choice: true, x)"]] == ["true", "x"]
    assert sum(n for _, n, _ in s.answers["q (noul: true, false)"]) == 3
    assert sum(n for _, n, _ in s.answers["q (choice: true, x)"]) == 2


def test_summary_answers_match_the_output(hf_backend, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [*_rows(8), {"id": "bad", "state": 3, "questions": Q}])
    cfg = build_config(input=src, output=tmp_path / "o.parquet", model="-", backend="hf", progress=False)
    s = run_job(cfg, backend=hf_backend)
    df = pl.read_parquet(tmp_path / "o.parquet")
    assert list(s.answers) == ["u", "k"]
    for qid, opts in s.answers.items():
        sub = df.filter(pl.col("question_id") == qid).drop_nulls("answer")
        assert [o for o, *_ in opts] == sub["options"][0].to_list()
        assert sum(n for _, n, _ in opts) == sub.height == 8  # the row error answered nothing
        for opt, n, conf in opts:
            got = sub.filter(pl.col("answer") == opt)
            assert n == got.height
            assert conf is None if n == 0 else conf == pytest.approx(got["confidence"].mean())


def _table(text: str) -> dict[str, str]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows


def _stop_in_chunk_three(cfg, backend) -> None:
    """Run `cfg` and stop it in its third window (one window per chunk here): two parts are on disk."""
    windows = []

    def stop(n: int, t: int) -> None:
        windows.append(n)
        if len(windows) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_job(cfg, backend=backend, on_progress=stop)
    assert len(list(cfg.output.with_name(cfg.output.name + ".partial").glob("part-*.parquet"))) == 2


def test_resumed_summary_counts_the_whole_job(tiny_model, hf_backend, tmp_path):
    """A job stopped after its first two chunks and resumed reports the numbers of the uninterrupted job
    (issue #20: a resumed run counted only its own chunks' prefix passes, 12,042 computed tokens / 32.5 %
    instead of 12,680 / 28.9 %), and names the chunks it took from OUT.partial."""
    qf = EXAMPLES / "ticket_questions.yaml"
    args = [EXAMPLES / "tickets.jsonl", "-q", qf, "-m", tiny_model, "-b", "hf", "--chunk-rows", "6"]
    out = tmp_path / "out.parquet"
    cfg = build_config(input=EXAMPLES / "tickets.jsonl", output=out, model=str(tiny_model), backend="hf",
                       questions=qf, chunk_rows=6, progress=False)  # fmt: skip
    _stop_in_chunk_three(cfg, hf_backend)
    live = Progress()
    s = run_job(cfg.model_copy(update={"resume": True}), backend=hf_backend, progress=live)
    whole = run_job(cfg.model_copy(update={"output": tmp_path / "whole.parquet"}), backend=hf_backend)
    assert s.resumed_chunks == (0, 1) and whole.resumed_chunks == ()
    for k in ("rows", "questions", "branch_tokens", "cached_tokens", "warm_tokens", "unique_tokens",
              "computed_tokens", "cache_hit_rate", "answers"):  # fmt: skip
        assert getattr(s, k) == getattr(whole, k), k
    # this run computed only the last two chunks (hf counts a prefix pass in its first branch: no warm-up)
    assert s.warm_tokens == live.warm == 0 and s.cached_tokens > live.cached > 0
    assert (live.resumed_rows, live.rows_done, live.total_rows) == (12, 24, 24)
    # the CLI prints the same table for the resumed job as for the uninterrupted one, plus the chunks
    pq = tmp_path / "cli.parquet"
    _stop_in_chunk_three(cfg.model_copy(update={"output": pq}), hf_backend)
    got = cli("run", *args, "--no-progress", "-o", pq, "--resume")
    assert got.returncode == 0, got.stderr
    assert pl.read_parquet(pq).equals(pl.read_parquet(tmp_path / "whole.parquet"))
    b = _table(got.stderr)
    assert (b["rows"], b["questions"], b["computed tokens"], b["cache hit rate"]) == (
        "24",
        f"{whole.questions:,}",
        f"{whole.computed_tokens:,}",
        f"{whole.cache_hit_rate:.1%}",
    )
    # issue 48.16: "2: 0–1" was unreadable
    assert b["chunks resumed (read back from the partial, not run again; counted above)"] == "2 (chunks 0–1)"


@pytest.mark.sglang
def test_sglang_reports_each_request_batch(sglang_backend, monkeypatch):
    """sglang reports each request batch as it returns: the first-branch pattern per group (first
    branches, then the rest), the hybrid prefix-first pattern per step; each branch counts once, and the
    totals are the window's results."""
    from token_rows import make_rows

    from openjev_batch.backends.sglang.state import StateBudget, state_groups
    from openjev_batch.core import RowPrompt
    from openjev_batch.pipeline.plan import plan
    from openjev_batch.pipeline.progress import WindowReports

    rows = make_rows(n_rows=8, n_q=3, seed=3)
    rows = [RowPrompt(i, str(i), r.prefix, r.branches) for i, r in enumerate(rows)]
    (w,) = plan(rows, 100_000)

    def run(expected_events: int) -> None:
        events = []
        live = Progress(listener=lambda p: events.append(p.branches_done))
        reports = WindowReports(w, sglang_backend, live)
        sglang_backend.on_branches = reports
        try:
            out = sglang_backend.prefill(w)
        finally:
            sglang_backend.on_branches = None
        assert len(events) == expected_events and events[-1] == 24, events
        reports.finish(w, out)  # every branch was reported: nothing is counted twice
        flat = [r for res in out for r in res]
        assert (live.branches_done, live.rows_done) == (24, 8) and len(events) == expected_events
        assert live.tokens == sum(r.prompt_tokens for r in flat)
        assert live.cached == sum(r.cached_tokens for r in flat)

    sglang_backend.engine.flush_cache()
    from openjev_batch.backends.sglang.patterns.first_branch import groups as first_branch_groups

    run(2 * len(first_branch_groups(w, sglang_backend.groups_per_window)))  # per group: firsts, then the rest
    budget = StateBudget(slots=20, per_request=3)
    monkeypatch.setattr(sglang_backend, "state_budget", budget)
    groups = state_groups(
        w.rows, budget, sglang_backend.hybrid_depth, overlap=sglang_backend.hybrid_overlap,
        lead=sglang_backend.hybrid_lead,
    )  # fmt: skip
    run(len(groups))  # per group its branches (the prefix-only step before the first reports none)


def test_api_run_takes_a_progress(tiny_model):
    import openjev_batch as ob

    df = pl.DataFrame({"id": ["a", "b", "c"], "state": ["Refund me", "It broke", "Thanks!"]})
    events = []
    live = Progress(listener=lambda p: events.append(p.rows_done))
    out = ob.run(df, Q, model=str(tiny_model), backend="hf", progress=live)
    assert (live.total_rows, live.rows_done, live.records_done) == (3, 3, out.height) == (3, 3, 6)
    assert events == [0, 1, 2, 3]  # the chunk read, then each row as the hf backend finishes it


def test_total_estimate_rates_and_eta_on_a_clock():
    """Before every chunk is read, the total of records is estimated from the chunks read (records per
    row × all rows); rates start at the first chunk (not while the model loads); resumed records count as
    done but not in the rate the ETA uses."""
    now = [100.0]
    p = Progress(total_rows=10, clock=lambda: now[0])
    assert p.total_records is None and p.eta_s() is None and p.text() == "0 questions · 0/10 rows · 0 tok/s"
    now[0] = 160.0  # a minute of model loading: not in the rates
    p.chunk_read(4, 12)  # 3 questions per row so far
    assert p.total_records == 30
    p.resumed(2, 6)  # an earlier run's chunk
    now[0] = 170.0
    p.branches(6, 600, 150, warm=30, rows=2)
    assert p.token_rate() == 60.0 and p.hit_rate() == pytest.approx(1 - (600 - 150 + 30) / 600)
    assert p.eta_s() == pytest.approx((30 - 12) / (6 / 10))  # 18 records left at 0.6 records/s
    assert p.text() == "12/30 questions · 4/10 rows · 60 tok/s · cache 20% · ETA 0:00:30"
    p.chunk_read(6, 12)  # the rest: 2 questions per row there, the total is now exact
    assert p.total_records == 24


def test_the_bar_redraws_between_events(monkeypatch):
    """The CLI's bar is redrawn by rich's own thread (twice a second), so its rates and ETA move while a
    long window runs without any event."""
    import io
    import time

    from rich.console import Console

    from openjev_batch.cli import display

    buf = io.StringIO()
    monkeypatch.setattr(display, "err", Console(file=buf, force_terminal=True, width=200))
    with display._progress("prefill", "questions", True) as live:
        live.total_rows = 4
        live.chunk_read(4, 8)
        live.branches(2, 100, 0, rows=1)
        n0 = buf.getvalue().count("2/8 questions")
        time.sleep(1.6)  # no event meanwhile
        assert buf.getvalue().count("2/8 questions") >= n0 + 2


def test_classify_answers_and_progress_per_batch(hf_cls, tmp_path):
    """classify's distribution is one question, `label`, over the checkpoint's labels; its rows are
    reported per padded batch. Its mean confidence is the mean of the `confidence` column, 1 − H/ln K as
    run's (issue 34.7: it was the mean top probability)."""
    rows = [
        {"id": f"r{i}", "premise": f"A man is eating pasta {i}.", "hypothesis": "He eats."} for i in range(5)
    ]
    src = write_jsonl(tmp_path / "in.jsonl", [*rows, {"id": "bad", "premise": 3}])
    cfg = build_config(input=src, output=tmp_path / "o.parquet", model="-", backend="hf",
                       readout="classifier-head", progress=False)  # fmt: skip
    live = Progress()
    s = run_job(cfg, backend=hf_cls, progress=live)
    df = pl.read_parquet(tmp_path / "o.parquet").drop_nulls("label")
    assert list(s.answers) == ["label"] and [o for o, *_ in s.answers["label"]] == list(hf_cls.labels)
    for opt, n, conf in s.answers["label"]:
        got = df.filter(pl.col("label") == opt)
        assert n == got.height
        assert conf is None if n == 0 else conf == pytest.approx(got["confidence"].mean())
    for probs, conf in zip(df["probs"].to_list(), df["confidence"].to_list(), strict=True):
        assert conf == pytest.approx(confidence(probs)) and conf != pytest.approx(max(probs))
    assert sum(n for _, n, _ in s.answers["label"]) == 5
    assert (live.rows_done, live.records_done, live.tokens) == (6, 6, s.branch_tokens)


def test_a_log_gets_a_plain_progress_line_every_few_seconds(monkeypatch):
    """Issue 34.3: with stderr not a terminal (`2>job.log`, cron, Kubernetes) the redrawn bar wrote nothing
    until the job ended. Now a log line every OPENJEV_HEARTBEAT_S seconds (rows, share, rate, ETA) from the
    first chunk on, and one when the job ends."""
    import io
    import time

    from rich.console import Console

    from openjev_batch.cli import display

    buf = io.StringIO()
    monkeypatch.setattr(display, "err", Console(file=buf, force_terminal=False, width=80))
    monkeypatch.setenv("OPENJEV_HEARTBEAT_S", "0.2")
    with display._progress("prefill", "questions", True) as live:
        time.sleep(0.5)
        assert buf.getvalue() == ""  # nothing while the model loads
        live.total_rows = 4
        live.chunk_read(4, 8)
        live.branches(2, 100, 0, rows=1)
        time.sleep(1.2)  # no event meanwhile
        beats = buf.getvalue().splitlines()
    assert len(beats) >= 3, beats
    line = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d prefill 25% · 2/8 questions · 1/4 rows · [0-9,]+ tok/s · cache 0%"
    assert all(re.fullmatch(line + r"( · ETA \d+:\d\d:\d\d)? · elapsed \d+:\d\d:\d\d", b) for b in beats), beats
    assert len(buf.getvalue().splitlines()) == len(beats) + 1  # the last line, at the end
    assert "\x1b" not in buf.getvalue()  # plain text: no cursor movement or colour


@pytest.mark.parametrize("value", ["0", "-5", "soon", "nan"])
def test_a_heartbeat_interval_that_is_no_duration_is_refused(monkeypatch, value):
    from openjev_batch.cli.display import heartbeat_s
    from openjev_batch.errors import ConfigError

    monkeypatch.setenv("OPENJEV_HEARTBEAT_S", value)
    with pytest.raises(ConfigError, match="OPENJEV_HEARTBEAT_S"):
        heartbeat_s()
