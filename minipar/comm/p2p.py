"""Point-to-point messages, with NCCL's matching rule checked on CPU (strict order mode).

    from minipar.comm import p2p
    work = p2p.isend(t, dst=1, tag=3, label="1F3")    # label: what this message is, for errors
    work = p2p.irecv(buf, src=0, tag=3, label="1F3")
    work.wait()                                        # strict mode: raises P2POrderError here
    p2p.send(t, dst=1, label="grad"); p2p.recv(buf, src=0, label="grad")
    works = p2p.batch_isend_irecv([p2p.P2P("send", cur, right, group, label="k0"), ...])

The rule. NCCL matches the point-to-point messages between two ranks (in one communicator)
strictly in the order they are posted: rank b's n-th receive from rank a gets rank a's n-th
send to b. NCCL has no tags (NCCL User Guide, "Point-to-point communication"; Megatron-LM's
``p2p_communication.py`` and ``torch.distributed.pipelining`` post matching sends/receives as
``batch_isend_irecv`` pairs for this reason). gloo matches by tag, so a program whose receives
are posted in another order than its peer's sends is correct on CPU and, on GPUs, silently hands
a stage the wrong tensor of the right shape. Tags only *label* messages; the order is the design.

Strict mode (``MINIPAR_P2P_ORDER=strict`` in the environment; ``tests/conftest.py`` turns it on
for every test). Every message is preceded by a header — its position in the sender's per-pair
sequence and its label (33 int64 = 264 bytes, not counted by ``minipar.comm.comm_log``) — sent
under ONE reserved tag, so gloo matches the headers exactly as NCCL matches messages: in posting
order. ``work.wait()`` on a receive first waits for its header, then compares the label of the
sender's n-th send with the label of this rank's n-th receive from that sender, and raises
:class:`P2POrderError` with both sequences (per ordered pair src→dst, in one group) when they
differ — before the data is handed to the caller. An order that NCCL could not run at all
(the sender's n-th send never comes) raises a RuntimeError with both sequences after the
``timeout`` given to ``wait`` (default: the group's timeout), instead of hanging. Off by default
(one more small message per message); labels are truncated to 32 bytes.
"""

from __future__ import annotations

import os
from collections import deque
from datetime import timedelta
from typing import NamedTuple

import torch
import torch.distributed as dist

from minipar.comm.comm_log import unrecorded

HEADER_TAG = 0x7FFF_0001  # reserved: no minipar message uses it (the executor's tags are < 2·S·m)
_LABEL_BYTES = 32
_SHOW = 12  # labels shown per sequence in an error
_KEEP = 64  # labels remembered per pair (the positions are counted exactly)


class P2POrderError(RuntimeError):
    """Receives from a peer posted in another order than the peer posted its sends (NCCL would
    mis-deliver or hang); the message lists both sequences."""


def strict() -> bool:
    """True when ``MINIPAR_P2P_ORDER=strict`` (read at every call, so a test or cell may set it)."""
    return os.environ.get("MINIPAR_P2P_ORDER", "").lower() == "strict"


class _Pair:
    """This rank's record for one ordered pair in one group: how many messages were posted, the
    labels of the last ``_KEEP`` (for error messages), and on the receive side the labels the
    peer's headers carried, by position."""

    def __init__(self):
        self.count = 0
        self.posted: deque[str] = deque(maxlen=_KEEP)  # my sends to the peer, or my receives from it
        self.peer_sends: dict[int, str] = {}  # receive side: position -> label (recent ones)

    def post(self, label: str) -> int:
        n, self.count = self.count, self.count + 1
        self.posted.append(label)
        return n

    def saw(self, n: int, label: str) -> None:
        self.peer_sends[n] = label
        for old in [k for k in self.peer_sends if k < n - _KEEP]:
            del self.peer_sends[old]


_pairs: dict[tuple, _Pair] = {}


def _group_key(group):
    if group is None or group is dist.group.WORLD:
        return "world"
    return (id(group), tuple(dist.get_process_group_ranks(group)))


def _pair(group, src: int, dst: int) -> _Pair:
    return _pairs.setdefault((_group_key(group), src, dst), _Pair())


def reset() -> None:
    """Forget every recorded sequence (e.g. after ``destroy_process_group``)."""
    _pairs.clear()


def _encode(n: int, label: str, device) -> torch.Tensor:
    raw = label.encode()[:_LABEL_BYTES].ljust(_LABEL_BYTES, b"\0")
    return torch.tensor([n, *raw], dtype=torch.int64, device=device)


def _decode(h: torch.Tensor) -> tuple[int, str]:
    vals = h.tolist()
    return int(vals[0]), bytes(v for v in vals[1:] if v).decode(errors="replace")


def _show(labels) -> str:
    labels = list(labels)
    if len(labels) > _SHOW:
        labels = ["..."] + labels[-_SHOW:]
    return "[" + ", ".join(labels) + "]"


