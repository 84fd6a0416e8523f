"""Proofs that read the same on every CPU: a verdict against a stated bound, never a raw rounding value.

A notebook or test that shows "parallel == one device" must not print ``max|Δ| 3.0e-06``: another
CPU (AVX2 vs AVX-512 kernels, MKL on AMD or Intel) sums in another order and prints ``3.8e-06``,
and strict nbval fails there. It prints instead what holds everywhere::

    check_close("DDP vs one device, params after 5 steps", got, want, bound=1e-12, why="float64")
    # DDP vs one device, params after 5 steps: max|Δ| < 1e-12 ✓ (float64)

and raises :class:`ProofError` (an ``AssertionError``) with the measured value and advice when
the bound does not hold, so a stored ``False`` cannot happen. How to choose the bound:

- **float64 runs** (the default for equivalence proofs): reordering a sum of n terms moves the
  result by at most ~n·ε·Σ|terms| with ε = 2⁻⁵³ ≈ 1.1e-16; for the course's models and a few
  steps that is < 1e-12 on parameters of size ~0.1, while a real bug (a missing micro-batch, a
  wrong 1/m, a stale activation) moves a parameter by ~lr ≥ 1e-4 in one AdamW step.
- **float32 runs**, where a lesson teaches that reordered sums differ: ε = 2⁻²⁴ ≈ 6e-8 per
  operation; AdamW divides by sqrt(v) so a gradient difference δ can move a parameter by up to
  lr per step in the worst case (δ ≫ sqrt(v)), typically lr·δ/sqrt(v). State the bound as that.
"""

from __future__ import annotations

from typing import Mapping

import torch


class ProofError(AssertionError):
    """A proof's bound did not hold: the message names the quantity, the value, the bound and what to check."""


def max_abs_diff(got, want) -> float:
    """Largest |got − want| over tensors, sequences of tensors or dicts of tensors (same keys/shapes).

    Raises:
        ProofError: keys or shapes differ (a wrong layout is a failed proof, not a crash).
    """
    if isinstance(got, Mapping):
        if set(got) != set(want):
            raise ProofError(
                f"different keys: only in got {sorted(set(got) - set(want))}, "
                f"only in want {sorted(set(want) - set(got))}"
            )
        return max((max_abs_diff(got[k], want[k]) for k in got), default=0.0)
    if isinstance(got, (list, tuple)):
        if len(got) != len(want):
            raise ProofError(f"different lengths: {len(got)} vs {len(want)}")
        return max((max_abs_diff(g, w) for g, w in zip(got, want)), default=0.0)
    g, w = torch.as_tensor(got), torch.as_tensor(want)
    if g.shape != w.shape:
        raise ProofError(f"different shapes: {tuple(g.shape)} vs {tuple(w.shape)}")
    if g.numel() == 0:
        return 0.0
    return (g.double() - w.double()).abs().max().item()


def verdict(what: str, diff: float, bound: float, why: str = "", hint: str = "") -> str:
    """``"{what}: max|Δ| < {bound} ✓ ({why})"``, or raise :class:`ProofError` if ``diff >= bound``.

    ``diff`` is printed only in the error (it depends on the CPU); the verdict line does not.
    ``hint`` is added to the error: what a learner should check when the proof fails.
    """
    tail = f" ({why})" if why else ""
    if not diff < bound:  # also catches NaN
        raise ProofError(
            f"{what}: max|Δ| = {diff:.3g} is not below the bound {bound:g}{tail}" + (f". {hint}" if hint else "")
        )
    return f"{what}: max|Δ| < {bound:g} ✓{tail}"


def check_close(what: str, got, want, bound: float, why: str = "", hint: str = "", show: bool = True) -> str:
    """:func:`max_abs_diff` then :func:`verdict`; prints the verdict line unless ``show=False``.

    Args:
        what: the claim, e.g. ``"ZeRO-2 vs one device, parameters after 3 steps"``.
        got, want: tensors / lists / dicts of tensors of equal shapes.
        bound: the derived tolerance (say how in ``why``).
    Returns:
        the verdict line.
    Raises:
        ProofError: the difference is not below ``bound``, or the shapes/keys differ.
    """
    line = verdict(what, max_abs_diff(got, want), bound, why, hint)
    if show:
        print(line)
    return line


