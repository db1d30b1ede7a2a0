"""The math the multi-item fork of the Qwen3.5/3.6 hybrids relies on (backends/sglang/hybrid), checked in float32
with transformers' torch gated-delta-net on the CPU: an item run from a copy of the prefix-end state (conv window +
SSM state, attention KV) gives the logits of the whole `prefix + item` sequence, for prefixes and items on both
sides of the conv window (4) and the GDN chunk (64), each item from its own copy. And the leak the fork removes is
real: an item whose recurrence starts at a delimiter (sglang 0.5.20's semantics) does not. The sglang kernels
themselves run on a GPU only (benchmarks/hybrid_mis_exact_gpu.py)."""

import copy

import pytest
import torch

# builds or runs a model, or imports sglang, in this process: minutes under load (issue 48.10), so in the
# full set only (tests/conftest.py)
pytestmark = pytest.mark.heavy

transformers = pytest.importorskip("transformers")
qwen3_5 = pytest.importorskip("transformers.models.qwen3_5")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = qwen3_5.Qwen3_5TextConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, full_attention_interval=4,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
        initializer_range=0.02, max_position_embeddings=1024,
    )  # fmt: skip
    m = qwen3_5.Qwen3_5ForCausalLM(cfg).eval()
    with torch.no_grad():  # realistic scale on every matrix: 0.02, as the GPU exactness checkpoint
        for p in m.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    assert "linear_attention" in cfg.layer_types and "full_attention" in cfg.layer_types
    return m


def last_logprobs(model, ids, past=None):
    with torch.no_grad():
        out = model(torch.tensor([ids]), past_key_values=past, use_cache=True)
    return out.logits[0, -1].log_softmax(-1), out.past_key_values


@pytest.mark.parametrize("prefix_len", [1, 3, 64, 65])
def test_each_item_from_a_copy_of_the_prefix_state_equals_prefix_plus_item(model, prefix_len):
    g = torch.Generator().manual_seed(prefix_len)
    prefix = torch.randint(10, 500, (prefix_len,), generator=g).tolist()
    items = [torch.randint(10, 500, (n,), generator=g).tolist() for n in (1, 4, 5, 65)]
    _, state = last_logprobs(model, prefix)
    for item in items:  # every item forks from the same prefix-end state; none sees another
        forked, _ = last_logprobs(model, item, copy.deepcopy(state))
        whole, _ = last_logprobs(model, prefix + item)
        assert torch.allclose(forked, whole, atol=2e-5), (len(item), (forked - whole).abs().max())


def test_an_item_whose_recurrence_starts_at_the_delimiter_is_not_its_own_request(model):
    """The negative control: prefix → D → item (the delimiter in the state, not in attention: the 0.5.20 fork)
    moves the answer by far more than float noise."""
    g = torch.Generator().manual_seed(7)
    prefix, item, delimiter = torch.randint(10, 500, (40,), generator=g).tolist(), [11, 12, 13], 9
    whole, _ = last_logprobs(model, prefix + item)
    leaked, _ = last_logprobs(model, prefix + [delimiter] + item)
    assert (leaked - whole).abs().max() > 1e-3
