"""ZeRO-Offload (Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model Training",
arXiv:2101.06840, §4): fp32 master weights and Adam state live in host memory and are stepped
there by the CPU; the device keeps only the 16-bit parameters and gradients (2 + 2 bytes per
parameter instead of 16). Per step, 16-bit gradients go down to the host and 16-bit parameters
come back up: 4 bytes per parameter over PCIe.

:class:`OffloadedAdamW` is that loop, with every transfer counted; the pure functions below are
for the planner. On a CPU-only machine "device" and "host" are the same RAM: the device is a
budget you account for (:meth:`OffloadedAdamW.device_bytes`), not a separate memory. Bytes per rank.
"""

from __future__ import annotations

import torch

from minipar.optim.amp import DynamicLossScaler, MixedPrecisionAdamW


def _nbytes(ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


class OffloadedAdamW(MixedPrecisionAdamW):
    """:class:`minipar.optim.amp.MixedPrecisionAdamW` with the master weights and AdamW's moments on
    ``host`` ("cpu"; pinned when the model is on a GPU). Counts the bytes it moves:
    ``transferred["to_host"]`` (16-bit gradients) and ``transferred["to_device"]`` (16-bit
    parameters), summed over steps. Same arithmetic as without offload, so the same numbers.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        dtype: torch.dtype = torch.bfloat16,
        scaler: DynamicLossScaler | None = None,
        host: str = "cpu",
        **adamw,
    ):
        super().__init__(model, dtype, scaler, master_device=host, **adamw)
        self.transferred = {"to_host": 0, "to_device": 0}

    def _grads_to_master(self) -> None:
        self.transferred["to_host"] += _nbytes(p.grad for p in self.params)  # 16-bit, then cast on the host
        super()._grads_to_master()

    def _master_to_model(self) -> None:
        self.transferred["to_device"] += _nbytes(self.params)
        super()._master_to_model()

    def device_bytes(self) -> int:
        """Model-state bytes on the device: 16-bit parameters + 16-bit gradients."""
        return _nbytes(self.params) + _nbytes(p.grad for p in self.params)

    def host_bytes(self) -> int:
        """Model-state bytes on the host: fp32 master weights + AdamW's two moments (+ the fp32
        gradient buffer while a step runs, not counted: it is freed by ``zero_grad``)."""
        state = [v for st in self.opt.state.values() for v in st.values() if torch.is_tensor(v) and v.dim() > 0]
        return _nbytes(self.master) + _nbytes(state)


def device_bytes(num_params: int, dp: int = 1, offload: bool = True, zero_stage: int = 0) -> int:
    """Model-state bytes left on the device per rank with mixed-precision Adam (2+2+12 per param).
    With offload the 12 bytes of optimizer state go to the host; ZeRO stage shards the rest."""
    p, g, o = 2 * num_params, 2 * num_params, 12 * num_params
    if zero_stage >= 1:
        o //= dp
    if zero_stage >= 2:
        g //= dp
    if zero_stage >= 3:
        p //= dp
    return p + g + (0 if offload else o)


def transfer_bytes_per_step(num_params: int, dp: int = 1) -> int:
    """Device↔host bytes per step per rank: 16-bit grads down, 16-bit params up (ZeRO-Offload §4.1)."""
    return 2 * (2 * num_params) // dp
