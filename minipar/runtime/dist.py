"""Process-group set-up: one call that works under ``torchrun``, under ``minipar.launch`` and alone.

``init()`` reads the standard environment variables that ``torchrun`` sets (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``). With none of them set it
makes a one-process world, so the same training code runs on a laptop without a launcher.

Backend choice (``backend="auto"``): NCCL when CUDA is available and every local rank can have
its own GPU (``LOCAL_RANK < torch.cuda.device_count()``), else gloo on CPU.

Every process group gets a bounded timeout (``DEFAULT_TIMEOUT_S`` = 45 s, or the
``MINIPAR_TIMEOUT`` environment variable in seconds): gloo's own default is 30 minutes, so a
rank waiting on a collective its peer never issues would otherwise hang a notebook for half an
hour. Use :func:`new_group` (not ``torch.distributed.new_group``) so sub-groups get it too.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import NoReturn

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from minipar.errors import ConfigError

DEFAULT_TIMEOUT_S = 45.0

# PyTorch 2.13 (the pinned version) names the one-tensor collectives ``all_gather_single`` and
# ``reduce_scatter_single``; earlier versions call the same functions, with the same arguments,
# ``all_gather_into_tensor`` and ``reduce_scatter_tensor``. A GPU image may ship an earlier PyTorch
# (2.11 on the H100 that ran ``make gpu-check``), so there the new names are aliases of the old ones.
# Nothing changes on 2.13, where the names exist.
for _name, _older in (
    ("all_gather_single", "all_gather_into_tensor"),
    ("reduce_scatter_single", "reduce_scatter_tensor"),
):
    for _module in (c10d, dist):  # both: minipar.comm.intercept wraps c10d's functions
        if not hasattr(_module, _name):
            setattr(_module, _name, getattr(_module, _older))
del _name, _older, _module

_device: torch.device | None = None


MAX_WAIT_S = 86400.0  # a day: the longest wait an environment variable may ask for (every wait stays bounded)


def is_wait(seconds) -> bool:
    """True for a number of seconds in (0, :data:`MAX_WAIT_S`] (not a bool, not nan, not inf): a bounded wait."""
    return not isinstance(seconds, bool) and isinstance(seconds, (int, float)) and 0 < seconds <= MAX_WAIT_S


def env_seconds(name: str, default: float) -> float:
    """Seconds from the environment variable ``name`` (``default`` when unset): a number in (0, :data:`MAX_WAIT_S`].

    Raises:
        ConfigError: not a number, not finite (``inf`` is a wait that never ends, ``nan`` none), <= 0 or above a day;
            one line naming the variable, its value and a value to set.
    """
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number of seconds; set e.g. {name}=60") from None
    if not is_wait(seconds):  # also nan and inf
        raise ConfigError(f"{name}={raw!r} must be > 0 and at most {MAX_WAIT_S:g} seconds; set e.g. {name}=60")
    return seconds


def default_timeout() -> timedelta:
    """The timeout every minipar process group uses: ``MINIPAR_TIMEOUT`` seconds (:func:`env_seconds`), else 45 s."""
    return timedelta(seconds=env_seconds("MINIPAR_TIMEOUT", DEFAULT_TIMEOUT_S))


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}={raw!r} is not an integer") from None


def pick_backend(backend: str = "auto", local_rank: int = 0, local_world_size: int = 1) -> str:
    """Resolve ``"auto"`` to ``"nccl"`` or ``"gloo"``.

    NCCL needs one GPU per rank on the node; if CUDA is missing, or there are fewer GPUs than
    local ranks, gloo is the only backend that works, so it is chosen.

    Raises:
        ConfigError: for an unknown backend, or ``"nccl"`` without enough GPUs.
    """
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "auto":
        return "nccl" if n_gpu >= max(local_world_size, local_rank + 1) else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ConfigError(f"backend={backend!r} is not supported; use 'auto', 'gloo' or 'nccl'")
    if backend == "nccl" and n_gpu < local_rank + 1:
        raise ConfigError(
            f"backend='nccl' needs a GPU for local rank {local_rank} but {n_gpu} GPU(s) are visible; "
            "use backend='auto' or 'gloo' on CPU"
        )
    return backend


def init(
    backend: str = "auto",
    timeout: float | timedelta | None = None,
    store=None,
    rank: int | None = None,
    world_size: int | None = None,
) -> None:
    """Join (or create) the default process group. Idempotent: a second call does nothing.

    Args:
        backend: ``"auto"`` (NCCL on GPUs, else gloo), ``"gloo"`` or ``"nccl"``.
        timeout: seconds (or a ``timedelta``) before a collective that cannot complete raises;
            default :func:`default_timeout`.
        store: a ``torch.distributed.Store`` to rendezvous through (``minipar.launch`` passes one);
            default: ``env://`` (``MASTER_ADDR``/``MASTER_PORT``), or a private store for a
            one-process world.
        rank, world_size: default from ``RANK``/``WORLD_SIZE``, else 0 and 1.

    Raises:
        ConfigError: bad backend, bad environment variables, rank outside ``[0, world_size)``.
    """
    global _device
    if dist.is_initialized():
        return
    rank = _env_int("RANK", 0) if rank is None else rank
    world_size = _env_int("WORLD_SIZE", 1) if world_size is None else world_size
    if world_size < 1:
        raise ConfigError(f"world_size={world_size} must be >= 1")
    if not 0 <= rank < world_size:
        raise ConfigError(f"rank={rank} is outside [0, {world_size}); check RANK and WORLD_SIZE")
    local_rank = _env_int("LOCAL_RANK", rank)
    local_world = _env_int("LOCAL_WORLD_SIZE", world_size)
    backend = pick_backend(backend, local_rank, local_world)
    if timeout is None:
        timeout = default_timeout()
    elif not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))

    if backend == "nccl":
        _device = torch.device("cuda", local_rank)
        torch.cuda.set_device(_device)
    else:
        _device = torch.device("cpu")

    kwargs = dict(backend=backend, rank=rank, world_size=world_size, timeout=timeout)
    if store is None and "TORCHELASTIC_RESTART_COUNT" in os.environ and "MASTER_ADDR" in os.environ:
        store = _elastic_store(rank, world_size, timeout)
    if store is not None:
        kwargs["store"] = store
    elif "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        if world_size != 1:
            raise ConfigError(
                f"WORLD_SIZE={world_size} but MASTER_ADDR/MASTER_PORT are not set; "
                "start the job with torchrun or minipar.launch"
            )
        kwargs["store"] = dist.HashStore()
    if backend == "nccl":
        kwargs["device_id"] = _device
    dist.init_process_group(**kwargs)


def _elastic_store(rank: int, world_size: int, timeout: timedelta):
    """Under torchrun: the rendezvous store, with keys prefixed by the restart attempt.

    After ``torchrun --max-restarts`` restarts a failed job, the store still holds the previous
    attempt's gloo addresses; without a per-attempt prefix the new ranks connect to dead peers
    ("Gloo connectFullMesh failed ... Connection refused", seen with torch 2.13 on gloo).

    The attempt number must be the same on every node, and ``TORCHELASTIC_RESTART_COUNT`` is not:
    only the failing node's agent counts a restart; the others restart on the membership change
    without counting it (torch/distributed/elastic/agent/server/api.py). So with the agent's store,
    every rank adds 1 to a counter in it: attempt = (value − 1) // world_size, equal for all ranks
    of an attempt, and written back to ``TORCHELASTIC_RESTART_COUNT`` for code that reads it.
    """
    env = os.environ
    agent = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    base = dist.TCPStore(
        env["MASTER_ADDR"], int(env["MASTER_PORT"]), world_size, is_master=(not agent and rank == 0), timeout=timeout
    )
    if agent:
        joined = base.add(f"minipar/joined/{env.get('TORCHELASTIC_RUN_ID', '')}", 1)
        env["TORCHELASTIC_RESTART_COUNT"] = str((joined - 1) // world_size)
    return dist.PrefixStore(f"minipar/attempt{env['TORCHELASTIC_RESTART_COUNT']}/", base)


def new_group(ranks: list[int] | None = None, timeout: float | timedelta | None = None):
    """``torch.distributed.new_group`` with minipar's bounded timeout. Collective: every rank calls it."""
    if timeout is None:
        timeout = default_timeout()
    elif not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    return dist.new_group(ranks=ranks, timeout=timeout)


