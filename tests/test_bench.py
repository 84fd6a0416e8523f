"""minipar.course.bench.median_time: the one timing loop of the lessons and benchmarks, alone and on ranks."""

import time

from minipar import launch
from minipar.course.bench import median_time


def test_median_of_the_timed_runs_only():
    calls = []
    t = median_time(lambda: calls.append(time.sleep(0.001)), repeats=3, warmup=2)
    assert len(calls) == 5 and 0.001 <= t < 1.0


def slow_rank_one():
    """Rank 1's runs take 50 ms, rank 0's none: with slowest=True both report rank 1's median."""
    from minipar.runtime import dist as md

    me = md.rank()
    return median_time(lambda: time.sleep(0.05 * me), repeats=3, barrier=True, slowest=True)


def test_barrier_and_slowest_rank_on_two_ranks():
    a, b = launch(slow_rank_one, world_size=2)
    assert a == b >= 0.05


def test_bad_out_or_only_is_one_line_before_anything_runs(tmp_path, capsys, monkeypatch):
    """A bench run takes minutes: a bad --out or an --only that names nothing is refused before any benchmark runs,
    and earlier results stay as they were."""
    from minipar.course import bench

    monkeypatch.setattr(bench, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("benchmarks ran")))
    file = tmp_path / "f"
    file.write_text("x")
    out = tmp_path / "old"
    out.mkdir()
    (out / "results.md").write_text("earlier results")
    for argv, words in [
        (["--out", str(file)], "is a file, not a folder"),
        (["--out", str(file / "x")], "which is a file, not a folder"),
        (["--out", str(out), "--only", "zz"], "--only 'zz' names no benchmark; use part of one of b00_"),
    ]:
        assert bench.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err
    assert (out / "results.md").read_text() == "earlier results"
