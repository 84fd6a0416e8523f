"""Functions the pipeline tests run on several ranks (importable: child processes find them by name)."""

import torch

import minipar.runtime.dist as md
from minipar.data import CharCorpus, load_text
from minipar.model.gpt import GPT, GPTConfig
from minipar.model.presets import default_dtype
from minipar.pp.executor import PipelineExecutor
from minipar.pp.schedules import make_schedule
from minipar.pp.stages import build_stages

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
        x = torch.stack([data[j : j + T] for j in i.tolist()])
        y = torch.stack([data[j + 1 : j + T + 1] for j in i.tolist()])
        out.append((x, y))
    return out


def small_gpt(n_layer, d_model=32, T=16, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=128, block_size=T, n_layer=n_layer, n_head=2, d_model=d_model))


def reference(m, n_layer, steps=2, T=16, mb_size=2, lr=1e-3, dtype=torch.float64):
    """Single-device training on the same global batches: (losses, {name: parameter}).
    Runs in ``dtype`` (float64 by default, see tests/test_pipeline.py for the bound)."""
    with default_dtype(dtype):
        return _reference(m, n_layer, steps, T, mb_size, lr)


def _reference(m, n_layer, steps, T, mb_size, lr):
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


def pipeline_train(cases, steps=2, T=16, mb_size=2, lr=1e-3, dtype=torch.float64, coupled=False):
    """In ``dtype`` (float64 by default: the default dtype of this worker process, so parameters,
    activations and the executor's receive buffers are all float64). For each (schedule, m, v, n_layer):
    train with the pipeline executor on p = world size ranks
    on the same global batches as :func:`reference` (B = m·mb_size). Returns per case
    (losses on the last-stage rank or None, {name: parameter} of the stages this rank owns)."""
    p, me = md.world_size(), md.rank()
    torch.set_default_dtype(dtype)
    out = []
    for name, m, v, n_layer in cases:
        model = small_gpt(n_layer, T=T).to(md.device())  # cuda:LOCAL_RANK on NCCL
        sched = make_schedule(name, p, m, v)
        stages = build_stages(model, p * v, sorted({a.stage for a in sched[me]}))
        params = [q for s in stages.values() for q in s.parameters()]
        opt = torch.optim.AdamW(params, lr=lr)
        ex = PipelineExecutor(stages, sched, coupled=coupled)
        losses = [ex.step(x, y, opt).loss for x, y in batches(steps, m * mb_size, T)]
        mine = {id(q) for q in params}
        out.append(
            (
                losses if me == p - 1 else None,
                {k: q.detach().clone() for k, q in model.named_parameters() if id(q) in mine},
            )
        )
    return out


def against_native(cases, steps=2, T=16, mb_size=2, lr=1e-3):
    """minipar's executor vs ``torch.distributed.pipelining`` on the same model and batches.
    Returns per case (max |loss diff| or None, max |param diff| on this rank's stages)."""
    from minipar.pp.native import native_schedule, native_step

    p, me = md.world_size(), md.rank()
    torch.set_default_dtype(torch.float64)  # exactness proof: see tests/test_pipeline.py for the bound
    out = []
    for name, m, v, n_layer in cases:
        a, b = small_gpt(n_layer, T=T).to(md.device()), small_gpt(n_layer, T=T).to(md.device())
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
    """Rank 1 runs m=4 while rank 0 runs m=2: rank 1 waits for micro-batch 2 that never comes.
    Rank 0 (which also waits, for 0B1) gives up quietly once rank 1 is gone, so rank 1's own
    receive timeout is the error the test reads."""
    model = small_gpt(2)
    m = 2 if md.rank() == 0 else 4
    sched = make_schedule("gpipe", 2, m)
    ex = PipelineExecutor(
        build_stages(model, 2, [md.rank()]), sched, timeout=timeout if md.rank() == 1 else timeout + 30
    )
    x, y = batches(1, 4, 16)[0]
    if md.rank() == 1:
        ex.step(x, y)  # raises after `timeout` s
    try:
        ex.step(x, y)
    except RuntimeError:  # "Connection closed by peer" once rank 1 has failed
        return None


def strict_sweep(cases, lookaheads=(0, 1, 2, 3), T=8):
    """One step of every (schedule, m, v) in ``cases`` at every lookahead, under whatever
    ``MINIPAR_P2P_ORDER`` the environment sets (strict in the tests). Returns the number of steps run."""
    from minipar.comm import p2p

    p, me = md.world_size(), md.rank()
    assert p2p.strict(), "the tests run with MINIPAR_P2P_ORDER=strict (tests/conftest.py)"
    runs = 0
    for name, m, v in cases:
        sched = make_schedule(name, p, m, v)
        model = small_gpt(p * v, d_model=16, T=T)
        stages = build_stages(model, p * v, sorted({a.stage for a in sched[me]}))
        for la in lookaheads:
            x, y = batches(1, m, T)[0]
            PipelineExecutor(stages, sched, lookahead=la, count_memory=False).step(x, y)
            runs += 1
    return runs


def reordered_gpipe(timeout=10):
    """GPipe p=2, m=2, except that rank 1 runs its forwards in the order 1F1, 1F0 (a schedule a
    learner might write; valid as data flow, and gloo would deliver it by tag). Rank 0 sends 1F0
    then 1F1, so NCCL would hand 1F0's activation to 1F1: strict mode raises on rank 1."""
    from minipar.pp.schedules import gpipe, parse

    sched = gpipe(2, 2)
    sched[1] = [parse(a) for a in ("1F1", "1F0", "1B1", "1B0")]
    model = small_gpt(2, d_model=16, T=8)
    ex = PipelineExecutor(build_stages(model, 2, [md.rank()]), sched, timeout=timeout)
    x, y = batches(1, 4, 8)[0]
    try:
        return ex.step(x, y).loss
    except RuntimeError as exc:
        if md.rank() == 0 and "P2POrderError" not in type(exc).__name__:
            return None  # rank 0 only sees rank 1 go away
        raise


def swapped_labels():
    """Rank 0 sends a then b (tags 1, 2); rank 1 posts its receives b then a. gloo matches by tag,
    so with strict mode off both arrive right; strict mode raises at rank 1's first wait.
    Returns what rank 1 received (strict off)."""
    from minipar.comm import p2p

    a, b = torch.tensor([1.0]), torch.tensor([2.0])
    if md.rank() == 0:
        works = [p2p.isend(a, 1, tag=1, label="a"), p2p.isend(b, 1, tag=2, label="b")]
        try:
            for w in works:
                w.wait()
        except RuntimeError:
            return None
        return None
    ra, rb = torch.zeros(1), torch.zeros(1)
    works = [p2p.irecv(rb, 0, tag=2, label="b"), p2p.irecv(ra, 0, tag=1, label="a")]
    for w in works:
        w.wait()
    return ra.item(), rb.item()


def missing_send(timeout=3.0):
    """Rank 0 sends "a" only; rank 1 posts receives "a" then "b": the second never comes. Strict
    mode turns the wait into a RuntimeError after ``timeout`` s with both sequences (no hang)."""
    import time
    from datetime import timedelta

    from minipar.comm import p2p

    if md.rank() == 0:
        p2p.isend(torch.tensor([1.0]), 1, tag=1, label="a").wait()
        time.sleep(timeout + 3)  # stay alive: rank 1's error is its own timeout
        return None
    ra, rb = torch.zeros(1), torch.zeros(1)
    works = [p2p.irecv(ra, 0, tag=1, label="a"), p2p.irecv(rb, 0, tag=2, label="b")]
    for w in works:
        w.wait(timedelta(seconds=timeout))
