"""Checks for lesson 11: the online-softmax merge of two attention blocks, and one ring step on real ranks.

``merge`` is compared in float64 with one softmax over both blocks' keys (bound 1e-12: the same
arithmetic reordered), including scores near 1000, where ``exp`` overflows, either block 1500+ nats
above the other (a reference taken from one block's lse instead of the maximum overflows), and a row
that sees none of one block's keys (lse = −inf). ``ring_step`` runs on N = 1, 2, 3, 4 ranks and on the
sub-group [1, 2, 3] of 4, with blocks of different lengths (rank r's block has 3 + r tokens, filled
with r + 1), so a block from the wrong neighbour, a buffer of the wrong size, a new buffer instead of
the caller's ``recv`` or a collective is named. Both must be the learner's own text (no source
compiled under the file's name, no paste of ``minipar.cp``).
"""

from __future__ import annotations

import importlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from exercises.checks.common import EXACT, CheckFailed, Lesson, run_ranks
from exercises.checks.watch import Refuse, Watch, finally_own, judge, watched

MERGE = "this exercise is the merge: write the two lines yourself"
RING = "this exercise is the ring step: write it from isend and irecv"
PYTORCH_CP = "torch.distributed.tensor.experimental"  # PyTorch's context parallelism (its SDPA merger, its ring)
RULES_MERGE = Refuse(
    {"minipar.cp": MERGE, "torch.nn.functional": MERGE, PYTORCH_CP: MERGE + ", not PyTorch's context parallelism"}
)
RULES_RING = Refuse(
    {
        "minipar.cp": RING,
        "minipar.comm.collectives": RING,
        "torch.distributed._functional_collectives": RING,
        PYTORCH_CP: RING + ", not PyTorch's context parallelism",
    }
)

CASES = [(1, None, False), (2, None, False), (3, None, True), (3, None, False), (4, None, False), (4, [1, 2, 3], False)]
# (world, sub-group, equal blocks): equal blocks first, so a block from the wrong side is named by its value


