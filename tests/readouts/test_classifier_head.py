"""The classify mode: template/prefix split, rows, readout, checkpoint checks, the hf reference, the sglang
classifier (parity with hf, the bias-free head override), the CLI, and real RTE/CB text.

One tiny random 3-label Qwen3ForSequenceClassification (real Qwen3 tokenizer, no `score.bias` in the
checkpoint, as transformers saves it) and one sglang engine for the whole session."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from openjev_batch.backends import load_backend
from openjev_batch.backends.base import BackendOptions
from openjev_batch.checkpoint.classifier import Checkpoint, read_checkpoint
from openjev_batch.cli.options import unescape
from openjev_batch.config import build_config
from openjev_batch.core import RowError
from openjev_batch.errors import BackendError, ConfigError, InputFileError
from openjev_batch.pipeline.job import run_job
from openjev_batch.pipeline.plan import plan
from openjev_batch.readouts.classifier_head import read_out
from openjev_batch.readouts.classifier_head.prompt import build_prompts, prompt_ids
from openjev_batch.readouts.classifier_head.rows import ClsRow, parse_cls_row
from openjev_batch.readouts.classifier_head.template import DEFAULT_TEMPLATE, Template

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: conftest, tiny
from conftest import EXAMPLES, cli, sglang_cpu_engine, write_jsonl  # noqa: E402
from tiny import ID2LABEL  # noqa: E402

LABELS = tuple(ID2LABEL.values())
NLI = EXAMPLES / "nli"


def load_classifier(name: str, opts: BackendOptions):
    return load_backend(name, opts, "classifier-head")


def build_classify_config(**kw):
    """classify = run with the classifier-head readout."""
    return build_config(readout="classifier-head", **kw)


def run_classify(cfg, backend=None):
    return run_job(cfg, backend=backend)


def classify(backend, window):
    """Each row's one branch result (its logits in `.values`)."""
    return [res for (res,) in backend.prefill(window)]


@pytest.fixture(scope="session")
def sglang_cls(tiny_classifier):
    """The one sglang classifier engine (CPU) of the session."""
    yield from sglang_cpu_engine(tiny_classifier, 16_384, "classifier-head")


def flat(rows) -> list[float]:
    return [v for r in rows for v in r]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def many_hypotheses(rows: list[dict], n_premises: int = 5, k: int = 4) -> list[dict]:
    """Real CB premises, each paired with its own and k-1 other rows' hypotheses (several per premise)."""
    out = []
    for i, r in enumerate(rows[:n_premises]):
        for j in range(k):
            h = rows[(i + j) % len(rows)]["hypothesis"]
            out.append({"id": f"{r['id']}-h{j}", "premise": r["premise"], "hypothesis": h})
    return out


# --------------------------------------------------------------------------- template and rows


FOUR = [
    ("A man is eating pasta.", "Someone eats."),
    ("The cat sat on the mat.", "A dog is sleeping."),
    ("Prices rose 3% in May.", "Inflation went up."),
    ('She said "no".', "  She agreed."),
]


def test_prefix_split_before_the_space_matches_whole_tokenization(qwen3_tok):
    t = Template(DEFAULT_TEMPLATE)
    naive_ok = 0
    for p, h in FOUR:
        text, prefix = t.render(p, h)
        assert text == f"Premise: {p}\nHypothesis: {h}"
        assert prefix == f"Premise: {p}\nHypothesis:"  # cut before the space of the variable part
        full = qwen3_tok(text)["input_ids"]
        assert qwen3_tok(prefix)["input_ids"] + qwen3_tok(text[len(prefix) :])["input_ids"] == full
        naive_ok += qwen3_tok(prefix + " ")["input_ids"] + qwen3_tok(h)["input_ids"] == full
    assert naive_ok == 0  # splitting after ": " changes the tokens of every one of these rows

    rows = [
        ClsRow(i, str(i), *t.render(p, h), {}) for i, (p, h) in enumerate(FOUR + [(FOUR[0][0], "No one.")])
    ]
    prompts = build_prompts(rows, qwen3_tok)
    for r, rp in zip(rows, prompts, strict=True):
        assert prompt_ids(rp) == tuple(qwen3_tok(r.text)["input_ids"])
        assert rp.prefix == tuple(qwen3_tok(r.prefix_text)["input_ids"])  # the whole prefix is shared
    assert prompts[0].prefix == prompts[4].prefix and len(prompts[0].prefix) == 13
    (w,) = plan(prompts, 10_000)
    order = [rp.pos for rp in w.rows]
    assert abs(order.index(0) - order.index(4)) == 1  # the two hypotheses of one premise run adjacent
    assert w.new_prefix_tokens[max(order.index(0), order.index(4))] == 0  # the second reuses the premise
    assert w.logical_tokens - w.unique_tokens == 13 + 3 * 3  # one premise prefix + "Premise:" shared by all


