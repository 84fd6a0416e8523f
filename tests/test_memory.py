"""minipar.model.memory: counted bytes equal the ZeRO-paper formula; the measured peak is real."""

import torch

from minipar.model.gpt import GPT, GPTConfig, num_params
from minipar.model.memory import adam_bytes_formula, measure_peak, saved_activation_bytes, state_bytes


def test_counted_state_equals_formula_after_a_step():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=2, d_model=32))
    opt = torch.optim.AdamW(m.parameters())
    x = torch.randint(0, 40, (2, 16))
    m(x, x)[1].backward()
    opt.step()
    counted, formula = state_bytes(m, opt), adam_bytes_formula(num_params(m))
    assert counted == formula  # exact: 4Ψ + 4Ψ + 8Ψ = 16Ψ bytes (ZeRO §3.1, fp32 variant)
    assert adam_bytes_formula(1000, mixed_precision=True) == dict(params=2000, grads=2000, optimizer=12000, total=16000)


def test_saved_activations_grow_linearly_with_batch():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=40, block_size=32, n_layer=2, n_head=2, d_model=32))
    a = [saved_activation_bytes(lambda b=b: m(torch.randint(0, 40, (b, 32)))[0].sum(), exclude=m) for b in (2, 4)]
    assert a[0] > 0 and abs(a[1] / a[0] - 2) < 0.05


def test_measured_peak_sees_a_big_allocation():
    n = 64 * 2**20  # 64 MiB

    def work():
        t = torch.ones(n // 4)
        return t.sum()

    peak = measure_peak(work)
    assert 0.9 * n < peak < 1.5 * n
