"""Functions the collectives tests run on several ranks (importable by the child processes)."""

import time

import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from minipar import ConfigError
from minipar.comm.collectives import (
    ReduceOp,
    chunk_bounds,
    naive_all_reduce,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
)
from minipar.comm.comm_log import CommLog, label

OPS = {"SUM": ReduceOp.SUM, "AVG": ReduceOp.AVG, "MAX": ReduceOp.MAX, "MIN": ReduceOp.MIN, "PRODUCT": ReduceOp.PRODUCT}


def _data(shape, kind, seed, dtype=torch.float32):
    """Seeded data on this rank's device (``cuda:LOCAL_RANK`` under NCCL: make gpu-check)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "int":  # integer-valued floats: sums are exact whatever the order
        return torch.randint(-50, 51, shape, generator=g).to(device=md.device(), dtype=dtype)
    return torch.randn(shape, generator=g, dtype=dtype).to(md.device())


def _compare(shapes, group):
    """For each shape, op and data kind: max |minipar - torch.distributed| for ring and naive all-reduce."""
    out = {}
    for shape in shapes:
        for op_name in ("SUM", "AVG"):
            for kind in ("int", "randn"):
                x = _data(shape, kind, seed=1000 * md.rank() + sum(shape))
                # test_collectives' bound 2(N−1)·2⁻²⁴·4.5N assumes |x| < 4.5: check it, do not assume it
                assert kind == "int" or x.numel() == 0 or x.abs().max().item() < 4.5, "pick another seed"
                ref = x.clone()
                dist.all_reduce(ref, op=OPS[op_name], group=group)
                for algo, fn in (("ring", ring_all_reduce), ("naive", naive_all_reduce)):
                    y = x.clone()
                    res = fn(y, op=OPS[op_name], group=group)
                    assert res is y and y.shape == x.shape
                    out[(shape, op_name, kind, algo)] = (y - ref).abs().max().item() if y.numel() else 0.0
    return out


def compare_all_reduce(shapes):
    """``_compare`` over the whole world: ``{(shape, op, kind, algo): max abs difference}``."""
    return _compare(shapes, None)


def compare_sub_groups(shapes):
    """Groups [0, 2] and [1, 3] (each rank in one of them), then [1, 2, 3] (rank 0 outside)."""
    g02, g13, g123 = md.new_group([0, 2]), md.new_group([1, 3]), md.new_group([1, 2, 3])
    out = {"pairs": _compare(shapes, g02 if md.rank() in (0, 2) else g13)}
    out["triple"] = _compare(shapes, g123) if md.rank() != 0 else "not in group"
    return out


def compare_other_ops(numel):
    out = {}
    for op_name in ("MAX", "MIN", "PRODUCT"):
        x = _data((numel,), "int", seed=md.rank()) / 10
        if op_name == "PRODUCT":  # powers of two: every product is exact, whatever the order
            x = 2.0 ** (x * 10 % 9 - 4)
        ref = x.clone()
        dist.all_reduce(ref, op=OPS[op_name])
        out[op_name] = (ring_all_reduce(x.clone(), op=OPS[op_name]) - ref).abs().max().item()
    return out


def compare_scatter_gather(numels):
    """ring_reduce_scatter / ring_all_gather against reduce_scatter_single / all_gather_single.

    torch's versions need numel divisible by N; for other sizes the reference is the all-reduced
    tensor's slice (reduce-scatter) or the input shards concatenated (all-gather).
    """
    n, me = md.world_size(), md.rank()
    out = {}
    for numel in numels:
        x = _data((numel,), "int", seed=7 * me + numel)
        a, b = chunk_bounds(numel, n, me)
        full = x.clone()
        dist.all_reduce(full)
        mine = ring_reduce_scatter(x.clone(), op=ReduceOp.SUM)
        assert mine.shape == (b - a,)
        ok_rs = torch.equal(mine, full[a:b])
        # all-gather: every rank contributes its chunk of a rank-dependent tensor
        pieces = [_data((numel,), "int", seed=r)[slice(*chunk_bounds(numel, n, r))] for r in range(n)]
        buf = torch.full((numel,), float("nan"))
        buf[a:b] = pieces[me]
        ok_ag = torch.equal(ring_all_gather(buf), torch.cat(pieces))
        if numel % n == 0:
            ref = torch.empty(numel // n)
            dist.reduce_scatter_single(ref, x.clone())
            ok_rs = ok_rs and torch.equal(mine, ref)
            ref = torch.empty(numel)
            dist.all_gather_single(ref, pieces[me].contiguous())
            ok_ag = ok_ag and torch.equal(buf, ref)
        out[numel] = (ok_rs, ok_ag)
    return out


def record_bytes(numel):
    """CommLog records of one ring and one naive all-reduce of ``numel`` float32."""
    x = torch.ones(numel)
    with CommLog() as log:
        with label("grads"):
            ring_all_reduce(x)
        naive_all_reduce(x)
        dist.all_reduce(x)
    return [
        (r.op, r.bytes, r.sent, r.recv, r.label, [(p.op, p.peer, p.sent, p.recv) for p in r.parts]) for r in log.records
    ]


def bad_input(case):
    """Make one kind of bad call; return ``(exception type, message)`` seen on this rank."""
    me = md.rank()
    try:
        if case == "shape":
            ring_all_reduce(torch.ones(4 + (me == 1)))
        elif case == "dtype":
            ring_all_reduce(torch.ones(4, dtype=torch.float64 if me == 2 else torch.float32))
        elif case == "noncontiguous":
            t = torch.ones(4, 6)
            ring_all_reduce(t.t() if me == 1 else t.t().contiguous())
        elif case == "outside":
            group = md.new_group([0, 1])
            ring_all_reduce(torch.ones(4), group=group)
        elif case == "avg_int":
            ring_all_reduce(torch.ones(4, dtype=torch.int64), op=ReduceOp.AVG)
        elif case == "op":
            ring_all_reduce(torch.ones(4), op=ReduceOp.BAND)
        elif case == "missing_peer":  # rank 1 never calls: the others must time out, not hang
            if me != 1:
                ring_all_reduce(torch.ones(4), check=False)
            else:
                time.sleep(5)
        return None
    except (ConfigError, RuntimeError) as exc:
        return type(exc).__name__, str(exc)
