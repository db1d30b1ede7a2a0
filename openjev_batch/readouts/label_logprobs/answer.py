"""Readout (pure math): label logprobs → distribution, answer, p_true, score, confidence, label mass.

For K label logprobs ℓ_i (natural log, from the full-vocabulary log-softmax at the last position):
- probs      P_i = exp(ℓ_i − m) / Σ_j exp(ℓ_j − m), m = max ℓ (stable softmax over the labels only)
- label_mass = Σ_i exp(ℓ_i) = exp(logsumexp ℓ): the next-token mass the model put on valid labels
- confidence = 1 − H(P)/ln K, H(P) = −Σ P_i ln P_i, clamped to [0, 1]. It measures how *concentrated*
  the distribution is (normalised entropy), not whether the answer is correct.
- p_true     = P_0 for noul (option order: true, false)
- score      = Σ_i i·P_i for score questions (levels numbered from 0, lowest first)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..answer import confidence, softmax
from .questions import QuestionSpec


@dataclass(frozen=True)
class Answer:
    qid: str
    type: str
    options: tuple[str, ...]
    probs: tuple[float, ...]
    answer: str
    p_true: float | None
    score: float | None
    confidence: float
    label_mass: float


def label_mass(logprobs: Sequence[float]) -> float:
    m = max(logprobs)
    return math.exp(m) * sum(math.exp(x - m) for x in logprobs)


def read_out(q: QuestionSpec, logprobs: Sequence[float]) -> Answer:
    """Answer one question from its K label logprobs (aligned with `q.options`).

    Raises ValueError when len(logprobs) != K or a logprob is missing/non-finite.
    """
    if len(logprobs) != len(q.options):
        raise ValueError(f"got {len(logprobs)} label logprobs for {len(q.options)} options")
    probs = softmax(logprobs)
    best = max(range(len(probs)), key=probs.__getitem__)
    return Answer(
        qid=q.qid,
        type=q.type,
        options=q.options,
        probs=tuple(probs),
        answer=q.options[best],
        p_true=probs[0] if q.type == "noul" else None,
        score=sum(i * p for i, p in enumerate(probs)) if q.type == "score" else None,
        confidence=confidence(probs),
        label_mass=label_mass(logprobs),
    )
