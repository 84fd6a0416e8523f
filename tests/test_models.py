"""minipar.model.gpt: shapes, causality, the pieces a pipeline stage is made of."""

import pytest
import torch

from minipar import ConfigError
from minipar.model.gpt import GPT, GPTConfig, MLPNet, num_params


@pytest.fixture
def gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, d_model=32))


def test_shapes_and_loss(gpt):
    x = torch.randint(0, 50, (3, 16))
    logits, loss = gpt(x, x)
    assert logits.shape == (3, 16, 50)
    assert abs(loss.item() - torch.log(torch.tensor(50.0)).item()) < 0.3  # near-uniform at init


def test_causal(gpt):
    x = torch.randint(0, 50, (1, 16))
    y = x.clone()
    y[0, 10:] = (y[0, 10:] + 1) % 50
    a, _ = gpt(x)
    b, _ = gpt(y)
    # positions < 10 see the same inputs; masked positions add exactly 0 (exp(-inf)), so only fp32
    # rounding of the same sums may differ: atol 1e-6 ≈ 10 ulps of logits of size ≤ 1, while a
    # leak from the future changes them by ~0.1
    assert torch.allclose(a[0, :10], b[0, :10], atol=1e-6)
    assert not torch.allclose(a[0, 10:], b[0, 10:])


def test_pieces_compose_to_forward(gpt):
    x = torch.randint(0, 50, (2, 8))
    h = gpt.embed(x)
    for blk in gpt.blocks:
        h = blk(h)
    assert torch.equal(gpt.head(h), gpt(x)[0])


def test_same_seed_same_weights():
    cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=1, d_model=8)
    torch.manual_seed(1)
    a = GPT(cfg)
    torch.manual_seed(1)
    b = GPT(cfg)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_param_count_and_tying():
    cfg = dict(vocab_size=20, block_size=8, n_layer=1, n_head=2, d_model=8)
    untied, tied = GPT(GPTConfig(**cfg)), GPT(GPTConfig(**cfg, tie_weights=True))
    assert num_params(untied) - num_params(tied) == 20 * 8
    d = 8  # per block: 2 LN (4d) + qkv (3d²+3d) + proj (d²+d) + fc (4d²+4d) + proj (4d²+d)
    assert num_params(untied) == 20 * d + 8 * d + (12 * d * d + 13 * d) + 2 * d + 20 * d


def test_generate_and_mlp(gpt):
    g = torch.Generator().manual_seed(0)
    out = gpt.generate(torch.zeros(1, 1, dtype=torch.long), 20, generator=g)
    assert out.shape == (1, 21)
    y, loss = MLPNet(4, 8, 2, 3)(torch.randn(5, 4), torch.randn(5, 3))
    assert y.shape == (5, 3) and loss.ndim == 0


def test_bad_config():
    with pytest.raises(ConfigError, match="--d-model 32 is not divisible by --n-head 3"):
        GPTConfig(d_model=32, n_head=3)
    # the advice looks near --n-head, not through 1..d_model (a fuzzer's --d-model 99999999999999999999 never returned)
    with pytest.raises(ConfigError, match="use --n-head 1, 3, 9, 11, or"):
        GPTConfig(d_model=10**20 - 1, n_head=4)
    with pytest.raises(ConfigError, match="use --n-head 1, or"):  # no divisor near 30: 1 divides everything
        GPTConfig(d_model=7, n_head=30)
    with pytest.raises(ConfigError, match="n_layer=0"):
        GPTConfig(n_layer=0)
    m = GPT(GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=1, d_model=4))
    with pytest.raises(ConfigError, match="block_size=4"):
        m(torch.zeros(1, 5, dtype=torch.long))
