"""Concept drawings for the lessons: boxes with arrows, and timelines, described as data.

A lesson's concept drawing (shape v2, "the idea") is a schematic, not a measurement: which rank holds
what, where a message goes, what runs while what waits. Writing each one with raw matplotlib calls
would put fifty lines of coordinates in every lesson's workers module; here a drawing is a list of
boxes and arrows, or a list of lanes of spans, and this module draws it the same way in every lesson.

    from minipar.course.schematic import Box, Arrow, draw_boxes, Span, draw_timeline

    draw_boxes(ax, [Box("x", 0, 0, "X (B, T, d)"), Box("w", 2, 0, "W (d, 4d)")],
               [Arrow("x", "w", "matmul")], title="one layer")
    draw_timeline(ax, {"rank 0": [Span(0, 3, "F", "forward"), Span(3, 6, "B", "backward")]},
                  title="one step", xlabel="time (units of one forward)")

Coordinates are in box units: a box is `w` wide and `h` tall, centred on (x, y); y grows upwards.
Nothing here runs a rank or reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Colours by meaning, the same in every lesson (matplotlib's tab10 names).
KIND_COLORS = {
    "forward": "tab:blue",
    "backward": "tab:orange",
    "weight": "tab:olive",
    "comm": "tab:red",
    "optimizer": "tab:green",
    "idle": "lightgrey",
    "data": "tab:purple",
    "param": "tab:cyan",
    "grad": "tab:orange",
    "state": "tab:green",
    "activation": "tab:pink",
    "note": "white",
}


@dataclass(frozen=True)
class Box:
    """A labelled box centred on (x, y); `kind` picks its colour from KIND_COLORS (or give `color`)."""

    name: str
    x: float
    y: float
    label: str
    kind: str = "note"
    w: float = 1.6
    h: float = 0.7
    color: str | None = None


@dataclass(frozen=True)
class Arrow:
    """An arrow from box `src` to box `dst` with an optional label at its middle; `style` '-|>' or '<|-|>'."""

    src: str
    dst: str
    label: str = ""
    style: str = "-|>"
    color: str = "black"
    dashed: bool = False


@dataclass(frozen=True)
class Span:
    """Work on one lane from `start` to `end` (any unit: the x-axis label names it)."""

    start: float
    end: float
    label: str = ""
    kind: str = "forward"
    color: str | None = None


def _edge(box: Box, toward: tuple[float, float]) -> tuple[float, float]:
    """The point where the segment from the box's centre toward `toward` leaves the box."""
    dx, dy = toward[0] - box.x, toward[1] - box.y
    if dx == 0 and dy == 0:
        return box.x, box.y
    sx = (box.w / 2) / abs(dx) if dx else float("inf")
    sy = (box.h / 2) / abs(dy) if dy else float("inf")
    s = min(sx, sy)
    return box.x + dx * s, box.y + dy * s


def draw_boxes(ax, boxes: list[Box], arrows: list[Arrow] = (), title: str = "", legend: dict | None = None) -> None:
    """Draw `boxes` and the `arrows` between them on `ax`, axes hidden (a schematic has no units).

    `legend` maps a label to a kind (or a colour) and adds a legend of coloured patches.
    Raises KeyError naming the arrow when an arrow refers to a box that is not in `boxes`.
    """
    from matplotlib.patches import FancyBboxPatch, Patch

    by_name = {b.name: b for b in boxes}
    for b in boxes:
        color = b.color or KIND_COLORS.get(b.kind, b.kind)
        ax.add_patch(
            FancyBboxPatch(
                (b.x - b.w / 2, b.y - b.h / 2),
                b.w,
                b.h,
                boxstyle="round,pad=0.02,rounding_size=0.08",
                facecolor=color,
                alpha=0.35 if color != "white" else 1.0,
                edgecolor="black",
                linewidth=1.0,
            )
        )
        ax.text(b.x, b.y, b.label, ha="center", va="center", fontsize=9)
    for a in arrows:
        if a.src not in by_name or a.dst not in by_name:
            raise KeyError(f"arrow {a.src!r} -> {a.dst!r}: no box named {a.src if a.src not in by_name else a.dst!r}")
        s, d = by_name[a.src], by_name[a.dst]
        p0, p1 = _edge(s, (d.x, d.y)), _edge(d, (s.x, s.y))
        ax.annotate(
            "",
            xy=p1,
            xytext=p0,
            arrowprops=dict(arrowstyle=a.style, color=a.color, linestyle="--" if a.dashed else "-", lw=1.3),
        )
        if a.label:
            ax.text(
                (p0[0] + p1[0]) / 2,
                (p0[1] + p1[1]) / 2,
                a.label,
                ha="center",
                va="bottom",
                fontsize=8,
                color=a.color,
                bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1),
            )
    xs = [b.x - b.w / 2 for b in boxes] + [b.x + b.w / 2 for b in boxes]
    ys = [b.y - b.h / 2 for b in boxes] + [b.y + b.h / 2 for b in boxes]
    ax.set_xlim(min(xs) - 0.3, max(xs) + 0.3)
    ax.set_ylim(min(ys) - 0.3, max(ys) + 0.3)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title)
    if legend:
        ax.legend(
            handles=[Patch(facecolor=KIND_COLORS.get(k, k), alpha=0.5, label=lab) for lab, k in legend.items()],
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            ncol=min(4, len(legend)),
            fontsize=8,
            frameon=False,
        )


def draw_timeline(ax, lanes: dict[str, list[Span]], title: str = "", xlabel: str = "time", legend: bool = True) -> None:
    """Draw one horizontal lane per key of `lanes` (top to bottom in order), each span a labelled bar.

    The legend lists the kinds used (forward, backward, comm, idle, ...) with their colours.
    """
    from matplotlib.patches import Patch

    names = list(lanes)
    used = {}
    for row, name in enumerate(names):
        y = len(names) - 1 - row
        for s in lanes[name]:
            color = s.color or KIND_COLORS.get(s.kind, s.kind)
            used.setdefault(s.kind, color)
            ax.barh(
                y, s.end - s.start, left=s.start, height=0.6, color=color, alpha=0.8, edgecolor="black", linewidth=0.6
            )
            if s.label:
                ax.text((s.start + s.end) / 2, y, s.label, ha="center", va="center", fontsize=8)
    ax.set_yticks(range(len(names)), list(reversed(names)))
    ax.set_xlabel(xlabel)
    if title:
        ax.set_title(title)
    ax.spines[["top", "right"]].set_visible(False)
    if legend and used:
        ax.legend(
            handles=[Patch(facecolor=c, alpha=0.8, label=k) for k, c in used.items()],
            loc="upper center",
            bbox_to_anchor=(0.5, -0.18),
            ncol=min(5, len(used)),
            fontsize=8,
            frameon=False,
        )
