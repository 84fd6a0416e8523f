"""minipar.job.fits: a run that cannot fit in this machine's memory is refused before any rank starts."""

import dataclasses
import re

import pytest

from minipar.errors import ConfigError
from minipar.job import fits
from minipar.job.config import TrainConfig

GIB = 2**30


@pytest.fixture
def eight_gib(monkeypatch):
    monkeypatch.setattr(fits, "available_bytes", lambda: 8 * GIB)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)


def test_the_default_run_and_the_3d_run_fit(eight_gib):
    fits.check_memory(TrainConfig(), 1, 1)
    fits.check_memory(TrainConfig(dp=2, tp=2, pp=2), 2, 8)


@pytest.mark.parametrize(
    "kw,flag",
    [
        (dict(block_size=10_000_000), "--block-size"),
        (dict(batch_size=13081), "--batch-size"),
        (dict(n_layer=100_000), "--n-layer"),
    ],
)
def test_refused_naming_the_largest_value_that_fits(eight_gib, kw, flag):
    cfg = TrainConfig(**kw)
    with pytest.raises(ConfigError) as e:
        fits.check_memory(cfg, 1, 1)
    msg = str(e.value)
    assert "\n" not in msg and "GiB is available" in msg, msg
    best = int(re.search(rf"{flag} (\d+) or less", msg).group(1))
    name = flag[2:].replace("-", "_")
    fits.check_memory(dataclasses.replace(cfg, **{name: best}), 1, 1)  # the advice fits ...
    with pytest.raises(ConfigError):  # ... and is the largest that does
        fits.check_memory(dataclasses.replace(cfg, **{name: best + 1}), 1, 1)


def test_ranks_of_this_machine_count(eight_gib, monkeypatch):
    with pytest.raises(ConfigError, match="64 rank"):
        fits.check_memory(TrainConfig(dp=64), 64, 64)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # torchrun: 8 of the 64 ranks on this node
    fits.check_memory(TrainConfig(dp=64), 64, 64)


def test_sharding_and_recompute_shrink_the_estimate():
    big = TrainConfig(d_model=1024, n_head=8, batch_size=64, block_size=512)
    base = fits.rank_bytes(big, 1)
    assert fits.rank_bytes(dataclasses.replace(big, zero=1, dp=4), 4)["state"] < base["state"]
    assert fits.rank_bytes(dataclasses.replace(big, recompute="full"), 1)["activations"] < base["activations"] / 3
    assert fits.rank_bytes(dataclasses.replace(big, tp=4), 1)["total"] < base["total"]
