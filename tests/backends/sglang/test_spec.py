"""`--request-pattern auto` on a Qwen3.5/3.6 hybrid on sglang (backends/sglang/spec.py's `prepare`, asked by
pipeline/job.choose_request_pattern for the job's backend): the planner's
counts over the job's first chunk pick multi-item scoring (one request per ticket) or prefix-first (a long block
shared by different rows, which multi-item would compute in every pack). Before it, the input is read for images
(issue 41: pipeline/job_images.choose_images, for a backend whose spec has `images_at_start`): a job with images
starts a vision-language model's engine multimodal and runs no multi-item. Tokenizer and config.json only."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import write_jsonl

from openjev_batch.config import build_config
from openjev_batch.pipeline.job import choose_request_pattern

Q = {"urgent": {"type": "noul", "instructions": "Urgent?"}}


def hybrid_folder(tmp_path, tok_dir, arch="Qwen3_5MoeForConditionalGeneration"):
    d = tmp_path / "model"
    shutil.copytree(tok_dir, d)
    text = {"model_type": "qwen3_5_moe_text", "num_hidden_layers": 4, "max_position_embeddings": 8192,
            "layer_types": ["linear_attention"] * 3 + ["full_attention"]}  # fmt: skip
    (d / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": "qwen3_5_moe",
                                               "text_config": text}))  # fmt: skip
    return d


def cfg(tmp_path, model, rows, **kw):
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    return build_config(input=src, model=str(model), backend="sglang", device="cpu", progress=False, **kw)


def test_unique_tickets_keep_multi_item_and_a_long_shared_block_picks_prefix_first(tmp_path, qwen3_tok_dir):
    model = hybrid_folder(tmp_path, qwen3_tok_dir)
    tickets = [{"id": f"t{i}", "state": f"ticket {i}: " + f"word{i} " * 60, "questions": Q} for i in range(8)]
    c, why = choose_request_pattern(cfg(tmp_path, model, tickets))
    assert c.sglang.request_pattern == "auto" and "auto → multi-item" in why and "on the first 8 rows" in why
    shots = "Examples of urgent tickets: " + "the printer is on fire again. " * 120  # ~1k tokens before each row
    c, why = choose_request_pattern(cfg(tmp_path, model, tickets, system_prompt=shots))
    assert c.sglang.request_pattern == "prefix-first" and "auto → prefix-first" in why


def test_only_an_auto_job_on_a_forked_hybrid_on_sglang_is_chosen_for(tmp_path, qwen3_tok_dir):
    rows = [{"id": "a", "state": "x", "questions": Q}]
    model = hybrid_folder(tmp_path, qwen3_tok_dir)
    asked = cfg(tmp_path, model, rows, request_pattern="multi-item")
    text_only = {"images": False}  # the input read for images first (issue 41): none here
    assert choose_request_pattern(asked) == (asked.model_copy(update=text_only), "")  # the user's choice stands
    dense = hybrid_folder(tmp_path / "d", qwen3_tok_dir, arch="Qwen3ForCausalLM")
    plain = cfg(tmp_path, dense, rows)
    assert choose_request_pattern(plain) == (plain.model_copy(update=text_only), "")
    hf = build_config(input=tmp_path / "in.jsonl", model=str(model), backend="hf", progress=False)
    assert choose_request_pattern(hf) == (hf, "")


def test_connect_is_known_before_the_start_no_multi_item_is_announced(tmp_path, qwen3_tok_dir):
    """Issue 49.1: `--connect` drives a server over HTTP, which runs no multi-item: the pre-start choice
    announced "multi-item where the engine runs it" for a hybrid, which remote.py then turned off. It chooses
    nothing, and the dry run's prediction names --connect."""
    from openjev_batch.backends.sglang.patterns import engine_multi_item

    model = hybrid_folder(tmp_path, qwen3_tok_dir)
    tickets = [{"id": f"t{i}", "state": f"ticket {i}: " + f"word{i} " * 60, "questions": Q} for i in range(8)]
    c, why = choose_request_pattern(cfg(tmp_path, model, tickets, connect="http://127.0.0.1:1"))
    assert why == "" and c.sglang.request_pattern == "auto"
    assert engine_multi_item(c) == (False, "off: --connect drives a running server")


