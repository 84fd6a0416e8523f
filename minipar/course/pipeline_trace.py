"""Traced pipeline runs on real ranks: run, measure the bubble, compare with the simulation, draw.

    out = launch(traced_run, world_size=2, args=(RunSpec("1f1b", m=8),))   # one dict per rank
    traces = [o["trace"] for o in out]              # the last step's TraceEvents, per rank
    measured_bubble(traces)                         # idle fraction, measured
    simulate(schedule, *measured_durations(traces)) # the SIMULATION fed with measured durations
    gantt(ax, traces)                               # one row per rank, F/B boxes, gaps = bubble
    from_clock([o["timeline"] for o in out])        # the same events on the cluster clock (minipar.clock)

Bubble, measured: over the window from the first forward to the last backward of a step (all ranks,
one clock: ``time.perf_counter`` is system-wide on Linux), ``1 − busy / (p · window)``, busy = the time
ranks spend inside F and B; waiting and the optimizer step are idle, as in the simulator.

``cpu=True`` counts as busy only the CPU time a rank's thread used inside its F and B (I, W) spans
(``TraceEvent.cpu``, ``time.thread_time``). On cores shared with other processes, an action's
wall-clock span stretches while the OS runs someone else; counting that as *work* makes concurrent
actions look longer than serial ones, and the wall-clock bubble can fall BELOW the formula's minimum
(an artefact). With CPU time, time taken away by the OS counts as idle, as it is.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from statistics import fmean

import torch

from minipar.clock import ClusterClock
from minipar.data import CharCorpus, load_text, make_loader
from minipar.model.gpt import GPT, GPTConfig
from minipar.model.presets import default_dtype
from minipar.pp.executor import PipelineExecutor, TraceEvent
from minipar.pp.schedules import Action, Simulation, bubble_formula, make_schedule, parse, simulate, unpack
from minipar.pp.stages import build_stages
from minipar.pp.zero_bubble import zb_h1_bubble
from minipar.runtime import dist as mdist


@dataclass
class RunSpec:
    """What :func:`traced_run` trains: a GPT cut into ``p·v`` stages, ``steps`` timed steps after one warm-up."""

    schedule: str = "gpipe"  # gpipe | 1f1b | interleaved | zb-h1
    m: int = 4  # micro-batches per step
    v: int = 1  # virtual stages per rank (interleaved)
    n_layer: int = 4
    d_model: int = 64
    n_head: int = 4
    T: int = 64  # sequence length
    B: int = 16  # global batch (sequences per optimizer step)
    steps: int = 3
    lr: float = 1e-3
    lookahead: int = 1  # receives posted this many actions early
    native: bool = False  # run torch.distributed.pipelining instead of minipar's executor
    return_params: bool = False
    seed: int = 0
    dtype: str = "float32"  # "float64" for equivalence proofs (rounding ~1e-16, see minipar.course.verify)
    clock: tuple | None = None  # (intra, inter) Links: run every step on the cluster clock (minipar.clock)
    coupled: bool = False  # blocking paired send/receive instead of decoupled (PipelineExecutor(coupled=))


def model_and_data(spec: RunSpec):
    """``(model, batches)``: the GPT of ``spec`` (seeded) and ``spec.steps + 1`` global batches of real text."""
    corpus = CharCorpus(load_text())
    torch.manual_seed(spec.seed)
    cfg = dict(vocab_size=corpus.vocab_size, block_size=spec.T, n_layer=spec.n_layer, n_head=spec.n_head)
    model = GPT(GPTConfig(**cfg, d_model=spec.d_model))
    loader = make_loader(corpus.split("train", spec.T), batch_size=spec.B, seed=spec.seed)
    return model, [next(loader) for _ in range(spec.steps + 1)]


def traced_run(spec: RunSpec) -> dict:
    """Train on this launch's ranks (the pipeline group = the world). Returns, for this rank:
    ``losses`` (last stage, else None), ``trace`` (the events of the fastest timed step), ``peak_act_bytes``,
    ``act_bytes_per_mb`` (one micro-batch on this rank's first stage), ``step_s`` (the fastest timed step, s,
    as the slowest rank saw it, after a barrier; the minimum: other processes only add time), ``stages``, ``params``.
    With ``spec.clock`` (links): every step runs on a :class:`~minipar.clock.ClusterClock`; also
    ``timeline`` (this rank's clock spans of the step with the least virtual time, for
    :func:`from_clock`) and ``virtual_s`` (that step's virtual seconds, the last rank to finish)."""
    p, me = mdist.world_size(), mdist.rank()
    torch.set_default_dtype(getattr(torch, spec.dtype))  # this rank's process only
    model, batches = model_and_data(spec)
    sched = make_schedule(spec.schedule, p, spec.m, spec.v)
    ids = sorted({a.stage for a in sched[me]})
    S = p * (spec.v if spec.schedule == "interleaved" else 1)
    stages = build_stages(model, S, ids)
    opt = torch.optim.AdamW([q for s in stages.values() for q in s.parameters()], lr=spec.lr)
    if spec.native:
        from minipar.pp.native import native_schedule, native_step

        nat = native_schedule(spec.schedule, stages, S, spec.m)
    else:
        ex = PipelineExecutor(stages, sched, lookahead=spec.lookahead, coupled=spec.coupled)
    losses, times, trace, peak, per_mb = [], [], [], 0, 0
    virtual, timeline = [], []
    for i, (x, y) in enumerate(batches):
        mdist.barrier()
        t0 = time.perf_counter()
        if spec.native:
            loss = native_step(nat, stages, S, x, y, opt)
        else:
            with ClusterClock(*(spec.clock or ()), enabled=spec.clock is not None) as clk:
                res = ex.step(x, y, opt, clock=clk if spec.clock is not None else None)
            loss, peak = res.loss, max(peak, res.peak_act_bytes)
            per_mb = res.act_bytes.get((ids[0], 0), 0)
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=mdist.device())
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)  # the same value on every rank
        if spec.clock is not None and not spec.native:  # the step's virtual time: the last rank to finish
            v = torch.tensor([clk.now], dtype=torch.float64, device=mdist.device())
            torch.distributed.all_reduce(v, op=torch.distributed.ReduceOp.MAX)
            if i > 0:
                if not virtual or v.item() < min(virtual):
                    timeline = [tuple(sp) for sp in clk.timeline]
                virtual.append(v.item())
        if i > 0:  # step 0 is the warm-up
            if not spec.native and (not times or t.item() < min(times)):
                trace = res.trace  # keep the fastest step's trace: the least disturbed by other processes
            times.append(t.item())
        losses.append(loss)
    out = dict(
        rank=me,
        stages=ids,
        losses=losses if loss is not None else None,
        trace=[asdict(e) for e in trace],
        peak_act_bytes=peak,
        act_bytes_per_mb=per_mb,
        step_s=min(times) if times else 0.0,
        step_times=times,
    )
    if spec.clock is not None and not spec.native:  # on the cluster clock: the fastest step's timeline, virtual s
        out.update(timeline=timeline, virtual_s=min(virtual), virtual_times=virtual)
    if spec.return_params:
        mine = {id(q) for s in stages.values() for q in s.parameters()}
        out["params"] = {k: q.detach().clone() for k, q in model.named_parameters() if id(q) in mine}
    return out


