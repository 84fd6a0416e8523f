"""``python -m minipar.course.gpu_check`` (``make gpu-check``): the GPU check-list, run on a node with GPUs.

Everything else in the course runs on CPU ranks and gloo. This module runs, on a node with at
least one CUDA GPU, the checks that say the same code is right on NCCL (issue #14, item 3):

1. **Unit tests on NCCL.** The unit tests' 2-rank cases (:data:`GPU_TESTS`, pytest node ids)
   with ``MINIPAR_BACKEND=auto``: :func:`minipar.launch` then starts its ranks on NCCL, one GPU
   each, when the node has a GPU per rank (2 or more), else on gloo (the table says which); and
   1-rank cases (:data:`GPU_TESTS_1RANK`), on NCCL with one GPU, so a 1-GPU node checks placement.
2. **The main job on 1 GPU**, fp32 and bf16 autocast (``python -m minipar.train``), timed.
3. **Every layout N GPUs allow** (``torchrun --nproc-per-node N -m minipar.train --pp P --tp T``,
   dp = N/(P·T), for each (P, dp, T) the model accepts): the 3D job's losses equal one GPU's
   within :data:`TOL`, the |Δloss| bound of the CPU tests (``tests/test_3d.py``, same config
   :data:`TINY`), then the same layout timed in bf16.
4. **Benchmarks** (:data:`GPU_BENCH`): ``python -m minipar.course.bench --only bNN`` for the lessons whose rows
   compare minipar with PyTorch on the same ranks, ``MINIPAR_BACKEND=auto``; graded on NCCL only (:func:`bench_check`).

It prints one table (:func:`format_table`): each check, passed or not, the GPU, the measured
step time and the MFU against the GPU's datasheet bf16 dense peak (:data:`PEAK_BF16_DENSE`; fp32
rows are compared with the same peak, as MFU usually is).
MFU = model FLOPs per step (``GPT.flops_per_token`` · tokens; Kaplan et al. 2020,
arXiv:2001.08361) / (step time · GPUs · peak). The course's model is tiny, so expect MFU far
below the 40-55 % of large runs: the numbers say the job runs, not that it is fast.

Exit codes: 0 every check passed; 1 a check failed; 3 no CUDA device (nothing ran; the
message is ``no CUDA device: gpu-check needs a GPU``), so a script can tell "not run" from
"passed". (``make gpu-check`` then stops with make's "Error 3"; make itself exits 2.)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from minipar.errors import ConfigError
from minipar.job.outdir import check_folder, publish, write_atomically

EXIT_OK, EXIT_FAILED, EXIT_NO_CUDA = 0, 1, 3
PARTS = ("tests", "job", "bench")  # what --skip may leave out
NO_CUDA = "no CUDA device: gpu-check needs a GPU"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

# Datasheet dense bf16 tensor-core peaks, FLOP/s (no sparsity), matched by substring of
# torch.cuda.get_device_name(), most specific first. A100 (SXM4 and PCIe) 312 T; H100 SXM5 989 T,
# H100 NVL 835 T, H100 PCIe 756 T; H200 (SXM) 989 T (same tensor cores as H100 SXM, more HBM).
PEAK_BF16_DENSE: list[tuple[str, float]] = [
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("H200", 989e12),
    ("A100", 312e12),
]

# The unit tests' 2-rank cases run with MINIPAR_BACKEND=auto (each a pytest node id).
GPU_TESTS = [
    "tests/test_collectives.py::test_ring_and_naive_equal_torch_all_reduce[2]",
    "tests/test_data_parallel.py::test_n_ranks_equal_one_device[2]",
    "tests/test_data_parallel.py::test_bytes_per_step_and_overlap[2]",
    "tests/test_zero.py::test_stages_equal_single_device_and_measure_formulas[2]",
    "tests/test_tensor_parallel.py::test_tp_training_equals_one_device[2]",
    "tests/test_tensor_parallel.py::test_conjugate_operators_on_2_ranks",
    "tests/test_pipeline.py::test_pipeline_equals_single_device[2]",
    "tests/test_pipeline.py::test_same_numbers_as_torch_pipelining",
    "tests/test_compression.py::test_none_is_the_mean[2]",
    "tests/test_checkpoint.py::test_saved_on_two_ranks_resumed_on_one",
    "tests/test_train.py::test_two_data_parallel_ranks_equal_one_device",
]

# One-rank cases, NCCL on any node with a GPU (a 1-GPU node runs the 2-rank cases on gloo): the tensors of
# the job must live on minipar.runtime.dist.device(), where the 2-rank cases on gloo would not notice CPU ones.
GPU_TESTS_1RANK = [
    "tests/test_data_parallel.py::test_n_ranks_equal_one_device[1]",
    "tests/test_compression.py::test_none_is_the_mean[1]",
    "tests/test_zero.py::test_one_rank_equals_one_device",
]

# Benchmark modules whose rows make sense on GPUs and whose jobs put their tensors on
# minipar.runtime.dist.device(): b01 (ring vs NCCL all-reduce), b02 (minipar DDP vs PyTorch DDP step).
# b00 (process launch) and b05 (pipeline traces) measure the CPU; b03, b04 (init_device_mesh("cpu")),
# b07 (8 ranks) and b09 still build CPU tensors: add them once their jobs use the device.
GPU_BENCH = ["b01_collectives", "b02_data_parallel"]

# The 3D equivalence run: tests/test_3d.py's TINY config and |Δloss| bound (fp32).
TINY = dict(steps=4, batch_size=8, block_size=16, n_layer=2, n_head=2, d_model=32, eval_every=4, log_every=1,
            eval_batches=1, sample_chars=10, microbatches=2)  # fmt: skip
TOL = 1e-5
# The timed runs: the main job's default model (4 layers, d=128, T=128), global batch 16; the rest as TINY.
TIMED = dict(TINY, steps=30, batch_size=16, block_size=128, n_layer=4, n_head=4, d_model=128, eval_every=30,
             log_every=5)  # fmt: skip


@dataclass
class Check:
    """One row of the table. ``ok`` None = not applicable / skipped (``detail`` says why)."""

    name: str
    ok: bool | None
    detail: str = ""
    step_ms: float | None = None
    mfu: float | None = None


def peak_bf16(gpu_name: str) -> float | None:
    """The datasheet dense bf16 peak (FLOP/s) of a GPU by its CUDA name, or None if unknown."""
    for key, peak in PEAK_BF16_DENSE:
        if key.lower() in gpu_name.lower():
            return peak
    return None


def format_table(gpu: str, n_gpu: int, peak: float | None, checks: list[Check]) -> str:
    """The check-list as one Markdown table, with a header line naming the GPU and its peak."""
    head = f"GPU: {n_gpu} × {gpu}; bf16 dense peak " + (
        f"{peak / 1e12:.0f} TFLOP/s per GPU" if peak else "unknown (MFU not computed)"
    )
    lines = [head, "", "| check | result | step time | MFU | detail |", "|---|---|---|---|---|"]
    for c in checks:
        res = "skipped" if c.ok is None else ("pass" if c.ok else "FAIL")
        t = "" if c.step_ms is None else f"{c.step_ms:.1f} ms"
        m = "" if c.mfu is None else f"{100 * c.mfu:.2f} %"
        cell = lambda text: text.replace("|", "\\|")  # a | inside a cell would split it (Markdown)
        lines.append(f"| {cell(c.name)} | {res} | {t} | {m} | {cell(c.detail)} |")
    n_ok = sum(c.ok is True for c in checks)
    n_fail = sum(c.ok is False for c in checks)
    lines += ["", f"{n_ok} passed, {n_fail} failed, {len(checks) - n_ok - n_fail} skipped"]
    return "\n".join(lines)


def cuda_devices() -> tuple[int, str]:
    """(number of CUDA GPUs, name of GPU 0); (0, "") without CUDA."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return 0, ""
    return torch.cuda.device_count(), torch.cuda.get_device_name(0)


