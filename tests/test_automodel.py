"""NeMo AutoModel's H100 rows (:mod:`minipar.perf.automodel`): its pipeline split and balanced gate as its code sets
them, and the rows' errors held where they stand."""

import torch

from minipar.perf.automodel import AUTOMODEL, SHAPES_AM, automodel_layout, automodel_rows, stage_split
from minipar.perf.hardware import GPUS
from minipar.perf.moe import ep_nodes, node_hit


def test_the_pipeline_split_gives_the_tables_virtual_stages():
    """⌈61/2⌉ + 1 = 32 stages: the table's VP 8 at PP 4 and VP 4 at PP 8, 29 of two blocks and 3 of one."""
    for pp, v in ((4, 8), (8, 4)):
        split = stage_split(61, 2, pp)
        assert len(split) == pp * v and sum(split) == 61 and split == (2,) * 29 + (1,) * 3
    for row in AUTOMODEL:
        lay = automodel_layout(row)
        assert lay.pp * lay.v == (len(lay.stage_split) if lay.stage_split else lay.pp)


def test_the_balanced_gate_sends_a_token_to_one_node():
    """AutoModel's ``FakeBalancedGate`` gives token i the experts 8i … 8i + 7 mod E: with EP 64 over 8 nodes of 8 GPUs
    (DeepSeek-V3) or EP 32 over 4 (Kimi K2) every token's experts sit on one node, the modelled group-limited routing's
    chance that a given node holds one of them, 1/n."""
    for name, ep in (("DeepSeek-V3", 64), ("Kimi-K2", 32)):
        model = SHAPES_AM[name]
        E, k = model.experts, model.top_k
        indices = torch.arange(4096 * k).view(-1, k) % E  # the gate's assignment (module doc)
        node = indices // (E // ep) // 8  # 8 EP ranks per node, E/ep consecutive experts per rank
        assert bool((node == node[:, :1]).all())
        row = next(r for r in AUTOMODEL if r[0] == name)
        n = ep_nodes(GPUS["h100"], automodel_layout(row))[1]
        assert n == ep // 8 and abs(node_hit(model, n) - 1 / n) < 1e-12


def test_the_rows_read_where_they_stand():
    """Two rows within 15 %, two labelled after seen (+16 %, +24 %), Llama 3 70B compiled; every run fits in memory."""
    rows = {label: (e, e.mfu / pub - 1) for label, e, _, pub in automodel_rows()}
    assert len(rows) == len(AUTOMODEL) == 5
    for label, (e, err) in rows.items():
        assert e.mem["total"] < 0.9 * 80 * 2**30, label
        if "MISS:seen" in label:
            assert 0.15 < err < 0.30, (label, err)
        elif "MISS:compile" in label:
            assert -0.20 < err < 0.0, (label, err)
        else:
            assert 0.0 < err <= 0.15, (label, err)
    assert sum("MISS:seen" in label for label in rows) == 2
