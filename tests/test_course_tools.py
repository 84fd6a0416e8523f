"""The lessons' helpers the library and the course tooling own (issue #33: workers keep only teaching drivers):
the seeded preset GPT, the default-dtype scope, random tokens, the tiny main-job settings, the all-reduce
sweep, launch capture, clock timelines, the memory timeline and the MemTracker set-up."""

import os

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from minipar import launch  # noqa: E402
from minipar.course.capture import env, fingerprint_summary, launch_capture, launch_quiet, stable_message  # noqa: E402
from minipar.course.clock_view import draw_lanes, exposed_seconds, span_seconds  # noqa: E402
from minipar.course.memory_timeline import TIMELINE_CATEGORIES, coalesce, profile_memory  # noqa: E402
from minipar.course.presets import h100_seconds, tiny_train_config  # noqa: E402
from minipar.data import builtin_corpus, random_tokens  # noqa: E402
from minipar.model.gpt import GPT, GPTConfig  # noqa: E402
from minipar.model.memory import tensor_memory_tracker  # noqa: E402
from minipar.model.presets import SMALL, default_dtype, seeded_gpt  # noqa: E402
from tests import _workers_course_tools as w  # noqa: E402


def test_seeded_gpt_is_the_seeded_preset_model_cast():
    model = seeded_gpt(SMALL, torch.float32, seed=3, dropout=0.1)
    torch.manual_seed(3)
    ref = GPT(GPTConfig(vocab_size=builtin_corpus().vocab_size, **SMALL, dropout=0.1))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values()))
    assert next(seeded_gpt().parameters()).dtype == torch.float64  # float64 by default: the proofs' dtype


def test_default_dtype_restores_the_previous_default_also_on_error():
    before = torch.get_default_dtype()
    with pytest.raises(RuntimeError), default_dtype(torch.float64):
        assert torch.zeros(1).dtype == torch.float64
        raise RuntimeError
    assert torch.get_default_dtype() == before


def test_random_tokens_are_seeded_and_in_the_vocabulary():
    x = random_tokens(3, 7, seed=1)
    assert x.shape == (3, 7) and x.dtype == torch.int64
    assert 0 <= x.min() and x.max() < builtin_corpus().vocab_size
    assert torch.equal(x, random_tokens(3, 7, seed=1)) and not torch.equal(x, random_tokens(3, 7, seed=2))


def test_tiny_train_config():
    cfg = tiny_train_config(6, tp=2, d_model=64)
    assert (cfg.steps, cfg.eval_every, cfg.batch_size, cfg.n_layer, cfg.d_model, cfg.tp) == (6, 6, 8, 2, 64, 2)
    assert cfg.out is None and cfg.sample_chars == 0 and cfg.log_every == 1


def test_h100_seconds_is_six_psi_tokens_at_half_the_peak():
    assert h100_seconds(10**9, 1000) == pytest.approx(6e12 / (0.5 * 989e12))


def test_all_reduce_sweep_on_two_ranks():
    res = launch(w.sweep, world_size=2)
    assert [s for s, _ in res[0]] == [4, 256]
    assert res[0] == res[1]  # slowest=True: every rank reports the slowest rank's median
    assert all(t > 0 for _, t in res[0])


def test_launch_capture_and_quiet():
    exc, out = launch_capture(w.fails, world_size=1, raise_=False)
    assert isinstance(exc, Exception) and "about to fail" in out
    with pytest.raises(ValueError, match="on purpose"):  # launch re-raises the rank's exception
        launch_quiet(w.fails, world_size=1)


def test_stable_message_and_env():
    msg = "[../gloo/transport.cc:42] Timed out 1500ms on [127.0.0.1]:29500 GLHF"
    assert stable_message(msg) == "Timed out <N>ms on 127.0.0.1:<port>"
    os.environ.pop("MINIPAR_TEST_ENV", None)
    with env(MINIPAR_TEST_ENV=1):
        assert os.environ["MINIPAR_TEST_ENV"] == "1"
    assert "MINIPAR_TEST_ENV" not in os.environ


def test_fingerprint_summary():
    msg = (
        "Detected mismatch between collectives on ranks. Rank 0 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=3, OpType=ALLREDUCE, TensorShape=[4], ...), but Rank 1 is running "
        "collective: CollectiveFingerPrint(SequenceNumber=3, OpType=BROADCAST, TensorShape=[4], ...). "
        "Collectives differ in the following aspects: \tOp type: ALLREDUCEvs BROADCAST"
    )
    assert fingerprint_summary(msg) == (
        "I (rank 0) run collective #3 ALLREDUCE [4], rank 1 runs #3 BROADCAST [4] -> differ in: "
        "Op type: ALLREDUCE vs BROADCAST"
    )
    assert fingerprint_summary("boom\nmore").startswith("unexpected error: boom")


TIMELINE = [("compute", "forward", 0.0, 1.0), ("comm", "ar", 0.5, 2.0), ("compute", "backward", 1.5, 1.8)]


