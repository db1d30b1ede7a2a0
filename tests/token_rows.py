"""Row prompts of random token ids for the backend and plan tests (no tokenizer, no readout), and the plain
full forward pass the backends are checked against."""

import torch

from openjev_batch.core import BranchSpec, RowPrompt


def make_rows(n_rows=4, n_q=3, shared=(), seed=0):
    """`n_rows` rows of random prefixes (after `shared`) and `n_q` random branches of 4 labels each."""
    import random

    rng = random.Random(seed)
    rows = []
    for i in range(n_rows):
        prefix = tuple(shared) + tuple(rng.randrange(100, 5000) for _ in range(rng.randrange(5, 30)))
        br = tuple(
            BranchSpec(
                f"q{j}",
                tuple(rng.randrange(100, 5000) for _ in range(rng.randrange(3, 12))),
                tuple(rng.sample(range(32, 90), 4)),
            )
            for j in range(n_q)
        )
        rows.append(RowPrompt(i, str(i), prefix, br))
    return rows


def full_forward(model, ids, label_ids):
    """The logprobs of `label_ids` after `ids`, from one forward pass over the whole sequence."""
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)
    return [lp[t].item() for t in label_ids]


def row(pos, prefix, n_q=2, suffix_len=3):
    """Row `pos` with `prefix` and `n_q` branches of `suffix_len` tokens, labels (1, 2)."""
    return RowPrompt(
        pos,
        str(pos),
        tuple(prefix),
        tuple(BranchSpec(f"q{i}", (900 + i,) * suffix_len, (1, 2)) for i in range(n_q)),
    )
