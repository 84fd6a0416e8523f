"""The parameter server (minipar.dp.param_server) against one-device references, float64.

Bound 1e-12: the server averages W gradients in rank order where the reference sums a
concatenated batch's mean, a reordering worth ~1e-16 relative after a few SGD steps; a wrong
average (1/N), a stale or missing gradient changes parameters by ~lr·|g| ≈ 1e-2.
"""

import pytest
import torch
import torch.nn as nn

from minipar import ConfigError, launch
from minipar.dp.param_server import flat_params, load_flat_, roles, server_bytes_formula
from tests._workers_comm import batch, ps_arrival, ps_async, ps_sync, sgd, tiny_model

TOL = 1e-12


def reference_sync(steps, workers):
    model = tiny_model()
    opt = sgd(model.parameters())
    for s in range(steps):
        opt.zero_grad()
        loss = sum(nn.functional.cross_entropy(model(batch(w, s)[0]), batch(w, s)[1]) for w in range(workers)) / workers
        loss.backward()
        opt.step()
    return flat_params(model)


def reference_delayed(updates, workers, tau):
    """Delayed SGD on one device: update t is worker t mod W's gradient at parameters of version max(0, t − τ)."""
    return reference_replay([t % workers for t in range(updates)], [min(t, tau) for t in range(updates)])


@pytest.mark.parametrize("world,servers", [(3, 1), (4, 2)])
def test_sync_equals_one_device(world, servers):
    res = launch(ps_sync, world_size=world, kwargs={"n_servers": servers})
    workers = world - servers
    final = res[servers]["final"]
    assert (final - reference_sync(3, workers)).abs().max() < TOL


def test_server_bytes_are_the_formula():
    res = launch(ps_sync, world_size=3, kwargs={"steps": 2})
    numel = flat_params(tiny_model()).numel()
    f = server_bytes_formula(numel, workers=2, servers=1, element_size=8)
    assert res[0]["recv"] == 2 * f["server_in"] and res[0]["sent"] == 2 * f["server_out"]
    assert res[1]["sent"] == 2 * numel * 8  # a worker pushes Ψ per step


@pytest.mark.parametrize("tau", [0, 1, 3])
def test_async_is_delayed_sgd_with_staleness_tau(tau):
    res = launch(ps_async, world_size=3, kwargs={"updates": 6, "staleness": tau})
    assert (res[1]["final"] - reference_delayed(6, 2, tau)).abs().max() < TOL


def test_async_is_reproducible():
    a = launch(ps_async, world_size=3, kwargs={"staleness": 1})
    b = launch(ps_async, world_size=3, kwargs={"staleness": 1})
    assert torch.equal(a[1]["final"], b[1]["final"])


def reference_replay(order, staleness):
    """One device replays an arrival-order run: update t is worker order[t]'s next gradient, computed on
    the parameters of version t − staleness[t]."""
    model, opt_p = tiny_model(), flat_params(tiny_model()).clone()
    opt, versions, seen = sgd([opt_p]), {0: opt_p.clone()}, {}
    for t, (w, s) in enumerate(zip(order, staleness)):
        load_flat_(model, versions[t - s])
        model.zero_grad()
        x, y = batch(w, seen.get(w, 0))
        seen[w] = seen.get(w, 0) + 1
        nn.functional.cross_entropy(model(x), y).backward()
        opt_p.grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        opt.step()
        versions[t + 1] = opt_p.clone()
    return opt_p


@pytest.mark.parametrize("world,servers", [(3, 1), (4, 2)])
def test_async_arrival_is_the_replay_of_its_order_and_the_straggler_pushes_less(world, servers):
    res = launch(ps_arrival, world_size=world, kwargs={"n_servers": servers})
    order, stale = res[0]["order"], res[0]["staleness"]
    assert all(r["order"] == order and r["staleness"] == stale for r in res[:servers])  # servers agree
    assert len(order) == 10 and all(0 <= s <= t for t, s in enumerate(stale))
    assert (res[servers]["final"] - reference_replay(order, stale)).abs().max() < TOL
    slow = [s for w, s in zip(order, stale) if w == 0]
    fast = [s for w, s in zip(order, stale) if w == 1]
    assert len(slow) < len(fast) and sum(slow) / len(slow) > sum(fast) / len(fast), (order, stale)


def test_async_arrival_needs_an_entered_clock():
    with pytest.raises(ConfigError, match="ClusterClock"):
        launch(ps_arrival, world_size=2, kwargs={"clocked": False})


def test_bad_roles():
    with pytest.raises(ConfigError, match="at least one worker"):
        roles(2, 2, 10)
    assert roles(5, 2, 11).bounds == [(0, 6), (6, 11)]
