"""Lesson 00: the activation formula is exact for our GPT, and the measured peak matches the count."""

import pathlib
import sys

import pytest
import torch
import torch.nn.functional as F

from minipar import launch
from minipar.course.autograd_graph import autograd_graph, graph_text
from minipar.model.gpt import GPT, GPTConfig
from minipar.model.memory import activation_bytes_formula, saved_activation_bytes
from minipar.perf.model import activation_bytes_per_layer
from minipar.perf.shape import ModelShape

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lessons"))
import workers_00  # noqa: E402  (lessons/workers_00.py, the notebook's experiment drivers)


@pytest.mark.parametrize(
    "b, s, layers, d, heads, vocab",
    [(2, 32, 1, 32, 2, 100), (4, 32, 3, 32, 4, 65), (3, 17, 2, 48, 3, 50), (1, 64, 2, 64, 8, 103)],
)
def test_activation_formula_equals_saved_tensors(b, s, layers, d, heads, vocab):
    """Exact equality (integer bytes): the formula lists every tensor autograd saves in fp32."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=vocab, block_size=s, n_layer=layers, n_head=heads, d_model=d)
    model = GPT(cfg)
    x, y = torch.randint(0, vocab, (2, b, s))
    counted = saved_activation_bytes(lambda: model(x, y)[1], exclude=model)
    formula = activation_bytes_formula(cfg, b)
    assert counted == formula["total"]
    assert formula["layers"] == layers * formula["per_layer"]


def test_korthikanti_formula():
    # Korthikanti et al. 2022 §4.1: per layer s·b·h·(34 + 5·a·s/h) bytes; GPT-3 175B shape, b = 1.
    s, h, a = 2048, 12288, 96
    layer = ModelShape(layers=1, hidden=h, heads=a, seq=s)
    assert activation_bytes_per_layer(layer, 1, 1) == s * h * (34 + 5 * a * s // h)
    assert activation_bytes_per_layer(layer, 2, 1) == 2 * activation_bytes_per_layer(layer, 1, 1)


def test_autograd_graph_of_linear_cross_entropy():
    torch.manual_seed(0)
    W, b = torch.randn(2, 3, requires_grad=True), torch.zeros(2, requires_grad=True)
    loss = F.cross_entropy(F.linear(torch.randn(4, 3), W, b), torch.tensor([0, 1, 1, 0]))
    nodes, edges = autograd_graph(loss, {id(W): "W", id(b): "b"})
    assert sorted(label for label, _ in nodes.values()) == sorted(
        ["NllLossBackward0", "LogSoftmaxBackward0", "AddmmBackward0", "TBackward0", "W.grad", "b.grad"]
    )
    assert len(edges) == 5
    assert graph_text(nodes, edges).splitlines()[0] == "NllLossBackward0"


def test_measured_peak_matches_counted_bytes():
    """Peak RSS of building + two AdamW steps, in a fresh process, vs params+grads+AdamW+activations.

    Tolerance 30%: RSS counts 4 KiB pages and allocator/kernel buffers (above the count), while
    activations are freed during backward as the gradients appear (below it); on this model the
    peak/count measured 1.15 (fp32) and 0.96 (bf16).
    """
    cfg = GPTConfig(vocab_size=64, block_size=64, n_layer=2, n_head=4, d_model=64)
    r = launch(workers_00.sweep_memory, world_size=1, args=([(cfg, 16, "fp32")],))[0][0]
    counted = r["params"] + r["grads"] + r["optimizer"] + r["activations"]
    assert activation_bytes_formula(cfg, 16)["total"] == r["activations"]  # the counted activations: the formula
    assert 4 * r["params"] == 4 * r["grads"] == 2 * r["optimizer"] == 16 * r["num_params"]
    assert 0.7 < r["peak"] / counted < 1.3, (r["peak"], counted)


def test_release_freed_memory_keeps_later_step_peaks_visible():
    """Four successive training steps in a fresh process, each peak measured, after
    ``release_freed_memory``: steps 2-4 still show their activations.

    Bound: above 0.7x the activation bytes (activations are freed during backward as the
    gradients appear, so the peak is activations plus part of the gradients; measured 1.07x).
    Without the release the later steps read only 0-4 MiB (33, 4.7, 0, 0 and 33, 1.9, 1.7, 3.7 measured);
    that is glibc's adaptive behaviour, shown in the lesson, not asserted here.
    """
    cfg = GPTConfig(vocab_size=64, block_size=64, n_layer=2, n_head=4, d_model=64)
    peaks = launch(workers_00.step_peaks, world_size=1, args=(cfg, 16, True))[0]
    act = activation_bytes_formula(cfg, 16)["total"]
    assert all(p > 0.7 * act for p in peaks[1:]), (peaks, act)
