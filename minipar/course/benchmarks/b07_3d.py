"""Lesson 07: one 3D training step (dp2·tp2·pp2, 1F1B) vs PyTorch DDP on 8 ranks, ZeRO-1's cost,
and how well the planner ranks every factorization of 8 (8 gloo ranks on this machine's cores)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from minipar.course.bench import Row, median_time, median_times
from minipar.runtime.launch import launch

CFG = dict(vocab_size=96, block_size=32, n_layer=4, n_head=4, d_model=64)
BATCH, M = 16, 2


def job(layouts, reps: int) -> dict:
    from minipar.job.config import TrainConfig
    from minipar.job.parallelize import parallelize
    from minipar.model.gpt import GPT, GPTConfig
    from minipar.runtime.mesh import init_mesh

    cfg = GPTConfig(**CFG)
    g = torch.Generator().manual_seed(0)
    out, steps = {}, {}
    for pp, dp, tp, zero in layouts:
        torch.manual_seed(0)
        piece = parallelize(GPT(cfg), init_mesh(pp=pp, dp=dp, tp=tp), TrainConfig(microbatches=M, zero=zero))
        x = torch.randint(0, cfg.vocab_size, (BATCH // dp, cfg.block_size), generator=g, device="cpu")
        steps[(pp, dp, tp, zero)] = lambda piece=piece, x=x: piece.step(x, x, 1e-3)
    pair = [(2, 2, 2, 0), (2, 2, 2, 1)]  # ZeRO-1 against the all-reduce: interleaved, twice the rounds
    out.update(median_times({k: steps[k] for k in pair}, 2 * reps + 1, barrier=True, slowest=True))
    for k in steps:
        if k not in pair:
            out[k] = median_time(steps[k], reps, barrier=True, slowest=True)
    # PyTorch-native reference: DDP over all 8 ranks, the same global batch as M accumulated micro-batches
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(GPT(cfg))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, cfg.vocab_size, (BATCH // dist.get_world_size(), cfg.block_size), generator=g, device="cpu")

    def ddp_step():
        for i, xm in enumerate(x.chunk(M)):
            if i < M - 1:
                with model.no_sync():
                    (model(xm, xm)[1] / M).backward()
            else:
                (model(xm, xm)[1] / M).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    out["ddp"] = median_time(ddp_step, reps, barrier=True, slowest=True)
    return out


def rows(quick: bool) -> list[Row]:
    from minipar.model.gpt import GPTConfig
    from minipar.perf.hardware import cpu_device
    from minipar.perf.layout import Layout, shape_of
    from minipar.perf.model import estimate
    from minipar.perf.search import rank_correlation
    from minipar.runtime.mesh import factorizations

    reps = 2 if quick else 5
    lays = [(1, 8, 1, 0), (2, 2, 2, 0), (2, 2, 2, 1)] + [
        (*f, 0)
        for f in factorizations(8)
        if f not in ((1, 8, 1), (2, 2, 2)) and f[0] <= CFG["n_layer"] and CFG["n_head"] % f[2] == 0
    ]
    r = launch(job, world_size=8, args=(lays, reps), prefix=False)[0]
    t3, t3z, tdp, tddp = r[(2, 2, 2, 0)], r[(2, 2, 2, 1)], r[(1, 8, 1, 0)], r["ddp"]
    out = [
        Row(
            "07",
            "3D step dp2·tp2·pp2 (1F1B, m=2) vs PyTorch DDP on 8 ranks (same global batch)",
            t3 / tddp,
            note=f"{t3 * 1e3:.0f} ms vs {tddp * 1e3:.0f} ms; 8 ranks on {os.cpu_count()} cores, reported only",
        ),
        Row(
            "07",
            "minipar dp8 step (one flat all-reduce) vs PyTorch DDP dp8",
            tdp / tddp,
            target="<= 1.5",
            ok=tdp / tddp <= 1.5,
            note=f"{tdp * 1e3:.0f} ms vs {tddp * 1e3:.0f} ms",
        ),
        Row(
            "07",
            "ZeRO-1 vs all-reduce inside dp2·tp2·pp2",
            t3z / t3,
            target="<= 1.2",
            ok=t3z / t3 <= 1.2,
            note=f"{t3z * 1e3:.0f} ms vs {t3 * 1e3:.0f} ms",
        ),
    ]
    # the performance model (minipar.perf) with this machine's nominal numbers; its ranking vs the measured step times
    hw = cpu_device(5e10, alpha=2.5e-4, beta=5e7, layer_overhead=1e-3, ranks=8, cores=os.cpu_count() or 1)
    keys = [k for k in r if k != "ddp" and k[3] == 0]
    shape = shape_of(GPTConfig(**CFG))
    layout_of = {k: Layout(dp=k[1], tp=k[2], pp=k[0], micro_batch=BATCH // (k[1] * M), recompute="none") for k in keys}
    pred = [estimate(shape, hw, layout_of[k], BATCH).time["total"] for k in keys]
    rho = rank_correlation(pred, [r[k] for k in keys])
    out.append(
        Row(
            "07",
            f"planner vs measured step time, rank correlation over {len(keys)} layouts of 8",
            rho,
            unit="ρ",
            target=">= 0.7",
            ok=rho >= 0.7,
            note="Spearman; the lesson calibrates the planner's inputs",
        )
    )
    out += plan_rows()
    return out


def plan_rows() -> list[Row]:
    """The planner's command line on a custom shape and a fixed layout, and its search (issue #22: under
    5 s each, the Python start-up included), and its error on the declared test set (minipar.perf.runs)."""
    import json
    import statistics
    import subprocess
    import sys
    import time

    from minipar.perf.runs import known_miss, out_of_sample

    def timed(name, argv, check=lambda out: True):  # the command line, Python start-up included: its Row (<= 5 s)
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "minipar.plan", *argv], capture_output=True, text=True, timeout=120
        )
        dt, ok = time.perf_counter() - t0, proc.returncode == 0 and check(proc.stdout)
        note = "" if ok else f"exit {proc.returncode}: {proc.stderr[-200:]}"
        return Row("07", f"python -m minipar.plan: {name}", dt, unit="s", target="<= 5", ok=ok and dt <= 5, note=note)

    json_rows = lambda out: all("mfu" in json.loads(line) for line in out.splitlines() if line.strip())  # noqa: E731
    rows = [
        timed("custom 70B shape, fixed layout, --json (seconds)",
              ["--layers", "80", "--hidden", "8192", "--heads", "64", "--kv-heads", "8", "--ffn", "28672", "--swiglu",
               "--vocab", "32000", "--seq", "4096", "--gpus", "64", "--gpu", "h100", "--global-batch", "1024",
               "--tp", "4", "--pp", "4", "--dp", "4", "--json"], json_rows),
        timed("search 70B on 64 H100s (tp, pp, cp, dp, b, v, ZeRO, recompute; s)",
              ["--model", "70b", "--gpus", "64", "--gpu", "h100", "--seq", "4096", "--global-batch", "1024", "--json"]),
        timed("search 7B with 8 experts, top-2, on 64 H100s (and ep; s)",
              ["--model", "7b", "--gpus", "64", "--gpu", "h100", "--seq", "4096", "--global-batch", "1024",
               "--moe-experts", "8", "--moe-top-k", "2", "--json"]),
        timed("search Qwen3 235B-A22B's shape, 128 experts, top-8, FP8, --expert-tp 1, on 256 H100s (ep up to tp·dp, "
              "folded; s)",
              ["--layers", "94", "--hidden", "4096", "--heads", "64", "--kv-heads", "4", "--kv-channels", "128",
               "--ffn", "1536", "--swiglu", "--vocab", "151936", "--moe-experts", "128", "--moe-top-k", "8",
               "--gpus", "256", "--gpu", "h100", "--framework", "megatron", "--global-batch", "8192",
               "--expert-tp", "1", "--precision", "fp8", "--json"]),
        timed("search Llama 3 405B's shape (126 blocks: Megatron-Core's uneven first/last chunks where pp·v does not "
              "divide them) on 1,024 H100s (s)",
              ["--layers", "126", "--hidden", "16384", "--heads", "128", "--kv-heads", "8", "--ffn", "53248",
               "--swiglu", "--vocab", "128256", "--seq", "8192", "--gpus", "1024", "--gpu", "h100",
               "--framework", "megatron", "--global-batch", "512", "--json"], lambda out: "first" in out),
        timed("search GPT-OSS 120B's shape (a 128-token sliding window in every other block, 128 experts, top-4) on "
              "64 H100s (s)",
              ["--layers", "36", "--hidden", "2880", "--heads", "64", "--kv-heads", "8", "--kv-channels", "64",
               "--ffn", "2880", "--swiglu", "--vocab", "201088", "--seq", "4096", "--moe-experts", "128",
               "--moe-top-k", "4", "--window-size", "128", "--window-attn-skip-freq", "2", "--gpus", "64",
               "--gpu", "h100", "--framework", "megatron", "--global-batch", "1280", "--flash-attention", "--json"],
              lambda out: '"window_size": 128' in out),
        timed("search DeepSeek-V3's shape (MLA, 3 dense blocks, 256 experts and a shared one, MTP, FP8; its 61 blocks "
              "in the balanced flexible pipeline layouts) on 1,024 H100s (s)",
              ["--layers", "61", "--hidden", "7168", "--heads", "128", "--ffn", "18432", "--swiglu", "--vocab",
               "129280", "--seq", "4096", "--q-lora-rank", "1536", "--kv-lora-rank", "512", "--qk-head-dim", "128",
               "--qk-pos-emb-head-dim", "64", "--v-head-dim", "128", "--moe-experts", "256", "--moe-top-k", "8",
               "--moe-ffn-hidden-size", "2048", "--moe-shared-expert-intermediate-size", "2048", "--moe-layer-freq",
               "([0]*3+[1]*58)", "--moe-router-num-groups", "8", "--moe-router-group-topk", "4", "--mtp-num-layers",
               "1", "--gpus", "1024", "--gpu", "h100", "--framework", "megatron", "--global-batch", "8192",
               "--precision", "fp8", "--flash-attention", "--expert-tp", "1", "--json"],
              lambda out: '"kv_lora_rank": 512' in out and '"moe_router_group_topk": 4' in out),
        # 1,344 divisors: every tp·pp·dp split is a candidate; a batch as large leaves dp groups of up to ~10⁸ ranks
        timed("search 70B on 735,134,400 GPUs, global batch as large (1,344 divisors; hostile, s)",
              ["--gpus", "735134400", "--global-batch", "735134400", "--json"]),
    ]  # fmt: skip
    test_set = out_of_sample()
    errs = [abs(getattr(e, key) / pub - 1) for _, e, key, pub in test_set]
    worst = max(errs)
    hit = [x for x, (label, *_) in zip(errs, test_set) if not known_miss(label)]
    med = statistics.median(hit)  # the rows not known misses (a rule on their layout: minipar.perf.runs.known_miss)
    return rows + [
        Row("07", f"planner test set, A100 and H100 ({len(hit)} of {len(errs)} published runs, not known misses): "
            "median absolute error", 100 * med, unit="%", target="<= 7", ok=med <= 0.07,
            note=f"worst {max(hit):.0%}; all {len(errs)} rows: median {statistics.median(errs):.0%}, worst "
            f"{worst:.0%} (minipar.perf.runs; known misses: DeepSpeed ZeRO-3, llm-foundry, Megatron-LM, DGX Cloud, "
            "BLOOM and nanotron MISS:seen, nanotron MISS:step, torchtitan and OLMo-core MISS:compile, "
            "minipar.perf.mb_archive MISS:provenance, release and seen (GPT-OSS), minipar.perf.moe_zoo "
            "MISS:provenance, fms-fsdp MISS:compile; issue #22 target 15 %)"),
    ]  # fmt: skip