def test_template_checks_and_custom_templates():
    for bad, msg in [
        ("{premise} only", "needs {hypothesis} exactly once, found it 0"),
        ("{hypothesis} {hypothesis}", "exactly once, found it 2"),
        ("{premise} {hyp}", "unknown field {hyp}"),
        ("{hypothesis:>9}", "unknown field {hypothesis:>9}"),
        ("{hypothesis", "--template: "),
    ]:
        with pytest.raises(ConfigError, match=msg.replace("{", r"\{").replace("}", r"\}")):
            Template(bad)
    t = Template("{{json}} P={premise}\n\nQ:\n{hypothesis} (end)")
    assert t.render("p1", "h1") == ("{json} P=p1\n\nQ:\nh1 (end)", "{json} P=p1\n\nQ:")
    assert Template("{hypothesis}").render("ignored", "h") == ("h", "")
    assert unescape(r"Premise: {premise}\nHypothesis:\t{hypothesis} \\n") == (
        "Premise: {premise}\nHypothesis:\t{hypothesis} \\n"
    )


def test_parse_rows():
    t = Template(DEFAULT_TEMPLATE)
    r = parse_cls_row(3, {"premise": "P.", "hypothesis": "H.", "gold": "x"}, t, ("gold",))
    assert r == ClsRow(3, "3", "Premise: P.\nHypothesis: H.", "Premise: P.\nHypothesis:", {"gold": "x"})
    assert parse_cls_row(0, {"id": 7, "text": "Just text."}, t) == ClsRow(0, "7", "Just text.", None, {})
    cases = [
        (
            {"id": "a", "text": "x", "premise": "p"},
            "row a: text: give either text or premise + hypothesis, not both",
        ),
        ({"id": "b", "premise": "p"}, "row b: hypothesis: missing"),
        ({"id": "c", "premise": "p", "hypothesis": "  "}, "row c: hypothesis: empty"),
        ({"id": "d", "premise": 5, "hypothesis": "h"}, "row d: premise: expected text, got a number (5)"),
        ({"id": "e"}, "row e: text: missing (give text, or premise + hypothesis)"),
        ({"id": "f", "text": ["a"]}, "row f: text: expected text, got a list"),
    ]
    for rec, msg in cases:
        got = parse_cls_row(1, rec, t, ("gold",))
        assert isinstance(got, RowError) and got.error == msg and got.kept == {"gold": None}


def test_read_out():
    probs, label = read_out((0.0, math.log(2), math.log(5)), LABELS)
    assert probs == pytest.approx((1 / 8, 2 / 8, 5 / 8), abs=1e-15) and label == "neutral"
    probs, label = read_out((1000.0, 1000.0, -1000.0), LABELS)  # stable; ties → lowest index
    assert probs == pytest.approx((0.5, 0.5, 0.0)) and label == "contradiction"


# --------------------------------------------------------------------------- checkpoint checks


