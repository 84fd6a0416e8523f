"""The exercises' checker, checked (issue 13): the reference solutions pass every check, the
untouched stubs report "not implemented yet" for every exercise (no crash, no hang), and a wrong
solution of each kind the checker promises to catch is caught, with its hint, within the timeout.

Wrong solutions live in ``tests/exercise_mutants/`` (one mistake each; child processes import them
by name). The group timeout is short here (``MINIPAR_TIMEOUT=6``) so the two mutants that hang
end in seconds.
"""

import ast
import inspect
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exercises import check, make_stubs

ROOT = Path(__file__).resolve().parent.parent
LESSONS = list(check.lessons())

MUTANTS = [  # (lesson, mutant module, the exercise that must fail, words its message must contain)
    ("00", "ex00_unbiased_var", "layer_norm_backward", "biased variance"),
    ("00", "ex00_ce_no_mean", "cross_entropy_backward", "divide by N"),
    ("00", "ex00_adamw_no_bias_correction", "adamw_step", "bias-correct"),
    # issue 23: delegation to PyTorch or to the reference solution is refused
    ("00", "ex00_adamw_torch_optim", "adamw_step", "your code called torch.optim."),
    ("00", "ex00_ln_autograd", "layer_norm_backward", "without autograd"),
    ("00", "ex00_ln_aten_kernel", "layer_norm_backward", "native_layer_norm_backward"),
    ("00", "ex00_ce_tensor_backward", "cross_entropy_backward", "Tensor.backward"),
    ("00", "ex00_reexport_solution", "cross_entropy_backward", "reference solution"),
    # issue 37: the step argument, not a count of one's own; no state outside the contract
    ("00", "ex00_adamw_own_counter", "adamw_step", "never a count of your own"),
    ("00", "ex00_adamw_counter_per_param", "adamw_step", "never a count of your own"),
    ("00", "ex00_adamw_logs_in_global", "adamw_step", "changed `LAST`"),
    ("00", "ex00_exec_solution", "adamw_step", "source compiled under your file's name"),
    ("01", "ex01_wrong_chunk", "ring_reduce_scatter", "got the reduce-scatter chunk of rank"),
    ("01", "ex01_even_split", "ring_reduce_scatter", "chunk_bounds"),
    ("01", "ex01_wrong_pairing", "ring_reduce_scatter", "waited"),
    ("01", "ex01_gather_wrong_place", "ring_all_gather", "never received chunk"),
    # issue 23: the right values by the wrong communication, or by minipar's own ring
    ("01", "ex01_rs_all_reduce", "ring_reduce_scatter", "called the collective all_reduce"),
    ("01", "ex01_ag_all_reduce_pad", "ring_all_gather", "called the collective all_reduce"),
    ("01", "ex01_ag_broadcasts", "ring_all_gather", "called the collective broadcast"),
    ("01", "ex01_ag_send_everyone", "ring_all_gather", "sends to one neighbour"),
    ("01", "ex01_rs_minipar", "ring_reduce_scatter", "this exercise is the ring"),
    ("01", "ex01_recv_wrong_size", "ring_reduce_scatter", "its neighbour receives it into"),
    ("02", "ex02_forward_order", "make_buckets", "reverse"),
    ("02", "ex02_frozen_in_bucket", "make_buckets", "requires_grad=False"),
    ("02", "ex02_big_param_merged", "make_buckets", "larger than the cap"),
    ("02", "ex02_no_divide", "BucketedDDP", "divide the all-reduced sum by the world size"),
    ("02", "ex02_not_overlapped", "BucketedDDP", "overlaps backward"),
    ("02", "ex02_blocking", "BucketedDDP", "async_op=True"),
    ("02", "ex02_no_wait", "BucketedDDP", "not waited for"),
    # issue 23: overlap in name only, a bucket that fills out of order, delegation
    ("02", "ex02_wait_at_once", "BucketedDDP", "waited for during backward"),
    ("02", "ex02_first_bucket_only", "BucketedDDP", "launched in finish()"),
    ("02", "ex02_launch_when_full", "BucketedDDP", "in bucket order"),
    ("02", "ex02_no_while", "BucketedDDP", "a while loop"),
    ("02", "ex02_buckets_minipar", "make_buckets", "your code called minipar.dp.buckets."),
    # issue 34: a shape error is named in the lesson's terms (the bucket slot), not as a raw RuntimeError
    ("02", "ex02_slot_size", "BucketedDDP", "differ in size"),
    ("03", "ex03_sum_not_mean", "zero1_step", "SUM of the gradients"),
    ("03", "ex03_full_state", "zero1_step", "shard of the moments"),
    ("03", "ex03_no_all_gather", "zero1_step", "all-gather"),
    # issue 23: the wrong communication, hidden state, delegation
    ("03", "ex03_all_reduce", "zero1_step", "one reduce-scatter"),
    ("03", "ex03_state_in_list", "zero1_step", "walked through every dict, list and object"),
    ("03", "ex03_state_in_global", "zero1_step", "outside `state`"),
    ("03", "ex03_zero_redundancy", "zero1_step", "your code called minipar.zero.flat."),
    # issue 37: the all-gather's input is the updated parameter shard; class attributes are walked
    ("03", "ex03_gather_grad_class_state", "zero1_step", "the all-gather's input is not this rank's updated shard"),
    ("03", "ex03_gather_update", "zero1_step", "the all-gather's input is not this rank's updated shard"),
    ("03", "ex03_moments_class_attr", "zero1_step", "a class attribute"),
    ("03", "ex03_moments_in_default", "zero1_step", "outside `state`"),
    ("03", "ex03_moments_on_param", "zero1_step", "of the parameter tensor"),
    # issue 34: shape errors named in the lesson's terms (padded buffer, shard), not gloo's check
    ("03", "ex03_unpadded_grad", "zero1_step", "reduce-scatter of the wrong shapes"),
    ("03", "ex03_gather_into_param", "zero1_step", "all-gather of the wrong shapes"),
    ("03", "ex03_unpadded_param_shard", "zero1_step", "a shard against a shorter slice"),
    ("03", "ex03_copy_padded_back", "zero1_step", "copy only the first numel elements"),
    ("04", "ex04_f_backward_identity", "f and g", "own gradient"),
    ("04", "ex04_bias_before_g", "Column/RowParallelLinear", "bias was added"),
    ("04", "ex04_world_group", "f and g", "g's forward"),
    # issue 23: a full weight kept, the wrong communication, delegation
    ("04", "ex04_full_weight_kept", "Column/RowParallelLinear", "its shard is"),
    ("04", "ex04_g_all_gather", "f and g", "called c10d::allgather"),
    ("04", "ex04_minipar_mappings", "f and g", "your code called minipar.tp.mappings."),
    # issue 37 (review): class attributes are walked too
    ("04", "ex04_full_weight_class_attr", "Column/RowParallelLinear", "globals or class attributes"),
    # issue 34: a shape error is named in the lesson's terms, not a raw size mismatch
    ("04", "ex04_row_split_rows", "Column/RowParallelLinear", "row-parallel keeps the columns"),
    ("04", "ex04_row_param_replaced", "Column/RowParallelLinear", "left weight (2, 12)"),
    ("04", "ex04_row_forward_matmul", "Column/RowParallelLinear", "(out, in/N) in nn.Linear's layout"),
    ("05", "ex05_bubble_ideal", "bubble_fraction", "whole step"),
    ("05", "ex05_gpipe_interleaved", "gpipe", "forward after a backward"),
    ("05", "ex05_gpipe_minipar", "gpipe", "your code called minipar.pp.schedules.gpipe"),
    ("05", "ex05_bubble_simulated", "bubble_fraction", "your code called minipar.pp."),
    ("06", "ex06_1f1b_minipar", "one_f_one_b", "your code called minipar.pp.schedules.one_f_one_b"),
    ("06", "ex06_no_min", "one_f_one_b", "one_f_one_b(3, 1)"),
    ("06", "ex06_deadlock", "one_f_one_b", "deadlock"),
    ("06", "ex06_w_in_i", "linear_backward_* (stretch)", "the weight gradient belongs in W"),
    ("06", "ex06_w_transposed", "linear_backward_* (stretch)", "dL/dW of the weight's shape"),
    ("06", "ex06_i_transposed", "linear_backward_* (stretch)", "dL/dx"),
    ("06", "ex06_split_autograd", "linear_backward_* (stretch)", "without autograd"),
    ("06", "ex06_w_lifo", "linear_backward_* (stretch)", "oldest first"),
    # issue 37: dL/dW in I in any layout, copies in the stash, state beside it, a W that multiplies nothing
    ("06", "ex06_i_transposed_global", "linear_backward_* (stretch)", "the weight gradient belongs in W"),
    ("06", "ex06_stash_copies", "linear_backward_* (stretch)", "shares x's storage"),
    ("06", "ex06_dw_via_numpy_global", "linear_backward_* (stretch)", "changed `_PENDING`"),
    ("06", "ex06_w_returns_stashed", "linear_backward_* (stretch)", "computed no product of x and dL/dy"),
    ("06", "ex06_dw_rows_in_i", "linear_backward_* (stretch)", "I computes nothing from x"),
    ("07", "ex07_coords_minipar", "coords_of", "your code called minipar.runtime.mesh."),
    ("07", "ex07_pp_fastest", "coords_of", "tp varies fastest"),
    # mismatched new_group calls either hang (the ranks wait) or pair the wrong ranks, by timing: one hint for both
    ("07", "ex07_own_group_only", "build_groups", "same calls in the same order"),
    ("07", "ex07_none_for_size1", "build_groups", "one-rank group"),
    ("08", "ex08_no_rng_restore", "Checkpoint", "restore the RNG state"),
    ("08", "ex08_no_fork_rng", "Checkpoint", "fork_rng"),
    ("08", "ex08_scaler_no_reset", "loss_scale_step", "reset the clean count"),
    ("08", "ex08_unscale_on_skip", "loss_scale_step", "changed on a skipped step"),
    # issue 23: delegation, a recompute that never recomputes, cases the old check never exercised
    ("08", "ex08_torch_checkpoint", "Checkpoint", "torch.utils.checkpoint"),
    ("08", "ex08_no_recompute", "Checkpoint", "forward ran fn 1 time(s) with grad [True]"),
    ("08", "ex08_first_input_only", "Checkpoint", "input b got no gradient"),
    ("08", "ex08_scale_first_only", "loss_scale_step", "in the last tensor"),
    ("08", "ex08_hardcoded_factors", "loss_scale_step", "use the arguments"),
    # issue 37 (review): state kept in the class or the module instead of ctx / the arguments
    ("08", "ex08_ckpt_rng_on_class", "Checkpoint", "changed `Checkpoint.rng`"),
    ("08", "ex08_scaler_own_clean", "loss_scale_step", "changed `_CLEAN`"),
    ("08", "ex08_ckpt_saves_copy", "Checkpoint", "saved a copy of the input"),
    ("09", "ex09_no_error_feedback", "topk_with_error_feedback", "grad + error"),
    ("09", "ex09_orth_before_reduce", "powersgd_round", "then orthogonalize"),
    ("09", "ex09_powersgd_full_matrix", "powersgd_round", "never the whole n·k"),
    ("09", "ex09_topk_minipar", "topk_with_error_feedback", "your code called minipar.dp.compression.TopKCompression."),
    # issue 37 (review): the error kept in the module instead of the argument
    ("09", "ex09_topk_own_error", "topk_with_error_feedback", "changed `_ERROR`"),
    # lesson 10: nccl-tests' method, graded on the checker's clock and the collectives called
    ("10", "ex10_busbw_one_way", "bus_bandwidth", "2(N − 1)/N"),
    ("10", "ex10_busbw_no_checks", "bus_bandwidth", "raise ValueError"),
    ("10", "ex10_no_barrier", "all_reduce_perf", "one barrier"),
    ("10", "ex10_warmup_timed", "all_reduce_perf", "3 timed all-reduce(s)"),
    ("10", "ex10_rank_local_time", "all_reduce_perf", "average over the ranks"),
    ("10", "ex10_not_divided", "all_reduce_perf", "divide by iters"),
    ("10", "ex10_clock_before_barrier", "all_reduce_perf", "after the barrier"),
    ("10", "ex10_global_rank_fill", "all_reduce_perf", "the rank in the group"),
    ("10", "ex10_perf_minipar", "all_reduce_perf", "your code called minipar.course.benchmarks"),
    ("10", "ex10_wrong_zero", "all_reduce_perf", "the checker zeroed elements"),
    ("10", "ex10_wrong_local", "all_reduce_perf", "sum the wrong counts"),
    ("10", "ex10_no_refill", "all_reduce_perf", "wrong = 32, expected 0"),
    ("10", "ex10_float64_buffer", "all_reduce_perf", "S/4 float32 elements"),
    ("10", "ex10_clock_per_call", "all_reduce_perf", "between timed all-reduces"),
    ("11", "ex11_merge_naive_exp", "merge", "logaddexp"),
    ("11", "ex11_merge_average", "merge", "share of the mass"),
    ("11", "ex11_merge_minipar", "merge", "your code called minipar.cp."),
    ("11", "ex11_ring_wrong_direction", "ring_step", "left neighbour"),
    ("11", "ex11_ring_all_gather", "ring_step", "collective"),
    # issue 37: either block far heavier, code compiled under the learner's name or pasted, PyTorch's CP, a new buffer
    ("11", "ex11_merge_block_a_reference", "merge", "the maximum"),
    ("11", "ex11_merge_exec_minipar", "merge", "source compiled under your file's name"),
    ("11", "ex11_merge_pasted_minipar", "merge", "is minipar.cp.blocks.merge, token for token"),
    ("11", "ex11_merge_pytorch_cp", "merge", "your code called torch.distributed.tensor.experimental."),
    ("11", "ex11_ring_pytorch_cp", "ring_step", "your code called torch.distributed.tensor.experimental."),
    ("11", "ex11_ring_new_buffer", "ring_step", "the caller's buffer `recv`"),
    ("11", "ex11_ring_copy_into_recv", "ring_step", "received elsewhere, then copied"),
    ("12", "ex12_aux_no_e", "router_with_aux_loss", "aux = E"),
    ("12", "ex12_gate_always_renorm", "router_with_aux_loss", "the chosen expert's probability itself"),
    ("12", "ex12_router_minipar", "router_with_aux_loss", "your code called minipar.model.moe.router.route"),
    ("12", "ex12_ep_source_major", "expert_parallel_forward", "grouped by source"),
    ("12", "ex12_ep_every_row", "expert_parallel_forward", "never on every token"),
    ("12", "ex12_ep_all_reduce", "expert_parallel_forward", "three all-to-alls"),
    # issue 37: gates without their gradient; state kept between calls of expert_parallel_forward
    ("12", "ex12_router_nograd_gates", "router_with_aux_loss", "the gates carry no gradient"),
    ("12", "ex12_router_detached_norm", "router_with_aux_loss", "d(Σ gate · w) / d logits"),
    ("12", "ex12_ep_cached_splits", "expert_parallel_forward", "three all-to-alls on every call"),
    ("12", "ex12_ep_state_attr", "expert_parallel_forward", "changed `expert_parallel_forward`"),
    ("12", "ex12_router_naive_softmax", "router_with_aux_loss", "logits ~800"),
]


