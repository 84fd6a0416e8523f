"""Functions the pipeline tests run on several ranks (importable: child processes find them by name)."""
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


def against_native(cases, steps=2, T=16, mb_size=2, lr=1e-3):
    """minipar's executor vs ``torch.distributed.pipelining`` on the same model and batches.
    Returns per case (max |loss diff| or None, max |param diff| on this rank's stages)."""
    from minipar.pipeline_native import native_schedule, native_step
    p, me = md.world_size(), md.rank()
    out = []
    for name, m, v, n_layer in cases:
        a, b = small_gpt(n_layer, T=T), small_gpt(n_layer, T=T)
        sched = make_schedule(name, p, m, v)
        ids = sorted({x.stage for x in sched[me]})
        sa, sb = build_stages(a, p * v, ids), build_stages(b, p * v, ids)
        pa = [q for s in sa.values() for q in s.parameters()]
        pb = [q for s in sb.values() for q in s.parameters()]
        oa, ob = torch.optim.AdamW(pa, lr=lr), torch.optim.AdamW(pb, lr=lr)
        ex, nat = PipelineExecutor(sa, sched), native_schedule(name, sb, p * v, m)
        dloss = 0.0
        for x, y in batches(steps, m * mb_size, T):
            la = ex.step(x, y, oa).loss
            lb = native_step(nat, sb, p * v, x, y, ob)
            if la is not None:
                dloss = max(dloss, abs(la - lb))
        out.append((dloss if p * v - 1 in ids else None, max((u - w).abs().max().item() for u, w in zip(pa, pb))))
    return out


def shape_mismatch():
    """Stage 0 returns width 16 while the pipeline carries width 32: rank 0 must raise, not hang."""
    import torch.nn as nn
    model = small_gpt(2)
    sched = make_schedule("gpipe", 2, 2)
    stages = build_stages(model, 2, [md.rank()])
    if md.rank() == 0:
        stages = {0: nn.Sequential(stages[0], nn.Linear(32, 16))}
    ex = PipelineExecutor(stages, sched, hidden_size=32)
    x, y = batches(1, 4, 16)[0]
    ex.step(x, y)


def mismatched_schedules(timeout):
    """Rank 1 runs m=4 while rank 0 runs m=2: rank 1 waits for micro-batch 2 that never comes."""
    model = small_gpt(2)
    m = 2 if md.rank() == 0 else 4
    sched = make_schedule("gpipe", 2, m)
    ex = PipelineExecutor(build_stages(model, 2, [md.rank()]), sched, timeout=timeout)
    x, y = batches(1, 4, 16)[0]
    ex.step(x, y)
    if md.rank() == 0:
        import time
        time.sleep(timeout + 5)  # stay alive, so rank 1's failure is the receive timeout itself
