"""The graph autograd builds, walked from a loss and drawn (lesson 00).

nodes, edges = autograd_graph(loss, {id(W): "W"})   # what backward() will run
print(graph_text(nodes, edges))                     # loss first, each node's inputs below it
draw_graph(nodes, edges, ax)                        # left (loss) to right (leaves), matplotlib
"""

from __future__ import annotations

import torch


def autograd_graph(root: torch.Tensor, names: dict[int, str] | None = None):
    """Walk ``root.grad_fn`` and its ``next_functions``: the graph ``backward()`` will run.

    Returns ``(nodes, edges)``: ``nodes`` maps a node id to ``(label, depth)`` (depth = steps from
    the loss); ``edges`` is a list of ``(from_id, to_id)``, from an op to the op (or leaf) whose
    gradient it produces. Leaves (``AccumulateGrad``) are labelled with ``names[id(tensor)]``.
    """
    names = names or {}
    nodes: dict[int, tuple[str, int]] = {}
    edges: list[tuple[int, int]] = []
    alive = []  # hold every node object, so that no id() is reused while we walk
    todo = [(root.grad_fn, 0)]
    while todo:
        fn, depth = todo.pop(0)
        alive.append(fn)
        if id(fn) in nodes:
            continue
        label = type(fn).__name__
        if hasattr(fn, "variable"):  # a leaf: the gradient is accumulated into tensor.grad
            label = f"{names.get(id(fn.variable), 'leaf')}.grad"
        nodes[id(fn)] = (label, depth)
        for nxt, _ in fn.next_functions:
            if nxt is not None:
                edges.append((id(fn), id(nxt)))
                todo.append((nxt, depth + 1))
    return nodes, edges


def graph_text(nodes, edges) -> str:
    """The graph as an indented tree, loss first: each line is a node, its inputs below it."""
    children: dict[int, list[int]] = {}
    for a, b in edges:
        children.setdefault(a, []).append(b)
    lines: list[str] = []

    def visit(nid, indent):
        lines.append("    " * indent + nodes[nid][0])
        for c in children.get(nid, []):
            visit(c, indent + 1)

    visit(next(iter(nodes)), 0)
    return "\n".join(lines)


def draw_graph(nodes, edges, ax, title: str = "") -> None:
    """Draw ``autograd_graph``'s output left (loss) to right (leaves) with matplotlib."""
    by_depth: dict[int, list[int]] = {}
    for nid, (_, d) in nodes.items():
        by_depth.setdefault(d, []).append(nid)
    pos = {}
    for d, ids in by_depth.items():
        for i, nid in enumerate(ids):
            pos[nid] = (1.6 * d, (len(ids) - 1) / 2 - i)
    boxes = {}
    for nid, (label, _) in nodes.items():
        leaf = label.endswith(".grad")
        boxes[nid] = ax.text(
            *pos[nid],
            label,
            ha="center",
            va="center",
            fontsize=8,
            bbox=dict(boxstyle="round", fc="#fde9c8" if leaf else "#d7e6f5", ec="0.5"),
        )
    for a, b in edges:  # from the right edge of a's box to the left edge of b's box
        ax.annotate(
            "",
            xy=(0, 0.5),
            xycoords=boxes[b],
            xytext=(1, 0.5),
            textcoords=boxes[a],
            arrowprops=dict(arrowstyle="->", color="0.4", lw=1, shrinkA=4, shrinkB=4),
        )
    ax.set_xlim(-0.9, 1.6 * max(by_depth) + 0.9)
    ax.set_ylim(-1.6, 1.6)
    ax.axis("off")
    ax.set_title(title, fontsize=10)
