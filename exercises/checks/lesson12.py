"""Checks for lesson 12: the router and its load-balancing loss (in this process), the expert-parallel
dispatch/combine on 1, 2 and 4 ranks (float64 against one device, the all-to-alls watched), called twice per
worker with different routing (nothing may be kept between calls)."""

from __future__ import annotations

import importlib

import torch

from exercises.checks.common import EXACT, CheckFailed, Lesson, expect_close, run_ranks
from exercises.checks.watch import (
    Refuse,
    Watch,
    finally_own,
    judge,
    kept_state_message,
    state_changed,
    state_snapshot,
    watched,
)

MOE = "this exercise is the MoE bookkeeping: write it yourself"
RULES = Refuse(
    {
        "minipar.model.moe": MOE + ", not minipar's",
        "minipar.ep": MOE + ", not minipar's expert parallelism",
        "minipar.comm.all_to_all": MOE + ", not minipar's all-to-all",
        "torch.distributed.nn": MOE + ", with torch.distributed's all_to_all_single",
        "torch.distributed._functional_collectives": MOE + ", with torch.distributed's all_to_all_single",
    }
)

D = 3  # token width in the expert-parallel cases


def reference_router(logits, k):
    """The same numbers computed another way (one-hot counts, a loop over experts)."""
    T, E = logits.shape
    p = torch.exp(logits - logits.max(1, keepdim=True).values)
    p = p / p.sum(1, keepdim=True)
    expert = p.argsort(dim=1, descending=True, stable=True)[:, :k]
    gate = p.gather(1, expert)
    if k > 1:
        gate = gate / gate.sum(1, keepdim=True)
    aux = sum((expert == i).sum().item() / (T * k) * p[:, i].mean() for i in range(E)) * E
    return expert, gate, aux


def check_router(mod) -> str:
    seen = []
    gen = torch.Generator().manual_seed(12)
    for T, E, k, shift in [(6, 4, 1, 0), (16, 4, 2, 0), (9, 3, 3, 0), (1, 8, 2, 0), (32, 8, 1, 0), (8, 4, 2, 800)]:
        # the last case: logits ~800, where exp(logits) overflows (softmax subtracts each row's maximum)
        logits = (2 * torch.randn(T, E, generator=gen, dtype=torch.float64) + shift).requires_grad_(True)
        what = f"router_with_aux_loss(T={T}, E={E}, k={k})" + (f", logits ~{shift}" if shift else "")
        (expert, gate, aux), summary = watched(what, RULES, mod, mod.router_with_aux_loss, logits, k)
        seen.append((what, summary))
        want_e, want_g, want_aux = reference_router(logits.detach(), k)
        if tuple(expert.shape) != (T, k) or not torch.equal(expert, want_e):
            raise CheckFailed(
                f"{what}: expert {expert[:3].tolist()}..., expected {want_e[:3].tolist()}...: the k experts of "
                "largest softmax probability, largest first"
            )
        hint = "k = 1: the chosen expert's probability itself; k > 1: the k probabilities divided by their sum"
        expect_close(f"{what}: gate", gate, want_g, EXACT, hint)
        expect_close(
            f"{what}: aux",
            aux.detach(),
            want_aux,
            EXACT,
            "aux = E · Σ_i f_i · P_i, f_i = choices of expert i / (T·k) (a count), P_i = mean probability of expert i",
        )
        wts = torch.randn(T, k, generator=gen, dtype=torch.float64)
        if not gate.requires_grad:
            raise CheckFailed(
                f"{what}: the gates carry no gradient to the logits (chosen under no_grad, or detached): the "
                "router learns through the gates — out = Σ gate · expert(x) — so take them from the softmax "
                "probabilities with autograd on (topk of probs keeps the graph; only the expert ids are integers)"
            )
        (gg,) = torch.autograd.grad((gate * wts).sum(), logits, retain_graph=True, allow_unused=True)
        p_ref = logits.softmax(1)
        gate_ref = p_ref.gather(1, want_e)
        gate_ref = gate_ref / gate_ref.sum(1, keepdim=True) if k > 1 else gate_ref
        (want_gg,) = torch.autograd.grad((gate_ref * wts).sum(), logits)
        expect_close(
            f"{what}: d(Σ gate · w) / d logits",
            torch.zeros_like(logits) if gg is None else gg,
            want_gg,
            EXACT,
            "the gate's gradient flows through the softmax probabilities it was taken from (and, for k > 1, "
            "through their renormalising sum): no detach, no no_grad",
        )
        (g,) = torch.autograd.grad(aux, logits)
        graph = E * (_f(want_e, E, T, k) @ logits.softmax(1).mean(0))  # f a count, P differentiable
        (want_grad,) = torch.autograd.grad(graph, logits)
        expect_close(
            f"{what}: d aux / d logits",
            g,
            want_grad,
            EXACT,
            "the gradient flows through P only: f is a count (no gradient), P_i the mean softmax probability",
        )
    finally_own(mod, ["router_with_aux_loss"], seen)
    return "T = 1..32, E = 3..8, k = 1..E: experts, gates (renormalised for k > 1), aux and its gradient"


