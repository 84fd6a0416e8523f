"""Issue #38 item 1: ``--framework pytorch|megatron``: the device's large-GEMM efficiency per software stack, each
chosen on its own declared fit set (:mod:`minipar.perf.hardware`,
:func:`minipar.perf.published.fit_gemm_efficiency`)."""

from dataclasses import replace

import pytest

from minipar.errors import ConfigError
from minipar.perf.hardware import GEMM_EFF_BY_DEVICE, GEMM_EFF_MEGATRON, GPUS, cpu_device, for_framework
from minipar.plan import main, parser
from tests.test_plan_precision import FIXED, LLAMA70B, _run  # the same 70B command line


def test_framework_is_in_help_and_json(capsys):
    assert "--framework" in parser().format_help()
    pt = _run([*LLAMA70B, *FIXED], capsys)
    mc = _run([*LLAMA70B, *FIXED, "--framework", "megatron"], capsys)
    assert pt["framework"] == "pytorch" and pt["device"]["gemm_efficiency"] == GEMM_EFF_BY_DEVICE["H100"]
    assert mc["framework"] == "megatron" and mc["device"]["gemm_efficiency"] == GEMM_EFF_MEGATRON["H100"]
    assert mc["layout"] == pt["layout"] and mc["mem_gb"] == pt["mem_gb"]  # only the compute changes
    assert mc["time_s"]["compute"] != pt["time_s"]["compute"] and mc["mfu"] != pt["mfu"]
    h = GPUS["h100"]  # the PyTorch stack's memory passes and overlap cost, chosen with its efficiency; Megatron's 2, 0
    assert (pt["device"]["mem_passes"], pt["device"]["overlap_cost"]) == (h.mem_passes, h.overlap_cost)
    assert (mc["device"]["mem_passes"], mc["device"]["overlap_cost"]) == (2.0, 0.0)