def is_initialized() -> bool:
    return dist.is_initialized()


def rank(group=None) -> int:
    """This process's rank in ``group`` (default: the world); 0 when no group is initialised."""
    return dist.get_rank(group) if dist.is_initialized() else 0


def world_size(group=None) -> int:
    """Number of ranks in ``group`` (default: the world); 1 when no group is initialised."""
    return dist.get_world_size(group) if dist.is_initialized() else 1


def local_rank() -> int:
    """Rank on this node (``LOCAL_RANK``, set by torchrun and minipar.launch)."""
    return _env_int("LOCAL_RANK", rank())


def device() -> torch.device:
    """The device this rank computes on: ``cuda:LOCAL_RANK`` with NCCL, else ``cpu``."""
    if _device is not None:
        return _device
    return torch.device("cpu")


def backend() -> str | None:
    """The default group's backend (``"gloo"``/``"nccl"``), or None before :func:`init`."""
    return dist.get_backend() if dist.is_initialized() else None


def barrier(group=None) -> None:
    """Wait for every rank of ``group``; a no-op without a process group."""
    if dist.is_initialized():
        dist.barrier(group=group)


def exit_process(code: int = 0) -> NoReturn:
    """End this process now with exit code ``code``: flush stdout and stderr, then ``os._exit`` (no Python shutdown:
    no ``atexit`` handler, no finaliser runs). For the last line of a script whose process joined a gloo group, after
    :func:`destroy`: gloo's worker threads outlive ``destroy_process_group`` and may still be freeing a finished
    collective, which takes the GIL (its thread state or tensors hold Python objects); a thread that asks for the GIL
    once Python's shutdown has begun is stopped inside a C++ destructor and the process aborts (SIGABRT, "terminate
    called without an active exception"; reproduced and explained in lesson 10's appendix). ``minipar.launch``'s
    ranks end the same way. Never returns."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def destroy() -> None:
    """Leave the process group (safe to call twice, or without :func:`init`)."""
    global _device
    if dist.is_initialized():
        dist.destroy_process_group()
    _device = None
