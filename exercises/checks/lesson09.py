"""Checks for lesson 09: top-k with error feedback (in this process), PowerSGD on 1, 2 and 3 ranks."""

from __future__ import annotations

import importlib

import torch

from exercises.checks.common import EXACT, CheckFailed, Lesson, expect_close, run_ranks
from exercises.checks.watch import (
    Refuse,
    Watch,
    expect_no_state,
    finally_own,
    judge,
    kept_state_message,
    state_changed,
    state_snapshot,
    watched,
)

COMPRESS = "this exercise is gradient compression: write it yourself"
RULES = Refuse(
    {
        "minipar.dp.compression": COMPRESS
        + ", not with minipar's compressors (top-k: Tensor.topk on |grad + error|, then zero the sent entries "
        "of the error; PowerSGD: m·q, dist.all_reduce, orthogonalize, mᵀ·P̂, dist.all_reduce)",
        "torch.distributed.algorithms": COMPRESS + ", not PyTorch's DDP comm hooks",
    }
)


def check_topk(mod) -> str:
    seen = []
    gen = torch.Generator().manual_seed(9)
    cases = [(7, 1), (7, 7), (1000, 10), (257, 13)]
    before = state_snapshot(mod)
    for n, k in cases:
        error = torch.zeros(n, dtype=torch.float64)
        for step in range(3):
            grad = torch.randn(n, generator=gen, dtype=torch.float64)
            what = f"topk_with_error_feedback(n={n}, k={k}), step {step + 1}"
            (vals, idx, new_err), summary = watched(
                what, RULES, mod, mod.topk_with_error_feedback, grad.clone(), error.clone(), k
            )
            seen.append((what, summary))
            a = grad + error
            if tuple(vals.shape) != (k,) or tuple(idx.shape) != (k,):
                raise CheckFailed(
                    f"{what}: values {tuple(vals.shape)} and indices {tuple(idx.shape)}, expected ({k},) each"
                )
            want_idx = set(a.abs().topk(k).indices.tolist())
            if set(idx.tolist()) != want_idx:
                raise CheckFailed(
                    f"{what}: sent indices {sorted(idx.tolist())[:8]}..., expected the {k} largest |grad + error| "
                    f"{sorted(want_idx)[:8]}...: choose on grad + error (the error of earlier steps), by magnitude"
                )
            expect_close(f"{what}: values", vals, a[idx], EXACT, "values = (grad + error)[indices]")
            rebuilt = new_err.clone()
            rebuilt[idx] += vals
            expect_close(
                f"{what}: new_error + sent",
                rebuilt,
                a,
                EXACT,
                "error feedback: new_error = grad + error with the sent entries zeroed (nothing is lost)",
            )
            expect_no_state(
                what, mod, before, "the error of earlier steps is the `error` argument, returned as new_error"
            )
            error = new_err
    finally_own(mod, ["topk_with_error_feedback"], seen)
    return "n = 7, 257, 1000; k = 1 .. n; 3 steps each: the k largest |g + e| sent, the rest kept exactly"


def powersgd_worker(module, n, k, r, seed):
    from minipar.runtime import dist as mdist

    mod = importlib.import_module(module)
    gen = torch.Generator().manual_seed(seed + mdist.rank())
    m = torch.randn(n, k, generator=gen, dtype=torch.float64)
    q = torch.randn(k, r, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    before = state_snapshot(mod)
    with Watch(RULES, own=mod) as w:
        approx, new_q = mod.powersgd_round(m, q)
    return approx, new_q, w.summary(), state_changed(before, state_snapshot(mod))


def one_device(ms, q):
    m = sum(ms) / len(ms)
    p = torch.linalg.qr(m @ q).Q
    new_q = m.t() @ p
    return p @ new_q.t(), new_q


def check_powersgd(mod) -> str:
    cases = [(1, 6, 5, 2), (2, 8, 6, 2), (3, 9, 7, 3)]
    seen = []
    for world, n, k, r in cases:
        what = f"powersgd_round on {world} rank(s), m ({n}, {k}), rank {r}"
        got = run_ranks(powersgd_worker, world, (mod.__name__, n, k, r, 90), what)
        for rank, (*_, summary, _) in enumerate(got):
            judge(f"{what}: rank {rank}", summary)
            seen.append((f"{what}: rank {rank}", summary))
        ms = [
            torch.randn(n, k, generator=torch.Generator().manual_seed(90 + i), dtype=torch.float64)
            for i in range(world)
        ]
        q = torch.randn(k, r, generator=torch.Generator().manual_seed(90), dtype=torch.float64)
        want_approx, want_q = one_device(ms, q)
        for rank, (approx, new_q, _, changed) in enumerate(got):
            if changed:
                raise CheckFailed(
                    kept_state_message(f"{what}: rank {rank}", changed, "the round's state is q, given and returned")
                )
            expect_close(
                f"{what}: rank {rank}'s approx",
                approx,
                want_approx,
                1e-9,
                "it must equal one device's round on the MEAN matrix: all-reduce P, divide by N, and only "
                "then orthogonalize (every rank the same P̂), then the same for Q",
            )
            signs = torch.where((new_q * want_q).sum(0) < 0, -1.0, 1.0).to(new_q.dtype)  # QR may flip a column
            expect_close(
                f"{what}: rank {rank}'s new Q (up to each column's sign)",
                new_q * signs,
                want_q,
                1e-9,
                "new_q = the all-reduced mean of mᵀ·P̂",
            )
        for rank, (*_, summary, _) in enumerate(got):
            if world > 1:
                comm = summary["comm"]
                sizes = [(op, a) for op, a, _, _ in comm]
                if sizes != [("allreduce", n * r), ("allreduce", k * r)]:
                    raise CheckFailed(
                        f"{what}: rank {rank} communicated {sizes} (c10d op, elements), expected two all-reduces: "
                        f"P of n·r = {n * r} elements, then Q of k·r = {k * r} — PowerSGD sends (n + k)·r numbers, "
                        f"never the whole n·k = {n * k} matrix"
                    )
    finally_own(mod, ["powersgd_round"], seen)
    return (
        "1, 2 and 3 ranks: every rank's estimate = one device's PowerSGD round on the mean matrix; two all-reduces "
        "of n·r and k·r elements"
    )


LESSON = Lesson(
    number="09",
    title="communication: compression",
    module="ex09_communication",
    checks=(
        ("topk_with_error_feedback", check_topk),
        ("powersgd_round", check_powersgd),
    ),
    rules=(RULES,),
)
