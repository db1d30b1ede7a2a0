"""The hf backend's facts (backends/base.BackendSpec), asked without loading torch or a model: its classes per
readout kind, what its KV cache shares, the GPUs one Ray worker takes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..base import BackendPlan, BackendSpec


class HFSpec(BackendSpec):
    name = "hf"
    kinds = {
        "label-logprobs": "openjev_batch.backends.hf.causal:HFBackend",
        "classifier-head": "openjev_batch.backends.hf.classifier:HFClassifier",
    }
    cache = "identical prefixes only"
    # rows run one by one (backends/hf/causal.py): a wide batch gains nothing, so the budget only bounds how long
    # a request waits behind the ones batched with it (issue 46: 20 requests in one batch outlived the timeout)
    serve_batch_ms = 250.0

    def count(self, plan: BackendPlan, windows: Iterable[Any]) -> None:
        # the hf backend keeps one prefix's cache: only an identical next prefix (and images) reuses it
        for w in windows:
            prev = None
            for r in w.rows:
                key = (r.prefix, tuple(im.sha256 for im in r.images))
                fresh = len(r.prefix) if key != prev else 0
                plan.unique_tokens += fresh + sum(len(b.suffix) for b in r.branches)
                prev = key


SPEC = HFSpec()
