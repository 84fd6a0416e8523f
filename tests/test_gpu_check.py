"""#14.3: ``make gpu-check`` — what can be checked without a GPU: the no-CUDA path, the table, the plumbing."""

import os
import subprocess
import sys

import pytest

from minipar import ConfigError, launch
from minipar.course import gpu_check as g
from tests import test_3d

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rank():
    import minipar.runtime.dist as md

    return md.backend()


@pytest.mark.skipif(g.cuda_devices()[0] > 0, reason="this machine has a GPU")
def test_without_cuda_it_says_so_and_exits_3():
    p = subprocess.run(
        [sys.executable, "-m", "minipar.course.gpu_check", "--out", ""],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert p.returncode == g.EXIT_NO_CUDA == 3
    assert p.stdout.strip() == "no CUDA device: gpu-check needs a GPU" and p.stderr == ""


def test_table_from_a_fake_result_list():
    checks = [
        g.Check("unit, 2 ranks: test_a[2]", True, "nccl"),
        g.Check("main job, 1 GPU, bf16", True, "finite losses", step_ms=12.345, mfu=0.01234),
        g.Check("3D pp2·dp2·tp2 = 1 GPU (fp32, torchrun)", False, "max|Δloss| 3.0e-03 (bound 1e-05)"),
        g.Check("main job under torchrun, every layout", None, "needs >= 2 GPUs"),
    ]
    peak = g.peak_bf16("NVIDIA H100 80GB HBM3")
    assert g.format_table("NVIDIA H100 80GB HBM3", 8, peak, checks).splitlines() == [
        "GPU: 8 × NVIDIA H100 80GB HBM3; bf16 dense peak 989 TFLOP/s per GPU",
        "",
        "| check | result | step time | MFU | detail |",
        "|---|---|---|---|---|",
        "| unit, 2 ranks: test_a[2] | pass |  |  | nccl |",
        "| main job, 1 GPU, bf16 | pass | 12.3 ms | 1.23 % | finite losses |",
        r"| 3D pp2·dp2·tp2 = 1 GPU (fp32, torchrun) | FAIL |  |  | max\|Δloss\| 3.0e-03 (bound 1e-05) |",
        "| main job under torchrun, every layout | skipped |  |  | needs >= 2 GPUs |",
        "",
        "2 passed, 1 failed, 1 skipped",
    ]
    assert "unknown (MFU not computed)" in g.format_table("Tesla T4", 1, None, [])


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H100 NVL", 835e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA A100-PCIE-40GB", 312e12),
        ("Tesla T4", None),
    ],
)
def test_peak_table(name, peak):
    assert g.peak_bf16(name) == peak


def test_step_time_and_mfu_from_records():
    recs = [{"step": 0, "tokens_per_s": 1.0}, {"step": 5, "tokens_per_s": 2048.0}, {"step": 10, "tokens_per_s": 2048.0}]
    ms, mfu = g.timing(recs, g.TIMED, 1, 1e12)
    assert ms == pytest.approx(1e3 * 16 * 128 / 2048)  # the warm-up record (step 0) is left out
    assert 0 < mfu < 1
    assert g.timing(recs, g.TIMED, 1, None)[1] is None


def test_same_config_and_bound_as_the_cpu_3d_test():
    assert g.TOL == test_3d.TOL
    assert g.TINY == {k: v for k, v in test_3d.TINY.items() if k != "out"}


def test_layouts():
    assert (2, 2, 2) in g.layouts(8, g.TIMED) and (1, 8, 1) in g.layouts(8, g.TIMED)
    assert set(g.layouts(8, g.TINY)) <= set(g.layouts(8, g.TIMED))
    assert g.layouts(1, g.TIMED) == [(1, 1, 1)]


def test_selected_unit_tests_exist():
    tests = g.GPU_TESTS + g.GPU_TESTS_1RANK
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *tests],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert p.returncode == 0, p.stdout[-2000:]
    assert f"{len(tests)} tests collected" in p.stdout


