"""Functions the tests run on several ranks (importable: child processes find them by name)."""

import os
import sys
import time

import torch
import torch.distributed as dist

import minipar.runtime.dist as md


def rank_info():
    t = torch.tensor([float(md.rank())])
    dist.all_reduce(t)
    print(f"hello from {md.rank()}")
    print(f"stderr line {md.rank()}", file=sys.stderr)
    return {
        "rank": md.rank(),
        "world": md.world_size(),
        "sum": t.item(),
        "threads": torch.get_num_threads(),
        "backend": md.backend(),
        "device": str(md.device()),
        "pid": os.getpid(),
    }


def fail_on(bad_rank, message="boom"):
    if md.rank() == bad_rank:
        raise ValueError(f"{message} on {md.rank()}")
    t = torch.zeros(1)
    dist.all_reduce(t)  # the peers wait here for the rank that died
    return md.rank()


def exit_on(bad_rank, code=3):
    if md.rank() == bad_rank:
        os._exit(code)
    t = torch.zeros(1)
    dist.all_reduce(t)


def sys_exit_on(bad_rank, code=3):
    """``sys.exit(code)`` on ``bad_rank`` (a SystemExit, not a killed process), after the others joined."""
    import sys

    if md.rank() == bad_rank:
        sys.exit(code)
    t = torch.zeros(1)
    dist.all_reduce(t)


def skip_collective(bad_rank):
    """Rank ``bad_rank`` skips the collective: its peers must time out, not hang."""
    if md.rank() != bad_rank:
        t = torch.zeros(1)
        dist.all_reduce(t)
    else:
        time.sleep(60)


def sleep_forever():
    time.sleep(600)


def write_pid(path):
    with open(f"{path}.{md.rank()}", "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)


def env_value(name):
    return os.environ.get(name)


def accounting_demo():
    from minipar.comm.comm_log import CommLog, label

    n, me = md.world_size(), md.rank()
    t = torch.ones(1000)  # 4000 bytes
    with CommLog() as log:
        dist.all_reduce(t)
        out = torch.empty(1000 * n)
        with label("gather"):
            dist.all_gather_single(out, t)
        dist.reduce_scatter_single(torch.empty(1000), torch.ones(1000 * n))
        dist.broadcast(t, src=0)
        right, left = (me + 1) % n, (me - 1) % n
        buf = torch.empty(1000)
        ops = [dist.P2POp(dist.isend, t, right), dist.P2POp(dist.irecv, buf, left)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        dist.barrier()
    t2 = torch.ones(3)
    dist.all_reduce(t2)  # after the log closed: not recorded, functions restored
    assert dist.all_reduce is dist.distributed_c10d.all_reduce
    return [(r.op, r.bytes, r.sent, r.recv, r.peer, r.label) for r in log.records]