def _f(expert, E, T, k):
    return torch.bincount(expert.reshape(-1), minlength=E).to(torch.float64) / (T * k)


class Counted:
    """Expert e: rows -> tanh(rows @ W_e) + e, counting the rows it sees."""

    def __init__(self, e):
        self.w = torch.randn(D, D, generator=torch.Generator().manual_seed(100 + e), dtype=torch.float64)
        self.e, self.rows = e, 0

    def __call__(self, rows):
        self.rows += rows.shape[0]
        return torch.tanh(rows @ self.w) + self.e


def case(rank, T, k, E, skip, call=0):
    """This rank's tokens and routing; expert ``skip`` never chosen (an expert with no rows). ``call``:
    the worker calls the exercise twice, with different tokens and routing (nothing may be reused)."""
    gen = torch.Generator().manual_seed(1000 + rank + 7919 * call)
    x = torch.randn(T, D, generator=gen, dtype=torch.float64)
    choices = [e for e in range(E) if e != skip]
    scores = torch.rand(T, len(choices), generator=gen)
    expert = torch.tensor(choices)[scores.argsort(1)[:, :k]]
    gate = torch.rand(T, k, generator=gen, dtype=torch.float64)
    return x, expert, gate


def ep_worker(module, tokens_by_call, k, per, skip):
    from minipar.runtime import dist as mdist

    mod = importlib.import_module(module)
    r, n = mdist.rank(), mdist.world_size()
    before = state_snapshot(mod)
    calls = []
    for call, tokens in enumerate(tokens_by_call):
        x, expert, gate = case(r, tokens[r], k, n * per, skip, call)
        experts = [Counted(r * per + i) for i in range(per)]
        err = None
        with Watch(RULES, own=mod) as w:
            if call == 0:
                out = mod.expert_parallel_forward(x, expert, gate, experts)
            else:  # a failure here is named with what differs from the first call
                try:
                    out = mod.expert_parallel_forward(x, expert, gate, experts)
                except NotImplementedError:
                    raise
                except Exception as exc:  # noqa: BLE001
                    out, err = None, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        calls.append((out, [ex.rows for ex in experts], w.summary(), err))
        if err:
            break
    return calls, state_changed(before, state_snapshot(mod))


