"""A parameter server on minipar's process groups: synchronous, and asynchronous with bounded staleness.

Before the ring all-reduce, data parallelism was built around *parameter servers* (Li et al.
2014, "Scaling Distributed Machine Learning with the Parameter Server", OSDI; Dean et al. 2012,
"Large Scale Distributed Deep Networks" — Downpour SGD): ranks ``0 .. S−1`` are servers, each
holding a contiguous 1/S shard of the flat parameter vector and its optimizer; ranks
``S .. S+W−1`` are workers holding the model. A worker *pulls* the parameters (one ``recv`` per
server), computes a gradient on its own batch, and *pushes* it (one ``send`` per server).

- **Synchronous** (:func:`run_sync`): each step, every server receives the W gradients, averages
  them, steps its shard and sends it back to all W workers — exactly data parallelism with a
  global batch of W local batches (tested equal to DDP).
- **Asynchronous, in arrival order** (:func:`run_async_arrival`, on the cluster clock): each gradient
  is applied when it arrives (Downpour SGD); a straggler no longer holds the others back.
- **Asynchronous, bounded staleness τ** (:func:`run_async`): the server applies each worker's
  gradient on its own, one update at a time (update t comes from worker t mod W), and the
  gradient of update t is computed on parameters of version ``max(0, t − τ)``. That is the
  stale-synchronous-parallel bound (Ho et al. 2013, "More Effective Distributed ML via a Stale
  Synchronous Parallel Parameter Server", NeurIPS) taken at its worst case, every time, so the
  run is deterministic and reproducible: τ = 0 is sequential SGD (one worker busy at a time);
  τ = W − 1 keeps all W workers busy (version t − τ is ready as soon as update t − τ − 1 is
  applied), at the price of gradients that are τ updates old. Hogwild-style free-running
  asynchrony (Recht et al. 2011) has random staleness; here it is the bound, made exact.

Bytes: per synchronous step each server receives W·Ψ/S and sends W·Ψ/S elements, so its link
carries 2W·Ψ/S while a ring all-reduce moves 2(W−1)/W·Ψ through every rank: with one server
the server's link carries W²/(W−1) ≈ W times a ring rank's — why the ring (and sharded servers) won.

Every message between a server and a worker is posted in the same order on both sides
(increasing update number), so the exchange is also valid for NCCL's in-order matching.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.comm import p2p
from minipar.errors import ConfigError


@dataclass
class Roles:
    """Who is who: ``servers`` = ranks 0..S−1, ``workers`` = ranks S..S+W−1; ``bounds[s]`` = server s's
    slice ``[lo, hi)`` of the flat parameter vector (Ψ split as evenly as possible)."""

    servers: list[int]
    workers: list[int]
    bounds: list[tuple[int, int]] = field(default_factory=list)


def roles(world_size: int, n_servers: int, numel: int) -> Roles:
    """Split ``world_size`` ranks into ``n_servers`` servers and the rest workers.

    Raises:
        ConfigError: fewer than one server or one worker, or more servers than parameters.
    """
    if not 1 <= n_servers < world_size:
        raise ConfigError(
            f"n_servers={n_servers} with world_size={world_size}: need 1 <= n_servers < world_size "
            f"(at least one worker); e.g. n_servers=1 and world_size={max(2, n_servers + 1)}"
        )
    if n_servers > numel:
        raise ConfigError(f"n_servers={n_servers} but the model has only {numel} parameters; use fewer servers")
    q, r = divmod(numel, n_servers)
    bounds, lo = [], 0
    for s in range(n_servers):
        hi = lo + q + (1 if s < r else 0)
        bounds.append((lo, hi))
        lo = hi
    return Roles(list(range(n_servers)), list(range(n_servers, world_size)), bounds)


def flat_params(model: nn.Module) -> torch.Tensor:
    """Every parameter of ``model``, flattened and concatenated (a copy), (Ψ,)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def load_flat_(model: nn.Module, flat: torch.Tensor) -> None:
    """Copy the (Ψ,) vector ``flat`` into ``model``'s parameters, in ``parameters()`` order."""
    with torch.no_grad():
        for p, f in zip(model.parameters(), flat.split([p.numel() for p in model.parameters()])):
            p.copy_(f.view_as(p))


