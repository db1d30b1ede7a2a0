"""The hf backend's options: `HFOptions` (`batch_tokens`, the classifier's padded tokens a forward pass;
declared in the one table, `options.ENGINE_OPTIONS`, as owned by hf, and nested in every config as
`opts.hf`). The sglang engine's options are refused for hf (`EngineOptions.check_backend`)."""

from __future__ import annotations

from ...options import HFOptions

__all__ = ["HFOptions"]