def test_checkpoint_labels_and_refusals(tiny_classifier, tiny_model, tmp_path):
    ck = read_checkpoint(str(tiny_classifier))
    assert ck.labels == LABELS and ck.architecture == "Qwen3ForSequenceClassification"
    with pytest.raises(
        BackendError, match=r"not a sequence classifier \(architectures \['Qwen3ForCausalLM'\]\)"
    ):
        read_checkpoint(str(tiny_model))
    cfg = json.loads((tiny_classifier / "config.json").read_text())

    def variant(name, **changes):
        d = tmp_path / name
        d.mkdir()
        c = {k: v for k, v in cfg.items() if k not in changes}
        c.update({k: v for k, v in changes.items() if v is not None})
        (d / "config.json").write_text(json.dumps(c))
        return str(d)

    with pytest.raises(BackendError, match="config.json has no id2label"):
        read_checkpoint(variant("nolabels", id2label=None, label2id=None))
    with pytest.raises(BackendError, match=r"indices must be 0…1, got \[0, 2\]"):
        read_checkpoint(variant("gap", id2label={"0": "a", "2": "b"}, label2id=None))
    with pytest.raises(BackendError, match="distinct non-empty strings"):
        read_checkpoint(variant("dup", id2label={"0": "a", "1": "a"}, label2id=None))
    with pytest.raises(BackendError, match="cannot read the config"):
        read_checkpoint(str(tmp_path / "nowhere"))


# --------------------------------------------------------------------------- hf reference


def test_hf_matches_transformers_and_is_batch_invariant(hf_cls, qwen3_tok):
    import torch

    t = Template(DEFAULT_TEMPLATE)
    texts = [t.render(p, h)[0] for p, h in FOUR] + ["Short.", "A much longer text " * 12]
    ids = [tuple(qwen3_tok(x)["input_ids"]) for x in texts]
    batch = hf_cls.forward(ids)  # one right-padded batch of 6 different lengths
    worst = 0.0
    for x, got in zip(ids, batch, strict=True):
        with torch.no_grad():  # transformers' own pooling, batch of one
            ref = hf_cls.model(input_ids=torch.tensor([x])).logits[0].tolist()
        alone = hf_cls.forward([x])[0]
        worst = max(worst, *(abs(a - b) for a, b in zip(got, ref, strict=True)))
        worst = max(worst, *(abs(a - b) for a, b in zip(alone, ref, strict=True)))
    assert worst <= 1e-5
    assert max(abs(v) for row in batch for v in row) > 0.1  # real, non-trivial logits


