"""Label selection and prefix/branch ids on the real Qwen3 tokenizer."""

import pytest

from openjev_batch.errors import LabelError
from openjev_batch.readouts.label_logprobs.labels import candidates, select_labels
from openjev_batch.readouts.label_logprobs.prompt import ANSWER_LEAD, Prompter
from openjev_batch.readouts.label_logprobs.rows import parse_row

Q = {
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    "cat": {"type": "choice", "instructions": "Category?", "criteria": {"billing": "money", "bug": None}},
    "urg": {"type": "score", "instructions": "Urgency?", "criteria": ["low", "mid", "high"]},
}


@pytest.fixture(scope="module")
def prompter(qwen3_tok):
    return Prompter(qwen3_tok)


def test_64_labels_single_distinct_in_context(prompter, qwen3_tok):
    labels = prompter.labels
    assert len(labels) == 64 and len({lb.token_id for lb in labels}) == 64
    assert [lb.text for lb in labels[:27]] == candidates()[:27]  # A…Z then AA
    tail = prompter.tail
    ctx = qwen3_tok(tail + ANSWER_LEAD, add_special_tokens=False)["input_ids"]
    for lb in labels:
        ids = qwen3_tok(tail + ANSWER_LEAD + " " + lb.text, add_special_tokens=False)["input_ids"]
        assert ids == ctx + [lb.token_id]
        assert qwen3_tok.decode([lb.token_id]) == " " + lb.text


def small_bpe_tokenizer():
    """A 300-token byte-level BPE trained here: single capitals exist, two-letter labels do not."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    letters = " ".join("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    tok.train_from_iterator([f"Answer: {letters} the quick brown fox. " * 50], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def test_too_few_labels_fails_at_startup(qwen3_tok):
    with pytest.raises(LabelError, match=r"gives only 26 single-token labels after 'Answer:' \(need 64\)"):
        select_labels(small_bpe_tokenizer(), "Answer:")
    assert [lb.text for lb in select_labels(small_bpe_tokenizer(), "Answer:", n=26)][-1] == "Z"
    with pytest.raises(LabelError, match="need 800"):
        select_labels(qwen3_tok, "Answer:", n=800)  # only 702 candidates exist


def test_template_rendered_once_thinking_disabled(prompter):
    row = parse_row(0, {"id": "r", "state": "hi", "questions": Q})
    text = prompter.branch_text(row, row.questions[0])
    assert text.count("<|im_start|>assistant") == 1
    assert "<think>\n\n</think>" in text  # Qwen3's template with enable_thinking=False


def test_prefix_is_exact_prefix_and_matches_joint_tokenization(prompter, qwen3_tok):
    msgs = [
        {"role": "user", "content": "My card was charged twice!"},
        {"role": "assistant", "content": "Sorry."},
    ]
    for state in (msgs, "I love it.\n"):
        row = parse_row(0, {"id": "r", "state": state, "questions": Q})
        rp, failed = prompter.build(row)
        assert not failed and len(rp.branches) == 3
        for b, q in zip(rp.branches, row.questions, strict=True):
            full = prompter.branch_text(row, q)
            assert rp.prefix + b.suffix == tuple(qwen3_tok(full, add_special_tokens=False)["input_ids"])
            assert full.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nAnswer:")
        assert rp.branches[1].label_ids == tuple(lb.token_id for lb in prompter.labels[:2])
        assert "A. billing: money\nB. bug\n" in prompter.question_text(row.questions[1])


def test_token_limits_fail_only_that_question_or_row(qwen3_tok):
    p = Prompter(qwen3_tok, max_branch_tokens=120, max_row_tokens=10_000)
    long_q = {"type": "choice", "instructions": "word " * 200, "criteria": {"a": None, "b": None}}
    rp, failed = p.build(parse_row(0, {"id": "r", "state": "hi", "questions": {**Q, "long": long_q}}))
    assert [b.qid for b in rp.branches] == ["refund", "cat", "urg"]
    assert failed[0].qid == "long" and "row r: questions.long: branch has" in failed[0].error
    # a limit below the readout's own 32,768 is the model's context length (the backend's): the message says so
    assert failed[0].error.endswith("tokens, limit 120 (the model's context length)")
    p2 = Prompter(qwen3_tok, max_row_tokens=150)
    rp, failed = p2.build(parse_row(0, {"id": "r", "state": "hi", "questions": Q}))
    assert rp is None and len(failed) == 3 and "limit 150" in failed[0].error


def test_long_rows_do_not_leak_transformers_length_warning(qwen3_tok_dir, capfd):
    """Lengths are the product's to report (row errors); transformers' warning must not reach the output."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen3_tok_dir)
    tok.model_max_length = 64  # any real conversation is longer
    rp, failed = Prompter(tok).build(parse_row(0, {"id": "r", "state": "word " * 300, "questions": Q}))
    assert rp is not None and not failed
    assert "Token indices sequence length" not in capfd.readouterr().err
