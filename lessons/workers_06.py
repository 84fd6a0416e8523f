"""Experiment drivers for lesson 06 (1F1B): child processes import them by name."""

from __future__ import annotations

import dataclasses

import torch

import minipar.runtime.dist as md
from minipar.comm.p2p import P2POrderError
from minipar.course.clock_runs import fastest_on_clock
from minipar.course.pipeline_trace import RunSpec, model_and_data
from minipar.model.gpt import GPT
from minipar.pp.dualpipe import dualpipe, idle_per_rank, route, table2_bubble
from minipar.pp.executor import PipelineExecutor
from minipar.pp.native import torch_pipeline_order, v_shape
from minipar.pp.schedules import Action, make_schedule, one_f_one_b, simulate, unpack, zb_h1
from minipar.pp.stages import build_stages
from minipar.pp.zero_bubble import WeightGradStore, split_linears


def _tiny(n_layer: int, batch: int):
    """A GPT of ``n_layer`` layers (d_model 16, 2 heads, 16 positions; seed 0) and one (x, y) of ``batch`` rows."""
    model, [(x, y)] = model_and_data(RunSpec(n_layer=n_layer, d_model=16, n_head=2, T=16, B=batch, steps=0))
    return model, x, y


def run_schedule(schedule: list[list[Action]], timeout: float = 10.0):
    """One step of ``schedule`` (any per-rank action lists, one stage per rank) on a small GPT with
    minipar's executor. Returns the loss on the last rank, None elsewhere; a rank that only sees
    its peer fail returns None too, so the error a learner reads is the failing rank's own."""
    p, m = len(schedule), 1 + max(a.mb for acts in schedule for a in acts)
    model, x, y = _tiny(n_layer=p, batch=2 * m)
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
    batches and optimizer. Returns, per mode, this rank's clock ``timeline`` of the step with the least
    ``virtual_s`` (the last rank to finish) and that time."""
    p, me = md.world_size(), md.rank()
    model, batches = model_and_data(dataclasses.replace(spec, steps=2 * steps + 1))
    stages = build_stages(model, p, [me])
    opt = torch.optim.AdamW([q for s in stages.values() for q in s.parameters()], lr=spec.lr)
    sched = make_schedule("1f1b", p, spec.m)
    modes = ("decoupled", "coupled")
    ex = {mode: PipelineExecutor(stages, sched, coupled=mode == "coupled", count_memory=False) for mode in modes}
    batches = iter(batches)  # a warm-up step of each mode, then `steps` of each, in turn

    def step(mode, clk):
        ex[mode].step(*next(batches), opt, clock=clk)

    best = fastest_on_clock(step, modes, steps, (link, link))
    return {mode: dict(virtual_s=v, timeline=[tuple(span) for span in clk.timeline]) for mode, (v, clk) in best.items()}


def hook_phases(n_layer: int = 2) -> dict:
    """The names of the parameters whose post-accumulate-grad hooks (DDP's signal) fire in the I and in the W of
    one micro-batch through minipar's split backward (:mod:`minipar.pp.zero_bubble`), with a gradient or empty."""
    model, x, y = _tiny(n_layer, batch=2)
    stage = build_stages(model, 1, [0])[0]
    phase, fired = ["I"], {"I with a gradient": [], "I, empty": [], "W with a gradient": []}

    def hook(name):  # records ``name`` under the phase it fires in, with a gradient or empty
        return lambda q: fired[f"{phase[0]}, empty" if q.grad is None else f"{phase[0]} with a gradient"].append(name)

    for name, q in stage.named_parameters():
        q.register_post_accumulate_grad_hook(hook(name))
    store = WeightGradStore()
    with split_linears([stage], store):
        with store.collect((0, 0)):
            GPT.loss(stage(x), y).backward()
        phase[0] = "W"
        store.flush((0, 0))
    return fired


def pipelines_vs_table2(pp: int = 8, m: int = 20) -> dict:
    """SIMULATE 1F1B, ZB-H1, DualPipe (``pp`` ranks) and PyTorch's DualPipeV (``pp/2`` ranks, F&B pairs fused) on
    ``pp`` stages, ``m`` micro-batches, F = I = W = 1, B = 2, F&B = 3. Per schedule: the simulation, devices,
    parameters per device (stages), model copies, peak activations per device (micro-batches × 1/pp stages),
    the simulated idle per rank (the most of any rank) and its formula (DeepSeek-V3 Table 2)."""
    full = lambda a: 2.0 if a.kind == "B" else 1.0  # noqa: E731 — B = I + W
    F, B, W = 1, 2, 1
    table2 = table2_bubble(pp, F, B, W)  # DualPipe's row; DualPipeV on pp/2 ranks is the same pipeline
    dualpipev = torch_pipeline_order("dualpipev", pp // 2, m, fused=True)
    sims = {  # name: (simulation, activations' scale to 1/pp stages, the formula of the idle per rank)
        "1F1B": (simulate(one_f_one_b(pp, m), F, B), 1, (pp - 1) * (F + B)),
        "ZB-H1": (simulate(zb_h1(pp, m), F, B - W, t_w=W), 1, (pp - 1) * (F + B - 2 * W)),
        "DualPipe": (simulate(dualpipe(pp, m), F, full, t_w=W, place=v_shape(pp), route=route(pp, m)), 1, table2),
        "DualPipeV (PyTorch)": (simulate(dualpipev, F, full, t_w=W, place=v_shape(pp // 2)), 2, table2),
    }
    out = {}
    for name, (sim, scale, formula) in sims.items():
        stages = len({a.stage for e in sim.timeline[0] for a in unpack(e[0])})
        copies, idle = stages * sim.p // pp, max(idle_per_rank(sim))
        act = max(sim.peak_inflight) * scale  # the V's chunks count ½ of a 1/(pp/2) stage: ×2 in 1/pp stages
        out[name] = dict(sim=sim, devices=sim.p, params=stages, copies=copies, act=act, idle=idle, formula=formula)
    return out