def layouts(n_gpu: int, cfg: dict) -> list[tuple[int, int, int]]:
    """(pp, dp, tp) layouts of ``n_gpu`` ranks that the model and batch of ``cfg`` accept."""
    from minipar.job.config import TrainConfig
    from minipar.runtime.mesh import factorizations

    c = TrainConfig(**cfg)
    return [f for f in factorizations(n_gpu) if c.accepts(*f)]


def _flags(cfg: dict) -> list[str]:
    return [a for k, v in cfg.items() for a in (f"--{k.replace('_', '-')}", str(v)) if k != "sample_chars"]


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_job(
    cfg: dict, out: str, nproc: int = 1, pp: int = 1, tp: int = 1, dtype: str = "fp32", timeout: float = 600
) -> tuple[list[dict], str]:
    """The main job on ``nproc`` GPUs (torchrun when > 1); returns (metrics records, error text or "")."""
    args = _flags(cfg) + ["--pp", str(pp), "--tp", str(tp), "--dtype", dtype, "--out", out]
    if nproc == 1:
        cmd = [sys.executable, "-m", "minipar.train"] + args
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            "-m",
            "minipar.train",
        ] + args
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], f"timed out after {timeout:.0f} s"
    if p.returncode != 0:
        return [], (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1][:200]
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()], ""


