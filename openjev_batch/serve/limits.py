"""The limits a request is held to before any model call, and the HTTP error each gives (`HTTPError`): the body
over `max_body_bytes` is 413; a malformed body, too many questions or options, a branch or a request over its
token limit is 422 naming the field; more than `max_concurrent` requests evaluated at once is 529 with
Retry-After; no answer within `timeout_s` is 504. The token and count limits default to the readout's own
(readouts/label_logprobs: 64 questions, 2–64 options, 32,768 tokens a branch, 262,144 a row) and may only be
lowered: the readout refuses more anyway."""

from __future__ import annotations

from dataclasses import dataclass

from ..readouts.label_logprobs.questions import MAX_QUESTIONS
from ..readouts.label_logprobs.rows import MAX_BRANCH_TOKENS, MAX_ROW_TOKENS
from ..values import MAX_STATE_BYTES

MAX_OPTIONS = 64  # readouts/label_logprobs/question_schema.py: 2–64 options (multi: 1–64 labels)


@dataclass(frozen=True)
class Limits:
    max_questions: int = MAX_QUESTIONS
    max_options: int = MAX_OPTIONS
    max_body_bytes: int = MAX_STATE_BYTES  # 2 MiB, as a row's `state`
    max_branch_tokens: int = MAX_BRANCH_TOKENS
    max_request_tokens: int = MAX_ROW_TOKENS
    max_concurrent: int = 16
    timeout_s: float = 120.0
    batch_wait_ms: float = 2.0  # how long an idle engine waits for more requests to join a batch
    # most requests in one engine batch (0: every request waiting). Below the clients in flight, the next batch is
    # tokenized and the last one answered while the engine runs one (not measured on a GPU yet)
    max_batch: int = 0
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        caps = (("max_questions", MAX_QUESTIONS), ("max_options", MAX_OPTIONS),
                ("max_branch_tokens", MAX_BRANCH_TOKENS), ("max_request_tokens", MAX_ROW_TOKENS))  # fmt: skip
        for name, cap in caps:
            v = getattr(self, name)
            if not 1 <= v <= cap:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} must be 1 to {cap:,} (the readout's own limit), got {v:,}")
        for name in ("max_body_bytes", "max_concurrent", "timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-').removesuffix('-s')} must be positive")
        if self.batch_wait_ms < 0:
            raise ValueError("--batch-wait-ms must be 0 or more")
        if self.max_batch < 0:
            raise ValueError("--max-batch must be 0 (every request waiting) or more")


class HTTPError(Exception):
    """A request answered with an error status: `field` the body's field it names (dotted, `questions.q1.criteria`;
    None for the body as a whole), `message` one line."""

    def __init__(self, status: int, message: str, field: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.field, self.headers = status, message, field, headers or {}

    def body(self) -> dict:
        return {"error": {"status": self.status, "field": self.field, "message": self.message}}


def row_error(text: str, row_id: str | None) -> HTTPError:
    """A 422 from a readout's row or question error (`row T7: questions.q1.criteria: why`): the field is the
    part after the row id up to its first colon."""
    rest = text
    for head in (f"row {row_id}: ", "row at index 0: "):  # an unusable id: the row by its position
        if text.startswith(head):
            rest = text[len(head) :]
            break
    field = rest.split(": ", 1)[0] if ": " in rest else None
    if field is not None and field.split(".")[0].split("[")[0] not in FIELDS:
        field = None  # a cause, not a field path
    return HTTPError(422, text, field)


FIELDS = ("id", "state", "messages", "questions")  # the body's fields (request.py)
