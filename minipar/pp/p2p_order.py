"""The point-to-point messages a pipeline schedule implies, in the order each rank posts them.

NCCL matches the messages between two ranks strictly in posting order (it has no tags), so an
executor that follows a schedule is correct only if, for every ordered rank pair (a, b), a posts
its sends to b in the same order as b posts its receives from a. :func:`p2p_order` lists both
sequences from the schedule alone; :func:`check_p2p_order` raises when they differ. At run time
:mod:`minipar.comm.p2p`'s strict mode (``MINIPAR_P2P_ORDER=strict``) checks the same on the real
messages. (MegaScale, Jiang et al. 2024, arXiv:2402.15627 §3.2, decouples sends and receives the
same way; see :mod:`minipar.pp.executor`.)
"""

from __future__ import annotations

from minipar.errors import ConfigError
from minipar.pp.schedules import Action, num_stages


def p2p_order(schedule: list[list[Action]]) -> dict[tuple[int, int], tuple[list[str], list[str]]]:
    """Per ordered rank pair (a, b): (labels of a's sends to b, labels of b's receives from a), in
    the order an executor that follows the schedule posts them (each label is the action the
    message feeds, ``"1F3"``). NCCL matches a pair's messages in posting order, so a schedule is
    NCCL-safe when the two lists are equal for every pair (see :func:`check_p2p_order`).

    A rank posts a send after each action whose output goes to another rank (forward of stage s
    -> ``(s+1)F``, backward of stage s > 0 -> ``(s−1)B``; a split backward's I -> ``(s−1)I``, its W
    sends nothing), and a receive for each action whose input comes from another rank, in its own
    action order (receives posted early keep that order).
    """
    p, S = len(schedule), num_stages(schedule)
    pairs: dict[tuple[int, int], tuple[list[str], list[str]]] = {}
    for r, acts in enumerate(schedule):
        for a in acts:
            if a.kind == "F" and a.stage > 0 and (a.stage - 1) % p != r:  # input from stage s-1
                pairs.setdefault(((a.stage - 1) % p, r), ([], []))[1].append(str(a))
            if a.kind in "BI" and a.stage < S - 1 and (a.stage + 1) % p != r:  # grad from stage s+1
                pairs.setdefault(((a.stage + 1) % p, r), ([], []))[1].append(str(a))
            if a.kind == "W":  # a weight gradient stays on its rank
                continue
            nxt = Action(a.stage + 1, "F", a.mb) if a.kind == "F" else Action(a.stage - 1, a.kind, a.mb)
            if 0 <= nxt.stage < S and nxt.stage % p != r:
                pairs.setdefault((r, nxt.stage % p), ([], []))[0].append(str(nxt))
    return pairs


def check_p2p_order(schedule: list[list[Action]]) -> None:
    """Raise :class:`ConfigError` naming the pair and both sequences if, for some ordered rank
    pair, the sends and the receives of :func:`p2p_order` come in different orders (a schedule
    that NCCL would run wrongly or not at all; ``minipar.comm.p2p``'s strict mode catches the same at
    run time)."""
    for (a, b), (sends, recvs) in sorted(p2p_order(schedule).items()):
        if sends != recvs:
            raise ConfigError(
                f"rank {a} posts its sends to rank {b} in the order {sends} but rank {b} posts its "
                f"receives from rank {a} in the order {recvs}: NCCL matches them in posting order. "
                "Reorder one side so both follow the same order"
            )
