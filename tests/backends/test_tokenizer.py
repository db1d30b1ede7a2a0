"""The model's tokenizer tokenizes as its tokenizer.json says, whatever the installed transformers (issue 34.2):
transformers 5.12-5.17 load a Qwen3.5/3.6 checkpoint as `Qwen2Tokenizer`, whose split regex lacks `\\p{M}`,
so words with combining marks split into other tokens than the checkpoint's own."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from conftest import cli, write_jsonl
from tiny import QWEN3_6_TEXTS, make_tiny_qwen3
from tokenizers import Tokenizer

from openjev_batch.backends.base import load_tokenizer
from openjev_batch.backends.tokenizer import tokenizer_name
from openjev_batch.readouts.text import TextTokenizer


def _reference(folder):
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def test_qwen3_6_text_with_combining_marks_splits_as_its_tokenizer_json(qwen3_6_tok_dir):
    ref = _reference(qwen3_6_tok_dir)
    assert len(ref.encode("नमस्ते दुनिया", add_special_tokens=False).ids) == 6  # the real vocabulary's count
    tok = load_tokenizer(str(qwen3_6_tok_dir))
    content = TextTokenizer(tok)  # how the prompt stage tokenizes a row's text
    for text in QWEN3_6_TEXTS:
        want = ref.encode(text, add_special_tokens=False).ids
        assert list(content.encode([text])[0]) == want, text
        assert tok.encode(text, add_special_tokens=False) == want, text
    assert type(tok).__name__ in tokenizer_name(tok)


def test_a_tokenizer_that_splits_as_its_file_is_kept_as_transformers_loads_it(qwen3_tok_dir):
    from transformers import AutoTokenizer

    tok = load_tokenizer(str(qwen3_tok_dir))
    assert type(tok) is type(AutoTokenizer.from_pretrained(qwen3_tok_dir))
    assert tokenizer_name(tok) == type(tok).__name__


@pytest.fixture(scope="module")
def tiny_qwen3_6(qwen3_6_tok_dir, tmp_path_factory):
    """The tiny random Qwen3 model with the Qwen3.6 tokenizer (transformers maps model type qwen3 and the
    tokenizer_config's class to Qwen2Tokenizer)."""
    return make_tiny_qwen3(qwen3_6_tok_dir, tmp_path_factory.mktemp("tiny-qwen3.6"))


def test_the_run_summary_and_the_manifest_name_the_tokenizer(tiny_qwen3_6, tmp_path):
    inp = write_jsonl(tmp_path / "in.jsonl", [
        {"id": f"r{i}", "state": text, "questions": {"greeting": {"type": "noul", "instructions": "A greeting?"}}}
        for i, text in enumerate(QWEN3_6_TEXTS)
    ])  # fmt: skip
    out = tmp_path / "o.parquet"
    r = cli("run", inp, "-m", tiny_qwen3_6, "-b", "hf", "-o", out, "--no-progress")
    assert r.returncode == 0, r.stderr
    name = tokenizer_name(load_tokenizer(str(tiny_qwen3_6)))
    assert "tokenizer" in r.stderr and name.split(" ")[0] in r.stderr
    doc = json.loads(pq.read_schema(out).metadata[b"openjev_batch.manifest"])
    assert doc["manifest"]["tokenizer"] == name
