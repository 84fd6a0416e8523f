"""Replay one clocked step's durations under another policy: the same compute, the same links.

Two runs on the cluster clock differ in their measured compute (each rank's CPU time, which a busy
machine stretches unevenly), so comparing two policies by two runs compares two machines' loads as
well. A :class:`~minipar.clock.ClusterClock` records, per rank, when — in its own compute seconds —
it posted and waited on each collective (``clock.events``), and each collective's α–β duration
(``clock.collectives``). :func:`replay` recomputes every rank's step from those numbers alone, with
the clock's rules for collectives (:mod:`minipar.clock.clock`): one group is one stream, so the
k-th collective starts when the last rank has posted it and the (k-1)-th has ended, and lasts its
duration; a rank that waits stalls until the collective ends.

- Replaying the events as recorded gives each rank's own ``clock.now`` (the check that the replay
  and the clock follow the same rules: ``tests/test_cluster_clock.py``).
- :func:`post_after_backward` moves every post to the rank's first wait, which is DDP without
  overlap (every bucket's all-reduce launched once backward has ended). Replaying both from one
  run compares the policies on identical compute (lesson 02's overlap verdict).

Scope: the collectives of ONE group that every rank of the replay is in (DDP's data-parallel
group); point-to-point transfers are not recorded.
"""

from __future__ import annotations

from minipar.errors import ConfigError

Event = tuple[str, int, float]  # ("post" | "wait", collective index k, the rank's compute seconds then)


def replay(events: list[list[Event]], durations: list[float], compute: list[float]) -> list[float]:
    """Each rank's step in virtual seconds: its ``compute[r]`` plus the time it stalled in waits.

    Args:
        events: per rank, its ``clock.events`` (every rank posts collectives 0, 1, ... in the same order).
        durations: seconds of collective k (``end - start`` of ``clock.collectives[k]``; equal on every rank).
        compute: per rank, its total compute seconds (``clock.compute_s`` after the block).

    Raises:
        ConfigError: a rank waits on a collective before every rank has posted it, or never posts one.
    """
    n_ranks = len(events)
    end: list[float] = []
    stall = [0.0] * n_ranks
    pos = [0] * n_ranks

    def run_until(r: int, post_k: int | None) -> float | None:
        """Play rank r's events up to its post of collective ``post_k``; return that post's virtual time."""
        while pos[r] < len(events[r]):
            kind, k, c = events[r][pos[r]]
            pos[r] += 1
            if kind == "post" and k == post_k:
                return c + stall[r]
            if kind == "wait":
                if k >= len(end):
                    raise ConfigError(f"replay: rank {r} waits on collective {k} before every rank posted it")
                stall[r] = max(stall[r], end[k] - c)  # its virtual time becomes max(c + stall, end)
        if post_k is not None:
            raise ConfigError(f"replay: rank {r} never posts collective {post_k}")
        return None

    for k, d in enumerate(durations):
        posts = [run_until(r, k) for r in range(n_ranks)]
        end.append(max(max(posts), end[-1] if end else 0.0) + d)
    for r in range(n_ranks):
        run_until(r, None)
    return [compute[r] + stall[r] for r in range(n_ranks)]


def post_after_backward(events: list[Event]) -> list[Event]:
    """One rank's events with every post moved to its first wait (posts first, then the waits, in order):
    the same step without overlap."""
    waits = [e for e in events if e[0] == "wait"]
    first = waits[0][2] if waits else max((c for _, _, c in events), default=0.0)
    return [("post", k, first) for kind, k, _ in events if kind == "post"] + waits