def test_minipar_backend_env_reaches_launch(monkeypatch):
    monkeypatch.setenv("MINIPAR_BACKEND", "auto")  # on a CPU machine: auto = gloo
    assert launch(_rank, world_size=2) == ["gloo", "gloo"]
    monkeypatch.setenv("MINIPAR_BACKEND", "mpi")
    with pytest.raises(ConfigError, match="MINIPAR_BACKEND"):
        launch(_rank, world_size=2)


def test_run_job_one_process_and_torchrun_pipeline_agree(tmp_path):
    """The equivalence plumbing on CPU (gloo): 1 process vs torchrun pp2, TINY, |Δloss| < TOL."""
    one, err = g.run_job(g.TINY, str(tmp_path / "one"))
    assert err == "" and sorted(g.losses(one)) == [0, 1, 2, 3]
    two, err = g.run_job(g.TINY, str(tmp_path / "pp2"), nproc=2, pp=2)
    assert err == ""
    assert max(abs(g.losses(one)[k] - g.losses(two)[k]) for k in range(4)) < g.TOL


def test_unit_test_results_are_read_per_test(monkeypatch, tmp_path):
    """The junit plumbing, on two fast CPU tests: one row each, passed, the backend named."""
    monkeypatch.setattr(
        g,
        "GPU_TESTS",
        ["tests/test_dist.py::test_single_process_world", "tests/test_dist.py::test_auto_backend_on_cpu_is_gloo"],
    )
    monkeypatch.setattr(g, "GPU_TESTS_1RANK", ["tests/test_dist.py::test_bad_env"])
    rows = g.check_unit_tests(1, str(tmp_path))
    assert [(c.name, c.ok) for c in rows] == [
        ("unit, 2 ranks: test_single_process_world", True),
        ("unit, 2 ranks: test_auto_backend_on_cpu_is_gloo", True),
        ("unit, 1 rank: test_bad_env", True),
    ]
    assert rows[2].detail == "nccl"  # a 1-rank case runs on NCCL wherever there is a GPU
    assert all(c.detail.startswith("gloo") for c in rows[:2])


def test_bench_rows_on_gloo_are_shown_not_graded():
    """A bench row the check-list ran on gloo (its name says so, or more ranks than GPUs) is skipped with its number; on
    NCCL, graded. b02 names the backend its ranks ran."""
    row = {"lesson": "02", "measured": 1.05, "unit": "×", "target": "<= 1.0", "note": "median of 3 launches"}
    row["ok"] = False
    name = "minipar DDP vs torch DDP, 4 seq/rank, 4 {} ranks"  # the name as b02 gives it
    gloo, nccl = ({**row, "name": name.format(b)} for b in ("gloo", "nccl"))
    for skipped in (g.bench_check(gloo, n_gpu=1), g.bench_check(gloo, n_gpu=8), g.bench_check(nccl, n_gpu=1)):
        assert skipped.ok is None and "1.05 × <= 1.0" in skipped.detail and "not graded" in skipped.detail
    graded = g.bench_check(nccl, n_gpu=8)
    assert graded.ok is False and graded.detail.endswith("; NCCL)")


def test_a_bad_skip_or_out_is_refused_before_the_gpu_is_looked_for(tmp_path, capsys, monkeypatch):
    """GPU time is lent by the minute: a typo in --skip or an --out that cannot be written ends the run at once,
    before CUDA is touched, in one line (it used to be found after the whole check-list, or never)."""
    from minipar.course import gpu_check

    monkeypatch.setattr(gpu_check, "cuda_devices", lambda: (_ for _ in ()).throw(AssertionError("CUDA looked up")))
    file = tmp_path / "f"
    file.write_text("x")
    for argv, words in [
        (["--skip", "test"], "--skip test: use parts of tests,job,bench"),
        (["--out", str(file)], "is a file, not a folder"),
    ]:
        assert gpu_check.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err
