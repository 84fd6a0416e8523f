"""minipar.comm.comm_log: bytes recorded per call match the ring/direct formulas."""

from minipar import launch
from tests import _workers as w


def test_records_on_4_ranks():
    out = launch(w.accounting_demo, world_size=4)
    S, n = 4000, 4
    for rank, recs in enumerate(out):
        ops = [r[0] for r in recs]
        assert ops == [
            "all_reduce",
            "all_gather_single",
            "reduce_scatter_single",
            "broadcast",
            "isend",
            "irecv",
            "barrier",
        ]
        ar, ag, rs, bc, snd, rcv, _ = recs
        assert ar[2] == ar[3] == 2 * (n - 1) / n * S  # ring all-reduce: 2(N-1)/N·S
        assert ag[1] == n * S and ag[2] == (n - 1) * S and ag[5] == "gather"
        assert rs[1] == n * S and rs[2] == (n - 1) * S
        assert bc[2:4] == ((n - 1) * S, 0) if rank == 0 else bc[2:4] == (0, S)
        assert snd[2] == S and snd[4] == (rank + 1) % n
        assert rcv[3] == S and rcv[4] == (rank - 1) % n


def scoped_logs():
    """Two nested logs, the outer one left by an exception: who got which record, and what is left behind."""
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from minipar.comm.comm_log import CommLog
    from minipar.comm.intercept import OPS

    before = {n: (getattr(dist, n), getattr(c10d, n)) for n in OPS}
    t = torch.ones(10)
    outer, inner = CommLog(), CommLog()
    try:
        with outer:
            dist.all_reduce(t)
            with inner:
                dist.broadcast(t, src=0)
            dist.barrier()
            raise KeyError("leaves the block")
    except KeyError:
        pass
    restored = {n: (getattr(dist, n), getattr(c10d, n)) for n in OPS} == before
    dist.all_reduce(t)  # no log open: not recorded anywhere
    return [r.op for r in outer.records], [r.op for r in inner.records], restored


def test_logs_are_scoped_nested_and_restored_on_error():
    for outer, inner, restored in launch(scoped_logs, world_size=2):
        assert outer == ["all_reduce", "broadcast", "barrier"]
        assert inner == ["broadcast"]
        assert restored
