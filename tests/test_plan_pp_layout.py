"""Issue #38 item 2 ("every knob a real run sets"): Megatron-Core's ``--pipeline-model-parallel-layout`` string
(minipar.perf.pp_layout): parsed as Megatron-Core parses it, never evaluated, its expansion bounded; it sets v and the
blocks of each model chunk (``Layout.stage_split``), so DeepSeek-V3's recipe string gives the same step and memory as
its ``--first-stage-layers 1 --last-stage-layers 0``."""

import json
import time

import pytest

from minipar.errors import ConfigError
from minipar.perf.layout import Layout
from minipar.perf.pp_layout import parse_layout
from minipar.plan import main, parser
from tests.test_plan_mla import FLAGS

DSV3 = [*FLAGS, "--mtp-num-layers", "1", "--gpu", "h100", "--framework", "megatron", "--precision", "fp8",
        "--global-batch", "8192", "--tp", "2", "--pp", "8", "--dp", "64", "--zero", "1", "--recompute", "selective",
        "--recompute-modules", "mla_up_proj,mlp", "--sp", "--flash-attention", "--ep", "64", "--expert-tp", "1",
        "--moe-dispatcher", "flex", "--overlap", "pp,ep", "--grad-reduce-dtype", "bf16", "--json"]  # fmt: skip


def test_megatron_cores_grammar():
    """Chunks split by |, in chunk order; (…)*n and x*n unrolled, groups first; commas cosmetic; E, t, m, L."""
    assert parse_layout("Et|(tt|)*30mL", 8, 61, 1) == (4, (1, *[2] * 30, 0))
    assert parse_layout("Et*3|t*4|t*4|ttL", 2, 13) == (2, (3, 4, 4, 2))
    assert parse_layout("E,tt|(t,t|)*2,ttL", 4, 8) == (1, (2, 2, 2, 2))
    assert parse_layout("E|t*80|L", 3, None) == (1, (0, 80, 0))  # layers None: the Layout checks the sum
    assert Layout(8, 2, 8, v=4, stage_split=(1, *[2] * 30, 0)).stage_layers(61) == [7, 8, 8, 8, 8, 8, 8, 6]


@pytest.mark.parametrize(
    "text, pp, layers, mtp, message",
    [
        ("Et|tx|L", 3, 2, 0, "use E, t, m, L, | and (…)*n only (got x)"),
        ("Et|tL", 4, 2, 0, "has 2 model chunks, not a multiple of --pp 4"),
        ("tE|tL", 2, 2, 0, "the embedding E must open the first chunk"),
        ("Et|LtE", 2, 2, 0, "the embedding E must open the first chunk"),
        ("Et|Lt", 2, 2, 0, "the loss L must close the last chunk"),
        ("Et|tL", 2, 3, 0, "places 2 transformer blocks (t); the model has 3"),
        ("Et|tmL", 2, 2, 0, "places 1 MTP blocks (m); --mtp-num-layers is 0"),
        ("Ettt|(tt|)*29,m|L", 32, 61, 1, "the MTP blocks (m) after the last t, on the last chunk"),
        ("Et|mtL", 2, 2, 1, "the MTP blocks (m) after the last t"),
        ("E(t|)*999999999L", 2, 2, 0, "expands past 100,000 letters"),
        ("E" + "(tttttttttt)*9999" * 20000 + "L", 2, 2, 0, "expands past 100,000 letters"),  # many groups, each short
        ("E((t|)*2)*3L", 2, 2, 0, "a group is not (…)*n"),
        ("", 1, 1, 0, "use E, t, m, L"),
    ],
)
def test_bad_layouts_are_one_line(text, pp, layers, mtp, message):
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        parse_layout(text, pp, layers, mtp)
    assert message in str(err.value) and "\n" not in str(err.value) and time.perf_counter() - t0 < 1


def test_the_recipe_string_is_the_first_last_layout(capsys):
    """DeepSeek-V3's recipe string on pp 8 gives v = 4 and the same step and memory as its first/last counts; the
    table names the split compactly."""
    assert "--pipeline-model-parallel-layout" in parser().format_help()
    assert main([*DSV3, "--v", "4", "--first-stage-layers", "1", "--last-stage-layers", "0"]) == 0
    ends = json.loads(capsys.readouterr().out)
    assert main([*DSV3, "--pipeline-model-parallel-layout", "Et|(tt|)*30mL"]) == 0
    string = json.loads(capsys.readouterr().out)
    assert (string["step_s"], string["mem_gb"]) == (ends["step_s"], ends["mem_gb"])
    assert string["stage_split"] == [1, *[2] * 30, 0] and "·v4·split1/2×30/0·" in string["layout"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--v", "2"], "holds 32 chunks, v = 4 on --pp 8, not --v 2: drop --v or match it"),
        (["--stage-split", "1,60"], "--pipeline-model-parallel-layout with --stage-split: give one of them"),
        (["--first-stage-layers", "1"], "--pipeline-model-parallel-layout with --first/last-stage-layers"),
    ],
)
def test_contradictions_are_one_line(extra, message, capsys):
    assert main([*DSV3, "--pipeline-model-parallel-layout", "Et|(tt|)*30mL", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert main(["--model", "70b", "--pipeline-model-parallel-layout", "E|t*80|L"]) == 2
    assert "places a fixed layout's blocks: add --tp --pp --dp" in capsys.readouterr().err


def test_every_flexible_split_is_a_valid_balanced_layout():
    """For every layers 1-130, pp·v 3-64 and 0-2 MTP blocks: each split flexible_splits offers is a valid Layout whose
    middle chunks hold the same count, whose edge chunks (the last with its MTP blocks) hold no more, and which is not
    the even split; where pp·v divides the layers and there is no MTP block, it offers none."""
    from minipar.perf.layout_checks import flexible_splits

    for layers in range(1, 131):
        for S in range(3, 65):
            for mtp in (0, 1, 2):
                for first, last in flexible_splits(layers, S, 1, "megatron", mtp):
                    chunks = Layout(1, 1, S, first_stage_layers=first, last_stage_layers=last).chunk_layers(layers)
                    per = chunks[1]
                    assert sum(chunks) == layers and set(chunks[1:-1]) == {per}, (layers, S, mtp)
                    assert first <= per and last + mtp <= per and (first, last) != (per, per)
                if layers % S == 0 and not mtp:
                    assert flexible_splits(layers, S, 1, "megatron", mtp) == []
