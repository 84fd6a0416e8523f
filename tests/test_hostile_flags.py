"""Hostile values on both command lines, drawn at random from a fixed seed (the fuzzer that found ``--gpus
99999999999999999999``, ``--gpus-per-node 99999999999999999999``, ``--d-model 99999999999999999999`` running for ever
and ``--data /proc/self/mem``'s traceback, kept as a test): every case ends, as an answer or as one line naming a flag,
never a traceback. A case that runs past ``LIMIT_S`` fails as a hang (a bound, not a speed target)."""

import random
import shlex
import signal

import pytest

from minipar.errors import ConfigError

LIMIT_S = 120  # a hang guard: every case here answers in about a second
HUGE = ["0", "-1", "99999999999999999999", str(10**10), str(10**10 + 1), "nan", "inf", "1e400", "x", ""]
SMALL = ["1", "2", "3", "4", "7", "8", "16", "64"]
FLOATS = ["0.0001", "1e-300", "1e300", "5e-324", "-0.5", "nan", "inf"]
# quick bases (fixed layouts, small searches) from the README's commands: a mutation changes, adds or drops a flag
PLAN_BASES = [
    "--model 7b --tp 1 --pp 1 --dp 64 --zero 3 --hsdp 8 --recompute full --flash-attention",
    "--model 70b --tp 8 --pp 4 --dp 8 --zero 3 --recompute selective --sp --fsdp2",
    "--layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 --swiglu --vocab 32000 --seq 4096 "
    "--moe-experts 8 --moe-top-k 2 --ep 8 --tp 1 --pp 1 --dp 64",
    "--layers 36 --hidden 2880 --heads 64 --kv-heads 8 --kv-channels 64 --ffn 2880 --swiglu --vocab 201088 --seq 4096 "
    "--window-size 128 --window-attn-skip-freq 2 --moe-experts 128 --moe-top-k 4 --gpu h100 --framework megatron "
    "--global-batch 1280 --tp 1 --pp 4 --dp 16 --zero 1 --ep 8 --expert-tp 1 --flash-attention",
    "--model 7b --gpus 16 --gpu h100",
]
PLAN_FLAGS = {
    "--layers": SMALL,
    "--hidden": SMALL,
    "--heads": SMALL,
    "--kv-heads": SMALL,
    "--ffn": SMALL,
    "--vocab": SMALL,
    "--seq": SMALL,
    "--kv-channels": SMALL,
    "--window-size": SMALL,
    "--gpus": SMALL,
    "--gpus-per-node": SMALL,
    "--global-batch": SMALL,
    "--tp": SMALL,
    "--pp": SMALL,
    "--dp": SMALL,
    "--cp": SMALL,
    "--v": SMALL,
    "--micro-batch": SMALL,
    "--hsdp": SMALL,
    "--hpz": SMALL,
    "--recompute-layers": SMALL,
    "--moe-experts": SMALL,
    "--moe-top-k": SMALL,
    "--ep": SMALL,
    "--expert-tp": SMALL,
    "--moe-router-num-groups": SMALL,
    "--moe-router-group-topk": SMALL,
    "--mtp-num-layers": SMALL,
    "--first-stage-layers": SMALL,
    "--inter-node-gbps": FLOATS,
    "--device-peak-tflops": FLOATS,
    "--hbm-gbps": FLOATS,
    "--mem-gb": FLOATS,
    "--ddp-bucket-mb": FLOATS,
    "--zero": ["0", "1", "2", "3"],
    "--precision": ["bf16", "fp8"],
    "--framework": ["pytorch", "megatron"],
    "--gpu": ["a100", "h100", "b200"],
    "--overlap": ["dp", "ep", "x", ""],
    "--recompute-modules": ["moe_act,layernorm", "x", ""],
    "--stage-split": ["1,2", "x", "-1,5"],
    "--pipeline-model-parallel-layout": ["E|t|L", "x", "(t|)*1000000"],
    "--cuda-graph-scope": ["moe", "mamba", ""],
    "--sp": None,
    "--fsdp2": None,
    "--flash-attention": None,
    "--json": None,
}


def _guarded(fn):
    def alarm(*_):
        raise TimeoutError(f"no answer within {LIMIT_S} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(LIMIT_S)
    try:
        return fn()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _mutate(rng, argv, flags):
    argv = list(argv)
    for _ in range(rng.randint(1, 3)):
        k = rng.choice(list(flags))
        values = flags[k] if flags[k] is None or rng.random() < 0.6 else HUGE
        if k in argv:
            i = argv.index(k)
            if values is None or rng.random() < 0.3:
                del argv[i : i + (1 if values is None else 2)]
            else:
                argv[i + 1] = rng.choice(values)
        else:
            argv += [k] if values is None else [k, rng.choice(values)]
    return argv


@pytest.mark.parametrize("seed", range(4))
def test_the_planner_answers_or_names_a_flag(seed, capsys):
    from minipar.plan import main

    rng = random.Random(seed)
    for _ in range(12):
        argv = _mutate(rng, shlex.split(rng.choice(PLAN_BASES)), PLAN_FLAGS)
        try:
            rc = _guarded(lambda argv=argv: main(argv))
        except SystemExit as e:  # argparse: a value of the wrong type, usage and one error line
            rc = e.code
        out = capsys.readouterr()
        assert rc in (0, 2), (argv, out.err)
        if rc == 2 and out.err.startswith("error: "):  # minipar's own: one line
            assert out.err.strip().count("\n") == 0, (argv, out.err)


TRAIN_FLAGS = {
    "--block-size": SMALL,
    "--n-layer": SMALL,
    "--n-head": SMALL,
    "--d-model": SMALL,
    "--moe-experts": SMALL,
    "--moe-top-k": SMALL,
    "--microbatches": SMALL,
    "--dp": SMALL,
    "--tp": SMALL,
    "--pp": SMALL,
    "--cp": SMALL,
    "--ep": SMALL,
    "--steps": SMALL,
    "--batch-size": SMALL,
    "--warmup": SMALL,
    "--nproc": SMALL,
    "--lr": FLOATS,
    "--grad-clip": FLOATS,
    "--min-lr-frac": FLOATS,
    "--schedule": ["gpipe", "1f1b"],
    "--zero": ["0", "1", "3"],
    "--recompute": ["none", "selective", "full"],
    "--dtype": ["fp32", "bf16", "fp16"],
    "--data": ["/nonexistent", "/dev/zero", "/proc/self/mem", "/tmp", ""],
    "--resume": None,
}


@pytest.mark.parametrize("seed", range(3))
def test_the_trainer_checks_answer_or_name_a_flag(seed, tmp_path):
    """``python -m minipar.train``'s checks (:func:`minipar.job.config.check`), which run before any rank: a
    :class:`ConfigError` (one line) or a checked job, for any mutation of a small run."""
    from minipar.job.cli import parse_args
    from minipar.job.config import check

    rng = random.Random(100 + seed)
    for _ in range(15):
        argv = _mutate(rng, ["--steps", "2", "--out", str(tmp_path / "out")], TRAIN_FLAGS)

        def run(argv=argv):
            cfg, a = parse_args(argv)
            check(cfg, a.nproc or (cfg.dp or 1) * cfg.tp * cfg.pp * cfg.cp, "cpu")

        try:
            _guarded(run)
        except ConfigError as e:
            assert "\n" not in str(e), (argv, str(e))
