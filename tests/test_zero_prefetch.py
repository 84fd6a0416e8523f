"""ZeRO-3 forward prefetch (minipar.zero.stage3, ``prefetch=True``): the same numbers, gathers issued early.

Prefetch changes *when* unit k+1's all-gather is issued, not what it gathers: every rank receives
the same shards, so the run equals the one without prefetch bit for bit (float64, bound 0).
"""

import torch

from minipar import launch
from minipar.models import GPT, GPTConfig

CFG = GPTConfig(vocab_size=17, block_size=8, n_layer=3, n_head=2, d_model=16, tie_weights=False)


def worker(prefetch: bool, steps: int = 3):
    from minipar import dist as mdist
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
