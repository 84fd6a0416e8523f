"""ZeRO-3 forward prefetch (minipar.zero.stage3, ``prefetch=True``): the same numbers, gathers issued early.

Prefetch changes *when* unit k+1's all-gather is issued, not what it gathers: every rank receives
the same shards, so the run equals the one without prefetch bit for bit (float64, bound 0).
"""

import torch

from minipar import launch
from minipar.model.gpt import GPT, GPTConfig
from minipar.zero.flat import default_units

CFG = GPTConfig(vocab_size=17, block_size=8, n_layer=3, n_head=2, d_model=16, tie_weights=False)


def worker(prefetch: bool, steps: int = 3):
    from minipar.runtime import dist as mdist
    from minipar.zero import zero

    torch.manual_seed(0)
    model = GPT(CFG).double()
    timeline: list = []
    opt = zero(model, 3, lr=1e-2, prefetch=prefetch, timeline=timeline)
    gen = torch.Generator().manual_seed(1 + mdist.rank())
    losses = []
    for _ in range(steps):
        x = torch.randint(0, CFG.vocab_size, (2, CFG.block_size), generator=gen)
        _, loss = model(x, x)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    params = opt.full_state_dict()
    return losses, params, timeline


def test_prefetch_equals_no_prefetch_and_issues_each_gather_before_the_previous_unit_computes():
    plain = launch(worker, world_size=2, args=(False,))
    pre = launch(worker, world_size=2, args=(True,))
    for (l0, p0, _), (l1, p1, tl) in zip(plain, pre):
        assert l0 == l1
        assert all(torch.equal(p0[k], p1[k]) for k in p0)
        # per step, the forward gather of every unit but the first starts before the previous unit's compute
        gathers = [(u, t0) for row, u, t0, _ in tl if row == "all-gather" and "(bwd)" not in u]
        computes = [(u, t0) for row, u, t0, _ in tl if row == "compute"]
        units = list(dict.fromkeys(u for u, _ in computes))
        first_step = {}
        for u, t in gathers:
            first_step.setdefault(u, t)
        starts = {}
        for u, t in computes:
            starts.setdefault(u, t)
        for prev, nxt in zip(units, units[1:]):
            assert first_step[nxt] < starts[prev], (prev, nxt)


def zero12_worker(stage: int, overlap: bool, steps: int = 3):
    """ZeRO-1/2 on 2 ranks, float64, gradient accumulation over 2 micro-batches; with overlap_param_gather
    also records, per forward of a unit, how many weight all-gathers were still in flight (issued, not waited)."""
    from minipar.runtime import dist as mdist
    from minipar.zero import zero

    torch.manual_seed(0)
    model = GPT(CFG).double()
    opt = zero(model, stage, lr=1e-2, overlap_param_gather=overlap)
    in_flight = []
    if overlap:
        for _, m in default_units(model):
            m.register_forward_pre_hook(lambda mod, args: in_flight.append(sum(g is not None for g in opt._gathers)))
    gen = torch.Generator().manual_seed(1 + mdist.rank())
    losses = []
    for _ in range(steps):
        for _ in range(2):
            x = torch.randint(0, CFG.vocab_size, (2, CFG.block_size), generator=gen)
            _, loss = model(x, x)
            loss.backward()
            losses.append(loss.item())
        opt.step()
        opt.zero_grad()
    opt.wait_params()
    return losses, {k: v.clone() for k, v in model.state_dict().items()}, in_flight


def test_overlapped_param_gather_equals_blocking_zero12_bit_for_bit_and_keeps_the_next_gather_in_flight():
    for stage in (1, 2):
        plain = launch(zero12_worker, world_size=2, args=(stage, False))
        over = launch(zero12_worker, world_size=2, args=(stage, True))
        for (l0, p0, _), (l1, p1, fl) in zip(plain, over):
            assert l0 == l1, stage
            assert all(torch.equal(p0[k], p1[k]) for k in p0), stage
            # the hooks run after the optimizer's own: by then the next unit's gather is in flight
            # (after a step) except at the last unit; never more than that one
            assert max(fl) == 1 and 1 in fl, fl