def timing(records: list[dict], cfg: dict, n_gpu: int, peak: float | None) -> tuple[float | None, float | None]:
    """(median step time in ms, MFU) from a run's records; the first logged step (warm-up) is left out."""
    import torch

    from minipar.data import CharCorpus, load_text
    from minipar.job.config import TrainConfig
    from minipar.model.gpt import GPT

    toks = [r["tokens_per_s"] for r in records if "tokens_per_s" in r and r["step"] > 0]
    if not toks:
        return None, None
    tok_s = statistics.median(toks)
    vocab = CharCorpus(load_text(None)).vocab_size
    with torch.device("meta"):
        fpt = GPT(TrainConfig(**cfg).gpt(vocab)).flops_per_token()
    step_s = cfg["batch_size"] * cfg["block_size"] / tok_s
    return 1e3 * step_s, (fpt * tok_s / (n_gpu * peak) if peak else None)


def losses(records: list[dict]) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def check_unit_tests(n_gpu: int, tmp: str) -> list[Check]:
    """Run :data:`GPU_TESTS` and :data:`GPU_TESTS_1RANK` under pytest with ``MINIPAR_BACKEND=auto``; one Check
    per test."""
    xml = os.path.join(tmp, "junit.xml")
    tests = GPU_TESTS + GPU_TESTS_1RANK
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *tests]
    subprocess.run(cmd, cwd=ROOT, env=_env(MINIPAR_BACKEND="auto"), capture_output=True, text=True, timeout=1800)
    backend = "nccl" if n_gpu >= 2 else "gloo (1 GPU: 2 ranks need 2)"
    seen = {}
    if os.path.exists(xml):
        for case in ET.parse(xml).getroot().iter("testcase"):
            path = case.get("classname", "").replace(".", "/") + ".py"
            bad = case.find("failure") if case.find("failure") is not None else case.find("error")
            skip = case.find("skipped") is not None
            seen[f"{path}::{case.get('name')}"] = (
                None if skip else bad is None,
                "" if bad is None else (bad.get("message") or "")[:120],
            )
    out = []
    for t in tests:
        ok, msg = seen.get(t, (False, "not run (pytest did not report it)"))
        ranks, on = ("2 ranks", backend) if t in GPU_TESTS else ("1 rank", "nccl")
        out.append(Check(f"unit, {ranks}: {t.split('::', 1)[1]}", ok, f"{on} {msg}".strip()))
    return out


def check_main_job(n_gpu: int, peak: float | None, tmp: str) -> list[Check]:
    """1 GPU fp32 and bf16, then every layout of ``n_gpu`` GPUs: equal losses (fp32), then timed (bf16)."""
    out = []
    ref, err = run_job(TINY, os.path.join(tmp, "tiny1"))
    out.append(Check("3D reference: main job, 1 GPU, fp32 (tests/test_3d.py TINY)", not err and bool(ref), err))
    for dtype in ("fp32", "bf16"):
        rec, err = run_job(TIMED, os.path.join(tmp, f"timed1-{dtype}"), dtype=dtype)
        ms, mfu = timing(rec, TIMED, 1, peak) if rec else (None, None)
        finite = bool(rec) and all(math.isfinite(v) for v in losses(rec).values())
        out.append(Check(f"main job, 1 GPU, {dtype}", not err and finite, err or "finite losses", ms, mfu))
    if n_gpu < 2:
        out.append(Check("main job under torchrun, every layout", None, "needs >= 2 GPUs"))
        return out
    tiny = set(layouts(n_gpu, TINY))  # a subset of TIMED's layouts (fewer layers, heads, sequences)
    for pp, dp, tp in layouts(n_gpu, TIMED):
        name = f"pp{pp}·dp{dp}·tp{tp}"
        if (pp, dp, tp) not in tiny:
            out.append(
                Check(f"3D {name} = 1 GPU (fp32, torchrun)", None, "TINY's 2 layers, 2 heads, batch 8 do not split so")
            )
        else:
            rec, err = run_job(TINY, os.path.join(tmp, f"tiny-{name}"), n_gpu, pp, tp)
            a, b = losses(rec), losses(ref)
            if err or not b:
                out.append(Check(f"3D {name} = 1 GPU (fp32, torchrun)", False, err or "no 1-GPU reference"))
            else:
                d = max(abs(a[k] - b[k]) for k in b) if sorted(a) == sorted(b) else float("inf")
                out.append(Check(f"3D {name} = 1 GPU (fp32, torchrun)", d < TOL, f"max|Δloss| {d:.1e} (bound {TOL:g})"))
        rec, err = run_job(TIMED, os.path.join(tmp, f"timed-{name}"), n_gpu, pp, tp, dtype="bf16")
        ms, mfu = timing(rec, TIMED, n_gpu, peak) if rec else (None, None)
        out.append(Check(f"main job {name}, {n_gpu} GPUs, bf16", not err and bool(rec), err, ms, mfu))
    return out


