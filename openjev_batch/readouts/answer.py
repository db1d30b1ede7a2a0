"""The answer math both readouts share (pure): a stable softmax over scores (label logprobs, a head's
logits) and the confidence of the distribution (1 − its normalised entropy)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def softmax(logprobs: Sequence[float]) -> list[float]:
    """Stable softmax. Raises ValueError on an empty or non-finite input."""
    if not logprobs or not all(math.isfinite(x) for x in logprobs):
        raise ValueError(f"non-finite or missing label logprob in {list(logprobs)}")
    m = max(logprobs)
    e = [math.exp(x - m) for x in logprobs]
    s = sum(e)
    return [x / s for x in e]


def confidence(probs: Sequence[float]) -> float:
    """1 − H(P)/ln K, clamped to [0, 1] (1: all mass on one option; 0: uniform)."""
    k = len(probs)
    h = -sum(p * math.log(p) for p in probs if p > 0)
    return min(1.0, max(0.0, 1.0 - h / math.log(k)))
