"""The exercise checkers' anti-cheat rules (issue 33): named by module, resolved when a lesson's checks
are imported, loud on a name that resolves to nothing, and each lesson an explicit ``Lesson``.

A rule that named a moved file used to be accepted silently and refuse nothing; here every name a
rule holds must resolve, and the modules each lesson promises to refuse (minipar's reference of the
exercise and PyTorch's) are refused, function by function. Fast: nothing runs on ranks.
"""

import importlib
import inspect
from pathlib import Path

import pytest

from exercises import check
from exercises.checks.common import Lesson
from exercises.checks.watch import Refuse

ROOT = Path(__file__).resolve().parent.parent

# (lesson, a module whose functions that lesson's exercises may not call): minipar's own reference of
# each exercise and PyTorch's. A package rule ("minipar.model.moe") is tested through modules inside it.
REFUSED = [
    ("00", "torch.optim.adamw"),
    ("00", "torch.autograd.functional"),
    ("00", "minipar.optim.amp"),
    ("00", "minipar.optim.offload"),
    ("01", "minipar.comm.collectives"),
    ("01", "minipar.comm.p2p"),
    ("01", "torch.distributed._functional_collectives"),
    ("02", "minipar.dp.buckets"),
    ("02", "minipar.dp.ddp"),
    ("02", "torch.nn.parallel.distributed"),
    ("03", "minipar.zero.flat"),
    ("03", "minipar.zero.stage12"),
    ("03", "minipar.zero.redundancy"),
    ("03", "minipar.job.parallelize"),
    ("03", "torch.distributed.optim.zero_redundancy_optimizer"),
    ("04", "minipar.tp.mappings"),
    ("04", "minipar.tp.layers"),
    ("04", "torch.distributed.tensor._api"),
    ("05", "minipar.pp.schedules"),
    ("05", "minipar.pp.simulation"),
    ("05", "minipar.perf.model"),
    ("05", "torch.distributed.pipelining.schedules"),
    ("06", "minipar.pp.schedules"),
    ("06", "minipar.pp.zero_bubble"),
    ("07", "minipar.runtime.mesh"),
    ("07", "torch.distributed.device_mesh"),
    ("08", "minipar.model.recompute"),
    ("08", "minipar.optim.amp"),
    ("08", "torch.utils.checkpoint"),
    ("08", "torch.amp.grad_scaler"),
    ("09", "minipar.dp.compression"),
    ("09", "torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook"),
    ("10", "minipar.course.benchmarks.b01_collectives"),
    ("10", "minipar.comm.collectives"),
    ("11", "minipar.cp.blocks"),
    ("11", "minipar.cp.ring"),
    ("11", "minipar.comm.collectives"),
    ("11", "torch.distributed.tensor.experimental._context_parallel._attention"),  # issue 37: PyTorch's CP
    ("12", "minipar.model.moe.router"),
    ("12", "minipar.model.moe.dispatch"),
    ("12", "minipar.ep.parallel"),
    ("12", "minipar.ep.zero"),
    ("12", "minipar.comm.all_to_all"),
    ("12", "torch.distributed.nn.functional"),
]


def _functions(mod) -> list:
    """Every function and method defined in module ``mod`` (not imported into it, nor a wrapper put on a class
    later: a used ``torch.optim.AdamW`` has its ``step`` wrapped by code of ``torch/optim/optimizer.py``)."""
    out = []
    for v in vars(mod).values():
        if inspect.isfunction(v) and v.__module__ == mod.__name__:
            out.append(v)
        elif inspect.isclass(v) and v.__module__ == mod.__name__:
            out += [f for f in vars(v).values() if inspect.isfunction(f)]
    return [f for f in out if f.__code__.co_filename == mod.__file__]


@pytest.mark.parametrize(
    "name",
    ["minipar.no_such_module", "minipar.dp.no_such", "minipar.moe", "torch.no_such", "no_such_package.mod"],
)
def test_a_rule_that_names_no_module_raises(name):
    with pytest.raises(LookupError, match=name.replace(".", r"\.")):
        Refuse({name: "why"})


@pytest.mark.parametrize("name", ["minipar.dp.ddp:NoSuchClass", "torch.autograd:no_such", "minipar.nothing:f"])
def test_a_rule_or_an_allowance_that_names_no_object_raises(name):
    with pytest.raises(LookupError, match=name.replace(".", r"\.")):
        Refuse({name: "why"})
    with pytest.raises(LookupError, match=name.replace(".", r"\.")):
        Refuse({"minipar.dp": "why"}, allow=[name])


def test_every_lesson_is_one_lesson_object():
    lessons = check.lessons()
    assert lessons, "no exercises/checks/lessonNN.py"
    for nn, lesson in lessons.items():
        assert isinstance(lesson, Lesson) and lesson.number == nn
        assert (ROOT / "exercises" / lesson.file).exists() and (ROOT / "exercises" / "solutions" / lesson.file).exists()
        assert lesson.checks and all(isinstance(ex, str) and callable(fn) for ex, fn in lesson.checks), nn
        assert lesson.rules and all(isinstance(r, Refuse) for r in lesson.rules), nn
        mod = importlib.import_module(f"exercises.checks.lesson{nn}")
        assert not {"TITLE", "MODULE", "CHECKS"} & set(vars(mod)), f"lesson {nn}: the interface is LESSON only"


@pytest.mark.parametrize("nn,module", REFUSED, ids=[f"{nn}-{m}" for nn, m in REFUSED])
def test_each_lesson_refuses_its_references(nn, module):
    """Some function of ``module`` is refused by lesson ``nn``'s rules, and reported by its import name."""
    rules = check.lessons()[nn].rules
    fns = _functions(importlib.import_module(module))
    assert fns, f"{module} defines no function"
    refused = [v for f in fns for r in rules if (v := r.verdict(f.__code__))]
    assert refused, f"lesson {nn} refuses none of {module}'s {len(fns)} functions"
    assert all(name.startswith(module + ".") for name, _ in refused), refused[:3]


def test_lesson_12_refuses_minipar_moe_layer_and_expert_parallelism():
    names = {n for r in check.lessons()["12"].rules for n in r.names()}
    assert {"minipar.model.moe", "minipar.ep", "minipar.comm.all_to_all"} <= names, names
    from minipar.model.moe.router import route

    [rules] = check.lessons()["12"].rules
    assert rules.verdict(route.__code__)[0] == "minipar.model.moe.router.route"


def test_given_helpers_are_allowed_and_the_learners_file_is_not_refused():
    from minipar.comm.collectives import chunk_bounds

    [rules01] = check.lessons()["01"].rules
    assert rules01.verdict(chunk_bounds.__code__) is None
    stub = importlib.import_module("exercises.ex01_collectives")
    assert rules01.verdict(stub.ring_reduce_scatter.__code__) is None
