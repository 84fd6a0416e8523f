"""minipar.comm.intercept: one interception of torch.distributed, listeners chained, torch restored after."""

import pytest

from minipar import launch


def chained_listeners():
    """Two listeners: who sees which call, in which order, and what is left behind."""
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from minipar.comm import intercept

    before = {n: (getattr(dist, n), getattr(c10d, n)) for n in intercept.OPS}
    seen = []

    def first(op, call, args, kwargs):
        seen.append(("first", op))
        return call(*args, **kwargs)

    def second(op, call, args, kwargs):  # subscribed last: sees the program's call first, may change it
        seen.append(("second", op))
        if op == "all_reduce":
            args = (args[0] * 0 + 1, *args[1:])  # the call below gets another tensor
        return call(*args, **kwargs)

    t = torch.full((4,), 5.0)
    with intercept.listening(first):
        with intercept.listening(second):
            assert intercept.listeners() == (first, second)
            assert intercept.original("all_reduce") is before["all_reduce"][1]
            dist.all_reduce(t)  # second changed the tensor: t itself is left as it was
            peer = 1 - dist.get_rank()
            ops = [dist.P2POp(dist.isend, t, peer), dist.P2POp(dist.irecv, torch.empty(4), peer)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            with pytest.raises(RuntimeError, match="subscribed already"):
                intercept.subscribe(first)
        objs = [None, None]
        dist.all_gather_object(objs, dist.get_rank())  # calls c10d's all_gather from inside: seen again
    restored = {n: (getattr(dist, n), getattr(c10d, n)) for n in intercept.OPS} == before
    with pytest.raises(KeyError):
        intercept.original("all_reduce_coalesced")
    return seen, t.tolist(), objs, restored, intercept.listeners()


def test_listeners_chain_last_subscribed_first_and_torch_is_restored():
    for seen, t, objs, restored, left in launch(chained_listeners, world_size=2):
        assert seen[:2] == [("second", "all_reduce"), ("first", "all_reduce")]
        assert seen[2:6] == [("second", "isend"), ("first", "isend"), ("second", "irecv"), ("first", "irecv")]
        assert set(seen[6:]) == {("first", "all_gather")}
        assert t == [5.0] * 4 and objs == [0, 1]
        assert restored and left == ()


def out_of_order():
    """The first listener leaves while the second stays: the second keeps seeing calls; torch back after both."""
    import torch
    import torch.distributed as dist

    from minipar.comm import intercept

    orig = dist.all_reduce
    seen = []
    a = lambda op, call, args, kwargs: seen.append("a") or call(*args, **kwargs)  # noqa: E731
    b = lambda op, call, args, kwargs: seen.append("b") or call(*args, **kwargs)  # noqa: E731
    intercept.subscribe(a)
    intercept.subscribe(b)
    intercept.unsubscribe(a)
    dist.all_reduce(torch.ones(2))
    intercept.unsubscribe(b)
    intercept.unsubscribe(b)  # not subscribed: nothing happens
    dist.all_reduce(torch.ones(2))
    return seen, dist.all_reduce is orig is dist.distributed_c10d.all_reduce


def test_listeners_leave_in_any_order():
    for seen, restored in launch(out_of_order, world_size=2):
        assert seen == ["b"] and restored
