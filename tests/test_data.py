"""minipar.data: the corpus, the split, batch shapes, sharding that adds up to the global batch."""

import pytest
import torch

from minipar import ConfigError
from minipar.data import CharCorpus, load_text, make_loader


@pytest.fixture(scope="module")
def corpus():
    return CharCorpus(load_text())


def test_builtin_corpus_is_real_text(corpus):
    assert len(corpus.text) > 400_000 and 60 < corpus.vocab_size < 200
    assert corpus.decode(corpus.encode("def f(x):")) == "def f(x):"


def test_split_is_deterministic_and_disjoint(corpus):
    tr, va = corpus.split("train", 64), corpus.split("val", 64)
    assert len(tr) > 9 * len(va) > 0
    x, y = tr[3]
    assert x.shape == y.shape == (64,) and x.dtype == torch.int64
    assert torch.equal(x[1:], y[:-1])  # y is x shifted by one character


def test_batches_have_shape_B_T(corpus):
    x, y = next(make_loader(corpus.split("train", 32), batch_size=6))
    assert x.shape == y.shape == (6, 32)


@pytest.mark.parametrize("n", [2, 4])
def test_dp_shards_add_up_to_the_single_device_batch(corpus, n):
    ds = corpus.split("train", 128)
    one = make_loader(ds, 8, seed=1)
    many = [make_loader(ds, 8, dp_rank=r, dp_size=n, seed=1) for r in range(n)]
    for _ in range(one.steps_per_epoch + 3):  # crosses an epoch boundary (set_epoch reshuffles)
        x, _ = next(one)
        parts = torch.cat([next(m)[0] for m in many])
        assert sorted(map(tuple, x.tolist())) == sorted(map(tuple, parts.tolist()))
    assert one.epoch == 1


def test_loader_resumes_at_its_position(corpus):
    ds = corpus.split("train", 64)
    a = make_loader(ds, 4, seed=3)
    for _ in range(5):
        next(a)
    b = make_loader(ds, 4, seed=3)
    b.load_state_dict(a.state_dict())
    assert torch.equal(next(a)[0], next(b)[0])


def test_bad_inputs(tmp_path, corpus):
    with pytest.raises(ConfigError, match="no such file"):
        load_text(tmp_path / "missing.txt")
    (tmp_path / "bin").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_text(tmp_path / "bin")
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(ConfigError, match="empty"):
        load_text(tmp_path / "empty.txt")
    import os

    if os.path.isfile("/proc/self/mem"):  # a regular file of size 0 whose read is an I/O error (a fuzzer found it)
        with pytest.raises(ConfigError, match="cannot be read"):
            load_text("/proc/self/mem")
    small = CharCorpus("hello world, a tiny text")
    with pytest.raises(ConfigError, match="block_size=500 is longer"):
        small.split("train", 500)
    ds = corpus.split("train", 64)
    with pytest.raises(ConfigError, match="--batch-size 0"):
        make_loader(ds, 0)
    with pytest.raises(ConfigError, match="not divisible"):
        make_loader(ds, 6, dp_rank=0, dp_size=4)
    with pytest.raises(ConfigError, match="larger than the dataset"):
        make_loader(small.split("train", 4), 64)


def test_a_pipe_a_device_or_a_huge_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """#36 items 11 and 15: --data FIFO blocked in open() forever; --data /dev/zero filled the memory."""
    import os

    import minipar.data as data

    os.mkfifo(tmp_path / "fifo")
    for path in (tmp_path / "fifo", "/dev/zero"):
        with pytest.raises(ConfigError, match="not a regular file"):
            load_text(path)
    (tmp_path / "big.txt").write_text("abc" * 100)
    monkeypatch.setattr(data, "MAX_TEXT_BYTES", 100)
    with pytest.raises(ConfigError, match=r"big.txt: 0 MiB is more than the 0 MiB this course reads; .*head -c 100M"):
        load_text(tmp_path / "big.txt")


def test_any_text_file(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("héllo wörld\n" * 100, encoding="utf-8")
    c = CharCorpus(load_text(p))
    assert "é" in c.chars and len(c.split("train", 16)) > 0
