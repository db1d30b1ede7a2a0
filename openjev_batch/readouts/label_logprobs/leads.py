"""A question's `answer_lead` is text the assistant turn says before the label; a control token in it (a
chat template's `<|im_start|>`, `[INST]`, `<start_of_turn>`) is the model's markup, not text. `validate` has
no tokenizer and passed such a lead, then `run` failed every row with a tokenization message naming probes
(issue 34.18). `lead_problem` refuses the common template markup by its look (the question's schema check:
`validate`, and `run` before the model loads) and, once a tokenizer is there, any control token of that
model (the prompter), with one message."""

from __future__ import annotations

import re

# chat-template markup by its look: <|…|> (ChatML, Qwen, Llama 3, Phi), SentencePiece's <s> </s>, Llama 2's
# [INST], Gemma's turns, and the tags many tokenizers add: <bos> <eos> <pad> <unk> <mask> <think>, tool and
# media tags (Qwen's <tool_call>, Gemma's <start_of_image>, <image>), fill-in-the-middle tags, BERT's [CLS]
# [SEP] [PAD] [MASK] and Mistral's [TOOL_CALLS]-style tokens. `validate` has no tokenizer, so a model's added
# token passed it unless it looks like one of these (issue 42); `<b>` and other tags are text.
CONTROL_LIKE = re.compile(
    r"<\|[^<>|\s]{1,64}\|>|</?s>|\[/?INST\]|<(?:start|end)_of_turn>"
    r"|</?(?:bos|eos|pad|unk|mask|sep|cls|think|tool_call|tool_response|tools|image|video|audio"
    r"|(?:start|end)_of_(?:image|audio|video)|image_soft_token|fim_(?:prefix|middle|suffix|pad)|file_sep"
    r"|repo_name)>"
    r"|\[/?(?:PAD|CLS|SEP|MASK|UNK|IMG|[A-Z]+(?:_[A-Z]+)+)\]"
)


def lead_problem(lead: str, control: re.Pattern | None = None) -> str | None:
    """What is wrong with `lead` (None: nothing); `control`: a tokenizer's control tokens
    (TextTokenizer.control_pattern)."""
    m = CONTROL_LIKE.search(lead) or (control.search(lead) if control is not None else None)
    if m is None:
        return None
    return (
        f"holds {m.group()!r}, a control token of the chat template, not text: write the lead as plain text"
    )