def same_run(a: tuple[list[float], Mapping], b: tuple[list[float], Mapping]) -> bool:
    """Two runs, each ``(losses, state dict)``, bit for bit: the same losses and every tensor ``torch.equal``
    (e.g. a ZeRO run with and without prefetch: reordering communication must not change one bit)."""
    (losses_a, state_a), (losses_b, state_b) = a, b
    return (
        losses_a == losses_b
        and state_a.keys() == state_b.keys()
        and all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    )


def check_equal(what: str, got, want, show: bool = True) -> str:
    """Exact equality (bytes, counts, schedules, integer tensors): ``"{what}: equal ✓"`` or ProofError."""
    same = torch.equal(torch.as_tensor(got), torch.as_tensor(want)) if isinstance(got, torch.Tensor) else got == want
    if not same:
        raise ProofError(f"{what}: {got!r} != {want!r}")
    line = f"{what}: equal ✓"
    if show:
        print(line)
    return line


def check_bound(
    what: str,
    value: float,
    lo: float | None = None,
    hi: float | None = None,
    bound_text: str = "",
    show: bool = True,
    fmt: str = "{:.1%}",
    detail: str = "",
) -> str:
    """A measured value (a bubble, a speed-up: it differs between machines) against bounds that do not.

    Prints ``"{what}: {bound_text} ✓ ⏱ {value}"`` — the claim before the marker ⏱, the measured value
    after it (the notebooks' sanitizer masks from ⏱ to the end of the line) — or raises
    :class:`ProofError` with the value and the bounds when ``lo <= value <= hi`` fails.

    Args:
        lo, hi: inclusive bounds (None: open). ``bound_text``: the claim in words, e.g.
            ``"at least the formula's 27.3 % - 2 points"`` — only numbers every machine agrees on
            (a formula's, not another measurement's: put that in ``detail``).
        fmt: how ``value`` and the bounds are printed. ``detail``: more measured text after the value.
    """
    ok = (lo is None or value >= lo) and (hi is None or value <= hi)
    if not ok:  # also NaN
        rng = f"[{'-inf' if lo is None else fmt.format(lo)}, {'inf' if hi is None else fmt.format(hi)}]"
        raise ProofError(f"{what}: {fmt.format(value)} is outside {rng} ({bound_text})")
    line = f"{what}: {bound_text} ✓ ⏱ {fmt.format(value)}{detail}"
    if show:
        print(line)
    return line


class ProofTable:
    """A lesson's proofs as one compact table (shape v2's "Prove it"), not a screen of ✓ lines.

    Each ``close``/``equal``/``bound`` call checks at once — a failed proof raises :class:`ProofError`
    then, naming the quantity and the value — and adds a row (what was compared, the bound, the result);
    :meth:`show` prints the table and one verdict line. Measured values (they differ between machines) go
    after the ⏱ marker at the end of their row, which the notebooks' sanitizer masks::

        proofs = ProofTable("GPipe equals one device (float64, 5 AdamW steps)")
        proofs.close("p=2: losses", got, want, bound=1e-9)
        proofs.show()
    """

    def __init__(self, title: str):
        self.title, self.rows = title, []

    def close(self, what: str, got, want, bound: float, why: str = "", hint: str = "") -> None:
        check_close(what, got, want, bound, why, hint, show=False)
        self.rows.append((what, f"max|Δ| < {bound:g}", "holds"))

    def equal(self, what: str, got, want) -> None:
        check_equal(what, got, want, show=False)
        self.rows.append((what, "equal", "holds"))

    def bound(
        self, what: str, value: float, lo=None, hi=None, bound_text: str = "", fmt: str = "{:.1%}", detail: str = ""
    ) -> None:
        check_bound(what, value, lo, hi, bound_text, show=False, fmt=fmt)
        self.rows.append((what, bound_text, f"holds ⏱ {fmt.format(value)}{detail}"))

    def show(self, note: str = "") -> None:
        """Print the table, then ``✓ all N proofs hold`` (and ``note``, e.g. how the bounds were derived)."""
        w0 = max([len("what was compared")] + [len(r[0]) for r in self.rows])
        w1 = max([len("bound")] + [len(r[1]) for r in self.rows])
        print(self.title)
        print(f"  {'what was compared':<{w0}}  {'bound':<{w1}}  result")
        for what, bound, result in self.rows:
            print(f"  {what:<{w0}}  {bound:<{w1}}  {result}")
        print(f"✓ all {len(self.rows)} proofs hold" + (f" ({note})" if note else ""))