def test_the_choice_plans_with_the_jobs_readout_built_once(tmp_path, qwen3_tok_dir):
    """The CLI builds a job's readout once and hands it to the choice and the job: the first chunk's plan reads
    no questions file again (here gone after the build, so a second build would fail)."""
    from openjev_batch import readouts
    from openjev_batch.errors import OpenjevError

    model = hybrid_folder(tmp_path, qwen3_tok_dir)
    q = tmp_path / "q.json"
    q.write_text(json.dumps(Q))
    rows = [{"id": f"t{i}", "state": f"ticket {i}: " + f"word{i} " * 60} for i in range(4)]
    job = cfg(tmp_path, model, rows, questions=q)
    readout = readouts.build(job.readout, job)
    q.unlink()
    c, why = choose_request_pattern(job, readout)
    assert c.sglang.request_pattern == "auto" and "on the first 4 rows" in why
    with pytest.raises(OpenjevError, match="q.json"):
        choose_request_pattern(job)  # built again: the file it names is gone


def test_an_input_with_images_starts_the_engine_multimodal_and_runs_no_multi_item(tmp_path, qwen3_tok_dir):
    """Issue 41: the input is read before the engine starts; an image column (or an image part of a message)
    sets `images`, which the backend options carry to the engine (multimodal, no GDN fork: images.py), and
    the hybrid's multi-item planning is skipped (such an engine runs none). A text-only input keeps both."""
    from openjev_batch.pipeline.job_images import choose_images

    model = hybrid_folder(tmp_path, qwen3_tok_dir)
    rows = [{"id": f"t{i}", "state": f"ticket {i}", "questions": Q} for i in range(3)]
    text, why = choose_images(cfg(tmp_path, model, rows))
    assert text.images is False and why == "" and text.backend_options(str(model)).images is False
    c, why = choose_request_pattern(cfg(tmp_path, model, rows))
    assert c.images is False and "request pattern auto →" in why
    pics = [*rows, {"id": "p", "state": "a photo", "image": "p.png", "questions": Q}]
    c, why = choose_request_pattern(cfg(tmp_path, model, pics))
    assert c.images is True and c.sglang.request_pattern == "auto" and "starts multimodal" in why
    assert "multi-item" not in why.split("(")[0] and c.backend_options(str(model)).images is True
    parts = [{"id": "m", "questions": Q, "state": [{"role": "user", "content": [
        {"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "p.png"}}]}]}]  # fmt: skip
    assert choose_images(cfg(tmp_path, model, parts))[0].images is True
    given = cfg(tmp_path, model, rows, images=True)  # set already (the Python API): kept
    assert choose_images(given) == (given, "")
    hf = build_config(input=tmp_path / "in.jsonl", model=str(model), backend="hf", progress=False)
    assert choose_images(hf) == (hf, "") and hf.images is None


def test_dry_run_predicts_no_multi_item_for_a_vision_model_with_images(tmp_path, qwen3_tok_dir):
    """`--dry-run` names the pattern the engine would run: with images, a vision-language checkpoint's engine
    turns multi-item off (a hybrid's even when asked for by enable_mis; another's unless asked)."""
    from openjev_batch.backends.sglang.patterns import takes_images_off_multi_item

    model = hybrid_folder(tmp_path, qwen3_tok_dir, arch="Qwen3_5ForConditionalGeneration")
    c = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**c, "vision_config": {"depth": 1}}))
    rows = [{"id": "a", "state": "x", "image": "a.png", "questions": Q}]
    assert takes_images_off_multi_item(cfg(tmp_path, model, rows, images=True))
    assert takes_images_off_multi_item(cfg(tmp_path, model, rows, images=True, engine_args={"enable_mis": True}))
    assert not takes_images_off_multi_item(cfg(tmp_path, model, rows, request_pattern="multi-item"))
    text = hybrid_folder(tmp_path / "t", qwen3_tok_dir)  # no vision_config: a text-only export
    assert not takes_images_off_multi_item(cfg(tmp_path, text, rows))


def test_dry_run_names_the_installed_sglang_and_whether_the_hybrid_fork_serves_it(tmp_path, qwen3_tok_dir, tiny_model):
    """Issue 38.4: the package's extra, the README and `--dry-run` agree on which releases run exact hybrid
    multi-item. The real command on a Qwen3.5 hybrid (config.json + tokenizer) names the installed sglang
    release, that the fork (fork_releases.FORK_SGLANG) serves it, and how far it is verified (fork_releases.fork_note); a dense
    model's plan has no such line."""
    import importlib.metadata

    from conftest import EXAMPLES, cli

    from openjev_batch.backends.sglang import fork_releases

    try:
        version: str | None = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:  # CI's plain `pip install '.[dev]'`: no sglang
        version = None
    model = hybrid_folder(tmp_path, qwen3_tok_dir)
    args = ("run", EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml", "-b", "sglang",
            "--device", "cuda", "--dry-run")  # fmt: skip
    r = cli(*args, "-m", model)
    assert r.returncode == 0, r.stdout + r.stderr
    flat = " ".join(r.stdout.replace("│", " ").split())  # the table wraps the line: compare its words
    served = f"{fork_releases.FORK_SGLANG[0]}-{fork_releases.FORK_SGLANG[-1]}"
    if version is None:  # the plan still says which releases the fork serves, and that none is installed
        assert f"sglang not installed; the exact hybrid multi-item fork serves sglang {served}" in flat
    else:
        assert f"sglang {version} installed: the exact hybrid multi-item fork serves it" in flat
        assert f"({served})" in flat
        assert " ".join(fork_releases.fork_note(version).split(": ", 1)[1].split()) in flat
    dense = cli(*args, "-m", tiny_model)
    assert dense.returncode == 0 and "installed" not in dense.stdout and "fork serves" not in dense.stdout


def test_the_release_line_for_a_release_the_fork_does_not_serve():
    from openjev_batch.backends.sglang import fork_releases

    assert "not this release (prefix-first runs instead)" in fork_releases.fork_release("0.5.24")
    assert fork_releases.fork_release(None).startswith("sglang not installed")
    assert fork_releases.fork_release("0.5.17").endswith("exactness measured on a GPU")
    assert "unused" in fork_releases.fork_release("0.5.21")


def test_the_run_summary_says_what_the_dry_run_says(tmp_path, qwen3_tok_dir, tiny_model):
    """The started backend's request-pattern line (`SGLangBackend.pattern`, built with `patterns.with_release`
    and the engine's own `sglang.__version__`) carries the same release line as `--dry-run` on a hybrid; the
    CPU engine runs no hybrid, so the line is checked here from the model's config, and a dense model gets
    none."""
    from openjev_batch.backends.sglang import fork_releases
    from openjev_batch.backends.sglang.patterns import with_release
    from openjev_batch.checkpoint.info import model_info

    hybrid = model_info(str(hybrid_folder(tmp_path, qwen3_tok_dir, arch="Qwen3_5ForCausalLM")))
    assert with_release("prefix-first", hybrid, "0.5.24") == f"prefix-first; {fork_releases.fork_release('0.5.24')}"
    assert with_release("multi-item", hybrid, "0.5.19").startswith("multi-item; sglang 0.5.19 installed: the exact")
    assert with_release("first-branch", model_info(str(tiny_model)), "0.5.19") == "first-branch"