def flat_grads(model: nn.Module) -> torch.Tensor:
    """Every ``p.grad`` (zeros where None), flattened and concatenated, (Ψ,)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in model.parameters()])


# ---- synchronous -----------------------------------------------------------------------------


def run_sync(
    model: nn.Module,
    grad_fn: Callable[[nn.Module, int, int], torch.Tensor],
    steps: int,
    make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
    n_servers: int = 1,
) -> dict:
    """Synchronous parameter-server training. Collective: call on every rank.

    Args:
        model: the same initial model on every rank (servers read their shard from it).
        grad_fn: ``grad_fn(model, worker_index, step) -> loss`` runs forward+backward on that
            worker's batch of that step (``model.grad`` filled), returns the loss (0-d tensor).
        steps: optimizer steps.
        make_optimizer: ``make_optimizer([shard]) -> torch.optim.Optimizer`` (elementwise
            optimizers such as SGD/AdamW make a sharded step equal to the unsharded one).
        n_servers: S.
    Returns:
        on workers ``{"losses": [...]}`` (this worker's per-step losses); on servers
        ``{"shard": final (hi−lo,) tensor}``; and ``"roles"`` everywhere.
    """
    me, world = dist.get_rank(), dist.get_world_size()
    flat = flat_params(model)
    r = roles(world, n_servers, flat.numel())
    W = len(r.workers)
    if me in r.servers:
        lo, hi = r.bounds[me]
        shard = flat[lo:hi].clone().requires_grad_(False)
        opt = make_optimizer([shard])
        for _ in range(steps):
            total, buf = torch.zeros_like(shard), torch.empty_like(shard)
            for w in r.workers:  # in rank order: a fixed summation order
                p2p.recv(buf, src=w, label="grad")
                total += buf
            shard.grad = total.div_(W)
            opt.step()
            for w in r.workers:
                p2p.send(shard, dst=w, label="params")
        return {"shard": shard, "roles": r}
    losses = []
    for step in range(steps):
        model.zero_grad(set_to_none=True)
        losses.append(float(grad_fn(model, me - len(r.servers), step)))
        g = flat_grads(model)
        for s in r.servers:
            lo, hi = r.bounds[s]
            p2p.send(g[lo:hi].contiguous(), dst=s, label="grad")
        for s in r.servers:
            lo, hi = r.bounds[s]
            p2p.recv(flat[lo:hi], src=s, label="params")
        load_flat_(model, flat)
    return {"losses": losses, "roles": r}


# ---- asynchronous, bounded staleness ---------------------------------------------------------


def run_async(
    model: nn.Module,
    grad_fn: Callable[[nn.Module, int, int], torch.Tensor],
    updates: int,
    make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
    staleness: int,
    n_servers: int = 1,
) -> dict:
    """Asynchronous parameter-server training with staleness exactly ``min(t, τ)`` for update t.

    Update t is computed by worker ``t mod W`` on parameters of version ``max(0, t − τ)``
    (version v = after v updates) and applied alone. The server sends version t − τ for update t
    as soon as it exists, so up to τ + 1 gradients are in flight (τ ≥ W − 1: every worker busy).

    Args:
        grad_fn: ``grad_fn(model, worker_index, k) -> loss`` for that worker's k-th gradient.
        updates: optimizer updates in total (T).
        staleness: τ >= 0.
    Returns:
        workers: ``{"losses": [(t, loss), ...]}`` (the loss at the stale version it computed on);
        servers: ``{"shard": final shard}``; ``"roles"`` everywhere.
    Raises:
        ConfigError: ``staleness`` < 0.
    """
    if not isinstance(staleness, int) or staleness < 0:
        raise ConfigError(f"staleness={staleness!r}: the staleness bound τ is an int >= 0 (0 = sequential SGD)")
    me, world = dist.get_rank(), dist.get_world_size()
    flat = flat_params(model)
    r = roles(world, n_servers, flat.numel())
    W, tau = len(r.workers), staleness
    if me in r.servers:
        lo, hi = r.bounds[me]
        shard = flat[lo:hi].clone()
        opt = make_optimizer([shard])
        versions = {0: shard.clone()}  # version -> shard, kept while still needed
        sends, next_send = [], 0
        buf = torch.empty_like(shard)
        for t in range(updates):
            while next_send < updates and max(0, next_send - tau) <= t:  # that version exists
                v = max(0, next_send - tau)
                sends.append(
                    (p2p.isend(versions[v], dst=r.workers[next_send % W], label="params"), versions[v])
                )  # keep the buffer alive
                next_send += 1
            p2p.recv(buf, src=r.workers[t % W], label="grad")
            shard.grad = buf.clone()
            opt.step()
            versions[t + 1] = shard.clone()
            for v in [v for v in versions if v < t + 1 - tau]:  # no later update needs it
                versions.pop(v)
        for work, _ in sends:
            work.wait()
        return {"shard": shard, "roles": r}
    k, losses = 0, []
    widx = me - len(r.servers)
    for t in range(widx, updates, W):
        for s in r.servers:
            lo, hi = r.bounds[s]
            p2p.recv(flat[lo:hi], src=s, label="params")
        load_flat_(model, flat)
        model.zero_grad(set_to_none=True)
        losses.append((t, float(grad_fn(model, widx, k))))
        g = flat_grads(model)
        for s in r.servers:
            lo, hi = r.bounds[s]
            p2p.send(g[lo:hi].contiguous(), dst=s, label="grad")
        k += 1
    return {"losses": losses, "roles": r}


def run_async_arrival(
    model: nn.Module,
    grad_fn: Callable[[nn.Module, int, int], torch.Tensor],
    updates: int,
    make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
    clock,
    n_servers: int = 1,
) -> dict:
    """Asynchronous training that applies each gradient when it ARRIVES on the cluster clock (Downpour SGD).

    Every worker pulls, computes and pushes in a loop; a server applies whichever in-flight gradient
    arrives first on ``clock`` (an entered :class:`minipar.clock.ClusterClock`; ties: lower worker)
    and sends the worker the parameters as they are now. Staleness is not bounded but measured:
    update t's gradient was computed on version t − staleness. A straggler (the clock's
    ``straggler``) pushes rarely and staler; the others are never held back by it. The arrival order
    is read from the workers' post times on the clock, exchanged off the clock (the emulator's
    bookkeeping, not traffic): the run is exactly as reproducible as the measured compute times.

    Returns:
        servers: ``{"shard", "roles", "order": [worker index per update], "staleness": [per update],
        "applied_at": [the server's clock seconds per update]}``; workers: ``{"losses": [per gradient],
        "roles"}``.
    Raises:
        ConfigError: ``clock`` is not an entered ClusterClock, or ``updates`` < 1.
    """
    if getattr(clock, "_hooks", None) is None:
        raise ConfigError("run_async_arrival(clock=...): pass the ClusterClock entered on every rank (`with clk:`)")
    if not isinstance(updates, int) or updates < 1:
        raise ConfigError(f"updates={updates!r}: the number of optimizer updates is an int >= 1")
    me, world = dist.get_rank(), dist.get_world_size()
    flat = flat_params(model)
    r = roles(world, n_servers, flat.numel())
    flag = torch.zeros(1, dtype=torch.float64, device=flat.device)
    stamp = torch.zeros(1, dtype=torch.float64, device=flat.device)
    if me in r.servers:
        lo, hi = r.bounds[me]
        shard = flat[lo:hi].clone()
        opt, buf = make_optimizer([shard]), torch.empty_like(shard)
        version, pending, out, issued = {}, {}, {"order": [], "staleness": [], "applied_at": []}, 0

        def reply(w: int, t: int) -> None:  # more work for w (the current parameters), or stop
            nonlocal issued
            with clock.off_the_clock():
                p2p.send(flag.fill_(float(issued < updates)), dst=w, label="control")
            if issued < updates:
                p2p.send(shard, dst=w, label="params")
                version[w], issued = t, issued + 1

        for w in r.workers:
            reply(w, 0)
        for t in range(updates):
            for w in r.workers:  # every in-flight gradient's post time on the workers' clocks
                if w in version and w not in pending:
                    with clock.off_the_clock():
                        p2p.recv(stamp, src=w, label="stamp")
                    pending[w] = stamp.item()
            w = min(pending, key=lambda k: (pending[k], k))
            del pending[w]
            p2p.recv(buf, src=w, label="grad")
            shard.grad = buf.clone()
            opt.step()
            out["order"].append(w - n_servers)
            out["staleness"].append(t - version.pop(w))
            out["applied_at"].append(clock.now)
            reply(w, t + 1)
        return {"shard": shard, "roles": r, **out}
    widx, losses = me - n_servers, []
    while True:
        with clock.off_the_clock():
            for s in r.servers:
                p2p.recv(flag, src=s, label="control")
        if not flag.item():
            return {"losses": losses, "roles": r}
        for s in r.servers:
            lo, hi = r.bounds[s]
            p2p.recv(flat[lo:hi], src=s, label="params")
        load_flat_(model, flat)
        model.zero_grad(set_to_none=True)
        losses.append(float(grad_fn(model, widx, len(losses))))
        g = flat_grads(model)
        stamp.fill_(clock.now)
        with clock.off_the_clock():
            for s in r.servers:
                p2p.send(stamp, dst=s, label="stamp")
        for s in r.servers:
            lo, hi = r.bounds[s]
            p2p.send(g[lo:hi].contiguous(), dst=s, label="grad")


def gather_model(model: nn.Module, result: dict) -> torch.Tensor | None:
    """The final (Ψ,) parameters, assembled on the first worker from the servers' shards. Collective.

    Returns the vector on that worker, None elsewhere.
    """
    r, me = result["roles"], dist.get_rank()
    first = r.workers[0]
    if me in r.servers:
        p2p.send(result["shard"], dst=first, label="params")
        return None
    if me != first:
        return None
    flat = flat_params(model)
    for s in r.servers:
        lo, hi = r.bounds[s]
        p2p.recv(flat[lo:hi], src=s, label="params")
    return flat


def server_bytes_formula(numel: int, workers: int, servers: int = 1, element_size: int = 4) -> dict:
    """Bytes per synchronous step through one server's link vs one rank of a ring all-reduce.

    Returns ``{"server_in", "server_out", "ring_rank"}`` in bytes: a server receives and sends
    W·Ψ/S elements; a ring rank sends 2(W−1)/W·Ψ (Patarasuk & Yuan 2009).
    """
    per = workers * numel / servers * element_size
    return {"server_in": per, "server_out": per, "ring_rank": 2 * (workers - 1) / workers * numel * element_size}