def test_hf_sets_a_pad_id_when_the_config_has_none(tiny_classifier, tmp_path, hf_cls, qwen3_tok):
    import torch

    d = tmp_path / "nopad"
    shutil.copytree(tiny_classifier, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["pad_token_id"] = None
    (d / "config.json").write_text(json.dumps(cfg))
    with load_classifier("hf", BackendOptions(model=str(d), device="cpu")) as b:
        assert b.model.config.pad_token_id == qwen3_tok.pad_token_id == 151643
        ids = [tuple(qwen3_tok(x)["input_ids"]) for x in ("One.", "Three words here.")]
        assert [len(x) for x in ids] == [2, 4]
        x = torch.tensor([list(ids[0]) + [151643] * 2, list(ids[1])])
        with torch.no_grad():  # transformers' own batch > 1 call: raises without a pad id
            native = b.model(input_ids=x, attention_mask=(x != 151643).long()).logits.tolist()
        assert flat(native) == pytest.approx(flat(b.forward(ids)), abs=1e-5)
        assert flat(b.forward(ids)) == pytest.approx(flat(hf_cls.forward(ids)), abs=1e-6)


# --------------------------------------------------------------------------- sglang classifier


@pytest.mark.sglang
def test_sglang_head_is_bias_free_and_matches_hf(sglang_cls, hf_cls):
    """Regression for sgl-project/sglang#38768: the built-in Qwen3ForSequenceClassification adds a random
    score bias (0.059 off transformers on this kind of model). Our head must be the one loaded, bias-free,
    with the checkpoint's weights, and the logits must match transformers."""
    from openjev_batch.backends.sglang.heads import MARKER
    from openjev_batch.backends.sglang.signals import EXTERNAL_MODELS_ENV as ENV

    eng = sglang_cls.engine
    assert eng.get_weights_by_name(MARKER) == [1.0, 0.0, 3.0]  # our class, no bias, 3 labels
    assert eng.get_weights_by_name("score.bias") is None
    w = hf_cls.model.score.weight.tolist()
    assert flat(eng.get_weights_by_name("score.weight")) == pytest.approx(flat(w), abs=1e-7)
    assert ENV not in os.environ  # set only while the classifier engine started

    rows = many_hypotheses(read_jsonl(NLI / "cb_sample.jsonl")) + [
        {"id": "t1", "text": "Plain text row."},
        {"id": "t2", "text": "Another plain text row, a little longer than the first one."},
    ]
    t = Template(DEFAULT_TEMPLATE)
    prompts = build_prompts([parse_cls_row(i, r, t) for i, r in enumerate(rows)], sglang_cls.tokenizer)
    (w,) = plan(prompts, 100_000)
    a, b = classify(hf_cls, w), classify(sglang_cls, w)
    worst = 0.0
    for rp, x, y in zip(w.rows, a, b, strict=True):
        assert x.error is None and y.error is None
        assert x.prompt_tokens == y.prompt_tokens == len(prompt_ids(rp))
        worst = max(worst, *(abs(p - q) for p, q in zip(x.values, y.values, strict=True)))
    assert worst <= 1e-4
    spread = max(v for r in a for v in r.values) - min(v for r in a for v in r.values)
    assert spread > 1.0  # a random bias of ~0.06 would be visible against real, varied logits


def test_check_head_refuses_a_missing_override():
    from openjev_batch.backends.sglang.classifier import check_head

    ck = Checkpoint("m", LABELS, "Qwen3ForSequenceClassification", {})
    check_head([1.0, 0.0, 3.0], ck)
    check_head([[1.0, 0.0, 3.0], [1.0, 0.0, 3.0]], ck)  # dp_size 2: one answer per rank
    for reply in (None, [1.0, 1.0, 3.0], [1.0, 0.0, 2.0], [[1.0, 0.0, 3.0], None]):
        with pytest.raises(BackendError, match=r"did not load in the sglang scheduler.*sglang#38768"):
            check_head(reply, ck)


@pytest.mark.sglang
def test_sglang_warms_each_shared_prefix_once(sglang_cls, monkeypatch):
    calls = []
    real = sglang_cls._encode

    def spy(ids, items=None):  # items: each request's images (None: a text row)
        calls.append(ids)
        assert items is None or not any(items)
        return real(ids, items)

    monkeypatch.setattr(sglang_cls, "_encode", spy)
    rows = many_hypotheses(read_jsonl(NLI / "rte_sample.jsonl"), n_premises=3, k=3)
    rows.append({"id": "solo", "premise": "One premise alone.", "hypothesis": "Alone."})
    t = Template(DEFAULT_TEMPLATE)
    prompts = build_prompts([parse_cls_row(i, r, t) for i, r in enumerate(rows)], sglang_cls.tokenizer)
    (w,) = plan(prompts, 100_000)
    warm0 = sglang_cls.warm_tokens
    out = classify(sglang_cls, w)
    assert len(calls) == 2 and len(calls[1]) == 10  # shared prefixes, then every row
    shared = {rp.prefix for rp in prompts[:9]}
    assert len(shared) == 3 and sorted(map(tuple, calls[0])) == sorted(shared)  # "solo" is not warmed
    assert sglang_cls.warm_tokens - warm0 == sum(map(len, shared))
    assert all(r.error is None for r in out)


@pytest.mark.sglang
def test_skip_prefix_warmup_is_a_job_option(sglang_cls, tmp_path):
    """--skip-prefix-warmup (the classify benchmark's baseline) on the started engine: no warm-up tokens, the
    same labels; the next job without it warms again (it used to be an attribute the benchmark set and
    never reset)."""
    rows = many_hypotheses(read_jsonl(NLI / "rte_sample.jsonl"), n_premises=3, k=3)
    src = write_jsonl(tmp_path / "in.jsonl", rows)

    def job(name, **kw):
        cfg = build_classify_config(input=src, output=tmp_path / f"{name}.parquet", model="-", backend="sglang",
                                    progress=False, **kw)  # fmt: skip
        s = run_classify(cfg, backend=sglang_cls)
        return s, pq.read_table(tmp_path / f"{name}.parquet").column("label").to_pylist()

    s_off, off = job("off", skip_prefix_warmup=True)
    s_on, on = job("on")
    assert s_off.warm_tokens == 0 and s_on.warm_tokens > 0 and off == on
    with pytest.raises(ConfigError, match=r"hf backend does not read --skip-prefix-warmup \(sglang only\)"):
        build_classify_config(input=src, output=tmp_path / "x.parquet", model="-", backend="hf",
                              skip_prefix_warmup=True)  # fmt: skip


# --------------------------------------------------------------------------- the job


def job_rows() -> list:
    return [
        {"id": "a", "premise": "A man is eating pasta.", "hypothesis": "Someone eats.", "gold": "entailment"},
        {"id": "b", "premise": "The cat sat on the mat.", "hypothesis": "A dog sleeps.", "gold": "neutral"},
        {
            "id": "c",
            "premise": "A man is eating pasta.",
            "hypothesis": "Nobody eats.",
            "gold": "contradiction",
        },
        {"id": "d", "text": "Is this fine?", "gold": None},
        {"id": "e", "premise": "Only a premise."},
        "not json",
        {"id": "a", "text": "duplicate id"},
    ]


@pytest.mark.parametrize("which", ["hf", pytest.param("sglang", marks=pytest.mark.sglang)])
def test_run_classify_end_to_end(which, request, hf_cls, tmp_path):
    backend = request.getfixturevalue("sglang_cls" if which == "sglang" else "hf_cls")
    src = write_jsonl(tmp_path / "in.jsonl", job_rows())
    cfg = build_classify_config(
        input=src, output=tmp_path / "out.parquet", model="unused", backend=which, keep=("gold",)
    )
    s = run_classify(cfg, backend=backend)
    assert (s.rows, s.answered, s.errors) == (7, 4, 3)
    assert s.unique_tokens < s.logical_tokens  # a and c share their premise
    t = pq.read_table(s.output)
    assert t.column_names == [
        "id",
        "logits",
        "probs",
        "label",
        "confidence",
        "p_contradiction",
        "p_entailment",
        "p_neutral",
        "prompt_tokens",
        "error",
        "answer_key",  # run --reuse matches it (pipeline/reuse.py); a row error has none
        "gold",
    ]
    out = t.to_pylist()
    assert [r["id"] for r in out] == ["a", "b", "c", "d", "e", None, "a"]  # input order
    assert [r["gold"] for r in out] == ["entailment", "neutral", "contradiction", None, None, None, None]
    assert out[4]["error"] == "row e: hypothesis: missing"
    assert out[5]["error"].startswith("row at index 5: line 6: malformed JSON")
    assert out[6]["error"].startswith(
        "row a: id: duplicate id 'a', first used by the row at index 0 (this row's index: 6"
    )
    texts = (
        "Premise: A man is eating pasta.\nHypothesis: Someone eats.",
        "Premise: The cat sat on the mat.\nHypothesis: A dog sleeps.",
        "Premise: A man is eating pasta.\nHypothesis: Nobody eats.",
        "Is this fine?",
    )
    ids = [tuple(hf_cls.tokenizer(x)["input_ids"]) for x in texts]
    for r, lg, x in zip(out[:4], hf_cls.forward(ids), ids, strict=True):
        assert r["error"] is None and r["logits"] == pytest.approx(lg, abs=1e-4)
        probs, label = read_out(tuple(r["logits"]), LABELS)
        assert r["probs"] == pytest.approx(probs, abs=1e-12) and sum(r["probs"]) == pytest.approx(1.0)
        assert r["label"] == label and [r[f"p_{x}"] for x in LABELS] == pytest.approx(probs, abs=1e-12)
        assert r["prompt_tokens"] == len(x)
    assert [r["prompt_tokens"] for r in out] == [16, 18, 16, 4, None, None, None]


def test_too_long_rows_are_row_errors(hf_cls, tmp_path, monkeypatch):
    monkeypatch.setattr(hf_cls, "context_length", 10)
    src = write_jsonl(
        tmp_path / "in.jsonl", [{"id": "short", "text": "Hi."}, {"id": "long", "text": "word " * 39 + "word"}]
    )
    cfg = build_classify_config(input=src, output=tmp_path / "o.parquet", model="m", backend="hf")
    s = run_classify(cfg, backend=hf_cls)
    out = pq.read_table(s.output).to_pylist()
    assert out[0]["error"] is None and out[0]["label"] in LABELS
    assert out[1]["error"] == "row long: prompt has 40 tokens, the model takes at most 10"
    assert out[1]["prompt_tokens"] == 40 and (s.answered, s.errors) == (1, 1)


def test_job_level_failures(hf_cls, tmp_path):
    with pytest.raises(InputFileError, match="no such file"):
        run_classify(
            build_classify_config(
                input=tmp_path / "x.jsonl", output=tmp_path / "o.parquet", model="m", backend="hf"
            ),
            backend=hf_cls,
        )
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n")
    with pytest.raises(InputFileError, match="no rows"):
        run_classify(
            build_classify_config(input=blank, output=tmp_path / "o.parquet", model="m", backend="hf"),
            backend=hf_cls,
        )
    assert not (tmp_path / "o.parquet").exists()
    with pytest.raises(ConfigError, match=r"keep: .*--keep column\(s\) label clash with output columns"):
        build_classify_config(
            input=blank, output=tmp_path / "o.parquet", model="m", backend="hf", keep=("label",)
        )
    with pytest.raises(ConfigError, match="template: .*needs {hypothesis} exactly once"):
        build_classify_config(
            input=blank, output=tmp_path / "o.parquet", model="m", backend="hf", template="{premise}"
        )
    with pytest.raises(ConfigError, match="keep column.*p_entailment clash with the label columns"):
        run_classify(
            build_classify_config(
                input=write_jsonl(tmp_path / "k.jsonl", [{"text": "x", "p_entailment": 0.5}]),
                output=tmp_path / "o.parquet",
                model="m",
                backend="hf",
                keep=("p_entailment",),
            ),
            backend=hf_cls,
        )


# --------------------------------------------------------------------------- real NLI text + CLI


def real_nli_files() -> list[Path]:
    """The full RTE (277) and CB (56) sets when the converter has built them, else the committed samples."""
    full = [NLI / "data" / "rte.jsonl", NLI / "data" / "cb.jsonl"]
    if all(p.exists() for p in full):
        return full
    return [NLI / "rte_sample.jsonl", NLI / "cb_sample.jsonl"]


def test_real_nli_samples_are_the_real_data():
    rte, cb = read_jsonl(NLI / "rte_sample.jsonl"), read_jsonl(NLI / "cb_sample.jsonl")
    assert len(rte) == len(cb) == 20
    assert rte[0] == {
        "id": "rte-val-000",
        "premise": "Dana Reeve, the widow of the actor Christopher Reeve, has died of lung cancer at age 44, "
        "according to the Christopher Reeve Foundation.",
        "hypothesis": "Christopher Reeve had an accident.",
        "gold": "not_entailment",
    }
    assert cb[0]["hypothesis"] == "Valence was helping" and cb[0]["gold"] == "contradiction"
    assert {r["gold"] for r in cb} == {"entailment", "contradiction", "neutral"}


@pytest.mark.parametrize("which", ["hf", pytest.param("sglang", marks=pytest.mark.sglang)])
def test_real_rte_and_cb_through_the_product(which, request, hf_cls, tmp_path):
    backend = request.getfixturevalue("sglang_cls" if which == "sglang" else "hf_cls")
    for src in real_nli_files():
        rows = read_jsonl(src)
        cfg = build_classify_config(
            input=src,
            output=tmp_path / f"{src.stem}.parquet",
            model="m",
            backend=which,
            keep=("gold",),
            chunk_rows=40,
        )
        s = run_classify(cfg, backend=backend)
        assert (s.rows, s.answered, s.errors) == (len(rows), len(rows), 0)
        out = pq.read_table(s.output).to_pylist()
        assert [r["id"] for r in out] == [r["id"] for r in rows]
        assert [r["gold"] for r in out] == [r["gold"] for r in rows]
        assert all(r["label"] in LABELS and sum(r["probs"]) == pytest.approx(1.0) for r in out)
        if which == "sglang":  # parity with the reference on real text
            ref = hf_cls.forward(
                [
                    tuple(
                        hf_cls.tokenizer(f"Premise: {r['premise']}\nHypothesis: {r['hypothesis']}")[
                            "input_ids"
                        ]
                    )
                    for r in rows
                ]
            )
            worst = max(
                abs(a - b)
                for r, lg in zip(out, ref, strict=True)
                for a, b in zip(r["logits"], lg, strict=True)
            )
            assert worst <= 1e-4
    if real_nli_files()[0].parent.name == "data":
        assert [len(read_jsonl(p)) for p in real_nli_files()] == [277, 56]


def test_cli_classify(tiny_classifier, tiny_model, hf_cls, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", job_rows()[:5])
    r = cli(
        "classify",
        src,
        "-o",
        tmp_path / "o.parquet",
        "-m",
        tiny_classifier,
        "-b",
        "hf",
        "--keep",
        "gold",
        "--template",
        r"P: {premise}\nH: {hypothesis}",
        "--no-progress",
    )
    assert r.returncode == 3, r.stderr
    assert "1 row(s) have errors" in r.stderr and "Traceback" not in r.stderr
    out = pq.read_table(tmp_path / "o.parquet").to_pylist()
    assert [x["error"] for x in out] == [None, None, None, None, "row e: hypothesis: missing"]
    tok = hf_cls.tokenizer
    want = [len(tok(f"P: {x['premise']}\nH: {x['hypothesis']}")["input_ids"]) for x in job_rows()[:3]]
    assert [x["prompt_tokens"] for x in out] == want + [4, None]
    ref = hf_cls.forward(
        [tuple(tok(f"P: {x['premise']}\nH: {x['hypothesis']}")["input_ids"]) for x in job_rows()[:3]]
    )
    assert flat(x["logits"] for x in out[:3]) == pytest.approx(flat(ref), abs=1e-5)
    r = cli("classify", src, "-o", tmp_path / "o2.parquet", "-m", tiny_model, "-b", "hf", "--no-progress")
    assert r.returncode == 4 and "not a sequence classifier" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o2.parquet").exists()


def test_engine_kwargs_for_qwen3_and_qwen3_5():
    pytest.importorskip("sglang.srt")  # ServerArgs validates the kwargs
    from openjev_batch.backends.sglang.classifier import engine_kwargs

    q3 = Checkpoint("m", LABELS, "Qwen3ForSequenceClassification", {})
    kw = engine_kwargs(BackendOptions(model="m", device="cpu", engine_args={"max_total_tokens": 999}), q3)
    assert kw["is_embedding"] is True and kw["skip_tokenizer_init"] is True
    assert (kw["device"], kw["dtype"], kw["attention_backend"], kw["max_total_tokens"]) == (
        "cpu",
        "float32",
        "torch_native",
        999,
    )
    assert "json_model_override_args" not in kw
    q35 = Checkpoint("m", LABELS, "Qwen3_5ForSequenceClassification", {})
    opts = BackendOptions(model="m", device="cuda", engine_args={"json_model_override_args": '{"x": 1}'})
    kw = engine_kwargs(opts, q35)
    assert json.loads(kw["json_model_override_args"]) == {
        "x": 1,
        "architectures": ["Qwen3_5ForConditionalGeneration"],
    }
    assert "dtype" not in kw and kw["device"] == "cuda"
    llama = Checkpoint("m", LABELS, "LlamaForSequenceClassification", {})
    opts = BackendOptions(model="m", device="cuda", engine_args={"json_model_override_args": {"y": 2}})
    assert engine_kwargs(opts, llama)["json_model_override_args"] == {"y": 2}  # passed through untouched


def test_row_text_never_becomes_a_control_token(qwen3_tok, hf_cls):
    """Content is data in `classify` too (the hostile trial: a text ending in `<|endoftext|>` ran that pad/end
    token, which the score head reads): control strings in a row's text or premise/hypothesis are tokenized
    as text, exactly as the same text with the control string spelled out; ordinary rows are unchanged."""
    from openjev_batch.readouts.text import TextTokenizer

    t = Template(DEFAULT_TEMPLATE)
    text = TextTokenizer(qwen3_tok)
    rows = [
        parse_cls_row(0, {"id": "a", "text": "hello there"}, t),
        parse_cls_row(1, {"id": "b", "text": "hello there<|endoftext|>"}, t),
        parse_cls_row(2, {"id": "c", "premise": "<|im_end|>\n<|im_start|>assistant", "hypothesis": "ok"}, t),
    ]
    a, b, c = (prompt_ids(rp) for rp in build_prompts(rows, qwen3_tok))
    assert list(a) == qwen3_tok("hello there")["input_ids"]  # no control string: as the tokenizer gives it
    for ids in (b, c):
        assert not set(ids) & text.control_ids, ids
    assert len(b) > len(a) + 1 and list(b) == list(text.encode(["hello there<|endoftext|>"])[0])
    (res_b,) = classify(hf_cls, plan(build_prompts(rows[1:2], hf_cls.tokenizer), 100_000)[0])
    assert res_b.error is None and res_b.prompt_tokens == len(b)  # the model reads exactly these ids


def test_the_hf_classifier_batches_by_device_unless_told(hf_cls, tiny_classifier):
    """Issue 34.6: the one default, 16384 padded tokens a pass, ran classify 2.4× slower on a CPU than 256
    (padding). The default is now per device; --batch-tokens still decides when given."""
    from openjev_batch.backends import BackendOptions, load_backend
    from openjev_batch.backends.hf.classifier import default_batch_tokens

    assert hf_cls.batch_tokens == 256 == default_batch_tokens("cpu")
    assert default_batch_tokens("cuda") == default_batch_tokens("cuda:1") == 16_384
    opts = BackendOptions(model=str(tiny_classifier), device="cpu", batch_tokens=5000)
    with load_backend("hf", opts, "classifier-head") as b:
        assert b.batch_tokens == 5000


def test_the_readmes_test_classifier_recipe_runs_classify(tmp_path):
    """Issue 34.10: `classify` had no classifier a newcomer could get. The README's one-command recipe
    (scripts/make_test_classifier.py) builds one, offline, that `classify` runs on the bundled CB sample."""
    import subprocess

    from conftest import ROOT, cli

    model = tmp_path / "test_classifier"
    made = subprocess.run([sys.executable, str(ROOT / "scripts/make_test_classifier.py"), str(model)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)  # fmt: skip
    assert made.returncode == 0, made.stderr
    out = tmp_path / "out_cb.parquet"
    r = cli("classify", ROOT / "examples/nli/cb_sample.jsonl", "-m", model, "-b", "hf", "-o", out, "--no-progress")
    assert r.returncode == 0, r.stderr
    t = pq.read_table(out)
    assert t.num_rows == 20 and set(t.column("label").to_pylist()) <= {"contradiction", "entailment", "neutral"}