def _blocks(shift_a: float, shift_b: float, seed: int, masked: bool = False):
    """q, two key/value blocks with scores shifted by ``shift_*``, and the truth over both. ``masked``:
    one query row sees none of block b's keys (a causal mask's fully masked row: lse_b = −inf, out_b = 0)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 2, 5, 4, dtype=torch.float64, generator=g)
    ka, kb, va, vb = (torch.randn(2, 2, n, 4, dtype=torch.float64, generator=g) for n in (3, 6, 3, 6))
    sa, sb = q @ ka.transpose(-2, -1) + shift_a, q @ kb.transpose(-2, -1) + shift_b
    if masked:
        sb[0, 1, 2] = float("-inf")
    s = torch.cat([sa, sb], -1)
    truth = (torch.softmax(s, -1) @ torch.cat([va, vb], -2), torch.logsumexp(s, -1))
    la, lb = torch.logsumexp(sa, -1), torch.logsumexp(sb, -1)
    blk_a = (torch.softmax(sa, -1) @ va, la)
    blk_b = (torch.nan_to_num(torch.softmax(sb, -1), nan=0.0) @ vb, lb)
    return blk_a, blk_b, truth


def check_merge(mod) -> str:
    cases = [
        ("scores ~1", 0.0, 0.0, False),
        ("block b 30 nats heavier", 0.0, 30.0, False),
        ("scores ~1000 (exp overflows)", 1000.0, 999.0, False),
        # one block far above the other, either way: a reference taken from one block's lse overflows
        ("block a 1500 nats heavier", 1500.0, 0.0, False),
        ("block b 2000 nats heavier", 0.0, 2000.0, False),
        ("a row fully masked in block b (lse_b = −inf)", 0.0, 0.0, True),
    ]
    seen = []
    for k, (name, sha, shb, masked) in enumerate(cases):
        (oa, la), (ob, lb), (want_o, want_l) = _blocks(sha, shb, k, masked)
        what = f"merge, {name}"
        got, summary = watched(what, RULES_MERGE, mod, mod.merge, oa.clone(), la.clone(), ob.clone(), lb.clone())
        seen.append((what, summary))
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise CheckFailed(f"{what}: returned {type(got).__name__}, expected the pair (out, lse)")
        out, lse = (torch.as_tensor(t) for t in got)
        if out.shape != want_o.shape or lse.shape != want_l.shape:
            raise CheckFailed(
                f"{what}: shapes out {tuple(out.shape)}, lse {tuple(lse.shape)}; expected "
                f"{tuple(want_o.shape)} and {tuple(want_l.shape)}"
            )
        if not (torch.isfinite(out).all() and torch.isfinite(lse).all()):
            raise CheckFailed(
                f"{what}: inf or nan in the result: exp overflows when scores (or one block's lse over the other's) "
                "reach ~700, and −inf − (−inf) is nan. Compute lse = logaddexp(lse_a, lse_b) (or subtract the "
                "larger lse, the maximum, first); the weights exp(lse_a − lse) are then <= 1"
            )
        dl = (lse - want_l).abs().max().item()
        if dl >= EXACT * max(1.0, want_l.abs().max().item()):
            raise CheckFailed(
                f"{what}: lse differs from log Σ exp over both blocks by {dl:.3g}: exp(lse) must equal "
                "exp(lse_a) + exp(lse_b)"
            )
        do = (out - want_o).abs().max().item()
        if do >= EXACT:
            raise CheckFailed(
                f"{what}: out differs from the softmax over both blocks by {do:.3g}: weigh each block's output "
                "by its share of the mass, exp(lse_a − lse) · out_a + exp(lse_b − lse) · out_b (not an average)"
            )
    finally_own(mod, ["merge"], seen)
    return (
        "6 cases (equal blocks, one 30 nats heavier, scores ~1000, either block 1500+ nats heavier, a fully "
        "masked row): exact in float64, finite"
    )


class _RecvInto(TorchDispatchMode):
    """The storage each point-to-point receive inside the block writes into."""

    def __init__(self):
        super().__init__()
        self.targets: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.name().startswith("c10d::recv"):
            bufs = args[0] if args and isinstance(args[0], (list, tuple)) else args[:1]
            self.targets += [t.untyped_storage().data_ptr() for t in bufs if torch.is_tensor(t)]
        return func(*args, **(kwargs or {}))


def ring_worker(module, members, equal):
    from minipar.runtime import dist as mdist

    mod = importlib.import_module(module)
    if members is None:
        group, ranks = None, list(range(mdist.world_size()))
    else:
        group, ranks = mdist.new_group(members), members
    if mdist.rank() not in ranks:
        return None
    n, i = len(ranks), ranks.index(mdist.rank())
    left = (i - 1) % n
    send = torch.full((2, 1, 3 + (0 if equal else i), 4), float(i + 1), dtype=torch.float64)
    recv = torch.full((2, 1, 3 + (0 if equal else left), 4), -1.0, dtype=torch.float64)
    with Watch(RULES_RING, own=mod) as w, _RecvInto() as into:
        try:
            out = mod.ring_step(send, recv, group)
        except Exception:
            if not w.refused:
                raise
            out = None  # a refused call that then failed: the refusal is the verdict
    return {
        "out": None if out is None else torch.as_tensor(out).detach().clone(),
        "is_recv": out is recv,
        "into_recv": [ptr == recv.untyped_storage().data_ptr() for ptr in into.targets],
        "recv": recv.clone(),
        "seen": w.summary(),
    }


def check_ring_step(mod) -> str:
    seen = []
    for world, members, equal in CASES:
        ranks = members or list(range(world))
        n = len(ranks)
        what = f"ring_step, {world} ranks" + (f", sub-group {members}" if members else "")
        what += ", equal blocks" if equal else ", blocks of 3 + r tokens"
        res = run_ranks(ring_worker, world, (mod.__name__, members, equal), what)
        for i, g in enumerate(ranks):
            summary = res[g]["seen"]
            judge(f"{what}: rank {g}", summary)
            seen.append((f"{what}: rank {g}", summary))
            left, right = (i - 1) % n, (i + 1) % n
            size = {j: 3 + (0 if equal else j) for j in range(n)}
            out = res[g]["out"]
            want_val = float(left + 1)
            if out is None:
                raise CheckFailed(f"{what}: rank {g} returned None; return the received block")
            if out.shape[2] != size[left] or not torch.equal(out, torch.full_like(out, want_val)):
                got = sorted(set(out.flatten().tolist()))[:3]
                raise CheckFailed(
                    f"{what}: rank {g} (index {i}) returned a block of {out.shape[2]} tokens holding {got}; expected "
                    f"the block of its left neighbour (index {left}): {size[left]} tokens of {want_val:g}. Send to "
                    "rank i + 1, receive from rank i − 1"
                )
            filled = torch.equal(res[g]["recv"], out)
            if n > 1 and not (res[g]["is_recv"] and filled and all(res[g]["into_recv"])):
                how = (
                    "it holds other values"
                    if not filled
                    else "not returned"
                    if not res[g]["is_recv"]
                    else "received elsewhere, then copied"
                )
                raise CheckFailed(
                    f"{what}: rank {g} (index {i}) returned the left block but not in the caller's buffer `recv` "
                    f"({how}): "
                    "receive into `recv` in place (dist.irecv(recv, ...)) and return it, as the contract says: "
                    "ring attention reuses its two buffers every step instead of allocating new ones"
                )
            comm = summary["comm"]
            other = [op for op, *_ in comm if op not in ("send", "recv")]
            if other:
                raise CheckFailed(f"{what}: rank {g} called the collective c10d::{other[0]}: {RING}, not a collective")
            sends = [(a, p) for op, a, _, p in comm if op == "send"]
            recvs = [(a, p) for op, a, _, p in comm if op == "recv"]
            want_s = [(2 * size[i] * 4, right)] if n > 1 else []
            want_r = [(2 * size[left] * 4, left)] if n > 1 else []
            if sends != want_s or recvs != want_r:
                raise CheckFailed(
                    f"{what}: rank {g} (index {i}) sent {sends} and received {recvs} as (elements, group rank); "
                    f"one ring step is one message of its block to the right neighbour ({want_s}) and one from "
                    f"the left ({want_r}), nothing with N = 1"
                )
    finally_own(mod, ["ring_step"], seen)
    return (
        "N = 1, 2, 3, 4 ranks and sub-group [1, 2, 3]; equal blocks and blocks of 3 + r tokens (uneven): one isend "
        "of its block to the right, one irecv from the left, the left block received"
    )


LESSON = Lesson(
    number="11",
    title="context parallelism",
    module="ex11_context_parallel",
    checks=(
        ("merge", check_merge),
        ("ring_step", check_ring_step),
    ),
    rules=(RULES_MERGE, RULES_RING),
)