def check_bench(tmp: str, n_gpu: int) -> list[Check]:
    """The :data:`GPU_BENCH` modules with ``MINIPAR_BACKEND=auto``: each row, its target met or not."""
    out = []
    for mod in GPU_BENCH:
        d = os.path.join(tmp, f"bench-{mod}")
        cmd = [sys.executable, "-m", "minipar.course.bench", "--only", mod, "--out", d]
        try:
            p = subprocess.run(
                cmd, cwd=ROOT, env=_env(MINIPAR_BACKEND="auto"), capture_output=True, text=True, timeout=1200
            )
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        path = os.path.join(d, "results.json")
        if rc != 0 or not os.path.exists(path):
            out.append(Check(f"bench {mod}", False, f"exit {rc}"))
            continue
        with open(path) as f:
            out += [bench_check(r, n_gpu) for r in json.load(f)]
    return out


def bench_check(r: dict, n_gpu: int) -> Check:
    """One row of ``results.json`` as a check, on a node of ``n_gpu`` GPUs. Run on gloo ("N gloo ranks", or N > GPUs):
    shown, not graded (``ok`` None): its ranks share the GPU node's CPUs, where three launches of one row read
    0.83-1.16x (2026-11-27), and its target is ``make bench``'s, on a CPU. "N nccl ranks", or N <= GPUs: graded."""
    detail = f"{r['measured']:.3g} {r['unit']} {r['target']} ({r['note']}"
    ranks = re.search(r"(\d+) (?:(gloo|nccl) )?ranks", r["name"])
    if ranks is None or int(ranks.group(1)) > n_gpu or ranks.group(2) == "gloo":
        return Check(f"bench {r['lesson']}: {r['name']}", None, detail + "; gloo on a GPU node: not graded here)")
    return Check(f"bench {r['lesson']}: {r['name']}", r["ok"], detail + "; NCCL)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m minipar.course.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/gpu_check", help="folder for results.md ('' for none)")
    p.add_argument("--skip", default="", help="comma-separated parts to leave out: tests,job,bench")
    a = p.parse_args(argv)
    skip = set(filter(None, a.skip.split(",")))
    try:  # before any GPU minute is spent: a typo in --skip, an --out the table could not be written to
        if skip - set(PARTS):
            raise ConfigError(f"--skip {a.skip}: use parts of {','.join(PARTS)}")
        if a.out:
            check_folder(a.out, "--out")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n_gpu, gpu = cuda_devices()
    if n_gpu == 0:
        print(NO_CUDA)
        return EXIT_NO_CUDA
    peak = peak_bf16(gpu)
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="minipar-gpu-check-") as tmp:
        for part, fn in (
            ("tests", lambda: check_unit_tests(n_gpu, tmp)),
            ("job", lambda: check_main_job(n_gpu, peak, tmp)),
            ("bench", lambda: check_bench(tmp, n_gpu)),
        ):
            if part in skip:
                continue
            print(f"gpu-check: {part} ...", flush=True)
            checks += fn()
    table = format_table(gpu, n_gpu, peak, checks)
    print(table)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        md = f"# make gpu-check\n\n{table}\n"
        publish([write_atomically(os.path.join(a.out, "results.md"), lambda f: f.write(md))])
        print(f"\nwritten to {a.out}/results.md")
    return EXIT_FAILED if any(c.ok is False for c in checks) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
