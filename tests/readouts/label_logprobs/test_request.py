"""readouts/label_logprobs/request.py: how `serve` reads a body into the label readout's row. The seed's route
(`seed_row`) takes what the seed takes: `state: ""`, one empty user message, rendered as the seed renders it."""

from __future__ import annotations

import json

import pytest

from openjev_batch.readouts.base import FieldError
from openjev_batch.readouts.label_logprobs import LabelLogprobs
from openjev_batch.readouts.label_logprobs.prompt_systemone import PREAMBLE
from openjev_batch.readouts.label_logprobs.request import LabelRequest
from openjev_batch.serve import seed
from openjev_batch.serve.limits import Limits

QUESTIONS = {"yes": {"type": "noul", "instructions": "Refund?"},
             "team": {"type": "choice", "criteria": {"billing": "Payments", "technical": None}}}  # fmt: skip


def seed_prefix(tok, state: list[dict]) -> list[int]:
    """The seed's prefix (its prompts.py, as its README describes it): the state's messages and the evaluation
    turn rendered around a marker, the text before the marker tokenized alone."""
    msgs = [*state, {"role": "user", "content": f"{PREAMBLE}\n\nQUESTION_MARKER_7f3a"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    return tok(text.split("QUESTION_MARKER_7f3a")[0], add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("state", ["", [{"role": "user", "content": None}],
                                   [{"role": "system", "content": ""}, {"role": "user", "content": ""}]])  # fmt: skip
def test_the_seeds_empty_state_is_its_empty_messages(qwen3_tok, state):
    readout = LabelLogprobs(layout="systemone")
    req = seed.parse(json.dumps({"model": "jev-latest", "state": state, "questions": QUESTIONS}).encode())
    body = seed.row_body(req)
    reader, limits = LabelRequest(readout), Limits().counts()
    row = reader.seed_row(body, limits)
    rp, fails = readout.prompter(qwen3_tok).build(row)
    assert not fails, fails
    want = seed_prefix(qwen3_tok, [{"role": m["role"], "content": ""} for m in body["messages"]])
    assert list(rp.prefix) == want
    if state == "":
        assert qwen3_tok.decode(want).startswith("<|im_start|>user\n<|im_end|>\n<|im_start|>user\nEvaluate")
    assert [b.qid for b in rp.branches] == ["yes", "team"]
    # the product's own route and `run` read an empty conversation as an error, as a batch row with no text
    with pytest.raises(FieldError, match="empty conversation"):
        reader.row(body, limits)


def test_the_seed_route_checks_an_empty_states_roles_too():
    body = {"messages": [{"role": "bot", "content": ""}], "questions": QUESTIONS}
    with pytest.raises(FieldError, match=r"^messages\[0\]\.role: unknown role 'bot'"):
        LabelRequest(LabelLogprobs(layout="systemone")).seed_row(body, Limits().counts())
