"""Rank functions for tests/test_fully_shard.py: minipar's per-parameter ZeRO-3 against one device."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import minipar.runtime.dist as md
from minipar.comm.comm_log import CommLog
from minipar.zero.fully_shard import full_state_dict, fully_shard

V = 11


class Toy(nn.Module):
    """Edge cases in one model: a head tied to the embedding, a (3, 8) weight and (3,) bias (fewer rows
    than 4 ranks), a frozen bias, and a parameter on the root itself."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 8)
        self.mid = nn.Linear(8, 3)
        self.up = nn.Linear(3, 8)
        self.head = nn.Linear(8, V, bias=False)
        self.head.weight = self.emb.weight
        self.gain = nn.Parameter(torch.ones(8))
        self.up.bias.requires_grad_(False)

    def forward(self, x, y):
        h = self.emb(x)
        h = h + self.up(torch.tanh(self.mid(h)))
        logits = self.head(h * self.gain)
        return logits, F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))


def make_opt(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01)
    return torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)


def train(opt_name, batches, world=1, wrap=None, mp=None, dtype=torch.float64):
    torch.manual_seed(0)
    model = Toy().to(dtype)
    if wrap == "minipar":
        fully_shard(model.mid, mp_policy=mp)
        fully_shard(model.up, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    opt = make_opt(opt_name, [p for p in model.parameters() if p.requires_grad])
    losses, comm = [], {}
    r = md.rank() if world > 1 else 0
    for step, xy in enumerate(batches):
        xy = xy.chunk(world)[r]
        with CommLog() as log:
            loss = model(xy[:, :-1], xy[:, 1:])[1]
            loss.backward()
        if step == 1:
            comm = {op: d["sent"] for op, d in log.by_op().items()}
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().double())
    state = full_state_dict(model) if wrap else {k: v.detach().clone() for k, v in model.named_parameters()}
    shapes = {k: tuple(v.shape) for k, v in model.named_parameters()}
    kinds = {n: type(m).__name__ for n, m in model.named_modules()}
    return dict(losses=torch.stack(losses), params=state, shapes=shapes, kinds=kinds, comm=comm)


def sharded(opt_name, batches, mp=None):
    out = train(opt_name, batches, md.world_size(), "minipar", mp)
    t = out["losses"].clone()
    torch.distributed.all_reduce(t)
    out["losses"] = t / md.world_size()
    return out


def train_options(opt_name, batches, accumulate=1, prefetch=True, replicate=False):
    """Like :func:`sharded`, with gradient accumulation over ``accumulate`` micro-batches per rank, prefetch
    on/off, or the root's ``gain`` kept replicated (all-reduced instead of sharded)."""
    torch.manual_seed(0)
    model = Toy().to(torch.float64)
    fully_shard(model.mid, prefetch=prefetch)
    fully_shard(model.up, prefetch=prefetch)
    fully_shard(model, prefetch=prefetch, replicate_params=[model.gain] if replicate else ())
    opt = make_opt(opt_name, [p for p in model.parameters() if p.requires_grad])
    n, r = md.world_size(), md.rank()
    for xy in batches:
        for micro in xy.chunk(n)[r].chunk(accumulate):
            (model(micro[:, :-1], micro[:, 1:])[1] / accumulate).backward()
        opt.step()
        opt.zero_grad()
    return dict(params=full_state_dict(model), gain_shape=tuple(model.gain.shape))


def gpt_layout(cfg):
    """The GPT after fully_shard on every block and the root: module kinds, and every parameter's
    (name, shape, full shape, sharded?) as seen by walking ``named_modules()``."""
    from minipar.model.gpt import GPT

    torch.manual_seed(0)
    model = GPT(cfg)
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    found = []
    for mname, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            for pname, p in m.named_parameters(recurse=False):
                spec = getattr(p, "shard_spec", None)
                found.append((f"{mname}.{pname}", type(m).__name__, tuple(p.shape), tuple(spec.full_shape), type(p)))
    return found


def double_wrap():
    fully_shard(fully_shard(Toy()))


def tied_across_calls():
    model = Toy()
    fully_shard(model.emb)
    fully_shard(model)


def different_start():
    torch.manual_seed(md.rank())
    fully_shard(Toy())