def single_device_run(spec: RunSpec) -> dict:
    """The same training on one device: ``losses`` and ``params`` (the reference), in ``spec.dtype``
    (the caller's default dtype is restored afterwards)."""
    with default_dtype(getattr(torch, spec.dtype)):
        model, batches = model_and_data(spec)
        opt = torch.optim.AdamW(model.parameters(), lr=spec.lr)
        losses = []
        for x, y in batches:
            opt.zero_grad(set_to_none=True)
            _, loss = model(x, y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return dict(losses=losses, params={k: q.detach().clone() for k, q in model.named_parameters()})


def _events(traces) -> list[list[TraceEvent]]:
    return [[e if isinstance(e, TraceEvent) else TraceEvent(**e) for e in tr] for tr in traces]


def from_simulation(sim: Simulation) -> list[list[TraceEvent]]:
    """A simulation's timeline as trace events (so :func:`gantt` draws both the same way); an overlapped
    pair (F&B) becomes two events over the pair's span, each with half of it as work."""
    tl = [[(a, t0, t1, len(unpack(e))) for e, t0, t1 in tl for a in unpack(e)] for tl in sim.timeline]
    return [
        [TraceEvent(r, a.kind, a.stage, a.mb, t0, t1, (t1 - t0) / n) for a, t0, t1, n in x] for r, x in enumerate(tl)
    ]


def from_clock(timelines) -> list[list[TraceEvent]]:
    """Per rank, the actions of a :class:`~minipar.clock.ClusterClock` timeline (a step run with
    ``PipelineExecutor.step(..., clock=clk)``) as trace events on the CLUSTER CLOCK: ``t0``/``t1``
    the action's first and last virtual second; ``cpu`` its compute, plus the unlabelled compute
    since the previous action when no wait came between (the executor's own Python handing over a
    local input: work that delays the rank; compute before a wait ran while the message travelled).
    A blocking send inside an action is communication, not work. Feed
    :func:`measured_bubble` (``cpu=True``), :func:`measured_durations` and :func:`gantt`."""
    out = []
    for r, tl in enumerate(timelines):
        acts: dict[str, list] = {}
        extra: dict[str, float] = {}
        pending = 0.0
        for kind, label, t0, t1 in tl:
            if kind != "compute":
                pending = 0.0  # compute before a wait ran while the message travelled: not the action's
                continue
            if re.fullmatch(r"\d+[FBIW]\d+", label):
                acts.setdefault(label, []).append((t0, t1))
                extra[label] = extra.get(label, 0.0) + (pending if acts.keys() - {label} else 0.0)
                pending = 0.0
            elif label == "":
                pending += t1 - t0
        events = []
        for label, spans in acts.items():
            a = parse(label)
            busy = sum(t1 - t0 for t0, t1 in spans) + extra[label]
            events.append(TraceEvent(r, a.kind, a.stage, a.mb, spans[0][0], spans[-1][1], busy))
        out.append(sorted(events, key=lambda e: e.t0))
    return out


def message_bytes(spec: RunSpec) -> int:
    """Bytes of one activation (or its gradient) between two stages: (B/m) · T · d_model · 4 (float32)."""
    return spec.B // spec.m * spec.T * spec.d_model * 4


def read_clock(out: list[dict], spec: RunSpec) -> dict:
    """What a :func:`traced_run` on the cluster clock (``spec.clock`` set; ``out``: one dict per rank) shows.

    Returns ``trace`` (:func:`from_clock`), ``clock`` (its bubble: idle fraction of p ranks over the
    F/B window, busy = each action's compute), ``simulated`` (the simulator fed with every action's
    clocked duration and one message's time on ``spec.clock[0]``: (B/m)·T·d_model·4 bytes; coupled as
    the run), ``medians`` (the simulator on each stage's median forward/backward: the stages'
    imbalance without single actions' spread), ``formula``, ``virtual_s`` (the step, seconds on the
    clock) and ``tokens_s`` (tokens per virtual second).
    """
    p = len(out)
    tr = from_clock([o["timeline"] for o in out])
    d_f, d_b = measured_durations(tr, cpu=True)
    sched = make_schedule(spec.schedule, p, spec.m, spec.v)
    t_comm = spec.clock[0].time(message_bytes(spec))
    sim = simulate(sched, d_f.__getitem__, d_b.__getitem__, t_comm, not spec.coupled, d_b.__getitem__)
    f, b = stage_durations(tr)
    return dict(
        trace=tr,
        clock=measured_bubble(tr, cpu=True),
        simulated=sim.bubble,
        simulated_s=sim.makespan,
        medians=simulate(sched, f, b, t_w=b).bubble,
        formula=_formula(spec, p, d_f, d_b),
        virtual_s=out[0]["virtual_s"],
        tokens_s=spec.B * spec.T / out[0]["virtual_s"],
    )


def _formula(spec: RunSpec, p: int, d_f: dict, d_b: dict) -> float:
    """The paper's bubble for ``spec``: arXiv:2104.04473's, or ZB-H1's with the clocked mean F, I, W."""
    if spec.schedule != "zb-h1":
        return bubble_formula(p, spec.m, spec.v if spec.schedule == "interleaved" else 1)
    return zb_h1_bubble(p, spec.m, *(fmean(t for a, t in {**d_f, **d_b}.items() if a.kind == k) for k in "FIW"))


def window(traces) -> tuple[float, float]:
    """(first forward start, last backward end) over all ranks, seconds."""
    ev = [e for tr in _events(traces) for e in tr if e.kind in "FBIW"]
    return min(e.t0 for e in ev), max(e.t1 for e in ev)


def measured_bubble(traces, cpu: bool = False) -> float:
    """Idle fraction of p ranks over the step's compute window (see the module doc); ``cpu=True``:
    busy = CPU time used inside F and B (robust to a shared machine)."""
    tr = _events(traces)
    t0, t1 = window(tr)
    busy = sum((e.cpu if cpu else e.t1 - e.t0) for r in tr for e in r if e.kind in "FBIW")
    return 1 - busy / (len(tr) * (t1 - t0))


def measured_durations(traces, cpu: bool = False) -> tuple[dict, dict]:
    """``(t_f, t_b)``: ``{Action: seconds}`` of every forward and backward (B, or I and W) in the trace, to
    feed :func:`~minipar.pp.schedules.simulate` (``t_f=d_f.__getitem__``, ``t_w`` too); ``cpu=True``: CPU s."""
    d_f, d_b = {}, {}
    for r in _events(traces):
        for e in r:
            if e.kind in "FBIW":
                (d_f if e.kind == "F" else d_b)[Action(e.stage, e.kind, e.mb)] = e.cpu if cpu else e.t1 - e.t0
    return d_f, d_b


def stage_durations(traces, cpu: bool = True):
    """``(t_f, t_b)``: functions ``Action -> seconds`` giving the MEDIAN measured duration of that
    stage's forwards / backwards (CPU time by default), to feed :func:`~minipar.pp.schedules.simulate`.

    With a constant duration per stage and kind, GPipe's bubble is provably at least
    ``(p−1)/(m+p−1)`` (the formula's minimum, reached when the stages are balanced): the critical
    path holds every stage's forward and backward once plus m−1 of the slowest, so
    makespan ≥ (m+p−1)·mean while the work is m·p·mean. The simulation fed with these medians is
    "the bubble this run's measured work leaves on dedicated cores": robust to a shared machine
    (time-slicing stretches wall spans, not CPU time; the median drops outliers).
    """
    per: dict[tuple, list[float]] = {}
    for r in _events(traces):
        for e in r:
            if e.kind in "FBIW":
                per.setdefault((e.stage, e.kind), []).append(e.cpu if cpu else e.t1 - e.t0)
    med = {k: sorted(v)[len(v) // 2] for k, v in per.items()}
    return (lambda a: med[(a.stage, "F")]), (lambda a: med[(a.stage, a.kind)])  # t_b serves as t_w too


def gantt(ax, traces, title: str = "", unit: float = 1e-3, show_wait: bool = True, n_stages: int | None = None):
    """Draw a Gantt chart: one row per rank, forward boxes blue, backward (or I) orange, W green (darker
    for later virtual stages), the micro-batch number in each box; white gaps are the bubble, thin
    grey bars (``R``) the time spent waiting for a message; an overlapped pair (two actions over one span,
    DualPipe's F&B) is drawn as two half-height boxes. ``unit``: seconds per x unit (1e-3 = ms;
    1 for a simulation in abstract time units)."""
    tr = _events(traces)
    starts = [e.t0 for r in tr for e in r if e.kind in "FBIW"]
    base = min(starts)
    S = n_stages or 1 + max(e.stage for r in tr for e in r if e.kind in "FBIW")
    p = len(tr)
    cols = {"F": [(0.55, 0.71, 0.90), (0.25, 0.47, 0.75)], "B": [(0.98, 0.72, 0.45), (0.85, 0.45, 0.15)]}
    cols.update(I=cols["B"], W=[(0.60, 0.80, 0.55), (0.35, 0.60, 0.30)])  # split backward: I orange, W green
    for r, events in enumerate(tr):
        pairs = [x for x, y in zip(events, events[1:]) if (x.t0, x.t1) == (y.t0, y.t1) and x.kind in "FBIW"]
        for e in events:
            x0, w = (e.t0 - base) / unit, (e.t1 - e.t0) / unit
            if e.kind in "FBIW":
                chunk = e.stage // p
                c = cols[e.kind][min(chunk, 1)] if S > p else cols[e.kind][0]
                y = r + (0 if (e.t0, e.t1) not in {(x.t0, x.t1) for x in pairs} else -0.2 if e in pairs else 0.2)
                ax.barh(y, w, left=x0, height=0.8 if y == r else 0.4, color=c, edgecolor="black", linewidth=0.4)
                ax.text(x0 + w / 2, y, str(e.mb), ha="center", va="center", fontsize=7 if y == r else 6)
            elif e.kind == "R" and show_wait:
                ax.barh(r + 0.45, w, left=x0, height=0.1, color="0.5")
    ax.set_yticks(range(p), [f"rank {r}" for r in range(p)])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)" if unit == 1e-3 else "time (units)")
    ax.set_title(title, fontsize=10)
    return ax


def step_time_vs_native(spec: RunSpec) -> dict:
    """Time minipar's executor and ``torch.distributed.pipelining`` on the same stages' copies,
    alternating step by step (so a busy machine slows both alike). Returns ``{"minipar": s,
    "native": s}``: the fastest of ``spec.steps`` steps each, as the slowest rank saw it."""
    from minipar.pp.native import native_schedule, native_step

    p, me = mdist.world_size(), mdist.rank()
    sched = make_schedule(spec.schedule, p, spec.m, spec.v)
    ids = sorted({a.stage for a in sched[me]})
    S = p * (spec.v if spec.schedule == "interleaved" else 1)
    (model_a, batches), (model_b, _) = model_and_data(spec), model_and_data(spec)
    sa, sb = build_stages(model_a, S, ids), build_stages(model_b, S, ids)
    oa = torch.optim.AdamW([q for s in sa.values() for q in s.parameters()], lr=spec.lr)
    ob = torch.optim.AdamW([q for s in sb.values() for q in s.parameters()], lr=spec.lr)
    ex = PipelineExecutor(sa, sched, lookahead=spec.lookahead, count_memory=False)  # PyTorch counts nothing either
    nat = native_schedule(spec.schedule, sb, S, spec.m)
    runs = {"minipar": lambda x, y: ex.step(x, y, oa), "native": lambda x, y: native_step(nat, sb, S, x, y, ob)}
    best = {k: float("inf") for k in runs}
    for i, (x, y) in enumerate(batches):
        for k, fn in runs.items():
            mdist.barrier()
            t0 = time.perf_counter()
            fn(x, y)
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=mdist.device())
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
            if i > 0:
                best[k] = min(best[k], t.item())
    return best
