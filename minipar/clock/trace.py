"""The cluster clock's timeline as a Chrome trace: open it in Perfetto (ui.perfetto.dev) or chrome://tracing.

``torch.profiler``'s ``prof.export_chrome_trace(path)`` writes the same JSON format (the Trace Event
Format: ``{"traceEvents": [{"name", "ph": "X", "ts", "dur", "pid", "tid"}, ...]}``, times in µs), so
a learner can open a real profiler trace of a step and the clock's modelled one side by side.
"""

from __future__ import annotations

import json
from pathlib import Path

#: Lanes (Chrome-trace thread ids) of a clock timeline: compute on one, communication on the other,
#: as a GPU trace shows the compute stream and NCCL's stream.
TIDS = {"compute": 0, "comm": 1}


def chrome_trace(timeline, path=None, rank: int = 0) -> dict:
    """The spans of a :class:`~minipar.clock.ClusterClock` ``timeline`` as a Chrome-trace dict.

    Args:
        timeline: ``clk.timeline`` (or tuples ``(kind, label, t0, t1)``), virtual seconds.
        path: if given, the JSON is also written there (parent folders created).
        rank: the process id (``pid``) of every event, so several ranks' files can be merged.

    Returns ``{"traceEvents": [...]}``: one complete event (``ph: "X"``) per span, ``name`` its label,
    ``ts``/``dur`` in microseconds, ``tid`` 0 for compute and 1 for communication (named by
    metadata events).
    """
    events = [
        {"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": kind}}
        for kind, tid in TIDS.items()
    ]
    for kind, label, t0, t1 in timeline:
        events.append(
            {
                "name": label,
                "cat": kind,
                "ph": "X",
                "ts": t0 * 1e6,
                "dur": (t1 - t0) * 1e6,
                "pid": rank,
                "tid": TIDS.get(kind, len(TIDS)),
            }
        )
    trace = {"traceEvents": events, "displayTimeUnit": "ms"}
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(trace), encoding="utf-8")
    return trace
