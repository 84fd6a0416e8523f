"""Functions the pipeline tests run on several ranks (importable: child processes find them by name)."""
import copy

import torch

import minipar.dist as md
from minipar.data import CharCorpus, load_text
from minipar.models import GPT, GPTConfig
from minipar.pipeline import PipelineExecutor, build_stages
from minipar.pipeline_schedules import make_schedule

_CORPUS = None


def batches(steps, B, T, seed=0):
    """``steps`` (x, y) batches of real text, (B, T) int64, the same on every rank."""
    global _CORPUS
    if _CORPUS is None:
        _CORPUS = CharCorpus(load_text())
    g = torch.Generator().manual_seed(seed)
    data = _CORPUS.data
    out = []
    for _ in range(steps):
        i = torch.randint(0, len(data) - T - 1, (B,), generator=g)
        x = torch.stack([data[j:j + T] for j in i.tolist()])
        y = torch.stack([data[j + 1:j + T + 1] for j in i.tolist()])
        out.append((x, y))
    return out


def small_gpt(n_layer, d_model=32, T=16, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=128, block_size=T, n_layer=n_layer, n_head=2, d_model=d_model))


def reference(m, n_layer, steps=2, T=16, mb_size=2, lr=1e-3):
    """Single-device training on the same global batches: (losses, {name: parameter})."""
    ref = small_gpt(n_layer, T=T)
    opt = torch.optim.AdamW(ref.parameters(), lr=lr)
    losses = []
    for x, y in batches(steps, m * mb_size, T):
        opt.zero_grad()
        _, loss = ref(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in ref.named_parameters()}


def pipeline_train(cases, steps=2, T=16, mb_size=2, lr=1e-3):
    """For each (schedule, m, v, n_layer): train with the pipeline executor on p = world size ranks
    on the same global batches as :func:`reference` (B = m·mb_size). Returns per case
    (losses on the last-stage rank or None, {name: parameter} of the stages this rank owns)."""
    p, me = md.world_size(), md.rank()
    out = []
    for name, m, v, n_layer in cases:
        model = small_gpt(n_layer, T=T)
        sched = make_schedule(name, p, m, v)
        stages = build_stages(model, p * v, sorted({a.stage for a in sched[me]}))
        params = [q for s in stages.values() for q in s.parameters()]
        opt = torch.optim.AdamW(params, lr=lr)
        ex = PipelineExecutor(stages, sched)
        losses = [ex.step(x, y, opt).loss for x, y in batches(steps, m * mb_size, T)]
        mine = {id(q) for q in params}
        out.append((losses if me == p - 1 else None,
                    {k: q.detach().clone() for k, q in model.named_parameters() if id(q) in mine}))
    return out
