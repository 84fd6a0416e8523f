"""Issue #38 item 2: ZeRO++-style hierarchical partitioning (``--hpz N``, ``Layout.hpz``): ZeRO-3's weights resharded
after the forward over N ranks, so the backward's all-gather runs inside them (Wang et al. 2023, arXiv:2306.10209;
DeepSpeed's ``zero_hpz_partition_size``; FSDP2's ``fully_shard(reshard_after_forward=N)``). Each number below is
derived by hand from the ring's cost (minipar.comm.cost) and ZeRO's memory formula."""

import pytest

from minipar.comm.cost import ring_time
from minipar.errors import ConfigError
from minipar.perf.flops import stage_params
from minipar.perf.hardware import GPUS
from minipar.perf.layout import Layout
from minipar.perf.layout_checks import check_layout
from minipar.perf.model import estimate
from minipar.perf.published import MODELS
from minipar.perf.shape import ModelShape
from minipar.perf.sharding import links
from minipar.plan import main, parser
from tests.test_plan_sharding import FSDP64, LLAMA8B, _run  # Llama 3 8B, ZeRO-3 over 64 H100s


def _collectives(n, nbytes, link, k) -> float:
    """k collectives of nbytes in all: the bytes once, the ring's latency k times (minipar.perf.sharding)."""
    return ring_time(n, nbytes, link) + (k - 1) * ring_time(n, 0.0, link)


def test_hpz_is_in_help_and_json(capsys):
    assert "--hpz" in parser().format_help()
    fsdp = _run([*LLAMA8B, *FSDP64], capsys)
    hpz = _run([*LLAMA8B, *FSDP64, "--hpz", "8"], capsys)
    assert hpz["hpz"] == 8 and "·hpz8" in hpz["layout"] and "hpz" not in fsdp


def test_hpz_moves_the_backward_gather_onto_the_node(capsys):
    """Llama 3 8B on 64 H100s, ZeRO-3, nothing overlapped: per micro-batch the forward all-gathers over the 64 ranks,
    the backward over its node's 8 (NVLink), the gradients reduce-scatter over the 64. The dp term is exactly that;
    the weights' secondary partition costs 2·Ψ/8 bytes more per GPU; the step is shorter."""
    fsdp = _run([*LLAMA8B, *FSDP64], capsys)
    hpz = _run([*LLAMA8B, *FSDP64, "--hpz", "8"], capsys)
    model = ModelShape(32, 4096, 32, 8192, 128256, False, 8, 14336, True)
    dev = GPUS["h100"]
    lay = Layout(64, 1, 1, zero=3, recompute="full", flash_attention=True, hpz=8)
    L, psi, k, m = links(dev, lay), stage_params(model, 1, 1)[0], model.layers + 1, hpz["m"]
    assert L["secondary"] == dev.intra and L["dp"] != dev.intra
    want = m * (
        _collectives(64, 2 * psi, L["dp"], k)  # forward: all-gather over dp
        + _collectives(8, 2 * psi, L["secondary"], k)  # backward: all-gather inside the node
        + _collectives(64, 4 * psi, L["dp"], k)  # gradients: fp32 reduce-scatter over dp
    )
    assert hpz["time_s"]["dp"] == pytest.approx(want, rel=1e-3)
    assert hpz["step_s"] < fsdp["step_s"]
    assert hpz["mem_gb"] - fsdp["mem_gb"] == pytest.approx(2 * psi / 8 / 1e9, abs=0.006)  # rounded to 10 MB


def test_hpz_across_nodes_is_slower_than_inside_one():
    """A secondary group of 16 ranks spans two nodes: its gather crosses the network, so it costs more than 8's."""
    model, dev = MODELS["13b"], GPUS["h100"]
    base = dict(dp=64, tp=1, pp=1, zero=3, recompute="full", flash_attention=True)
    e8, e16 = (estimate(model, dev, Layout(**base, hpz=n), 128) for n in (8, 16))
    assert links(dev, Layout(**base, hpz=16))["secondary"] != dev.intra
    assert e8.time["dp"] < e16.time["dp"] and e8.mem["params"] > e16.mem["params"]


BAD = [
    (dict(zero=2, hpz=8), "hpz=8 reshards ZeRO-3's weights after the forward: needs zero 3"),
    (dict(zero=3, hpz=64), "hpz=64 must divide dp=64, above 1 and below dp"),
    (dict(zero=3, hpz=1), "hpz=1 must divide dp=64, above 1 and below dp"),
    (dict(zero=3, hpz=3), "hpz=3 must divide dp=64"),
    (dict(zero=3, hpz=8, hsdp=8), "hpz=8 with hsdp=8: pick one"),
]


@pytest.mark.parametrize("kw,message", BAD, ids=[m[:30] for _, m in BAD])
def test_bad_hpz_layouts_raise_one_line(kw, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        check_layout(MODELS["7b"], Layout(64, 1, 1, **kw), 128)
    assert "\n" not in str(e.value)


def test_hpz_with_pipelines_is_refused():
    with pytest.raises(ConfigError, match="hpz=8 with pp=2: ZeRO-3 under pipelining gathers the weights once"):
        check_layout(MODELS["7b"], Layout(32, 1, 2, zero=3, hpz=8), 128)


CASES = [
    ([*LLAMA8B, *FSDP64[:7], "2", *FSDP64[8:], "--hpz", "8"], "--hpz 8 reshards ZeRO-3's weights after the forward"),
    ([*LLAMA8B, *FSDP64, "--hpz", "64"], "--hpz 64 must divide --dp 64, above 1 and below it"),
    ([*LLAMA8B, *FSDP64, "--hpz", "8", "--hsdp", "8"], "--hpz 8 with --hsdp 8: pick one"),
    ([*LLAMA8B, *FSDP64, "--hpz", "0"], "--hpz 0: must be an integer >= 1"),
    (["--model", "7b", "--hpz", "8"], "--hpz 8 modifies a fixed layout"),
    (["--model", "7b", "--tp", "1", "--pp", "2", "--dp", "32", "--zero", "3", "--hpz", "8"], "hpz=8 with pp=2"),
    (["--moe-experts", "8", "--hpz", "2"], "--hpz 2 modifies a fixed layout (the search does not try it)"),
]


@pytest.mark.parametrize("argv,message", CASES, ids=[m.split(":")[0][:40] for _, m in CASES])
def test_hpz_contradictions_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
