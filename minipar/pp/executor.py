"""Pipeline parallelism on real ranks: run any schedule over this rank's stages, and trace it.

    stages = build_stages(model, n_stages=4, stage_ids=[rank])      # minipar.pp.stages
    ex = PipelineExecutor(stages, one_f_one_b(p=4, m=8))             # schedule: minipar.pp.schedules
    out = ex.step(x, y, optimizer)          # out.loss (last stage), out.trace, out.peak_act_bytes

The stages (:class:`~minipar.pp.stages.GPTStage`, Huang et al. 2019 GPipe, arXiv:1811.06965) are
consecutive pieces of the GPT; the embedding is on stage 0, the head and the loss on stage S−1.

The executor runs a schedule (a list of actions per rank, see :mod:`minipar.pp.schedules`)
with point-to-point messages: after ``sF i`` the activation (B/m, T, d) goes to the rank of
stage s+1; after ``sB i`` the gradient of the stage input goes to the rank of stage s−1.

Why it cannot hang, and how it overlaps communication (MegaScale, Jiang et al. 2024,
arXiv:2402.15627 §3.2, "decoupling send and receive"):

- every send is an ``isend`` that is never waited for until the end of the step, so a rank
  never blocks on a peer that is busy; it only blocks on the *receive* of an input it needs —
  and the schedule was checked by :func:`~minipar.pp.schedules.simulate` (no cycle of
  waits) before the first message;
- the design relies on ORDER: NCCL matches the point-to-point messages between two ranks
  strictly in the order they are posted (it has no tags), so the sends from rank a to rank b
  must be posted in the same order as b posts its receives from a. Each message's tag (kind,
  stage, micro-batch) only *labels* it (gloo would match by tag and hide a wrong order). Every
  message goes through :mod:`minipar.comm.p2p`, labelled with the action it feeds (``"1F3"``); with
  ``MINIPAR_P2P_ORDER=strict`` (on in the tests) a receive whose position in its pair's sequence
  differs from the peer's send raises :class:`~minipar.comm.p2p.P2POrderError` with both sequences
  before the tensor is used. GPipe, 1F1B and interleaved 1F1B at every (p, m, v) and lookahead
  of the tests pass it: a rank posts its receives from a peer in its own action order, and the
  peer sends in its action order, which the generators keep consistent
  (:func:`~minipar.pp.p2p_order.check_p2p_order` checks the same from the schedule alone);
- receives are posted ``lookahead`` actions early (``irecv``), so the transfer overlaps the
  compute of the current action; ``lookahead=0`` posts each receive only when it is needed;
- ``coupled=True`` turns the decoupling off, for comparison, as Megatron-LM's ``p2p_communication``
  pairs them (``send_forward_recv_backward``): after an action, its send and the receive of the
  rank's next action are posted together and BOTH waited for before the next action starts (no
  receive is posted earlier: ``lookahead=0``); a slow peer then delays the sender too;
- every wait carries the group's timeout; a stage output of the wrong shape raises
  :class:`~minipar.ConfigError` before it is sent.

A split schedule (ZB-H1, :mod:`minipar.pp.zero_bubble`) runs I (input gradient, sent upstream like B's)
and W (weight gradient, no message) through a :class:`~minipar.pp.zero_bubble.WeightGradStore`.
Gradients accumulate over the m micro-batches: each micro-batch loss is divided by m, so the
sum of gradients equals the gradient of the mean loss over the global batch.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.comm import p2p
from minipar.errors import ConfigError
from minipar.model.gpt import GPT
from minipar.model.memory import saved_activation_bytes
from minipar.pp.schedules import Action, num_microbatches, num_stages, simulate
from minipar.pp.zero_bubble import WeightGradStore, split_linears
from minipar.runtime import dist as mdist


@dataclass
class TraceEvent:
    """One traced action on one rank: ``kind`` "F"/"B"/"I"/"W" (compute, from after its input arrived
    to after its output was handed to ``isend``: all of the rank's own work for the action), "R"
    (waiting for a receive), "O" (optimizer step). ``t0``, ``t1``: ``time.perf_counter()``
    seconds (one clock per machine). ``cpu``: CPU seconds this rank's thread used inside the span
    (``time.thread_time()``; less than ``t1 − t0`` when the OS gave the core to another process;
    0 for "R")."""

    rank: int
    kind: str
    stage: int
    mb: int
    t0: float
    t1: float
    cpu: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.stage}{self.kind}{self.mb}" if self.kind in "FBIW" else self.kind


@dataclass
class StepResult:
    loss: float | None  # mean loss over the global batch (last-stage rank only)
    trace: list[TraceEvent] = field(default_factory=list)
    peak_act_bytes: int = 0  # most activation bytes held for pending backwards at once
    act_bytes: dict = field(default_factory=dict)  # {(stage, mb): saved bytes of that forward}


class PipelineExecutor:
    """Run a pipeline schedule on real ranks.

    Args:
        stages: ``{stage index: nn.Module}``, the stages this rank runs (:func:`~minipar.pp.stages.build_stages`).
        schedule: ``schedule[pipe_rank]`` = list of :class:`Action` (all ranks' lists; checked
            by simulation first).
        loss_fn: ``loss_fn(output, target) -> scalar`` mean loss of one micro-batch (``GPT.loss``).
        group: the pipeline process group (default: the world). Its size must be ``len(schedule)``.
        pipe_ranks: global rank of each pipeline rank (default: the group's ranks, in order).
        hidden_size: last dim of the activations between stages (default: ``stage.cfg.d_model``).
        lookahead: post receives this many actions early (0: only when needed).
        timeout: seconds a receive may wait (default: minipar's group timeout).
        count_memory: count saved-activation bytes per micro-batch (``peak_act_bytes``).
        coupled: wait for every send at once and post receives only when needed (see the module doc).

    Raises:
        ConfigError: group size != schedule ranks; ``stages`` not the ones the schedule gives
            this rank; a bad schedule (see :func:`~minipar.pp.schedules.simulate`).
    """

    def __init__(
        self,
        stages: dict[int, nn.Module],
        schedule: list[list[Action]],
        loss_fn=GPT.loss,
        group=None,
        pipe_ranks: list[int] | None = None,
        hidden_size: int | None = None,
        lookahead: int = 1,
        timeout: float | None = None,
        count_memory: bool = True,
        coupled: bool = False,
    ):
        self.p = len(schedule)
        self.group = group
        n = mdist.world_size(group)
        if n != self.p:
            raise ConfigError(
                f"the schedule has {self.p} ranks but the pipeline group has {n}; make the schedule for p={n}"
            )
        self.me = mdist.rank(group)
        self.pipe_ranks = (
            list(pipe_ranks)
            if pipe_ranks is not None
            else (
                dist.get_process_group_ranks(group) if dist.is_initialized() and group is not None else list(range(n))
            )
        )
        simulate(schedule)  # raises on a schedule that is incomplete or would deadlock
        if {"B", "I"} <= {a.kind for acts in schedule for a in acts}:
            raise ConfigError("the schedule runs B on some stages and I/W on others; use one kind (1f1b or zb-h1)")
        self.schedule, self.actions = schedule, schedule[self.me]
        self.S, self.m = num_stages(schedule), num_microbatches(schedule)
        mine = {a.stage for a in self.actions}
        if set(stages) != mine:
            raise ConfigError(
                f"pipeline rank {self.me} runs stages {sorted(mine)} in this schedule but was given "
                f"stages {sorted(stages)}; build them with build_stages(model, {self.S}, {sorted(mine)})"
            )
        if coupled and self.S > self.p:
            raise ConfigError(
                f"coupled=True with {self.S} stages on {self.p} ranks: the coupled mode pairs each send with the "
                "rank's next receive, as Megatron-LM's non-interleaved 1F1B does, and that pairing can deadlock "
                "with several chunks per rank; use coupled=False (decoupled) for interleaved schedules"
            )
        self.stages, self.loss_fn, self.count_memory, self.coupled = stages, loss_fn, count_memory, coupled
        self.lookahead = 0 if coupled else lookahead
        if hidden_size is None:
            cfg = getattr(next(iter(stages.values())), "cfg", None)
            if cfg is None:
                raise ConfigError("pass hidden_size= (the last dim of the activations between stages)")
            hidden_size = cfg.d_model
        self.hidden = hidden_size
        self.timeout = mdist.default_timeout() if timeout is None else timedelta(seconds=float(timeout))
        # one step's messages, emptied when a step starts: receives posted (action -> (buffer, work)),
        # inputs handed over between two stages of this rank, sends not yet waited for, the trace
        self._inbox: dict[Action, tuple] = {}
        self._local: dict[Action, torch.Tensor] = {}
        self._sends: list[tuple] = []
        self._trace: list[TraceEvent] = []
        self._store = WeightGradStore() if any(a.kind == "W" for acts in schedule for a in acts) else None

    # -- messages ---------------------------------------------------------------------------
    def _src(self, a: Action) -> int | None:
        """Pipeline rank that sends the input of action ``a`` (None: no input needed)."""
        if a.kind == "F":
            return None if a.stage == 0 else (a.stage - 1) % self.p
        return None if a.kind == "W" or a.stage == self.S - 1 else (a.stage + 1) % self.p

    def _tag(self, a: Action) -> int:
        return ("FBI".index(a.kind) * self.S + a.stage) * self.m + a.mb

    def _post_recv(self, a: Action, shape) -> None:
        src = self._src(a)
        if src is None or src == self.me or a in self._inbox:
            return
        buf = torch.empty(shape, device=mdist.device())
        self._inbox[a] = (buf, p2p.irecv(buf, self.pipe_ranks[src], group=self.group, tag=self._tag(a), label=str(a)))

    def _send(self, a: Action, t: torch.Tensor) -> None:
        """Send ``t``, the input of action ``a`` (on another stage), to the rank that runs ``a``."""
        dst = a.stage % self.p
        if dst == self.me:
            self._local[a] = t
        else:
            t = t.contiguous()
            req = p2p.isend(t, self.pipe_ranks[dst], group=self.group, tag=self._tag(a), label=str(a))
            self._sends.append((t, req))

    def _get(self, a: Action, shape) -> torch.Tensor:
        if a in self._local:
            return self._local.pop(a)
        self._post_recv(a, shape)
        buf, work = self._inbox.pop(a)
        t0 = time.perf_counter()
        try:
            work.wait(self.timeout)
        except p2p.P2POrderError:
            raise
        except Exception as exc:
            raise RuntimeError(
                f"pipeline rank {self.me}: receiving the input of {a} from pipeline rank "
                f"{self._src(a)} failed after at most {self.timeout.total_seconds():.0f} s ({exc}); "
                "check that every rank runs the same schedule and that no peer died"
            ) from exc
        t1 = time.perf_counter()
        if t1 - t0 > 20e-6:
            self._trace.append(TraceEvent(self.me, "R", a.stage, a.mb, t0, t1))
        return buf

    @staticmethod
    def _label(clock, name: str):
        return clock.label(name) if clock is not None else contextlib.nullcontext()

    # -- one optimizer step -----------------------------------------------------------------
    def step(
        self, x: torch.Tensor, y: torch.Tensor, optimizer: torch.optim.Optimizer | None = None, clock=None
    ) -> StepResult:
        """Run the whole schedule on the global batch ``x``, ``y`` (B, T) int64, then ``optimizer.step()``.

        Every pipeline rank passes the same batch (only stage 0 reads ``x``, the last stage ``y``).
        With ``optimizer=None`` the gradients are only accumulated into ``.grad`` (zero them
        yourself): e.g. to all-reduce them over data-parallel replicas before stepping (3D).
        ``clock``: an open :class:`~minipar.clock.ClusterClock`: each action's compute is labelled
        with the action (``"1F3"``, ``"O"`` for the optimizer) in ``clock.timeline``.

        Returns:
            :class:`StepResult`; ``loss`` is set on the rank of the last stage, None elsewhere.
        Raises:
            ConfigError: B not divisible by m; a stage output of the wrong shape.
            RuntimeError: a receive that fails or times out (a peer died or runs another schedule).
        """
        B, T = x.shape
        if B % self.m:
            raise ConfigError(
                f"global batch B={B} is not divisible by m={self.m} micro-batches; "
                f"use B={(B // self.m or 1) * self.m} or m in {[d for d in range(1, B + 1) if B % d == 0]}"
            )
        shape = (B // self.m, T, self.hidden)
        xs, ys = x.chunk(self.m), y.chunk(self.m)
        for state in (self._inbox, self._local, self._sends, self._trace):
            state.clear()
        act_bytes: dict[tuple, int] = {}
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        split = split_linears(self.stages.values(), self._store) if self._store else contextlib.nullcontext()
        with split:
            peak, loss_sum = self._run(xs, ys, shape, clock, act_bytes)
        for _, work in self._sends:  # sends complete once their receivers have them
            work.wait(self.timeout)
        if self._inbox:
            raise RuntimeError(f"pipeline rank {self.me}: receives posted but never used: {list(self._inbox)}")
        if optimizer is not None:
            t0, c0 = time.perf_counter(), time.thread_time()
            with self._label(clock, "O"):
                optimizer.step()
            self._trace.append(TraceEvent(self.me, "O", -1, -1, t0, time.perf_counter(), time.thread_time() - c0))
        loss = loss_sum.item() if any(s == self.S - 1 for s in self.stages) else None
        return StepResult(loss, list(self._trace), peak, act_bytes)

    def _run(self, xs, ys, shape, clock, act_bytes: dict) -> tuple[int, torch.Tensor]:
        """This rank's actions in order; returns (peak activation bytes, sum of the micro-batch losses)."""
        dev = mdist.device()
        held: dict[tuple, tuple] = {}
        live = peak = 0
        loss_sum = torch.zeros((), device=dev)
        for k, a in enumerate(self.actions):
            stage, last = self.stages[a.stage], a.stage == self.S - 1
            if a.kind == "F":
                inp = xs[a.mb].to(dev) if a.stage == 0 else self._get(a, shape).requires_grad_()
            elif a.kind in "BI":
                grad = None if last else self._get(a, shape)
            with self._label(clock, str(a)):
                t0, c0 = time.perf_counter(), time.thread_time()  # the action's span: its own work, to its sends
                for nxt in self.actions[k + 1 : k + 1 + self.lookahead]:
                    self._post_recv(nxt, shape)  # the next inputs travel while this action computes
                if a.kind == "F":
                    res = {}

                    def fwd():
                        out = stage(inp)
                        res["out"] = self.loss_fn(out, ys[a.mb].to(dev)) / self.m if last else out

                    if self.count_memory:
                        act_bytes[(a.stage, a.mb)] = saved_activation_bytes(fwd, exclude=stage)
                    else:
                        fwd()
                    out = res["out"]
                    held[(a.stage, a.mb)] = (inp, out)
                    live += act_bytes.get((a.stage, a.mb), 0)
                    peak = max(peak, live)
                    if last:
                        loss_sum += out.detach()
                    else:
                        if tuple(out.shape) != shape:
                            raise ConfigError(
                                f"stage {a.stage} produced an activation of shape {tuple(out.shape)} but "
                                f"stage {a.stage + 1} expects (B/m, T, hidden_size)={shape}; make every "
                                f"stage return (batch, T, {self.hidden}) or pass hidden_size="
                            )
                        self._send(Action(a.stage + 1, "F", a.mb), out.detach())
                elif a.kind == "W":  # the weight gradients the I of this micro-batch left in the store
                    live -= self._store.nbytes((a.stage, a.mb))
                    self._store.flush((a.stage, a.mb))
                else:
                    inp, out = held.pop((a.stage, a.mb))
                    key = (a.stage, a.mb)
                    with self._store.collect(key) if a.kind == "I" else contextlib.nullcontext():
                        torch.autograd.backward(out, grad_tensors=grad)
                    live += (self._store.nbytes(key) if a.kind == "I" else 0) - act_bytes.get(key, 0)
                    peak = max(peak, live)  # after I: what W still needs (x, grad_y of every linear)
                    if a.stage > 0:
                        self._send(Action(a.stage - 1, a.kind, a.mb), inp.grad)
                if (
                    self.coupled
                ):  # Megatron's send_forward_recv_backward: the send and the next receive, one blocking pair
                    if k + 1 < len(self.actions):  # the next action's input (nothing if it needs none)
                        self._post_recv(self.actions[k + 1], shape)
                    for _, work in self._sends:
                        work.wait(self.timeout)
                    self._sends.clear()
                self._trace.append(
                    TraceEvent(self.me, a.kind, a.stage, a.mb, t0, time.perf_counter(), time.thread_time() - c0)
                )
        return peak, loss_sum
