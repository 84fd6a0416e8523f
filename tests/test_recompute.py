import pytest
import torch

from minipar.errors import ConfigError
from minipar.model.gpt import Block, GPTConfig
from minipar.model.memory import saved_activation_bytes
from minipar.model.recompute import CheckpointedBlock, checkpoint
from minipar.perf.model import activation_bytes_per_layer
from minipar.perf.shape import ModelShape


def _run(mode, seed=0):
    torch.manual_seed(seed)
    cfg = GPTConfig(d_model=32, n_head=4, dropout=0.1)
    blk = Block(cfg).double()
    x = torch.randn(2, 16, 32, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(1)
    y = CheckpointedBlock(blk, mode)(x)
    y.pow(2).sum().backward()
    return y.detach(), x.grad, [p.grad for p in blk.parameters()]


def test_full_recompute_equals_plain_with_dropout_float64():
    y0, gx0, g0 = _run("none")
    y1, gx1, g1 = _run("full")
    # same ops in the same order on the same RNG masks: bit-equal in float64
    assert torch.equal(y0, y1) and torch.equal(gx0, gx1)
    assert all(torch.equal(a, b) for a, b in zip(g0, g1))


def test_checkpoint_matches_torch_utils_checkpoint():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8).double()
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    checkpoint(lin, x).sum().backward()
    g_ours = lin.weight.grad.clone()
    lin.weight.grad = None
    torch.utils.checkpoint.checkpoint(lin, x, use_reentrant=False).sum().backward()
    assert torch.equal(g_ours, lin.weight.grad)


def test_full_recompute_keeps_only_input():
    cfg = GPTConfig(d_model=32, n_head=4)
    blk = Block(cfg)
    x = torch.randn(2, 16, 32, requires_grad=True)
    full = saved_activation_bytes(lambda: CheckpointedBlock(blk, "full")(x), exclude=blk)
    assert full == x.numel() * 4  # fp32 input: 2sbh in 16-bit is 4sbh bytes in fp32
    layer = ModelShape(layers=1, hidden=32, heads=4, seq=16)
    assert activation_bytes_per_layer(layer, 2, 1, "full") == 2 * 16 * 2 * 32
    assert activation_bytes_per_layer(layer, 2, 1, "none") == 34 * 16 * 2 * 32 + 5 * 4 * 16 * 16 * 2  # sbh(34 + 5as/h)


def test_bad_mode():
    with pytest.raises(ConfigError):
        CheckpointedBlock(torch.nn.Identity(), "half")
    with pytest.raises(ConfigError):
        activation_bytes_per_layer(ModelShape(layers=1, hidden=1, heads=1, seq=1), 1, 1, "half")
