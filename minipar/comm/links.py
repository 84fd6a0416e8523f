"""The link table: what a GPU's links move per direction, from the datasheets, and the α–β :class:`Link`.

    from minipar.comm.links import NVLINK4, IB_NDR, PCIE5, NVLINK_GBPS, NETWORKS
    NVLINK4.time(2**20)         # seconds to move 1 MiB over one H100's NVLink 4 (Hockney: α + n/β)
    NVLINK_GBPS[4], NETWORKS["ndr"]   # the datasheet rates the planner scales by its achieved fractions

ONE table, read by both users of link rates:

- the cluster clock (:mod:`minipar.clock`) runs on the :class:`Link` presets below (datasheet β,
  NCCL's per-ring-step α), scaled to this CPU (:func:`minipar.clock.scaling.scaled`);
- the performance model's GPU presets (:data:`minipar.perf.hardware.GPUS`, :func:`~minipar.perf.hardware.with_links`)
  take the same rates (:data:`NVLINK_GBPS`, :data:`NETWORKS`) times the fraction NCCL's rings
  achieve on them (``NVLINK_EFF``, ``IB_EFF``, assumptions named there), with their own α.

The rates, per direction as ONE GPU sees it, and where they come from:

- **NVLink** (:data:`NVLINK_GBPS`, inside a node, NVSwitch): generation 3 (A100) 300 GB/s, 4
  (H100/H200) 450 GB/s, 5 (B200) 900 GB/s: the datasheets' "NVLink 600 / 900 / 1,800 GB/s" count
  both directions (NVLink 4: 18 links × 25 GB/s per direction; NVIDIA H100 Tensor Core GPU
  datasheet). NVIDIA's ``p2pBandwidthLatencyTest`` reaches ~380 GB/s of NVLink 4 (NVIDIA/nccl
  issue #1264, 83 %).
- **InfiniBand / Ethernet** (:data:`NETWORKS`, across nodes, one HCA per GPU): HDR 200 Gb/s (DGX
  A100, Selene), NDR 400 Gb/s (ConnectX-7, DGX H100/H200/B200), 100 Gb/s RoCE; bytes/s = Gb/s / 8.
- **PCIe Gen5 x16** (:data:`PCIE5_GBPS`, GPUs without NVLink, or GPU to host): 64 GB/s (32 GT/s × 16
  lanes, 128b/130b; the H100 PCIe datasheet's "128 GB/s" counts both ways).
- **α** of the presets (:data:`NCCL_RING_LATENCY`): NCCL's per-ring-step latency with the Simple
  protocol, ``hwLat[NVLINK|NET|PCI][Ring][Simple]`` in ``src/graph/tuning.cc``: 3.4, 9.6, 5.7 µs as the table was
  before NCCL added NVLSTree; its current releases charge 14.0 µs per network ring step (NVLink and PCI unchanged).

These are link (datasheet) rates; NCCL's rings reach ~75–85 % of them (the planner's fractions).

Units: seconds, bytes, bytes/s; the tables in Gb/s (10⁹ bits/s) as the datasheets give them.
"""

from __future__ import annotations

from dataclasses import dataclass

from minipar.comm.cost import p2p_time
from minipar.errors import ConfigError

# NVLink generation -> Gb/s per direction per GPU: NVLink 3 (A100), 4 (H100/H200), 5 (B200)
NVLINK_GBPS = {3: 300 * 8, 4: 450 * 8, 5: 900 * 8}
# Inter-node networks, Gb/s per GPU (one HCA per GPU): name -> (Gb/s, what it is)
NETWORKS = {
    "hdr": (200, "InfiniBand HDR, one 200 Gb/s HCA per GPU (DGX A100, Selene)"),
    "ndr": (400, "InfiniBand NDR, one 400 Gb/s HCA per GPU (DGX H100/H200/B200)"),
    "roce100": (100, "100 Gb/s Ethernet (RoCE) per GPU"),
}
PCIE5_GBPS = 64 * 8  # PCIe Gen5 x16, per direction
# NCCL's per-ring-step latency, Simple protocol (src/graph/tuning.cc, hwLat[...][Ring][Simple]), seconds
NCCL_RING_LATENCY = {"nvlink": 3.4e-6, "net": 9.6e-6, "pci": 5.7e-6}


@dataclass(frozen=True)
class Link:
    """One direction of a link: ``time(n) = alpha_s + n / beta_bytes_per_s`` seconds for ``n`` bytes.

    Raises ConfigError when ``alpha_s < 0`` or ``beta_bytes_per_s <= 0``.
    """

    name: str
    alpha_s: float  # seconds per message (per ring step)
    beta_bytes_per_s: float  # bytes/s, one direction

    def __post_init__(self):
        if not self.alpha_s >= 0 or not self.beta_bytes_per_s > 0:
            raise ConfigError(
                f"Link {self.name!r}: alpha_s={self.alpha_s!r} must be >= 0 seconds and "
                f"beta_bytes_per_s={self.beta_bytes_per_s!r} > 0 bytes/s"
            )

    def time(self, nbytes: float) -> float:
        """Seconds to move one message of ``nbytes`` bytes: α + n/β (:func:`minipar.comm.cost.p2p_time`)."""
        return p2p_time(nbytes, self)


def gbps_to_bytes(gbps: float) -> float:
    """Gb/s (10⁹ bits/s) -> bytes/s."""
    return gbps / 8 * 1e9


NVLINK4 = Link("NVLink 4 (H100 SXM, in a node)", NCCL_RING_LATENCY["nvlink"], gbps_to_bytes(NVLINK_GBPS[4]))
IB_NDR = Link("InfiniBand NDR 400 Gb/s (across nodes)", NCCL_RING_LATENCY["net"], gbps_to_bytes(NETWORKS["ndr"][0]))
PCIE5 = Link("PCIe Gen5 x16", NCCL_RING_LATENCY["pci"], gbps_to_bytes(PCIE5_GBPS))
