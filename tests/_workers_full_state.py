"""Rank functions for tests/test_full_state.py: one ``full_state_dict`` for every sharding, against one device."""

import torch

import minipar.runtime.dist as md
from minipar.checkpoint.full_state import full_state_dict, gather_stages
from minipar.course.zero_strategies import apply_strategy
from minipar.cp.ring import ring_attention
from minipar.cp.split import load_balanced_ranges, shard
from minipar.errors import ConfigError
from minipar.model.gpt import GPT, GPTConfig
from minipar.model.memory import state_bytes
from minipar.model.presets import default_dtype
from minipar.runtime.mesh import init_mesh
from minipar.tp.gpt import TensorParallelGPT

CFG = GPTConfig(vocab_size=14, block_size=8, n_layer=2, n_head=2, d_model=16)


def batch():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, CFG.vocab_size, (4, CFG.block_size), generator=g)


def one_device() -> dict:
    """The single-device weights and float64 gradients of the whole batch (the reference)."""
    with default_dtype(torch.float64):
        torch.manual_seed(0)
        model = GPT(CFG)
        x = batch()
        model(x, x)[1].backward()
        return {"params": full_state_dict(model), "grads": full_state_dict(model, grads=True)}


def sharded(strategy: str) -> dict:
    """float64: the model sharded by ``strategy``, this rank's rows of the batch, gradients averaged as the
    strategy does; returns what ``full_state_dict`` gathers and what ``state_bytes`` counts on this rank."""
    with default_dtype(torch.float64):
        torch.manual_seed(0)
        if strategy == "tp":
            model = TensorParallelGPT(CFG)
            opt = None
            x = batch()  # TP: every rank sees the whole batch
        else:
            model = GPT(CFG)
            opt = apply_strategy(model, strategy, lambda m: torch.optim.SGD(m.parameters(), lr=0.0), lr=0.0)
            x = batch().chunk(md.world_size())[md.rank()]
        model(x, x)[1].backward()
        out = {"params": full_state_dict(model, optimizer=opt), "bytes": state_bytes(model, opt)}
        if strategy == "zero3":
            try:
                full_state_dict(model, grads=True, optimizer=opt)
            except ConfigError as e:
                out["grads_error"] = str(e)
        else:
            out["grads"] = full_state_dict(model, grads=True)
            if strategy == "fsdp2":
                local = sum(p.to_local().numel() * p.to_local().element_size() for p in model.parameters())
                out["local_param_bytes"] = local
        if strategy == "zero3":
            out["held"] = opt.held_bytes()
        return out


def stages() -> dict | None:
    """pp = 2 on 2 ranks: each stage contributes ``{f"stage{pp_rank}": pp_rank}``; rank 0 gets both."""
    mesh = init_mesh(pp=2, dp=1, tp=1)
    return gather_stages({f"stage{mesh.pp_rank}": torch.tensor(float(mesh.pp_rank))}, mesh, dst=0)


def ring_trace(T: int = 12) -> dict:
    """Ring attention's forward with and without ``trace``: the output, and the blocks this rank attended."""
    n, r = md.world_size(), md.rank()
    ranges = load_balanced_ranges(T, n)
    g = torch.Generator().manual_seed(0)
    q, k, v = (shard(torch.randn(1, 2, T, 4, dtype=torch.float64, generator=g), ranges[r], dim=2) for _ in range(3))
    seen: list = []
    return {
        "ranges": ranges,
        "traced": ring_attention(q, k, v, ranges, trace=seen),
        "plain": ring_attention(q, k, v, ranges),
        "trace": seen,
    }