def check_ep(mod) -> str:
    seen = []
    cases = [(1, [5], 2, 2, None), (2, [6, 3], 1, 1, None), (2, [4, 7], 2, 2, 1), (4, [5, 0, 8, 3], 2, 2, 6)]
    for world, tokens, k, per, skip in cases:
        E = world * per
        by_call = [tokens, tokens[::-1] if world > 1 else [tokens[0] + 2]]
        base = f"expert_parallel_forward on {world} rank(s), E={E}, k={k}"
        got = run_ranks(ep_worker, world, (mod.__name__, by_call, k, per, skip), f"{base}, tokens per rank {tokens}")
        for call, toks in enumerate(by_call):
            what = f"{base}, tokens per rank {toks}" + (" (second call, new routing)" if call else "")
            results = [g[0][call] if call < len(g[0]) else None for g in got]
            first = [[c[0] for c in g[0][0][2]["comm"]] for g in got]
            verify_call(what, world, toks, k, per, skip, call, results, seen, first)
        for rank, (_, changed) in enumerate(got):
            if changed:
                raise CheckFailed(
                    kept_state_message(
                        f"{base}: rank {rank}",
                        changed,
                        "each call exchanges its own counts and rows; nothing is kept for the next call",
                    )
                )
    finally_own(mod, ["expert_parallel_forward"], seen)
    return (
        "1, 2 and 4 ranks, E = 2..8, k = 1, 2, a rank with no tokens, an expert with none: each rank = one "
        "device; three all-to-alls, T·k rows out, each expert saw exactly its rows"
    )


def verify_call(what, world, tokens, k, per, skip, call, results, seen, first) -> None:
    """One call of the exercise on every rank: = one device, each expert its rows, three all-to-alls."""
    E = world * per
    for rank, res in enumerate(results):
        if res is None:
            continue
        _, _, summary, err = res
        judge(f"{what}: rank {rank}", summary)
        seen.append((f"{what}: rank {rank}", summary))
        ops = [c[0] for c in summary["comm"]]
        if call > 0 and ops != first[rank]:
            raise CheckFailed(
                f"{what}: rank {rank} called {ops} (c10d ops), {first[rank]} on the first call; expected three "
                "all-to-alls on every call: the "
                "counts change with the routing, so exchange them anew each call (keep nothing between calls)"
            )
        if err:
            raise CheckFailed(f"{what}: rank {rank} raised {err}; the first call had passed")
    routed = torch.zeros(E, dtype=torch.int64)
    for rank, res in enumerate(results):
        if res is None:
            raise CheckFailed(f"{what}: rank {rank} did not get to this call (another rank failed first)")
        out = res[0]
        x, expert, gate = case(rank, tokens[rank], k, E, skip, call)
        routed += torch.bincount(expert.reshape(-1), minlength=E)
        experts = [Counted(e) for e in range(E)]
        want = torch.zeros_like(x)
        for t in range(x.shape[0]):
            for j in range(k):
                want[t] += gate[t, j] * experts[int(expert[t, j])](x[t : t + 1])[0]
        expect_close(
            f"{what}: rank {rank}'s output",
            out,
            want,
            EXACT,
            "out[t] = Σ_j gate[t, j] · expert(x[t]): check the rows' order after the all-to-all (grouped by "
            "source, then expert) and that the results come back in the order they were sent"
            + (
                "; this call's routing differs from the first: compute everything from this call's arguments"
                if call
                else ""
            ),
        )
    for rank, (_, rows, summary, _) in enumerate(results):
        want_rows = routed[rank * per : (rank + 1) * per].tolist()
        if rows != want_rows:
            raise CheckFailed(
                f"{what}: rank {rank}'s experts saw {rows} rows, expected {want_rows} (the choices routed to "
                "them from every rank): run each expert on exactly its rows, never on every token"
            )
        comm = [c for c in summary["comm"]]
        ops = [c[0] for c in comm]
        if world > 1 and ops != ["alltoall_base"] * 3:
            raise CheckFailed(
                f"{what}: rank {rank} called {ops} (c10d ops), expected three all-to-alls: the counts, the "
                "rows out (dispatch), the results back (combine); an all-gather or all-reduce moves every "
                "token to every rank"
            )
        if world > 1:
            sent = comm[1][2]
            if sent != tokens[rank] * k * D or comm[2][1] != tokens[rank] * k * D:
                raise CheckFailed(
                    f"{what}: rank {rank} sent {sent // D} rows in its dispatch, expected T·k = "
                    f"{tokens[rank] * k}: one row per (token, choice), drop-free"
                )


LESSON = Lesson(
    number="12",
    title="mixture of experts",
    module="ex12_experts",
    checks=(
        ("router_with_aux_loss", check_router),
        ("expert_parallel_forward", check_ep),
    ),
    rules=(RULES,),
)
