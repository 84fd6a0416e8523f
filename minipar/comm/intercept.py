"""The one interception of torch.distributed's calls: listeners subscribe, nothing else patches it.

    from minipar.comm import intercept

    def timer(op, call, args, kwargs):           # op: "all_reduce", "isend", ... (one of OPS)
        t = time.perf_counter()                  # call: the function below this listener
        try:
            return call(*args, **kwargs)         # the program's call goes on (changed or not)
        finally:
            spent[op] += time.perf_counter() - t

    with intercept.listening(timer):
        ...                                      # every call of a function in OPS passes through timer

Subscribers: :class:`minipar.comm.comm_log.CommLog` (records each call's bytes),
:class:`minipar.clock.ClusterClock` (:mod:`minipar.clock.hooks`: runs each call on the cluster's
virtual time), the tensor-parallel benchmark's timer (:mod:`minipar.course.benchmarks.b04_tensor_parallel`)
and lesson 02's exercise checker (its spy on the learner's bucket all-reduces). Nothing else writes into
``torch.distributed``.

How. Importing changes nothing. While at least one listener is subscribed, each function of
:data:`OPS` is replaced, in ``torch.distributed`` and in ``torch.distributed.distributed_c10d``
(so ``P2POp``/``batch_isend_irecv``, the object collectives, library code such as FSDP2, and a
learner's own ``dist.all_reduce(...)`` are all seen), by ONE wrapper that hands the call to the
listeners as a chain: the listener subscribed LAST sees the program's call first, and its
``call`` is the next listener's, down to torch's own function. So a ``CommLog`` opened inside a
clock records the program's call, one opened outside it records what the clock sends. The
listener list is read once per call: a listener subscribed meanwhile sees the next call. When the
last listener leaves, torch's functions are put back where the wrapper is still in place (code
that replaced it meanwhile keeps its own), also when the block raised. Calls torch makes from
inside a call (``all_gather_object`` calls ``all_gather``) pass through the chain again: each
listener decides (the log and the clock let them through, unrecorded and unclocked).

Why wrappers around the Python functions and not PyTorch's dispatcher. A ``TorchDispatchMode``
(``CommDebugMode``, the exercise checker's ``watch.py``) sees the ``c10d`` operators BELOW these
functions. That counts collectives, but the listeners here need more: the log names the call the
program made, and ``send`` and ``isend`` are one operator (``c10d::send``), as ``all_gather`` and
``all_gather_object`` are one (``c10d::allgather_``), while a group reaches the operator as a
TorchScript object; the clock CHANGES the call: it runs a blocking collective asynchronously,
puts a 16-byte time stamp in front of every point-to-point message, and returns a Work whose
``wait()`` advances the virtual time, where an operator returns a C++ ``Work`` that a Python
listener cannot replace. The price of wrappers, as with ``unittest.mock.patch``: a function
imported by name before the block (``from torch.distributed import all_reduce``) keeps torch's
own, and calls that bypass Python (the C++ reducer inside ``torch.nn.parallel.DistributedDataParallel``)
are not seen: use a DDP comm hook there. The exercise checkers (``exercises/checks/watch.py``)
watch with the dispatcher on purpose: they must see a learner's calls however they are made (a
``ProcessGroup`` method, a functional collective, a name imported before), which these wrappers do not.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Callable

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

# the functions intercepted, as torch.distributed names them (those this torch has)
OPS = tuple(
    n
    for n in (
        "all_reduce",
        "broadcast",
        "reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_single",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "reduce_scatter_single",
        "all_to_all",
        "all_to_all_single",
        "scatter",
        "gather",
        "send",
        "recv",
        "isend",
        "irecv",
        "barrier",
    )
    if hasattr(c10d, n)
)

# listener(op, call, args, kwargs) -> what the call returns
Listener = Callable[[str, Callable, tuple, dict], object]

_listeners: tuple = ()  # subscribed listeners, first subscribed first; the wrappers are in place while non-empty
_installed: dict[str, tuple] = {}  # op -> (c10d's function, torch.distributed's function, the wrapper)
_lock = threading.Lock()  # subscribing and leaving from several threads


def original(op: str) -> Callable:
    """torch's own function ``op`` (of :data:`OPS`), also while the wrappers are in place: a listener's
    own bookkeeping calls it to bypass every listener. Raises KeyError for a name not in OPS."""
    if op not in OPS:
        raise KeyError(f"intercept.original({op!r}): not one of the intercepted functions {OPS}")
    return _installed[op][0] if op in _installed else getattr(c10d, op)


def listeners() -> tuple:
    """The listeners subscribed now, first subscribed first."""
    return _listeners


def _link(listener: Listener, op: str, below: Callable) -> Callable:
    return lambda *args, **kwargs: listener(op, below, args, kwargs)


def _wrap(op: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        call = fn
        for listener in _listeners:  # the first subscribed is innermost, next to torch's function
            call = _link(listener, op, call)
        return call(*args, **kwargs)

    return wrapper


def _install() -> None:
    try:
        for op in OPS:
            orig, orig_dist = getattr(c10d, op), getattr(dist, op)
            w = _wrap(op, orig)
            _installed[op] = (orig, orig_dist, w)
            setattr(c10d, op, w)
            setattr(dist, op, w)
    except BaseException:
        _uninstall()
        raise


def _uninstall() -> None:
    for op, (orig, orig_dist, w) in _installed.items():
        if getattr(c10d, op) is w:
            setattr(c10d, op, orig)
        if getattr(dist, op) is w:
            setattr(dist, op, orig_dist)
    _installed.clear()


def subscribe(listener: Listener) -> None:
    """Pass every later call of :data:`OPS` through ``listener`` (outermost: it sees the call first).

    Raises RuntimeError when ``listener`` is subscribed already.
    """
    global _listeners
    with _lock:
        if any(x is listener for x in _listeners):
            raise RuntimeError(f"intercept.subscribe: {listener!r} is subscribed already")
        if not _listeners:
            _install()
        _listeners = (*_listeners, listener)


def unsubscribe(listener: Listener) -> None:
    """Stop passing calls through ``listener``; the last one to leave puts torch's functions back.
    A listener that is not subscribed: nothing happens."""
    global _listeners
    with _lock:
        _listeners = tuple(x for x in _listeners if x is not listener)
        if not _listeners:
            _uninstall()


@contextlib.contextmanager
def listening(listener: Listener):
    """:func:`subscribe` ``listener`` for the block; unsubscribe it after, also when the block raises."""
    subscribe(listener)
    try:
        yield listener
    finally:
        unsubscribe(listener)