class _CheckedRecv:
    """The work of a strict-mode receive: ``wait`` checks the header, then waits for the data."""

    def __init__(self, data, header, buf, pair: _Pair, n: int, src: int, dst: int, label: str):
        self.data, self.header, self.buf, self.pair = data, header, buf, pair
        self.n, self.src, self.dst, self.label = n, src, dst, label
        self.checked = False

    def _sequences(self, upto: int) -> str:
        lo = max(0, upto + 1 - _SHOW)
        sends = (["..."] if lo else []) + [self.pair.peer_sends.get(i, "?") for i in range(lo, upto + 1)]
        return (
            f"  sends    posted by rank {self.src} to rank {self.dst}:   {_show(sends)}\n"
            f"  receives posted by rank {self.dst} from rank {self.src}: {_show(self.pair.posted)}\n"
        )

    def wait(self, timeout: timedelta | None = None) -> bool:
        if not self.checked:
            try:
                self.header.wait(timeout) if timeout is not None else self.header.wait()
            except RuntimeError as exc:
                raise RuntimeError(
                    f"point-to-point order (strict mode): rank {self.dst}'s receive #{self.n} from rank {self.src} "
                    f"({self.label}) got no message: rank {self.src} never posted its send #{self.n} to rank "
                    f"{self.dst} (or died).\n{self._sequences(self.n - 1)}"
                    "NCCL matches the messages of a rank pair in posting order, so it would hang here: post the "
                    f"receives in the order the peer posts its sends. ({exc})"
                ) from exc
            n, got = _decode(self.buf)
            self.pair.saw(n, got)
            self.checked = True
            if n != self.n or got != self.label[:_LABEL_BYTES]:
                raise P2POrderError(
                    f"point-to-point order violation (strict mode): rank {self.dst}'s receive #{self.n} from rank "
                    f"{self.src} expects {self.label} but rank {self.src}'s send #{n} to rank {self.dst} is {got}.\n"
                    f"{self._sequences(self.n)}"
                    f"NCCL matches the messages of a rank pair in posting order (tags are ignored), so it would "
                    f"deliver {got} where {self.label} is expected, without an error. Post the receives from rank "
                    f"{self.src} in the order it posts its sends (or pair them with batch_isend_irecv)."
                )
        return self.data.wait(timeout) if timeout is not None else self.data.wait()

    def is_completed(self) -> bool:
        return self.header.is_completed() and self.data.is_completed()


class _CheckedSend:
    """The work of a strict-mode send: waits for its header and its data."""

    def __init__(self, data, header, buf):
        self.data, self.header, self.buf = data, header, buf

    def wait(self, timeout: timedelta | None = None) -> bool:
        for w in (self.header, self.data):
            w.wait(timeout) if timeout is not None else w.wait()
        return True

    def is_completed(self) -> bool:
        return self.header.is_completed() and self.data.is_completed()


def _me() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _default_label(tensor: torch.Tensor, tag: int) -> str:
    return f"tag{tag}:{'x'.join(map(str, tensor.shape))}"


def _post_header(kind: str, peer: int, group, n: int, label: str, device):
    buf = (
        _encode(n, label, device) if kind == "send" else torch.empty(1 + _LABEL_BYTES, dtype=torch.int64, device=device)
    )
    fn = dist.distributed_c10d.isend if kind == "send" else dist.distributed_c10d.irecv
    with unrecorded():  # headers are strict mode's overhead, not the program's traffic
        return fn(buf, peer, group=group, tag=HEADER_TAG), buf


def isend(tensor: torch.Tensor, dst: int, group=None, tag: int = 0, label: str | None = None):
    """``dist.isend`` (``dst`` is a global rank, as in torch); in strict mode preceded by its header.

    Returns a work with ``wait(timeout=None)``; keep ``tensor`` alive until it completes.
    """
    if not strict():
        return dist.isend(tensor, dst, group=group, tag=tag)
    label = label or _default_label(tensor, tag)
    pair = _pair(group, _me(), dst)
    header, buf = _post_header("send", dst, group, pair.count, label, tensor.device)
    pair.post(label)
    return _CheckedSend(dist.isend(tensor, dst, group=group, tag=tag), header, buf)


def irecv(tensor: torch.Tensor, src: int, group=None, tag: int = 0, label: str | None = None):
    """``dist.irecv`` (``src`` global); in strict mode ``wait()`` checks the order first (see module doc).

    Raises (from ``wait``):
        P2POrderError: strict mode, and the sender's send at this position has another label, or
            never comes within the timeout.
    """
    if not strict():
        return dist.irecv(tensor, src, group=group, tag=tag)
    label = label or _default_label(tensor, tag)
    pair = _pair(group, src, _me())
    header, buf = _post_header("recv", src, group, pair.count, label, tensor.device)
    n = pair.post(label)
    return _CheckedRecv(dist.irecv(tensor, src, group=group, tag=tag), header, buf, pair, n, src, _me(), label)


def send(tensor: torch.Tensor, dst: int, group=None, tag: int = 0, label: str | None = None) -> None:
    """Blocking send: ``isend(...).wait()``."""
    isend(tensor, dst, group, tag, label).wait()


def recv(tensor: torch.Tensor, src: int, group=None, tag: int = 0, label: str | None = None) -> None:
    """Blocking receive: ``irecv(...).wait()`` (strict mode checks the order)."""
    irecv(tensor, src, group, tag, label).wait()


class P2P(NamedTuple):
    """One operation of :func:`batch_isend_irecv`: ``kind`` "send" or "recv", ``peer`` a global rank."""

    kind: str
    tensor: torch.Tensor
    peer: int
    group: object = None
    tag: int = 0
    label: str | None = None


def batch_isend_irecv(ops: list[P2P]) -> list:
    """Post sends and receives together (``dist.batch_isend_irecv``); returns one work per op.

    The pairing is what makes an exchange NCCL-safe: both ranks of a pair post their halves in
    one group, as Megatron-LM's ``p2p_communication.py`` does. In strict mode the ops are posted
    one by one, in list order, each after its header, and each receive's ``wait`` checks it.
    """
    if not strict():
        return dist.batch_isend_irecv(
            [dist.P2POp(dist.isend if o.kind == "send" else dist.irecv, o.tensor, o.peer, o.group, o.tag) for o in ops]
        )
    return [(isend if o.kind == "send" else irecv)(o.tensor, o.peer, o.group, o.tag, o.label) for o in ops]
