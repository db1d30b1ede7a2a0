"""The one resolver of `--request-pattern` (backends/sglang/patterns), without an engine: what `auto` means
for a dense and a hybrid model on engines with and without multi-item scoring, the refusals, and `--dry-run`
asking the same resolver (it used to name first-branch where a GPU run uses multi-item)."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES, cli

from openjev_batch.backends.sglang.patterns import planned, resolve, words
from openjev_batch.checkpoint.info import model_info
from openjev_batch.errors import ConfigError


@pytest.mark.parametrize(
    "asked, multi_item, hybrid, expected",
    [
        ("auto", False, False, "first-branch"),
        ("auto", False, True, "prefix-first"),
        ("auto", True, False, "multi-item"),
        ("auto", True, True, "multi-item"),
        ("prefix-first", False, False, "prefix-first"),  # a dense model may ask for it
        ("first-branch", False, True, "first-branch"),
        ("multi-item", True, False, "multi-item"),
    ],
)
def test_resolve(asked, multi_item, hybrid, expected):
    assert resolve(asked, multi_item=multi_item, hybrid=hybrid) == expected


def test_resolve_refuses_what_the_started_engine_cannot_serve():
    with pytest.raises(
        ConfigError, match="--request-pattern first-branch: this engine was started for multi"
    ):
        resolve("first-branch", multi_item=True, hybrid=False)
    with pytest.raises(ConfigError, match=r"started without multi-item scoring \(needs a CUDA GPU\)"):
        resolve("multi-item", multi_item=False, hybrid=False, multi_item_off="needs a CUDA GPU")


def test_dry_run_asks_the_same_resolver(tiny_model, tmp_path):
    """The config's options decide multi-item as the start-up would: a dense model on a CUDA device gets
    multi-item scoring (the GPU run's default), on the CPU first-branch; a pattern the engine would refuse is
    named with the refusal; the hf backend never runs multi-item."""
    pytest.importorskip("sglang.srt")  # the start-up's choice reads sglang's version
    from openjev_batch.config import build_config

    info = model_info(str(tiny_model))
    base = dict(input=EXAMPLES / "tickets.jsonl", model=str(tiny_model))

    def plan(**kw) -> str:
        return planned(build_config(**{**base, **kw}), info)

    assert plan(backend="sglang", device="cuda") == words("multi-item")
    assert plan(backend="sglang", device="cuda:1") == words("first-branch")  # engine_kwargs: not "cuda"
    assert plan(backend="sglang", device="cpu") == words("first-branch")
    assert plan(backend="sglang", device="cuda", request_pattern="prefix-first") == words("prefix-first")
    assert plan(backend="hf", device="cuda") == words("first-branch")
    refused = plan(backend="sglang", device="cpu", request_pattern="multi-item")
    assert refused.startswith("refused when the engine starts: multi-item scoring") and "CUDA GPU" in refused


def test_dry_run_cli_names_multi_item_for_a_gpu_run(tiny_model):
    pytest.importorskip("sglang.srt")
    r = cli(
        "run", EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml", "-m", tiny_model,
        "-b", "sglang", "--device", "cuda", "--dry-run",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert words("multi-item") in r.stdout


def test_multi_item_recompute_counts_a_shared_prefix_once_per_pack_run_and_advises_prefix_first():
    """W3-like tickets (unique prefixes) cost multi-item nothing extra; a long block shared by different row
    prefixes (few-shot, W2-like) is recomputed per row, and the advice names prefix-first."""
    from openjev_batch.backends.sglang.patterns import advice, multi_item_recompute
    from openjev_batch.core import BranchSpec, RowPrompt
    from openjev_batch.pipeline.plan import plan

    def row(i, prefix):
        return RowPrompt(i, str(i), tuple(prefix), tuple(BranchSpec(f"q{k}", (7, k), (1, 2)) for k in range(3)))

    tickets = [row(i, [100 + i] * 50) for i in range(10)]  # nothing shared
    mis, unique = multi_item_recompute(plan(tickets, 1 << 20))
    assert mis == unique == 10 * 50 + 10 * 3 * 2
    assert "prefix-first" not in advice(mis, unique).split("(")[0]
    shots = [row(i, [5] * 1000 + [100 + i] * 20) for i in range(10)]  # a 1,000-token block before each ticket
    mis, unique = multi_item_recompute(plan(shots, 1 << 20))
    assert mis == 10 * 1020 + 60 and unique == 1000 + 10 * 20 + 60
    assert "--request-pattern prefix-first" in advice(mis, unique)
