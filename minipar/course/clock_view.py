"""Reading and drawing the cluster clock's timelines (lessons 02, 09): sums of spans, the communication
no compute covered, one lane per rank.

A timeline is ``ClusterClock.timeline``: Spans ``(kind, label, t0, t1)``, kind ``"compute"`` or
``"comm"``, times in virtual seconds from the clock's start (:mod:`minipar.clock`).
"""

from __future__ import annotations

PHASE_COLORS = {"forward": "tab:blue", "backward": "tab:orange", "optimizer": "tab:green"}


def span_seconds(timeline, kind: str, label: str | None = None) -> float:
    """Seconds of the spans of ``kind`` (and ``label``, if given) in ``timeline``, summed."""
    return sum(t1 - t0 for k, lab, t0, t1 in timeline if k == kind and (label is None or lab == label))


def exposed_seconds(timeline, hidden_by: tuple[str, ...] | None = None) -> float:
    """Seconds of communication not covered by this rank's compute: the union of the ``comm`` spans
    minus the ``compute`` spans (waiting for a late peer before a collective starts is in neither).
    ``hidden_by``: only compute with one of these labels counts as covering (e.g. the next forward,
    not the bookkeeping that posts the collectives); None: every compute span."""
    comm = sorted((t0, t1) for kind, _, t0, t1 in timeline if kind == "comm")
    work = [(t0, t1) for kind, lab, t0, t1 in timeline if kind == "compute" and (hidden_by is None or lab in hidden_by)]
    total, end = 0.0, float("-inf")
    for t0, t1 in comm:  # walk the union of the comm intervals, subtracting compute inside each piece
        t0 = max(t0, end)
        if t1 > t0:
            total += (t1 - t0) - sum(max(0.0, min(t1, c1) - max(t0, c0)) for c0, c1 in work)
            end = t1
    return total


def draw_lane(ax, timeline, y: float, colors: dict | None = None, height: float = 0.32) -> None:
    """One rank's timeline as a lane at ``y``, in milliseconds: compute above (coloured by label from
    ``colors``, blue otherwise), messages and collectives below (grey), so what overlaps shows."""
    for kind, label, t0, t1 in timeline:
        up = kind == "compute"
        color = (colors or {}).get(label, "tab:blue") if up else "0.6"
        ax.barh(y + (0.5 if up else -0.5) * (height + 0.03), 1e3 * (t1 - t0), left=1e3 * t0, height=height,
                color=color, edgecolor="white", lw=0.3)  # fmt: skip


def draw_lanes(ax, runs: list[dict], title: str, names=None, colors: dict | None = None) -> None:
    """Every rank's timeline as a lane (rank 0 on top). ``runs``: ``launch``'s per-rank results, each
    with a ``timeline``; ``names``: the lanes' labels (default ``rank r``)."""
    n = len(runs)
    for r, run in enumerate(runs):
        draw_lane(ax, run["timeline"], n - 1 - r, colors)
    ax.set_yticks(range(n), list(reversed(names or [f"rank {r}" for r in range(n)])), fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("ms, cluster clock")
