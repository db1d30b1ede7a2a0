"""The start-up probe shared by the classes of this package (imported by sglang only; needs torch)."""

from __future__ import annotations

from . import HEAD_VERSION, MARKER


class ClassifierHeadProbe:
    """Mixin: `get_weights_by_name` (sglang's weight-inspection hook) answers the MARKER query with
    ``[HEAD_VERSION, 1.0 if the score head has a bias else 0.0, num_labels]``, and any parameter by its
    exact name as a (truncated) nested list; None for an unknown name."""

    def get_weights_by_name(self, name: str, truncate_size: int = 100, tp_size: int = 1):
        score = self.score
        if name == MARKER:
            return [HEAD_VERSION, 0.0 if score.bias is None else 1.0, float(score.out_features)]
        param = dict(self.named_parameters()).get(name)
        if param is None:
            return None
        return param.detach().float().cpu().tolist()[:truncate_size]
