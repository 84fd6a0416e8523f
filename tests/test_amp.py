import torch

from minipar.optim.amp import DynamicLossScaler, bytes_per_param
from minipar.optim.offload import device_bytes, transfer_bytes_per_step


def test_scaler_skips_halves_and_grows():
    s = DynamicLossScaler(init_scale=8.0, growth_interval=2)
    assert not s.unscale_and_check([torch.tensor([float("inf")])])
    s.update(False)
    assert s.scale == 4.0
    g = torch.tensor([8.0])
    assert s.unscale_and_check([g]) and g.item() == 2.0
    s.update(True)
    s.update(True)
    assert s.scale == 8.0


def test_bytes():
    assert bytes_per_param("adam", True) == 16
    assert device_bytes(10, offload=True) == 40 and device_bytes(10, offload=False) == 160
    assert transfer_bytes_per_step(10) == 40


def _tiny(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 3))


def _steps(opt, model, n=3, x=None):
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(1)) if x is None else x
    for _ in range(n):
        loss = model(x.to(next(model.parameters()).dtype)).float().pow(2).mean()
        opt.backward(loss) if opt.scaler else loss.backward()
        opt.step()
        opt.zero_grad()


def test_offloaded_equals_on_device_and_counts_bytes():
    from minipar.optim.amp import MixedPrecisionAdamW
    from minipar.optim.offload import OffloadedAdamW

    a, b = _tiny(), _tiny()
    pa, pb = MixedPrecisionAdamW(a, lr=1e-2), OffloadedAdamW(b, lr=1e-2)
    _steps(pa, a)
    _steps(pb, b)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    n = sum(p.numel() for p in b.parameters())
    assert pb.transferred == {"to_host": 3 * 2 * n, "to_device": 3 * 2 * n}
    assert pb.host_bytes() == 12 * n and pb.device_bytes() == 2 * n  # grads freed by zero_grad
    assert all(p.dtype == torch.bfloat16 for p in b.parameters()) and all(m.dtype == torch.float32 for m in pb.master)


def test_fp16_overflow_skips_and_halves():
    from minipar.optim.amp import MixedPrecisionAdamW

    m = _tiny()
    s = DynamicLossScaler(init_scale=2.0**40, growth_interval=100)
    opt = MixedPrecisionAdamW(m, torch.float16, scaler=s, lr=1e-2)
    before = [p.detach().clone() for p in m.parameters()]
    _steps(opt, m, n=1)
    assert opt.skipped == 1 and s.scale == 2.0**39
    assert all(torch.equal(x, y) for x, y in zip(before, m.parameters()))  # a skipped step changes nothing


def test_saved_tensor_meter_live_returns_to_zero():
    from minipar.model.memory import SavedTensorMeter, saved_activation_bytes

    m = _tiny()
    x = torch.randn(4, 6)
    with SavedTensorMeter(exclude=m) as meter:
        y = m(x).sum()
        kept = meter.live
        y.backward()
    assert kept == saved_activation_bytes(lambda: m(x), exclude=m) and meter.peak == kept and meter.live == 0


def test_scaler_equals_torch_grad_scaler():
    """Same gradients through torch.amp.GradScaler('cpu') and DynamicLossScaler: same scales and skips."""
    p = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([p], lr=1.0)
    native = torch.amp.GradScaler("cpu", init_scale=64.0, growth_interval=2)
    mine = DynamicLossScaler(init_scale=64.0, growth_interval=2)
    for kind in ("ok", "inf", "ok", "ok", "ok", "nan", "ok", "ok", "ok"):
        g = torch.full((3,), 0.25)
        if kind != "ok":
            g[0] = float(kind)
        opt.zero_grad()
        native.scale((p * g).sum()).backward()
        before = p.detach().clone()
        native.step(opt)
        native.update()
        ok = mine.unscale_and_check([g * mine.scale])
        mine.update(ok)
        assert (native.get_scale(), not torch.equal(before, p.detach())) == (mine.scale, ok)