def test_clock_view_sums_and_exposed():
    assert span_seconds(TIMELINE, "compute") == pytest.approx(1.3)
    assert span_seconds(TIMELINE, "compute", "backward") == pytest.approx(0.3)
    assert exposed_seconds(TIMELINE) == pytest.approx(1.5 - 0.5 - 0.3)  # comm 0.5-2.0 minus compute inside it
    assert exposed_seconds(TIMELINE, hidden_by=("backward",)) == pytest.approx(1.5 - 0.3)
    assert exposed_seconds(TIMELINE, hidden_by=()) == pytest.approx(1.5)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    draw_lanes(ax, [{"timeline": TIMELINE}, {"timeline": TIMELINE[:1]}], "two ranks")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 1", "rank 0"]
    plt.close(fig)


def test_memory_timeline():
    raw = [[0, 1000, 3000], [[0] + [1] * len(TIMELINE_CATEGORIES)] * 3]
    tl = coalesce(raw)
    assert tl["t"] == [0.0, 1.0, 3.0] and tl["total"] == [len(TIMELINE_CATEGORIES)] * 3
    with pytest.raises(ValueError):
        coalesce([[0], [[0, 1]]])
    model = torch.nn.Linear(64, 64)
    tl = profile_memory(lambda: model(torch.randn(8, 64)).sum().backward())
    assert max(tl["total"]) > 0 and set(tl["bytes"]) == set(TIMELINE_CATEGORIES)


def test_tensor_memory_tracker_peak_counts_the_step():
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.AdamW(model.parameters())
    tracker = tensor_memory_tracker(model, opt)
    with tracker:
        model(torch.randn(4, 256)).sum().backward()
        opt.step()
    peak = next(iter(tracker.get_tracker_snapshot("peak").values()))["Total"]
    assert peak >= 3 * 256 * 257 * 4  # weights, grads and AdamW's two moments alive at the step's end


def test_schematic_draws_boxes_arrows_and_lanes():
    import matplotlib.pyplot as plt

    from minipar.course.schematic import Arrow, Box, Span, draw_boxes, draw_timeline

    fig, (a, b) = plt.subplots(1, 2)
    draw_boxes(a, [Box("x", 0, 0, "X", "data"), Box("w", 2, 0, "W", "param")], [Arrow("x", "w", "matmul")], title="t")
    assert len(a.patches) == 2 and a.get_title() == "t"
    with pytest.raises(KeyError, match="no box named 'y'"):
        draw_boxes(a, [Box("x", 0, 0, "X")], [Arrow("x", "y")])
    draw_timeline(b, {"rank 0": [Span(0, 1, "F"), Span(1, 3, "B", "backward")], "rank 1": [Span(1, 2, "", "idle")]})
    assert len(b.patches) == 3 and [t.get_text() for t in b.get_yticklabels()] == ["rank 1", "rank 0"]
    assert {t.get_text() for t in b.get_legend().get_texts()} == {"forward", "backward", "idle"}
    plt.close(fig)


def test_proof_table_checks_at_once_and_prints_one_verdict(capsys):
    from minipar.course.verify import ProofError, ProofTable

    t = ProofTable("demo")
    t.close("losses", [1.0, 2.0], [1.0, 2.0 + 1e-12], bound=1e-9)
    t.equal("names", ["a"], ["a"])
    t.bound("bubble", 0.3, lo=0.2, bound_text="at least 20 %")
    with pytest.raises(ProofError, match="losses 2"):
        t.close("losses 2", [1.0], [1.1], bound=1e-9)  # raises at once, adds no row
    t.show("float64")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "demo" and len(out) == 6, out
    assert sum("✓" in line for line in out) == 1 and out[-1] == "✓ all 3 proofs hold (float64)"
    assert out[4].rstrip().endswith("holds ⏱ 30.0%")  # the measured value after the sanitizer's marker


def test_course_batches_and_same_run():
    from minipar.course.loop import corpus_batches, random_batch
    from minipar.course.verify import same_run
    from minipar.data import make_loader

    shares = [corpus_batches(16, 8, 3, rank, 2, seed=1) for rank in (0, 1)]
    loader = make_loader(builtin_corpus().split("train", 16), 8, 1, 2, seed=1)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(shares[1], (next(loader) for _ in range(3))))
    assert shares[0][0][0].shape == (4, 16) and not torch.equal(shares[0][0][0], shares[1][0][0])
    x, y = random_batch(50, 3, 7, seed=1)
    g = torch.Generator().manual_seed(1)
    assert torch.equal(x, torch.randint(0, 50, (3, 7), generator=g)) and torch.equal(
        y, torch.randint(0, 50, (3, 7), generator=g)
    )
    state = {"w": torch.ones(2)}
    assert same_run(([1.0], state), ([1.0], {"w": torch.ones(2)}))
    assert not same_run(([1.0], state), ([1.0], {"w": torch.ones(2) + 1e-7}))
    assert not same_run(([1.0], state), ([1.5], state))


def test_train_float64_runs_the_main_job_in_float64():
    from minipar.course.presets import train_float64

    before = torch.get_default_dtype()
    hist = train_float64(tiny_train_config(2))
    assert [r["loss"] for r in hist if "loss" in r] and torch.get_default_dtype() == before
