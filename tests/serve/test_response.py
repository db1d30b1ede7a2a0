"""serve/response.py's words for an HTTP client: a record's error without the batch job's row prefix."""

from __future__ import annotations

from openjev_batch.serve.response import unrowed


def test_an_engine_error_loses_only_its_own_row_prefix():
    assert unrowed("row 0: image: cannot decode", "0") == "image: cannot decode"
    assert unrowed("row T7: questions.q: non-finite label logprob", "T7") == "questions.q: non-finite label logprob"
    # another row's words, or none, are kept as they are
    assert unrowed("row 1: image: x", "0") == "row 1: image: x"
    assert unrowed("branch has 900 tokens, model context is 512", "0") == "branch has 900 tokens, model context is 512"
