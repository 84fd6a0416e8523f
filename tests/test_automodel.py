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


def test_a_pytorch_moe_plan_quotes_what_automodels_runs_read(capsys):
    """The planner's note under a layout with expert parallelism on the PyTorch stack quotes the range of AutoModel's
    rows with ep > 1 (:data:`minipar.perf.plan_notes.PYTORCH_MOE`), recomputed here; not under Megatron-Core, not
    without expert parallelism."""
    from minipar.perf.hardware import for_framework
    from minipar.perf.plan_notes import PYTORCH_MOE, pytorch_moe
    from minipar.plan import main

    errs = [e.mfu / pub - 1 for _, e, _, pub in automodel_rows() if e.layout.ep > 1]
    assert len(errs) == 4 and min(errs) > 0
    assert PYTORCH_MOE == f"{100 * min(errs):+.0f} to {100 * max(errs):+.0f} %"
    lay = automodel_layout(AUTOMODEL[1])
    assert pytorch_moe(lay, GPUS["h100"]) and not pytorch_moe(lay, for_framework(GPUS["h100"], "megatron"))
    mixtral = "--layers 8 --hidden 1024 --heads 16 --ffn 2048 --swiglu --seq 2048 --moe-experts 8 --moe-top-k 2".split()
    note = f"read {PYTORCH_MOE}, every one optimistic"
    dense = mixtral[: mixtral.index("--moe-experts")]
    for argv, says in (([*mixtral, "--ep", "8"], True), ([*mixtral, "--ep", "8", "--framework", "megatron"], False),
                       (dense, False)):  # fmt: skip
        assert main([*argv, "--gpus", "16", "--global-batch", "64"]) == 0
        assert (note in capsys.readouterr().out) == says, argv
