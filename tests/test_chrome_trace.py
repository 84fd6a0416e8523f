"""minipar.clock.chrome_trace: a cluster-clock timeline as Chrome-trace JSON (Perfetto, chrome://tracing)."""

import json

import pytest

from minipar.clock import Span, chrome_trace


def test_the_json_loads_and_durations_equal_the_spans(tmp_path):
    timeline = [
        Span("compute", "forward", 0.0, 0.002),
        Span("compute", "backward", 0.002, 0.006),
        Span("comm", "all_reduce", 0.003, 0.0075),
        Span("compute", "optimizer", 0.0075, 0.008),
    ]
    path = tmp_path / "sub" / "rank1.json"
    returned = chrome_trace(timeline, path, rank=1)
    trace = json.loads(path.read_text(encoding="utf-8"))
    assert trace == json.loads(json.dumps(returned))
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(timeline)
    for e, s in zip(spans, timeline):
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e)
        assert e["name"] == s.label and e["pid"] == 1
        assert e["ts"] == pytest.approx(s.t0 * 1e6) and e["dur"] == pytest.approx((s.t1 - s.t0) * 1e6)
    assert {e["tid"] for e in spans if e["cat"] == "comm"} != {e["tid"] for e in spans if e["cat"] == "compute"}


def test_plain_tuples_and_no_file():
    trace = chrome_trace([("comm", "bucket 0", 1.0, 1.5)])
    (e,) = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert e["ts"] == pytest.approx(1e6) and e["dur"] == pytest.approx(5e5) and e["pid"] == 0
