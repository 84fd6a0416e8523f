"""Lesson 00 / foundation: launcher start-up cost and bf16 autocast on CPU."""

from __future__ import annotations

import socket

import torch

from minipar.course.bench import Row, median_time
from minipar.course.benchmarks import _jobs
from minipar.model.gpt import GPT, GPTConfig
from minipar.runtime.launch import launch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rows(quick: bool) -> list[Row]:
    import torch.multiprocessing as tmp

    n = 4
    reps = 2 if quick else 5
    t_launch = median_time(lambda: launch(_jobs.noop, world_size=n, prefix=False), repeats=reps)
    t_spawn = median_time(lambda: tmp.spawn(_jobs.spawn_noop, args=(n, _free_port()), nprocs=n), repeats=reps, warmup=0)
    out = [
        Row(
            "00",
            f"minipar.launch vs torch.multiprocessing.spawn, {n} ranks, one all_reduce",
            t_launch / t_spawn,
            target="<= 1.0",
            ok=t_launch <= t_spawn,
            note=f"{t_launch:.2f} s vs {t_spawn:.2f} s",
        )
    ]

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = GPT(GPTConfig(vocab_size=103))
    x = torch.randint(0, 103, (8, 128), device="cpu")

    def step(dtype):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            _, loss = model(x, x)
        loss.backward()
        model.zero_grad(set_to_none=True)

    t32 = median_time(lambda: step("fp32"), repeats=reps)
    t16 = median_time(lambda: step("bf16"), repeats=reps)
    torch.set_num_threads(threads)
    out.append(
        Row(
            "00",
            "GPT fwd+bwd step, bf16 autocast vs fp32 (CPU, 1 thread)",
            t16 / t32,
            note=f"{t16 * 1e3:.0f} ms vs {t32 * 1e3:.0f} ms; CPUs without bf16 units gain nothing",
        )
    )
    return out
