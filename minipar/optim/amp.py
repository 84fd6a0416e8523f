"""Mixed precision by hand: fp32 master weights, a 16-bit compute copy, dynamic loss scaling.

Micikevicius et al. 2018, "Mixed Precision Training", arXiv:1710.03740, §3 (master weights,
loss scaling); bytes per parameter with Adam 2 + 2 + 12 = 16 (Rajbhandari et al. 2020, ZeRO,
arXiv:1910.02054, §3.1). The native equivalent is ``torch.amp.GradScaler``.
"""

from __future__ import annotations

import torch


def autocast(dtype: str, device: torch.device) -> torch.autocast:
    """The main job's ``--dtype`` as a ``torch.autocast`` context on ``device``: ``"fp32"`` (off), ``"bf16"`` or
    ``"fp16"`` (matmuls in 16 bits, weights and optimizer in fp32: PyTorch's automatic mixed precision)."""
    if dtype == "fp32":
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=torch.bfloat16 if dtype == "bf16" else torch.float16)


class DynamicLossScaler:
    """Loss scaling like ``torch.amp.GradScaler``: scale the loss; on inf/nan gradients skip the
    step and multiply the scale by ``backoff`` (0.5); after ``growth_interval`` clean steps
    multiply it by ``growth`` (2.0)."""

    def __init__(
        self, init_scale: float = 2.0**16, growth: float = 2.0, backoff: float = 0.5, growth_interval: int = 2000
    ):
        self.scale, self.growth, self.backoff = float(init_scale), growth, backoff
        self.growth_interval, self._clean = growth_interval, 0

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale

    def unscale_and_check(self, grads: list[torch.Tensor]) -> bool:
        """Divide ``grads`` in place by the scale; return True if all are finite (step allowed)."""
        finite = all(bool(torch.isfinite(g).all()) for g in grads)
        if finite:
            for g in grads:
                g.div_(self.scale)
        return finite

    def update(self, finite: bool) -> None:
        if not finite:
            self.scale *= self.backoff
            self._clean = 0
        else:
            self._clean += 1
            if self._clean == self.growth_interval:
                self.scale *= self.growth
                self._clean = 0


def bytes_per_param(optimizer: str = "adam", mixed: bool = True) -> int:
    """Model-state bytes per parameter: 16-bit params + 16-bit grads + fp32 master, m, v
    (2 + 2 + 12 = 16) with mixed precision and Adam; 4 + 4 + 8 = 16 in plain fp32 Adam
    (ZeRO §3.1). SGD without momentum keeps no state."""
    state = {"adam": 8, "sgd": 0}[optimizer]
    return (2 + 2 + 4 + state) if mixed else (4 + 4 + state)


class MixedPrecisionAdamW:
    """fp32 master weights + a 16-bit compute copy (Micikevicius et al. 2018, arXiv:1710.03740, §3.1).

    ``model`` is cast to ``dtype`` (bf16 or fp16) and runs forward/backward in it; an fp32 copy of
    every parameter (the master) is what ``torch.optim.AdamW`` updates; after the step the master
    is cast back into the model. With a :class:`DynamicLossScaler` (needed for fp16: its 5 exponent
    bits flush small gradients to zero), call ``backward(loss)`` and ``step()``: gradients are
    unscaled into fp32, and a step with an inf/nan gradient is skipped and the scale halved (§3.2).

    ``master_device`` is where the master weights and AdamW's moments live: the model's device by
    default, the host for ZeRO-Offload (:class:`minipar.optim.offload.OffloadedAdamW`). Bytes per
    parameter: 2 (16-bit weights) + 2 (16-bit grads) + 4 + 4 + 4 (fp32 master, m, v) = 16.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        dtype: torch.dtype = torch.bfloat16,
        scaler: DynamicLossScaler | None = None,
        master_device: torch.device | str | None = None,
        **adamw,
    ):
        self.model, self.scaler = model.to(dtype), scaler
        self.params = [p for p in model.parameters() if p.requires_grad]
        dev = torch.device(master_device) if master_device is not None else self.params[0].device
        pin = dev.type == "cpu" and self.params[0].device.type == "cuda"  # pinned host memory: async copies
        self.master = [p.detach().to(dev, torch.float32).clone() for p in self.params]
        if pin:
            self.master = [m.pin_memory() for m in self.master]
        for m in self.master:
            m.requires_grad_(True)
        self.opt = torch.optim.AdamW(self.master, **adamw)
        self.skipped = 0

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale_loss(loss) if self.scaler else loss).backward()

    def _grads_to_master(self) -> None:
        for p, m in zip(self.params, self.master):
            m.grad = p.grad.to(m.device, torch.float32)

    def _master_to_model(self) -> None:
        with torch.no_grad():
            for p, m in zip(self.params, self.master):
                p.copy_(m.to(p.device, non_blocking=True))

    def step(self) -> bool:
        """Unscale, check, AdamW on the master, copy back. Returns False if the step was skipped."""
        self._grads_to_master()
        ok = self.scaler.unscale_and_check([m.grad for m in self.master]) if self.scaler else True
        if self.scaler:
            self.scaler.update(ok)
        if ok:
            self.opt.step()
            self._master_to_model()
        else:
            self.skipped += 1
        return ok

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None
        for m in self.master:
            m.grad = None
