"""Options shared by the commands (cli/options.py), through the real command: `--system-prompt`'s
`@FILE` / `@@TEXT`, `--keep all`."""

from __future__ import annotations

import polars as pl
from conftest import EXAMPLES, cli, write_jsonl


def test_system_prompt_at_at_is_the_literal_text(tiny_model, tmp_path):
    """`@@TEXT` is the text `@TEXT` (a literal leading `@` could not be given: `@mention me` was read as a
    file and refused); `@FILE` still reads the file; --help says both."""
    args = ["run", EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml", "-m", tiny_model]
    r = cli(*args, "--show-prompt", "1", "--system-prompt", "@@mention me")
    assert r.returncode == 0, r.stderr
    assert "<|im_start|>system\n@mention me<|im_end|>" in r.stdout
    sp = tmp_path / "sp.txt"
    sp.write_text("From a file.", encoding="utf-8")
    r = cli(*args, "--show-prompt", "1", "--system-prompt", f"@{sp}")
    assert r.returncode == 0 and "<|im_start|>system\nFrom a file.<|im_end|>" in r.stdout, r.stderr
    r = cli(*args, "--show-prompt", "1", "--system-prompt", "@mention me")
    assert r.returncode == 4 and "--system-prompt @mention me: cannot read" in r.stderr, r.stderr
    assert "@@TEXT is the literal text @TEXT" in " ".join(cli("run", "--help").stdout.split())


def test_keep_all_keeps_every_input_column(tiny_model, tmp_path):
    """`--keep all` (the API's keep="all") copies every input column the readout neither reads nor writes,
    in the order first seen; the CLI refused it (`--keep column(s) … all`)."""
    rows = [{"id": "a", "state": "Refund me", "channel": "mail", "n": 3},
            {"id": "b", "state": "Love it", "lang": "en"}]  # fmt: skip
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.parquet"
    r = cli("run", src, "-q", EXAMPLES / "ticket_questions.yaml", "-m", tiny_model, "-b", "hf", "-o", out,
            "--keep", "all", "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr
    df = pl.read_parquet(out)
    assert df.columns[-7:] == ["error", "chosen", "order_spread", "answer_key", "channel", "n", "lang"]  # answer_key: issue 50
    assert "state" not in df.columns
    got = df.unique("id", maintain_order=True).select("id", "channel", "n", "lang").rows()
    assert got == [("a", "mail", 3, None), ("b", None, None, "en")]
    assert "`all`: every input column" in cli("run", "--help").stdout