@pytest.fixture(autouse=True)
def short_timeout(monkeypatch):
    monkeypatch.setenv("MINIPAR_TIMEOUT", "6")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def run(nn, **kw):
    lines = []
    status = check.check_lesson(nn, out=lines.append, **kw)
    return status, "\n".join(lines)


def test_every_lesson_00_to_07_has_an_exercise_file_and_a_solution():
    for nn in [f"{i:02d}" for i in range(8)]:
        assert nn in LESSONS, f"no exercises/checks/lesson{nn}.py"
        lesson = check.lessons()[nn]
        assert (ROOT / "exercises" / lesson.file).exists()
        assert (ROOT / "exercises" / "solutions" / lesson.file).exists()


def test_stubs_are_generated_from_the_solutions():
    """Stub and solution share every signature and docstring (``python -m exercises.make_stubs``)."""
    assert make_stubs.main(["--check"]) == 0


def test_every_stub_function_raises_not_implemented_yet():
    for nn, lesson in check.lessons().items():
        src = (ROOT / "exercises" / lesson.file).read_text(encoding="utf-8")
        n = src.count('raise NotImplementedError("not implemented yet: ')
        assert n >= len(lesson.checks), f"lesson {nn}: {n} stubs for {len(lesson.checks)} exercises"
        ast.parse(src)


