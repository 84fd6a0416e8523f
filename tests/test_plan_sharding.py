"""Issue #38 item 2: partial activation checkpointing (--recompute-layers), hybrid sharding (--hsdp) and ZeRO-3
(FSDP2) with pipelines, from the command line and the library."""

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from minipar.comm.cost import all_reduce_time, ring_time
from minipar.errors import ConfigError
from minipar.perf.flops import stage_params
from minipar.perf.hardware import GPUS
from minipar.perf.layout import Layout
from minipar.perf.model import estimate
from minipar.perf.published import MODELS
from minipar.perf.search import plan
from minipar.perf.shape_flags import model_shape
from minipar.perf.sharding import FSDP2_COPY_SLOWDOWN, dp_collectives, fsdp2_copy_time, links
from minipar.plan import main, parser

LLAMA70B = ["--layers", "80", "--hidden", "8192", "--heads", "64", "--kv-heads", "8", "--ffn", "28672", "--swiglu"]
LLAMA70B += ["--vocab", "128256", "--seq", "8192", "--gpu", "h100", "--global-batch", "2048"]
FIXED = ["--tp", "8", "--pp", "8", "--dp", "16", "--zero", "1", "--sp", "--flash-attention", "--json"]
LLAMA8B = ["--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "8", "--ffn", "14336", "--swiglu"]
LLAMA8B += ["--vocab", "128256", "--seq", "8192", "--gpu", "h100", "--global-batch", "512"]
FSDP64 = ["--tp", "1", "--pp", "1", "--dp", "64", "--zero", "3", "--recompute", "full", "--flash-attention", "--json"]


def _run(argv, capsys) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_new_flags_are_in_help():
    text = parser().format_help()
    assert "--recompute-layers" in text and "--hsdp" in text


def test_recompute_layers_lies_between_none_and_full(capsys):
    """10 blocks per stage (80 layers, pp 8): N = 10 is full recomputation, N = 5 sits between none and full in
    memory, step time and executed FLOPs; the JSON echoes N (and only when given)."""
    none = _run([*LLAMA70B, *FIXED, "--recompute", "none"], capsys)
    full = _run([*LLAMA70B, *FIXED, "--recompute", "full"], capsys)
    all10 = _run([*LLAMA70B, *FIXED, "--recompute", "full", "--recompute-layers", "10"], capsys)
    half = _run([*LLAMA70B, *FIXED, "--recompute", "full", "--recompute-layers", "5"], capsys)
    assert "recompute_layers" not in full and half["recompute_layers"] == 5
    assert half["layout"].endswith("full-rc5·flash·sp")
    for k in ("step_s", "mem_gb", "mfu", "tflops_per_gpu"):
        assert all10[k] == full[k]
    assert none["mem_gb"] > half["mem_gb"] > full["mem_gb"]
    assert none["step_s"] < half["step_s"] < full["step_s"]
    # compute: 5 of 10 blocks pay one more forward (a backward is 2 forwards): half of full's extra compute
    extra = full["time_s"]["compute"] - none["time_s"]["compute"]
    assert half["time_s"]["compute"] - none["time_s"]["compute"] == pytest.approx(extra / 2, rel=0.01)


def test_recompute_layers_per_chunk_with_interleaving():
    """With v = 2 each of a rank's two chunks recomputes N blocks: N = 5 of 5 blocks per chunk is all of them."""
    model, dev = MODELS["70b"], GPUS["h100"]
    full = estimate(model, dev, Layout(16, 8, 8, v=2, recompute="full"), 1024)
    n5 = estimate(model, dev, Layout(16, 8, 8, v=2, recompute="full", recompute_layers=5), 1024)
    n1 = estimate(model, dev, Layout(16, 8, 8, v=2, recompute="full", recompute_layers=1), 1024)
    assert n5.time["total"] == full.time["total"] and n5.mem["total"] == full.mem["total"]
    assert n1.time["total"] < full.time["total"] and n1.mem["total"] > full.mem["total"]


def test_hsdp_shards_inside_the_node_and_replicates_across(capsys):
    """Llama 3 8B, FSDP on 64 H100s: HSDP with shard groups of 8 (one node) all-gathers and reduce-scatters on
    NVLink and all-reduces 1/8 of the gradients across nodes; its states are sharded 8-way, not 64-way."""
    fsdp = _run([*LLAMA8B, *FSDP64], capsys)
    hsdp = _run([*LLAMA8B, *FSDP64, "--hsdp", "8"], capsys)
    same = _run([*LLAMA8B, *FSDP64, "--hsdp", "64"], capsys)
    assert hsdp["hsdp"] == 8 and "·hsdp8" in hsdp["layout"] and "hsdp" not in fsdp
    assert {k: same[k] for k in ("step_s", "mem_gb")} == {k: fsdp[k] for k in ("step_s", "mem_gb")}
    assert hsdp["mem_gb"] > fsdp["mem_gb"]
    dev, lay = GPUS["h100"], Layout(64, 1, 1, zero=3, hsdp=8)
    L = links(dev, lay)
    assert L["shard"] == dev.intra and L["replicate"] == dev.inter  # a replica group: one rank (one NIC) a node
    # FSDP's 64-rank ring has all 8 ranks of each node in it: every rail of the node, up to NVLink's rate; so
    # at 64 GPUs HSDP (NVLink, then 1/8 of the bytes on one NIC) is not faster (it pays off in latency at scale)
    assert links(dev, Layout(64, 1, 1, zero=3))["dp"][1] == min(8 * dev.inter[1], dev.intra[1])
    assert hsdp["time_s"]["dp"] >= fsdp["time_s"]["dp"]


def test_hsdp_costs_are_the_sum_of_its_two_collectives():
    """ZeRO-1 with HSDP, no overlap: reduce-scatter (fp32) + all-gather (bf16) in the shard group, all-reduce of
    the 1/H shard across the replicas (minipar.perf.sharding)."""
    model, dev = MODELS["70b"], GPUS["h100"]
    lay = Layout(32, 8, 1, zero=1, hsdp=4, recompute="full")
    e = estimate(model, dev, lay, 256)
    L, psi = links(dev, lay), stage_params(model, 1, 8)[0]
    want = ring_time(4, 4 * psi, L["shard"]) + ring_time(4, 2 * psi, L["shard"])
    want += all_reduce_time(8, 4 * psi / 4, L["replicate"])
    assert e.time["dp"] == pytest.approx(want, rel=1e-6)
    assert L["shard"] == dev.inter  # 4 dp ranks × tp 8 = 32 GPUs: across nodes


def test_zero3_with_pipelines_is_fsdp2s_per_step_gather(capsys):
    """ZeRO-3 with pp > 1 (torchtitan's 3-D layout; before: refused): FSDP2 under pipelining gathers a stage's
    weights once per step and reduce-scatters once, so memory and bytes are ZeRO-1's (only the latency differs: one
    collective per FSDP unit, a block, against one bucket, ``minipar.perf.sharding.collectives``); the search does not
    try it twice."""
    z1 = _run([*LLAMA70B, *FIXED, "--recompute", "selective"], capsys)
    z3 = _run([*LLAMA70B, *FIXED[:7], "3", *FIXED[8:], "--recompute", "selective"], capsys)
    assert "zero3" in z3["layout"] and z3["mem_gb"] == z1["mem_gb"]
    assert z1["step_s"] < z3["step_s"] < 1.001 * z1["step_s"]
    rows = plan(MODELS["70b"], GPUS["h100"], 64, 256)
    assert not any(e.layout.zero == 3 and e.layout.pp > 1 for e, _ in rows)


CASES = [
    ([*LLAMA70B, *FIXED, "--recompute-layers", "2"], "--recompute-layers 2 recomputes that many whole blocks"),
    ([*LLAMA70B, *FIXED, "--recompute", "full", "--recompute-layers", "0"], "--recompute-layers 0: must be"),
    (
        [*LLAMA70B, *FIXED, "--recompute", "full", "--recompute-layers", "11"],
        "recompute_layers=11 (--recompute-layers): between",
    ),
    (["--model", "70b", "--recompute-layers", "2"], "--recompute-layers 2 modifies a fixed layout"),
    ([*LLAMA8B, *FSDP64, "--hsdp", "3"], "--hsdp 3 must divide --dp 64 (shard groups inside dp); use --hsdp 1, 2, 4"),
    ([*LLAMA8B, *FSDP64[:7], "0", *FSDP64[8:], "--hsdp", "8"], "--hsdp 8 shards ZeRO's model states over 8 ranks"),
    (["--model", "70b", "--hsdp", "8"], "--hsdp 8 modifies a fixed layout"),
    (["--moe-experts", "8", "--hsdp", "2"], "--hsdp 2 modifies a fixed layout (the search does not try it)"),
    ([*LLAMA70B, *FIXED, "--fsdp2"], "--fsdp2 with --zero 1: FSDP2's fully_shard is ZeRO-3"),
    ([*LLAMA70B, *FIXED, "--stage-split", "10,10,x"], "--stage-split 10,10,x: give the blocks of each pipeline stage"),
    (
        [*LLAMA70B, *FIXED, "--stage-split", "10,10"],
        "--stage-split has 2 counts for --pp 8 · --v 1: give one per model chunk",
    ),
    ([*LLAMA70B, *FIXED, "--stage-split", "11,9,10,10,10,10,10,11"], "stage_split=11,9,10,10,10,10,10,11 holds 81"),
    (
        [*LLAMA70B, *FIXED, "--stage-split", "10,10,10,10,10,10,10,10", "--v", "2"],
        "--stage-split has 8 counts for --pp 8 · --v 2",
    ),
    (["--model", "70b", "--stage-split", "40,40"], "--stage-split 40,40 splits a fixed layout's model chunks"),
    ([*LLAMA70B, *FIXED, "--ddp-bucket-mb", "0"], "--ddp-bucket-mb 0: a finite number of MiB > 0"),
    ([*LLAMA8B, *FSDP64, "--ddp-bucket-mb", "25"], "--ddp-bucket-mb 25 with --zero 3: DDP's buckets are ZeRO 0/1's"),
    (["--model", "70b", "--ddp-bucket-mb", "25"], "--ddp-bucket-mb 25 modifies a fixed dense layout"),
    (
        [*LLAMA70B, *FIXED, "--stage-split", "11,9,10,10,10,10,10,10", "--first-stage-layers", "11"],
        "--stage-split with --first/last-stage-layers",
    ),
]


@pytest.mark.parametrize("argv,message", CASES, ids=[m.split(":")[0][:40] for _, m in CASES])
def test_contradictions_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith(f"error: {message}") and cap.err.count("\n") == 1, cap.err


def test_the_library_refuses_the_same():
    model, dev = MODELS["70b"], GPUS["h100"]
    with pytest.raises(ConfigError, match="hsdp=3 must divide dp=16"):
        estimate(model, dev, Layout(16, 8, 1, zero=1, hsdp=3), 256)
    with pytest.raises(ConfigError, match="hsdp=4 shards ZeRO's model states"):
        estimate(model, dev, Layout(16, 8, 1, hsdp=4), 256)
    with pytest.raises(ConfigError, match="needs recompute='full'"):
        estimate(model, dev, Layout(16, 8, 1, recompute="selective", recompute_layers=2), 256)
    for split, message in (((40, 41), "holds 81 blocks"), ((40,), "give pp·v=2 block counts"), ((80, -0), None)):
        if message is None:
            assert estimate(model, dev, Layout(16, 8, 2, stage_split=split), 256).fits is not None  # a stage of none
            continue
        with pytest.raises(ConfigError, match=message):
            estimate(model, dev, Layout(16, 8, 2, stage_split=split), 256)


def test_stage_split_is_each_stages_blocks(capsys):
    """``--stage-split`` (``Layout.stage_split``): the run's own split, in --help and --json; a split into a first
    and a last stage is the same layout as --first/last-stage-layers; the last stage also runs the logit layer and
    the loss (Llama 3 8B: about two blocks' time), so moving blocks onto it slows the step, and a split that leaves
    it two fewer (nanotron's, 18/14) runs within 1 % of the even one; each stage's blocks set its memory."""
    assert "--stage-split" in parser().format_help()
    pp2 = ["--tp", "1", "--pp", "2", "--dp", "32", "--zero", "1", "--flash-attention", "--json"]
    even = _run([*LLAMA8B, *pp2], capsys)
    split = _run([*LLAMA8B, *pp2, "--stage-split", "18,14"], capsys)
    ends = _run([*LLAMA8B, *pp2, "--first-stage-layers", "18", "--last-stage-layers", "14"], capsys)
    heavy = _run([*LLAMA8B, *pp2, "--stage-split", "14,18"], capsys)
    assert split["stage_split"] == [18, 14] and "stage_split" not in even and "·split18/14·" in split["layout"]
    assert (split["step_s"], split["mem_gb"]) == (ends["step_s"], ends["mem_gb"])
    assert heavy["step_s"] > 1.05 * even["step_s"] and split["step_s"] == pytest.approx(even["step_s"], rel=0.01)
    assert split["mem_gb"] > even["mem_gb"] > heavy["mem_gb"]  # stage 0 keeps pp micro-batches' activations
    lay = Layout(64, 8, 4, stage_split=(30, 20, 20, 10))
    assert lay.stage_layers(80) == [30, 20, 20, 10] and lay.chunk_layers(80) == [30, 20, 20, 10]


def test_ddp_buckets_each_pay_their_latency(capsys):
    """``--ddp-bucket-mb N`` (``Layout.bucket_mb``): ZeRO 0/1's reduction in PyTorch DDP's buckets of N MiB of 16-bit
    gradients, each its own collective (``dp_collectives`` in --json: ⌈psi · 2 / N MiB⌉, with or without overlap);
    smaller buckets pay more latencies; across 64 nodes that is what a 25 MiB bucket costs against Megatron-Core's."""
    assert "--ddp-bucket-mb" in parser().format_help()
    dp512 = ["--tp", "1", "--pp", "1", "--dp", "512", "--zero", "1", "--flash-attention", "--overlap", "dp", "--json"]
    mcore = _run([*LLAMA8B, *dp512], capsys)
    ddp25 = _run([*LLAMA8B, *dp512, "--ddp-bucket-mb", "25"], capsys)
    ddp5 = _run([*LLAMA8B, *dp512, "--ddp-bucket-mb", "5"], capsys)
    params = model_shape(parser().parse_args(LLAMA8B))[1].params
    assert "bucket_mb" not in mcore and ddp25["bucket_mb"] == 25 and "·ddp25MB" in ddp25["layout"]
    assert mcore["dp_collectives"] == -(-params // 512e6)  # max(40M, 1M·dp) parameters a bucket
    assert ddp25["dp_collectives"] == -(-params * 2 // (25 * 2**20))
    assert ddp5["dp_collectives"] > ddp25["dp_collectives"] > mcore["dp_collectives"]
    assert ddp5["time_s"]["dp"] > ddp25["time_s"]["dp"] > mcore["time_s"]["dp"]
    model, dev = MODELS["70b"], GPUS["h100"]
    for bad, message in ((-1, "bucket_mb=-1: DDP's bucket size"), (float("nan"), "bucket_mb=nan")):
        with pytest.raises(ConfigError, match=message):
            estimate(model, dev, Layout(16, 8, 1, zero=1, bucket_mb=bad), 256)
    with pytest.raises(ConfigError, match="bucket_mb=25 with zero=3"):
        estimate(model, dev, Layout(16, 8, 1, zero=3, bucket_mb=25), 256)


def test_op_recompute_is_torchtitans_every_second_matmul(capsys):
    """``--recompute op`` (issue #38: op-level recompute): torchtitan's per-op checkpointing recomputes every second
    weight matmul of a block (K, O, W3 of a Llama block) and its memory-bound operators: FLOPs and time between
    selective and full, memory between full's and selective's; experts refused in one line."""
    from minipar.perf.flops import model_flops, op_recomputed_matmuls, op_saved_values
    from minipar.perf.layout import ModelShape
    from minipar.plan import main

    llama8b = ModelShape(32, 4096, 32, 8192, 128256, False, 8, 14336, True, False)
    assert op_recomputed_matmuls(llama8b) == [(4096, 1024, True), (4096, 4096, False), (4096, 14336, True)]
    B = 16
    extra = 32 * sum(2 * B * 8192 * k * n for k, n, _ in op_recomputed_matmuls(llama8b))
    assert model_flops(llama8b, B, "op", True) - model_flops(llama8b, B, "none", True) == extra
    lay = lambda r: Layout(8, 1, 1, micro_batch=2, zero=3, recompute=r, flash_attention=True)  # noqa: E731
    est = {r: estimate(llama8b, GPUS["h100"], lay(r), B) for r in ("selective", "op", "full")}
    assert est["selective"].time["total"] < est["op"].time["total"] < est["full"].time["total"]
    assert "op-rc" in str(est["op"].layout)
    # memory: what its policy saves (op_saved_values): the block's input, Q, V, the attention output and log-sum-exp,
    # W1's and W2's outputs, per token; selective keeps Korthikanti's set, full the block's input
    assert op_saved_values(llama8b, 1, False) == 4096 + 4096 + 1024 + 4096 + 2 * 32 + 14336 + 4096
    acts = {r: e.mem["activations"] for r, e in est.items()}
    assert acts["full"] < acts["op"] < acts["selective"]
    args = ["--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "8", "--ffn", "14336", "--swiglu"]
    assert (
        main(
            [
                *args,
                "--tp",
                "1",
                "--pp",
                "1",
                "--dp",
                "8",
                "--zero",
                "3",
                "--recompute",
                "op",
                "--flash-attention",
                "--json",
            ]
        )
        == 0
    )
    assert "op-rc" in json.loads(capsys.readouterr().out.splitlines()[0])["layout"]
    moe = ModelShape(8, 1024, 8, 1024, 32000, False, None, 4096, True, False, 8, 2)
    with pytest.raises(ConfigError, match="recompute='op'"):
        estimate(moe, GPUS["h100"], Layout(8, 1, 1, recompute="op"), 64)


def test_search_tries_op_recompute_under_a_pytorch_stack():
    """The search tries torchtitan's per-op checkpointing on a GPU under a PyTorch stack, dense models only: not under
    Megatron-Core, not for experts, not on minipar's CPU ranks (which run none, selective or full)."""
    from dataclasses import replace

    from minipar.perf.hardware import cpu_device, for_framework
    from minipar.perf.search import recompute_modes

    model, h100 = MODELS["7b"], GPUS["h100"]
    assert "op" in recompute_modes(model, h100)
    assert "op" not in recompute_modes(model, for_framework(h100, "megatron"))
    assert "op" not in recompute_modes(replace(model, experts=8, top_k=2), h100)
    assert "op" not in recompute_modes(model, cpu_device(1e10))
    rows = plan(model, h100, 8, 64, micro_batches=(1,), vs=(1,), cps=(1,))
    assert {e.layout.recompute for e, _ in rows} == {"none", "selective", "op", "full"}


def test_json_names_the_collectives_each_pass_pays_latency_for(capsys):
    """``--json``'s ``dp_collectives`` (minipar.perf.sharding.collectives): FSDP's units (a block each, and the root)
    under ZeRO-3; Megatron-Core's buckets of max(40M, 1M·dp) parameters with the DP reduction overlapped; one
    collective without overlap."""
    fsdp = _run([*LLAMA8B, *FSDP64], capsys)
    assert fsdp["dp_collectives"] == 32 + 1
    one = _run([*LLAMA70B, *FIXED, "--recompute", "selective"], capsys)
    overlapped = _run([*LLAMA70B, *FIXED, "--recompute", "selective", "--overlap", "dp"], capsys)
    assert one["dp_collectives"] == 1 and overlapped["dp_collectives"] > 1
    assert overlapped["time_s"]["dp"] != one["time_s"]["dp"]


def test_fsdp2_copies_are_on_the_compute_stream(capsys):
    """``--fsdp2`` (FSDP2's ``fully_shard``): per micro-batch under ZeRO-3 two gathered copies out (2 + 2 bytes per
    parameter each) and one gradient copy in (2 read + 4 written in fp32), at the HBM bandwidth over their measured
    slowdown and never hidden, so the step grows by exactly that; once per step under pipelining; nothing below
    ZeRO-2. In --help and --json. The slowdowns are the medians of the stored H100 measurements; a bf16 reduction
    copies without a cast."""
    assert "--fsdp2" in parser().format_help()
    argv = [*LLAMA8B, *FSDP64, "--micro-batch", "2", "--overlap", "dp"]
    fsdp1, fsdp2 = _run(argv, capsys), _run([*argv, "--fsdp2"], capsys)
    assert (fsdp1["fsdp2"], fsdp2["fsdp2"], fsdp2["m"]) == (False, True, 4)
    dev, model = GPUS["h100"], model_shape(parser().parse_args(argv))[1]
    out, inn, plain = FSDP2_COPY_SLOWDOWN
    expect = 4 * stage_params(model, 1, 1, "megatron")[0] * (2 * 4 * out + 6 * inn) / dev.hbm_bw
    assert abs((fsdp2["time_s"]["dp"] - fsdp1["time_s"]["dp"]) - expect) < 2e-4, (fsdp2["time_s"], expect)
    assert fsdp2["mem_gb"] == fsdp1["mem_gb"]
    lay = Layout(16, 8, 8, zero=3)
    assert fsdp2_copy_time(dev, lay, 1e9, 1, 1) == 0.0  # not FSDP2
    two = replace(dev, fsdp2=True)
    assert fsdp2_copy_time(two, lay, 1e9, 1, 1) == 1e9 * (2 * 2 * out + (2 + 4) * inn) / dev.hbm_bw  # once per step
    assert fsdp2_copy_time(two, Layout(16, 8, 8, zero=1), 1e9, 1, 1) == 0.0

    assert fsdp2_copy_time(two, replace(lay, grad_bytes=2), 1e9, 1, 1) == 1e9 * (2 * 2 * out + 4 * plain) / dev.hbm_bw
    stored = Path(__file__).resolve().parent.parent / "examples" / "h100_2026-11-27"
    runs = ("fsdp2_copies.jsonl", "fsdp2_copies_2.jsonl")
    lines = [line for f in runs for line in (stored / f).read_text().splitlines()]
    rows = [json.loads(line) for line in lines]
    for k, key in enumerate(("copy_out", "copy_in", "copy_in_bf16")):
        ratios = [r[f"{key}_s"] / r[f"model_{key}_s"] for r in rows if f"{key}_s" in r]
        assert round(statistics.median(ratios), 2) == FSDP2_COPY_SLOWDOWN[k], (key, ratios)


def test_grad_reduce_hides_the_reduction_and_leaves_zeros_gather_exposed(capsys):
    """``--overlap grad_reduce`` (Megatron-LM's ``--overlap-grad-reduce`` alone; DeepSpeed's ``overlap_comm``;
    nanotron): under ZeRO-1 the reduction hides behind the last micro-batch's backward, in the same buckets as with
    ``dp``, while the weights' all-gather after the optimizer step stays exposed: on a device where hiding is free it
    costs more than ``dp`` by what ``dp`` hid of the all-gather behind the first forward, a part of its ring time.
    ZeRO-0 has no all-gather: there ``grad_reduce`` is ``dp``."""
    dp = [*LLAMA70B, *FIXED, "--recompute", "selective"]
    runs = {o: _run([*dp, "--overlap", o] if o else dp, capsys) for o in ("", "dp", "grad_reduce")}
    t = {o: r["time_s"]["dp"] for o, r in runs.items()}
    assert runs["grad_reduce"]["overlap"] == ["grad_reduce"] and runs[""]["overlap"] == []
    assert t["dp"] < t["grad_reduce"] < t[""]
    assert runs["grad_reduce"]["dp_collectives"] == runs["dp"]["dp_collectives"] > 1 == runs[""]["dp_collectives"]
    model, dev = MODELS["70b"], GPUS["a100"]  # overlap_cost 0: what hides is free
    lay = Layout(16, 8, 1, zero=1, recompute="selective", seq_parallel=True, overlap=frozenset({"dp"}))
    full = estimate(model, dev, lay, 256).time["dp"]
    part = estimate(model, dev, replace(lay, overlap=frozenset({"grad_reduce"})), 256).time["dp"]
    k = dp_collectives(model, dev, lay)
    gather = k * ring_time(16, dev.bytes_per_value * stage_params(model, 8, 1)[0] / k, links(dev, lay)["dp"])
    hidden = gather - (part - full)  # what "dp" hid of the all-gather behind the first forward
    assert 0 < hidden < gather
    z0 = {
        o: estimate(model, dev, replace(lay, zero=0, overlap=frozenset({o})), 256).time["dp"]
        for o in ("dp", "grad_reduce")
    }
    assert z0["grad_reduce"] == pytest.approx(z0["dp"], rel=1e-12)
    with pytest.raises(ConfigError, match="overlap=\\['dp', 'grads'\\]: grads not one of dp, grad_reduce, pp, tp"):
        estimate(model, dev, replace(lay, overlap=frozenset({"dp", "grads"})), 256)
    with pytest.raises(ConfigError, match="overlap='dp': a set of names"):
        estimate(model, dev, replace(lay, overlap="dp"), 256)
    assert estimate(model, dev, replace(lay, overlap=["grad_reduce"]), 256).time["dp"] == pytest.approx(part)


def test_untied_output_layer_and_rotary_positions_count_as_llama_does(capsys):
    """``ModelShape.tied_embeddings`` / ``learned_positions`` (``--untie-embeddings-and-output-weights``,
    ``--position-embedding-type``, Megatron-LM's flags): Llama's parameter counts come out as Meta publishes them (its
    own V×h output layer, rotary positions without a table); with pp = 1 the untied head is on the one stage beside the
    embedding, with pp > 1 every stage holds what it did (Megatron-LM keeps a tied head's copy on the last stage); a
    token's FLOPs leave out the lookups (6·N, N without the position table or an untied embedding)."""
    from minipar.perf.flops import moe_flops_per_token
    from minipar.perf.torchtitan import LLAMA31

    published = {  # Hugging Face's safetensors parameter counts; the model adds biases and LayerNorm's 2h more a block
        LLAMA31["8B"]: 8_030_261_248,
        LLAMA31["70B"]: 70_553_706_496,
        MODELS["7b"]: 6_738_415_616,  # Llama 2
        MODELS["13b"]: 13_015_864_320,
        MODELS["70b"]: 68_976_648_192,
    }
    for m, n in published.items():
        assert 0 < m.params - n < 1e-3 * n, (m, m.params)
    llama = LLAMA31["8B"]
    gpt = replace(llama, tied_embeddings=True, learned_positions=True)
    vh, sh = llama.vocab * llama.hidden, llama.seq * llama.hidden
    assert llama.params - gpt.params == vh - sh and llama.lookup_params == vh and gpt.lookup_params == sh
    assert stage_params(llama, 1, 1)[0] - stage_params(gpt, 1, 1)[0] == vh - sh
    two = [a - b for a, b in zip(stage_params(llama, 2, 1), stage_params(gpt, 2, 1))]
    assert two == [-sh, 0]
    dense = replace(llama, experts=1, top_k=1)  # one expert: the dense model plus a router of h per block
    assert (
        moe_flops_per_token(dense, 1, 1)
        == 6 * (llama.params - vh + llama.layers * llama.hidden) + 12 * 32 * 4096**2 * 2
    )
    shape = ["--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "8", "--ffn", "14336", "--swiglu"]
    shape += ["--vocab", "128256", "--seq", "8192", "--tp", "1", "--pp", "1", "--dp", "8", "--zero", "3", "--json"]
    gpt_row = _run(shape, capsys)
    row = _run([*shape, "--untie-embeddings-and-output-weights", "--position-embedding-type", "rope"], capsys)
    assert (gpt_row["tied_embeddings"], gpt_row["learned_positions"]) == (True, True)
    assert (row["tied_embeddings"], row["learned_positions"]) == (False, False)
    assert row["mem_gb"] > gpt_row["mem_gb"] and row["time_s"]["dp"] > gpt_row["time_s"]["dp"]
    assert row["time_s"]["compute"] == gpt_row["time_s"]["compute"]  # the same matmuls: the logit layer either way
    with pytest.raises(ConfigError, match="ModelShape.tied_embeddings='no': must be True or False"):
        replace(llama, tied_embeddings="no")
    with pytest.raises(ConfigError, match="position_type='alibi': use learned_absolute, rope or none"):
        gpt.with_embeddings(position_type="alibi")
    assert gpt.with_embeddings(True, "rope") == llama and llama.with_embeddings() == llama
    preset = _run(["--model", "70b", "--tp", "8", "--pp", "1", "--dp", "8", "--json"], capsys)
    assert (preset["tied_embeddings"], preset["learned_positions"]) == (False, False)  # Llama 2 70B
