"""Experiment drivers for lesson 06 (1F1B). They only call minipar; child processes import them by
name, so they live in a module, not in the notebook."""

from __future__ import annotations

import torch

import minipar.runtime.dist as md
from minipar.data import CharCorpus, load_text, make_loader
from minipar.model.gpt import GPT, GPTConfig
from minipar.pp.executor import PipelineExecutor
from minipar.pp.schedules import Action, unpack
from minipar.pp.stages import build_stages


def run_schedule(schedule: list[list[Action]], timeout: float = 10.0):
    """One step of ``schedule`` (any per-rank action lists, one stage per rank) on a small GPT with
    minipar's executor. Returns the loss on the last rank, None elsewhere; a rank that only sees
    its peer fail returns None too, so the error a learner reads is the failing rank's own."""
    from minipar.comm.p2p import P2POrderError

    corpus = CharCorpus(load_text())
    torch.manual_seed(0)
    p, m = len(schedule), 1 + max(a.mb for acts in schedule for a in acts)
    model = GPT(GPTConfig(vocab_size=corpus.vocab_size, block_size=16, n_layer=p, n_head=2, d_model=16))
    x, y = next(make_loader(corpus.split("train", 16), batch_size=2 * m, seed=0))
    ex = PipelineExecutor(build_stages(model, p, [md.rank()]), schedule, timeout=timeout)
    try:
        return ex.step(x, y).loss
    except P2POrderError:
        raise
    except RuntimeError:
        return None


def coupled_vs_decoupled(spec, link, steps: int = 4) -> dict:
    """1F1B steps of ``spec``'s model on the cluster clock (``link`` between ranks), alternating a
    decoupled executor (MegaScale) and a coupled one (Megatron-LM's blocking pairs) on the same stages,
    batches and optimizer, so both modes see the same machine. Returns, per mode, this rank's clock
    timeline of the step with the least virtual time and that time (the last rank to finish)."""
    import dataclasses

    from minipar.clock import ClusterClock
    from minipar.course.pipeline_trace import model_and_data
    from minipar.pp.schedules import make_schedule

    p, me = md.world_size(), md.rank()
    model, batches = model_and_data(dataclasses.replace(spec, steps=2 * steps + 1))
    sched = make_schedule("1f1b", p, spec.m)
    stages = build_stages(model, p, [me])
    opt = torch.optim.AdamW([q for s in stages.values() for q in s.parameters()], lr=spec.lr)
    ex = {c: PipelineExecutor(stages, sched, coupled=c, count_memory=False) for c in (False, True)}
    best: dict = {}
    for i, (x, y) in enumerate(batches):  # a warm-up step of each mode, then steps of each, in turn
        coupled = bool(i % 2)
        with ClusterClock(link, link) as clk:
            ex[coupled].step(x, y, opt, clock=clk)
        t = torch.tensor([clk.now], dtype=torch.float64)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        if i >= 2 and t.item() < best.get(coupled, (float("inf"),))[0]:
            best[coupled] = (t.item(), [tuple(s) for s in clk.timeline])
    return {("coupled" if c else "decoupled"): dict(virtual_s=v, timeline=tl) for c, (v, tl) in best.items()}


def hook_phases(n_layer: int = 2) -> dict:
    """Which parameters' post-accumulate-grad hooks (the signal DDP's reducer waits for) fire in the I
    and in the W of one micro-batch, on one stage of a small GPT run through minipar's split backward
    (:mod:`minipar.pp.zero_bubble`). Returns ``{"I with a gradient": [...], "I, empty": [...],
    "W with a gradient": [...]}`` (parameter names)."""
    from minipar.pp.zero_bubble import WeightGradStore, split_linears

    corpus = CharCorpus(load_text())
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=corpus.vocab_size, block_size=16, n_layer=n_layer, n_head=2, d_model=16))
    stage = build_stages(model, 1, [0])[0]
    x, y = next(make_loader(corpus.split("train", 16), batch_size=2, seed=0))
    phase, fired = ["I"], {"I with a gradient": [], "I, empty": [], "W with a gradient": []}
    for name, q in stage.named_parameters():
        q.register_post_accumulate_grad_hook(
            lambda q, name=name: fired[
                f"{phase[0]}, empty" if q.grad is None else f"{phase[0]} with a gradient"
            ].append(name)
        )
    store = WeightGradStore()
    with split_linears([stage], store):
        with store.collect((0, 0)):
            GPT.loss(stage(x), y).backward()
        phase[0] = "W"
        store.flush((0, 0))
    return fired


def pipelines_vs_table2(pp: int = 8, m: int = 20) -> dict:
    """SIMULATE four schedules on the same work: ``pp`` stages of 1/pp of the model, ``m`` micro-batches,
    F = I = W = 1 time unit, a full B = 2, an overlapped pair F&B = F + B = 3 (no gain from the overlap).
    1F1B, ZB-H1 and DualPipe on ``pp`` ranks; PyTorch's DualPipeV on ``pp/2`` ranks (two stages each,
    its OVERLAP_F_B pairs fused). Returns, per schedule: the simulation, devices, parameters per device
    (in stages), copies of the model, peak activations per device (micro-batches × stages), the
    simulated idle per rank (the most of any rank) and DeepSeek-V3 Table 2's formula for it."""
    from minipar.pp.dualpipe import dualpipe, idle_per_rank, route, table2_bubble
    from minipar.pp.native import torch_pipeline_order, v_shape
    from minipar.pp.schedules import one_f_one_b, simulate, zb_h1

    full = lambda a: 2.0 if a.kind == "B" else 1.0  # noqa: E731 — B = I + W
    F, B, W = 1, 2, 1
    table2 = table2_bubble(pp, F, B, W)  # DualPipe's row; DualPipeV on pp/2 ranks is the same pipeline
    sims = {
        "1F1B": (simulate(one_f_one_b(pp, m), F, B), 1, (pp - 1) * (F + B)),
        "ZB-H1": (simulate(zb_h1(pp, m), F, B - W, t_w=W), 1, (pp - 1) * (F + B - 2 * W)),
        "DualPipe": (simulate(dualpipe(pp, m), F, full, t_w=W, place=v_shape(pp), route=route(pp, m)), 1, table2),
        "DualPipeV (PyTorch)": (
            simulate(torch_pipeline_order("dualpipev", pp // 2, m, fused=True), F, full, t_w=W, place=v_shape(pp // 2)),
            2,
            table2,
        ),
    }
    out = {}
    for name, (sim, scale, formula) in sims.items():
        stages = len({a.stage for e in sim.timeline[0] for a in unpack(e[0])})
        out[name] = dict(
            sim=sim,
            devices=sim.p,
            params=stages,
            copies=stages * sim.p // pp,
            act=max(sim.peak_inflight) * scale,  # the V's chunks count ½ of a 1/(pp/2) stage: ×2 in 1/pp stages
            idle=max(idle_per_rank(sim)),
            formula=formula,
        )
    return out