# The reference solutions passing every check: each lesson's "Your turn" cell runs
# check_lesson(NN, solutions=True) and stores its ✓ lines, which strict nbval re-checks in make test
# (test-notebooks) and in every portability pass; a unit test here would only run them once more.
def test_every_lesson_with_checks_runs_its_solutions_in_its_notebook():
    for nn in LESSONS:
        nbs = list((ROOT / "lessons").glob(f"{nn}_*.ipynb"))
        assert nbs and f'check_lesson(\\"{nn}\\", solutions=True)' in nbs[0].read_text(), nn


@pytest.mark.parametrize("nn", LESSONS)
def test_untouched_stubs_report_not_implemented_yet(nn):
    t0 = time.monotonic()
    status, text = run(nn)
    assert set(status.values()) == {"todo"}, text
    assert text.count("not implemented yet") == len(status), text
    assert time.monotonic() - t0 < 60, "a stub must fail at once, not wait for a timeout"


@pytest.mark.parametrize("nn,mutant,exercise,words", MUTANTS, ids=[m[1] for m in MUTANTS])
def test_a_wrong_solution_is_caught_with_its_hint(nn, mutant, exercise, words):
    t0 = time.monotonic()
    # only its exercise's checks: a mutant is the solution with one exercise wrong
    status, text = run(nn, module=f"tests.exercise_mutants.{mutant}", only=exercise)
    assert status[exercise] == "fail", text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"✗ {exercise}:"))
    assert words in line, line
    assert time.monotonic() - t0 < 90, f"{mutant} took {time.monotonic() - t0:.0f} s: the checker must not hang"