def test_the_search_uses_it_and_prints_it(capsys):
    assert main(["--model", "13b", "--gpus", "16", "--framework", "megatron", "--top", "1"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert f"(GEMM efficiency {GEMM_EFF_MEGATRON['H100']:g}: megatron)" in head
    assert main(["--model", "13b", "--gpus", "16", "--top", "1"]) == 0
    assert "GEMM efficiency" not in capsys.readouterr().out.splitlines()[0]  # the default's output is unchanged


def test_a100_shares_one_efficiency_and_the_cpu_is_unchanged():
    a100 = GPUS["a100"]
    assert for_framework(a100, "megatron").gemm_efficiency == a100.gemm_efficiency  # Narayanan T1 is Megatron-LM
    cpu = cpu_device(1e10)
    assert for_framework(cpu, "megatron") is cpu  # measured, no shape model
    assert for_framework(GPUS["h200"], "megatron").gemm_efficiency == GEMM_EFF_MEGATRON["H200"]


def test_unknown_framework_is_one_line(capsys):
    with pytest.raises(SystemExit):
        main([*LLAMA70B, *FIXED, "--framework", "jax"])
    assert "invalid choice: 'jax'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"framework 'jax': use one of \('pytorch', 'megatron'\)"):
        for_framework(GPUS["h100"], "jax")


def test_fp8_activation_memory_follows_the_framework():
    """Transformer Engine keeps each weight GEMM's input for backward in FP8 (1 byte); torchao's Float8Linear keeps it
    in bf16: under ``--precision fp8`` only ``--framework megatron`` holds fewer activation bytes, by exactly
    ``fp8_saved_bytes`` per held block (pp 1: every block of one micro-batch), and full recomputation saves nothing."""
    from minipar.perf.flops import fp8_saved_bytes
    from minipar.perf.layout import Layout
    from minipar.perf.model import estimate
    from minipar.perf.nemo import SHAPES

    model, mb = SHAPES["Llama3-8B"], 1
    lay = Layout(dp=8, tp=1, pp=1, micro_batch=mb, zero=1, recompute="none", flash_attention=True)
    act = {}
    for fw in ("pytorch", "megatron"):
        dev = for_framework(GPUS["h100"], fw)
        for fp8 in (False, True):
            act[fw, fp8] = estimate(model, dev, replace(lay, fp8=fp8), 128).mem["activations"]
    saved = fp8_saved_bytes(model, mb, 1)
    assert saved == 2 * 8192 * 4096 + (4096 + 14336) * 8192  # QKV and MLP-up inputs, out-proj and MLP-down inputs
    assert act["pytorch", True] == act["pytorch", False] == act["megatron", False]
    assert act["megatron", False] - act["megatron", True] == pytest.approx(model.layers * saved, rel=1e-12)
    assert fp8_saved_bytes(model, mb, 1, recompute="full") == 0
    sp = fp8_saved_bytes(model, mb, 4, seq_parallel=True)
    assert sp == pytest.approx(saved / 4) and fp8_saved_bytes(model, mb, 4) > sp  # without SP the first two stay whole


def test_attention_kernel_is_in_help_and_json(capsys):
    """``--attention-kernel flash|cudnn|triton``: the FlashAttention kernel (default: the framework's), in ``--json``;
    Triton's at ``TRITON_VS_FA2`` of FlashAttention-2's largest rate (Dao 2023 §4.1), so only the compute changes."""
    from minipar.perf.gemm import ATTN_EFF, ATTN_EFF_H100, TRITON_VS_FA2, attention_rate

    assert "--attention-kernel" in parser().format_help()
    pt = _run([*LLAMA70B, *FIXED], capsys)
    mc = _run([*LLAMA70B, *FIXED, "--framework", "megatron"], capsys)
    tr = _run([*LLAMA70B, *FIXED, "--attention-kernel", "triton"], capsys)
    assert (pt["attention_kernel"], mc["attention_kernel"], tr["attention_kernel"]) == ("flash", "cudnn", "triton")
    assert tr["mem_gb"] == pt["mem_gb"] and tr["time_s"]["compute"] > pt["time_s"]["compute"]
    h100, a100 = replace(GPUS["h100"], attention="triton"), replace(GPUS["a100"], attention="triton")
    for ba, s in ((8, 1024), (128, 32768)):  # one rate at every size
        assert attention_rate(h100, True, ba, s) == h100.peak_flops * TRITON_VS_FA2 * max(
            map(max, ATTN_EFF_H100["flash"])
        )
        assert attention_rate(a100, True, ba, s) == a100.peak_flops * TRITON_VS_FA2 * ATTN_EFF["A100"]
    assert abs(TRITON_VS_FA2 - 3.5 / 6.4) < 1e-12  # FA2 1.4x forward, 2x backward; backward 2.5 forwards of work


def test_a_long_sequence_on_megatron_names_the_kernels_test_rows(capsys):
    """Where attention holds 30 % or more of a block's FLOPs and the kernel is Megatron-Core's cuDNN, the plan names
    the published runs that check that rate at such a share, Megatron-MoE-ModelZoo's long-context Qwen3 235B rows
    (minipar.perf.moe_zoo; NVIDIA's other cuDNN-kernel rows' shapes stay below 0.3 but Qwen3 30B-A3B's, whose rows run
    on the host's floor), and what NeMo's long-sequence rows, on FlashAttention-2, read (minipar.perf.nemo_long); not
    at 4K tokens, not with the flash kernel."""
    from minipar.perf.flops import attention_share
    from minipar.perf.moe_zoo import LONG, zoo_rows
    from minipar.perf.nemo import NEMO, SHAPES, nemo_rows, shape
    from minipar.perf.nemo_long import nemo_long_rows
    from minipar.perf.plan_notes import LONG_SEQ_CUDNN, LONG_SEQ_FLASH

    errs = [e.mfu / p - 1 for _, e, _, p in nemo_long_rows()]
    assert LONG_SEQ_FLASH == f"{100 * min(errs):+.0f} to {100 * max(errs):+.0f} %".lstrip("+")
    errs = [e.mfu / p - 1 for lab, e, _, p in zoo_rows() if " s=" in lab]
    assert LONG_SEQ_CUDNN == f"{100 * min(errs):+.0f} to {100 * max(errs):+.0f} %"
    shares = [attention_share(shape(f"Qwen3-235B-A22B s={s}")) for s, *_ in LONG]
    assert (round(100 * min(shares)), round(100 * max(shares))) == (55, 91)
    # the cuDNN-kernel rows (nemo, dgxc) run these shapes: below 0.3, but Qwen3 30B-A3B's, whose rows wait on the host
    assert max(attention_share(m) for k, m in SHAPES.items() if k != "Qwen3-30B-A3B") < 0.3
    qwen = [r for r in NEMO if r[1] == "Qwen3-30B-A3B" and r[4] == 1]  # micro-batch 1 (25.09's 2 is GPU-bound)
    assert qwen and all(e.time["host"] > 0 for _, e, _, _ in nemo_rows(rows=qwen))  # its attention rate unseen
    assert round(attention_share(shape("Llama2-7B s=16384")), 2) == 0.40
    cmd = ["--model", "7b", "--gpus", "128", "--tp", "4", "--pp", "1", "--dp", "8", "--cp", "4", "--sp", "--zero", "1"]
    cmd += ["--gpu", "h100", "--flash-attention", "--framework", "megatron", "--global-batch", "32", "--seq"]
    for seq, kernel, says in (
        ("131072", [], True),
        ("4096", [], False),
        ("131072", ["--attention-kernel", "flash"], False),
    ):
        assert main([*cmd, seq, *kernel]) == 0
        out = capsys.readouterr().out
        assert (f"read {LONG_SEQ_CUDNN} at it; NeMo's 2024 runs on FlashAttention-2 {LONG_SEQ_FLASH}" in out) == says


QWEN3_235B_FP8 = [  # README: Megatron-Bridge's Qwen3 235B-A22B recipe on 256 H100s, EP 32 across 4 nodes
    *("--layers 94 --hidden 4096 --heads 64 --kv-heads 4 --kv-channels 128 --ffn 1536 --swiglu --vocab 151936").split(),
    *("--seq 4096 --no-dropout --untie-embeddings-and-output-weights --position-embedding-type rope").split(),
    *("--moe-experts 128 --moe-top-k 8 --gpu h100 --framework megatron --fused-loss --global-batch 8192").split(),
    *("--tp 2 --pp 8 --dp 16 --v 4 --first-stage-layers 2 --last-stage-layers 2 --zero 1 --recompute none").split(),
    *("--sp --grad-reduce-dtype bf16 --flash-attention --precision fp8 --ep 32 --expert-tp 1").split(),
]


def test_an_exposed_nccl_all_to_all_across_nodes_names_what_runs_of_its_kind_read(capsys):
    """Where the top layout's all-to-all crosses nodes on NCCL's dispatcher with nothing hiding it, the plan quotes what
    every published run of that kind read (minipar.perf.plan_notes: NCCL_A2A_LARGE where the all-to-all held a third of
    the modelled step or more, NCCL_A2A_SMALL where less), recomputed here from the test rows the same rule picks: DGX
    Cloud's DeepSeek-V3 and Megatron-Bridge 25.09's Qwen3 235B-A22B, DGX Cloud's twelve Grok-1 rows. Printed for 25.09's
    Qwen3 235B recipe; not with the all-to-all overlapped, on the flex dispatcher, or inside one node."""
    from minipar.perf.hardware import GPUS, for_framework
    from minipar.perf.plan_notes import LARGE_SHARE, NCCL_A2A_LARGE, NCCL_A2A_SMALL, exposed_nccl_a2a
    from minipar.perf.runs import out_of_sample

    dev, large, small = for_framework(GPUS["h100"], "megatron"), [], []
    for lab, e, m, pub in out_of_sample():
        if exposed_nccl_a2a(e.layout, dev):
            (large if e.time["ep"] / e.time["total"] >= LARGE_SHARE else small).append((lab, getattr(e, m) / pub - 1))
    assert {tuple(lab.split()[:3]) for lab, _ in large} == {
        ("DGXC", "25.04", "DeepSeek-V3"),
        ("MB", "25.09", "Qwen3-235B-A22B"),
    }
    assert {lab.split()[2] for lab, _ in small} == {"Grok1-314B"} and len(small) == 12
    text = lambda rows: f"{100 * min(x for _, x in rows):+.0f} to {100 * max(x for _, x in rows):+.0f} %"  # noqa: E731
    assert (NCCL_A2A_LARGE, NCCL_A2A_SMALL) == (text(large), text(small))
    note = f"read {NCCL_A2A_LARGE} where it held a third of the step or more"
    for extra, says in (
        (["--overlap", "dp,pp"], True),  # 25.09's recipe
        (["--overlap", "dp,pp,ep"], False),  # the later releases'
        (["--overlap", "dp,pp", "--moe-dispatcher", "flex"], False),
    ):
        assert main([*QWEN3_235B_FP8, *extra]) == 0
        assert (note in capsys.readouterr().out) == says, extra
    inside = [*QWEN3_235B_FP8[: QWEN3_235B_FP8.index("--ep")], "--ep", "8", "--expert-tp", "1", "--overlap", "dp,pp"]
    assert main(inside) == 0 and note not in capsys.readouterr().out  # EP 8 over 8 consecutive ranks: one node


def test_unknown_attention_kernel_is_one_line(capsys):
    with pytest.raises(SystemExit):
        main([*LLAMA70B, *FIXED, "--attention-kernel", "xformers"])
    assert "invalid choice: 'xformers'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"attention kernel 'xformers': use one of \('flash', 'cudnn', 'triton'\)"):
        replace(GPUS["h100"], attention="xformers")


def test_fused_loss_is_in_help_and_json(capsys):
    """``--fused-loss``: the loss moves 6 bytes per logit value (hardware.FUSED_LOSS_BYTES) instead of the framework's
    unfused 48 / 52; the step gets shorter; on an A100, whose constants carry the loss, nothing changes."""
    assert "--fused-loss" in parser().format_help()
    base = [*LLAMA70B, *FIXED]
    unfused, fused = _run(base, capsys), _run([*base, "--fused-loss"], capsys)
    assert (unfused["loss_bytes"], fused["loss_bytes"]) == (48.0, 6.0) and fused["step_s"] < unfused["step_s"]
    assert _run([*base, "--framework", "megatron"], capsys)["loss_bytes"] == 52.0
    a100 = [*base, "--gpu", "a100"]
    assert _run(a100, capsys) == _run([*a100, "--fused-loss"], capsys)


def test_compile_is_in_help_and_json(capsys):
    """``--compile``: a gated model's blocks under torch.compile cross HBM as the fit set's blocks (``mem_passes``),
    eager ones ``GATED_EAGER_PASSES`` more (measured on an H100); a dense GELU model and Megatron-Core are unchanged."""
    from minipar.perf.hardware import GATED_EAGER_PASSES, block_passes

    assert "--compile" in parser().format_help()
    eager = _run([*LLAMA70B, *FIXED], capsys)
    comp = _run([*LLAMA70B, *FIXED, "--compile"], capsys)
    h = GPUS["h100"]
    assert (eager["compiled"], comp["compiled"]) == (False, True)
    assert eager["device"]["block_passes"] == h.mem_passes + GATED_EAGER_PASSES
    assert comp["device"]["block_passes"] == h.mem_passes and comp["mem_gb"] == eager["mem_gb"]
    assert comp["time_s"]["compute"] < eager["time_s"]["compute"]
    assert "--fused-kernels" in parser().format_help()  # hand-fused kernels (TinyLlama's): the same setting
    assert _run([*LLAMA70B, *FIXED, "--fused-kernels"], capsys) == comp
    assert block_passes(h, gated=False) == h.mem_passes  # MPT's (the fit set's) blocks: nothing added
    assert block_passes(for_framework(h, "megatron"), gated=True) == 2.0  # Transformer Engine's fused kernels
    assert block_passes(cpu_device(1e10), gated=True) == cpu_device(1e10).mem_passes  # measured, no shape model