def test_every_mutant_file_is_used():
    used = {m[1] for m in MUTANTS}
    files = {p.stem for p in (ROOT / "tests" / "exercise_mutants").glob("ex*.py")}
    assert files == used


def test_command_line_exit_status_and_output():
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    ok = subprocess.run(
        [sys.executable, "-m", "exercises.check", "--lesson", "05", "--solutions"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0 and "2 exercises: 2 pass" in ok.stdout and ok.stderr == "", ok.stdout + ok.stderr
    todo = subprocess.run(
        [sys.executable, "-m", "exercises.check", "--lesson", "5"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert todo.returncode == 1 and "2 not implemented yet" in todo.stdout, todo.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "exercises.check", "--lesson", "77"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "no checks for lesson" in bad.stdout


def test_solution_output_is_the_same_twice():
    """What the notebooks store must not change between runs (strict nbval)."""
    a, b = run("03", solutions=True)[1], run("03", solutions=True)[1]
    assert a == b
    assert inspect.getsource(check).count("perf_counter") == 0


# ----------------------------------------------------------------------------- homework checkers
HANDWRITTEN = {  # issue 23: a report with made-up numbers (the README as the data, a loss from 1e9 to -5)
    "data": str(ROOT / "README.md"),
    "layout": {"pp": 2, "dp": 1, "tp": 2, "microbatches": 2},
    "world_size": 4,
    "steps": 100,
    "loss_first": 1e9,
    "loss_last": -5.0,
    "val_loss_last": 1.4,
    "mem_measured_bytes": [9e7, 9e7, 8e7, 8e7],
    "mem_predicted_bytes": 5e6,
    "step_s_predicted": 0.1,
    "hardware": "measured: 2 cores",
    "notes": "RSS also counts the CPU allocator's caches and torch itself.",
}


def _failed(results):
    return " | ".join(what for ok, what in results if not ok)


def test_homework_a_checker_refuses_a_hand_written_report(tmp_path):
    """A report alone is a claim: with no evidence beside it, nothing passes."""
    import json

    from homework.a_train_your_text import check as hw_a
    from homework.a_train_your_text import job

    (tmp_path / "report.json").write_text(json.dumps(HANDWRITTEN))
    failed = _failed(hw_a.check_run(tmp_path))
    assert "metrics.jsonl missing" in failed and "run python -m homework.a_train_your_text.job" in failed, failed
    assert hw_a.main([str(tmp_path / "missing")]) == 1
    with pytest.raises(NotImplementedError, match="not implemented yet"):
        job.choose_layout(4, job.TrainConfig())


def test_homework_a_checker_refuses_forged_evidence_and_a_repository_file(tmp_path):
    """Evidence written by hand for the README, with a loss from 1e9 to -5: the file is the course's,
    the first loss is no fresh model's, the loss did not fall to a cross-entropy, no checkpoint."""
    import hashlib
    import json

    from homework.a_train_your_text import check as hw_a

    readme = ROOT / "README.md"
    raw = readme.read_bytes()
    ev = {"data": str(readme), "data_sha256": hashlib.sha256(raw).hexdigest(), "data_bytes": len(raw), "ranks": []}
    ev["ranks"] = [{"rank": r, "rss_idle_bytes": 1, "peak_rss_bytes": 10**9} for r in range(4)]
    cfg = {"data": str(readme), "pp": 2, "dp": 1, "tp": 2, "microbatches": 2, "steps": 100, "d_model": 128}
    losses = [1e9 * (1 - s / 99) - 5 * s / 99 for s in range(100)]
    (tmp_path / "report.json").write_text(json.dumps(HANDWRITTEN))
    (tmp_path / "evidence.json").write_text(json.dumps(ev))
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": v}) + "\n" for s, v in enumerate(losses))
    )
    failed = _failed(hw_a.check_run(tmp_path))
    assert "not a file of this course (README.md)" in failed, failed
    assert "is ln V" in failed and "as a cross-entropy is" in failed and "no checkpoint" in failed, failed


@pytest.mark.parametrize(
    "name, content, says",
    [
        ("report.json", "[]", "report.json holds a JSON list, not an object"),
        ("report.json", "{not json", "report.json is not JSON"),
        ("config.json", '{"pp": "2", "dp": 1, "tp": 2, "microbatches": 1, "steps": 4, "d_model": 8}', "pp = '2'"),
        ("config.json", '{"pp": 2, "dp": 1, "tp": 2, "microbatches": 1, "steps": 4}', "d_model = None"),
        (
            "config.json",
            '{"pp": 2, "dp": 1, "tp": 2, "microbatches": 1, "steps": 1e9, "d_model": 8}',
            "steps = 1000000000.0",
        ),
        ("config.json", '{"pp": 2, "dp": 1, "tp": 2, "microbatches": 1, "steps": 0, "d_model": 8}', "steps = 0"),
        ("evidence.json", '{"ranks": [{"peak_rss_bytes": "x"}]}', "peak_rss_bytes = 'x'"),
        ("evidence.json", " " * (2 << 20), "more than job.py ever writes"),
    ],
)
def test_homework_a_checker_says_what_is_malformed_in_one_line(tmp_path, capsys, name, content, says):
    """#36 items 16 and 18: malformed evidence gave tracebacks, a 6 GB file was read whole, steps 1e9 looped."""
    import json

    from homework.a_train_your_text import check as hw_a

    good = {
        "report.json": json.dumps(HANDWRITTEN),
        "evidence.json": json.dumps({"ranks": [{"peak_rss_bytes": 1}] * 4}),
        "config.json": json.dumps({"pp": 2, "dp": 1, "tp": 2, "microbatches": 1, "steps": 4, "d_model": 8}),
        "metrics.jsonl": "",
    }
    for n, text in {**good, name: content}.items():
        (tmp_path / n).write_text(text)
    assert hw_a.main([str(tmp_path)]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert says in lines[0] and "malformed" in lines[0], lines
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "loss": 4.1}\n"loss"\n')  # read after the data checks
    with pytest.raises(hw_a.Malformed, match="metrics.jsonl line 2 is not a record"):
        hw_a._records(tmp_path / "metrics.jsonl")


def test_homework_a_checker_recomputes_a_real_run(tmp_path):
    """A real (tiny) run of job.py passes; the same run with a doctored number in its report does not."""
    import json
    import random

    from homework.a_train_your_text import check as hw_a

    rnd = random.Random(0)
    words = "the of and to in a is that for it as was with be by on not he this are or his from at which".split()
    text = "\n".join(" ".join(rnd.choice(words) for _ in range(rnd.randint(5, 12))) for _ in range(500))
    (tmp_path / "text.txt").write_text(text + "\n")
    out = tmp_path / "run"
    args = ["--data", str(tmp_path / "text.txt"), "--world", "4", "--steps", "8", "--out", str(out)]
    args += ["--n-layer", "2", "--d-model", "32", "--block-size", "32", "--batch-size", "8"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-m", "tests.homework_refs.hw_a_solution", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    results = hw_a.check_run(out)
    assert all(ok for ok, _ in results), _failed(results)
    assert any("validation loss recomputed from the checkpoint" in what for _, what in results)
    rep = json.loads((out / "report.json").read_text())
    (out / "report.json").write_text(json.dumps(dict(rep, loss_first=rep["loss_first"] - 0.3)))
    assert "the report's loss_first, loss_last, steps are the log's" in _failed(hw_a.check_run(out))
    # #36 item 8: a one-device run can't pass as the layout it claims: the checkpoint's own files say who wrote it
    assert hw_a.shard_files(str(out / "ckpt" / "step_00000008")) == 4
    ev = json.loads((out / "evidence.json").read_text())
    ev["ranks"] = ev["ranks"] + [dict(ev["ranks"][0], rank=4), dict(ev["ranks"][0], rank=5)]  # invented ranks
    (out / "evidence.json").write_text(json.dumps(ev))
    assert "the checkpoint's own shard files were written by 4 rank(s), the 6 ranks claimed" in _failed(
        hw_a.check_run(out)
    )


@pytest.mark.parametrize(
    "module,expect,case",
    [
        ("homework.b_accumulate_zero2.accumulate", "· accumulation_step: not implemented yet: accumulation_step", []),
        ("tests.homework_refs.hw_b_solution", "✓ accumulation_step", []),
        ("tests.homework_refs.hw_b_no_scale", "|got|/|want| = 2.000", []),
        # issue 23: several steps against one device; the micro-batches seen by the checker's own hook
        ("tests.homework_refs.hw_b_no_zero_grad", "step 2 of 3, unit wte", ["--case", "2,2"]),
        ("tests.homework_refs.hw_b_full_batch", "1 batch(es) of [4] rows", ["--case", "2,2"]),
        ("tests.homework_refs.hw_b_one_backward", "reduce-scattered its 6 units 6 times", ["--case", "2,2"]),
    ],
)
def test_homework_b_checker(module, expect, case):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-m", "homework.b_accumulate_zero2.check", "--module", module, *case],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert expect in r.stdout, r.stdout + r.stderr
    assert r.returncode == (0 if expect.startswith("✓") else 1)
