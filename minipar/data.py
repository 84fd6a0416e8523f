"""Character-level text data: a real corpus, a deterministic split, (B, T) batches per rank.

The default corpus is ``pydoc_data.topics``: the text of Python's own ``help()`` topics,
~465k characters of English prose and code that ships with every CPython install, so the
course needs no download. Any UTF-8 text file can be given instead (``--data PATH``).

Pipeline, top to bottom:

    text = load_text(path)                    # str
    corpus = CharCorpus(text)                 # vocabulary: the sorted set of characters
    train = corpus.split("train", T)          # Dataset of (x, y) windows, y = x shifted by one
    loader = make_loader(train, batch_size=B, dp_rank=r, dp_size=N, seed=s)
    for step, (x, y) in zip(range(steps), loader):   # x, y: (B // N, T) int64

Sharding: ``torch.utils.data.DistributedSampler`` gives data-parallel rank r the shuffled
indices r, r+N, r+2N, ...; ``set_epoch`` is called at every epoch so each epoch reshuffles.
With ``drop_last`` and a global batch B divisible by N, the N ranks' local batches at step k
together hold exactly the B windows that a single device sees at step k — the property every
equivalence test in the course relies on.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from minipar.errors import ConfigError

VAL_FRACTION = 0.1  # the last 10% of the text is the validation split


def builtin_text() -> str:
    """The default corpus: every ``pydoc_data.topics`` entry, sorted by topic name, joined."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


MAX_TEXT_BYTES = 256 * 2**20  # a corpus is read whole, as one string: 256 MiB of text is plenty here


def load_text(path: str | os.PathLike | None = None) -> str:
    """Read the corpus: ``path`` as UTF-8 text, or the built-in corpus when ``path`` is None.

    Raises:
        ConfigError: missing file, a directory, not a regular file (a FIFO, /dev/stdin, a device: it may block
        or never end), a file over :data:`MAX_TEXT_BYTES`, one that cannot be read (no permission, a ``/proc``
        file that reads as an I/O error), a non-UTF-8 (binary) file, or an empty file.
    """
    if path is None:
        return builtin_text()
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ConfigError(
            f"--data {path}: no such file; give a UTF-8 text file, or leave out --data "
            "to use the built-in corpus (pydoc_data.topics)"
        )
    if os.path.isdir(path):
        raise ConfigError(f"--data {path}: is a directory; give one UTF-8 text file")
    if not os.path.isfile(path):  # before open(): opening a FIFO blocks until a writer comes
        raise ConfigError(f"--data {path}: not a regular file (a pipe or a device may never end); give a text file")
    if (size := os.path.getsize(path)) > MAX_TEXT_BYTES:
        raise ConfigError(
            f"--data {path}: {size / 2**20:.0f} MiB is more than the {MAX_TEXT_BYTES // 2**20} MiB this course reads; "
            f"give a shorter text, e.g. its first part: head -c 100M {path} > part.txt"
        )
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TEXT_BYTES + 1)
    except OSError as e:  # no permission; a /proc or /sys file that reads as an I/O error
        raise ConfigError(f"--data {path}: cannot be read ({e.strerror or e}); give a readable text file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"--data {path}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); "
            "give a plain-text file, e.g. convert it with iconv -t UTF-8"
        ) from None
    if "\x00" in text:
        raise ConfigError(f"--data {path}: contains NUL bytes, so it looks binary; give a plain-text file")
    if not text.strip():
        raise ConfigError(f"--data {path}: the file is empty; give a text file with some content")
    return text


def split_sizes(n_chars: int) -> tuple[int, int]:
    """Characters in the (train, val) splits of a text of ``n_chars`` characters."""
    cut = int(n_chars * (1 - VAL_FRACTION))
    return cut, n_chars - cut


def check_fits(n_chars: int, block_size: int, batch_size: int, dp_size: int = 1) -> None:
    """Check that a text of ``n_chars`` characters holds one global batch of training windows and
    one validation window of ``block_size``; the advice fits *both* splits at once.

    A split of n characters holds ``(n - 1) // block_size`` windows (:class:`CharWindows`).

    Raises:
        ConfigError: naming what does not fit and one change that fits (``--block-size``,
        ``--batch-size`` or both), or the shortest text that can work at all.
    """
    n_train, n_val = split_sizes(n_chars)

    def fits(T: int, B: int) -> bool:
        return n_val >= T + 1 and (n_train - 1) // T >= B

    if fits(block_size, batch_size):
        return
    why = []
    if (n_train - 1) // block_size < batch_size:
        why.append(
            f"the train split ({n_train} characters) holds {max(0, n_train - 1) // block_size} windows, "
            f"fewer than --batch-size {batch_size}"
        )
    if n_val < block_size + 1:
        why.append(f"the validation split (the last {VAL_FRACTION:.0%}, {n_val} characters) holds no window")
    head = f"--block-size {block_size} with --batch-size {batch_size} does not fit the text: {' and '.join(why)}"
    if not fits(1, dp_size):  # no block size and batch fit: only a longer text helps
        need = (
            max(n_chars, int((block_size * batch_size + 1) / (1 - VAL_FRACTION)), int((block_size + 1) / VAL_FRACTION))
            - 2
        )
        while not (split_sizes(need)[1] >= block_size + 1 and split_sizes(need)[0] - 1 >= block_size * batch_size):
            need += 1
        raise ConfigError(
            f"{head}; the text has {n_chars} characters, too short even for --block-size 1: "
            f"give a text of at least {need} characters for these settings"
        )
    t_fit = min(n_val - 1, (n_train - 1) // batch_size)  # longest block for this batch
    b_fit = (n_train - 1) // block_size // dp_size * dp_size if n_val >= block_size + 1 else 0
    fixes = []
    if t_fit >= 1:
        fixes.append(f"--block-size {t_fit} or less")
    if b_fit >= dp_size:
        fixes.append(f"--batch-size {b_fit} or less")
    if not fixes:  # neither alone: change both
        t2 = min(n_val - 1, (n_train - 1) // dp_size)
        fixes.append(f"--block-size {t2} with --batch-size {(n_train - 1) // t2 // dp_size * dp_size} or less")
    raise ConfigError(f"{head}; use {', or '.join(fixes)}")


def check_dataset(num_samples: int, global_batch: int, world_size: int) -> dict:
    """Check that ``num_samples`` can be sharded over ``world_size`` ranks in batches of ``global_batch``.

    ``DistributedSampler(drop_last=True)`` gives each rank ``num_samples // world_size`` samples,
    and the loader keeps whole batches only, so an epoch is ``num_samples // global_batch`` steps
    and the last ``num_samples % global_batch`` samples of each (shuffled) epoch are dropped on
    every layout alike: N ranks together see exactly the batches one device sees.

    Returns:
        ``{"local_batch", "steps_per_epoch", "dropped"}`` (samples per rank per step, optimizer
        steps per epoch, samples left out per epoch).
    Raises:
        ConfigError: fewer samples than ranks (every rank would get 0 samples, or — without ``drop_last`` —
            repeated padding samples), a global batch not divisible by the ranks or larger than the dataset.
    """
    if world_size < 1:
        raise ConfigError(f"world_size={world_size} must be >= 1")
    if num_samples < world_size:
        raise ConfigError(
            f"the dataset has {num_samples} samples but world_size={world_size}: DistributedSampler would give "
            f"each rank {num_samples // world_size} samples (drop_last=True) or pad with repeated samples "
            f"(drop_last=False); use at most {max(1, num_samples)} ranks or a larger dataset"
        )
    if global_batch < 1 or global_batch % world_size:
        lo = global_batch // world_size * world_size
        raise ConfigError(
            f"global batch {global_batch} is not divisible by world_size={world_size}; "
            f"use {lo or world_size} or {lo + world_size}"
        )
    if global_batch > num_samples:
        raise ConfigError(
            f"global batch {global_batch} is larger than the dataset ({num_samples} samples); "
            f"use a global batch of at most {num_samples // world_size * world_size}"
        )
    n, b = num_samples, global_batch
    return {"local_batch": b // world_size, "steps_per_epoch": n // b, "dropped": n % b}


class CharCorpus:
    """A text and its character vocabulary.

    Attributes:
        text: the whole corpus (str).
        chars: the vocabulary, sorted (list of str); ``vocab_size = len(chars)``.
        data: the text encoded, shape ``(len(text),)`` int64.
    """

    def __init__(self, text: str):
        if not text:
            raise ConfigError("the corpus is empty; give a text with some content")
        self.text = text
        self.chars = sorted(set(text))
        self.vocab_size = len(self.chars)
        self._stoi = {c: i for i, c in enumerate(self.chars)}
        self.data = torch.tensor(
            [self._stoi[c] for c in text], dtype=torch.long
        )  # device-ok: corpus stays on CPU; each step moves its batch (x.to(dev))

    def encode(self, s: str) -> torch.Tensor:
        """String -> ids, shape ``(len(s),)`` int64. Raises ConfigError for an unknown character."""
        try:
            return torch.tensor(
                [self._stoi[c] for c in s], dtype=torch.long
            )  # device-ok: ids on CPU; callers move them (run_log: .to(device))
        except KeyError as e:
            raise ConfigError(f"character {e.args[0]!r} is not in the corpus vocabulary") from None

    def decode(self, ids) -> str:
        """Ids (any iterable of ints or a tensor) -> string."""
        return "".join(self.chars[int(i)] for i in ids)

    def split(self, name: str, block_size: int) -> "CharWindows":
        """The ``"train"`` (first 90%) or ``"val"`` (last 10%) split as (x, y) windows of ``block_size``.

        Raises:
            ConfigError: unknown split, ``block_size`` < 1, or a split shorter than one window.
        """
        if name not in ("train", "val"):
            raise ConfigError(f"split {name!r} must be 'train' or 'val'")
        cut, _ = split_sizes(len(self.data))
        part = self.data[:cut] if name == "train" else self.data[cut:]
        return CharWindows(part, block_size, name)


@functools.cache
def builtin_corpus() -> CharCorpus:
    """The built-in corpus (:func:`builtin_text`) as a :class:`CharCorpus`, built once per process."""
    return CharCorpus(load_text())


def random_tokens(batch: int, block_size: int, seed: int = 0) -> torch.Tensor:
    """``(batch, block_size)`` int64 ids, uniform over the built-in vocabulary, from a generator seeded ``seed``
    (the global RNG untouched): inputs for timings, where the text does not matter (``seed=rank``: per rank)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, builtin_corpus().vocab_size, (batch, block_size), generator=g)  # device-ok: CPU ids


class CharWindows(Dataset):
    """Non-overlapping windows of a token stream: item i is ``(x, y)``, each shape ``(T,)`` int64,
    ``x = data[i*T : i*T+T]`` and ``y = data[i*T+1 : i*T+T+1]`` (the next character)."""

    def __init__(self, data: torch.Tensor, block_size: int, name: str = "data"):
        if not isinstance(block_size, int) or block_size < 1:
            raise ConfigError(f"block_size={block_size!r} must be an integer >= 1")
        if len(data) < block_size + 1:
            raise ConfigError(
                f"block_size={block_size} is longer than the {name} split ({len(data)} characters); "
                f"use --block-size {max(1, len(data) - 1)} or less, or a longer text"
            )
        self.data, self.block_size = data, block_size

    def __len__(self) -> int:
        return (len(self.data) - 1) // self.block_size

    def __getitem__(self, i: int):
        s = i * self.block_size
        chunk = self.data[s : s + self.block_size + 1]
        return chunk[:-1], chunk[1:]


@dataclass
class Loader:
    """An endless iterator over ``(x, y)`` batches of shape ``(local_batch, T)``.

    One epoch is ``len(dataset) // batch_size`` steps on every layout (so a step means the same
    global batch for any number of data-parallel ranks); ``sampler.set_epoch(e)`` is called as
    each epoch starts. ``state_dict()`` / ``load_state_dict()`` give the position (epoch, step)
    for checkpoint and resume.
    """

    dataset: CharWindows
    batch_size: int  # global batch (sequences per optimizer step, all ranks together)
    dp_rank: int = 0
    dp_size: int = 1
    seed: int = 0
    shuffle: bool = True
    epoch: int = 0
    step_in_epoch: int = 0

    def __post_init__(self):
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"--batch-size {self.batch_size}: must be an integer >= 1")
        if self.dp_size < 1 or not 0 <= self.dp_rank < self.dp_size:
            raise ConfigError(f"dp_rank={self.dp_rank}, dp_size={self.dp_size}: need 0 <= dp_rank < dp_size")
        if self.batch_size % self.dp_size:
            lo = self.batch_size // self.dp_size * self.dp_size
            raise ConfigError(
                f"--batch-size {self.batch_size} is not divisible by the {self.dp_size} data-parallel "
                f"ranks; use {lo or self.dp_size} or {lo + self.dp_size}"
            )
        if len(self.dataset) < self.batch_size:
            fits = len(self.dataset) // self.dp_size * self.dp_size
            fix = (
                f"use --batch-size {fits} or less"
                if fits
                else f"use at most {len(self.dataset)} data-parallel ranks, or a longer text / shorter --block-size"
            )
            raise ConfigError(
                f"--batch-size {self.batch_size} is larger than the dataset ({len(self.dataset)} "
                f"windows of {self.dataset.block_size}); {fix}"
            )
        self.local_batch = self.batch_size // self.dp_size
        self.steps_per_epoch = len(self.dataset) // self.batch_size
        self.sampler = DistributedSampler(
            self.dataset,
            num_replicas=self.dp_size,
            rank=self.dp_rank,
            shuffle=self.shuffle,
            seed=self.seed,
            drop_last=True,
        )
        self._it = None

    def _start_epoch(self):
        self.sampler.set_epoch(self.epoch)
        loader = DataLoader(self.dataset, batch_size=self.local_batch, sampler=self.sampler, drop_last=True)
        self._it = iter(loader)
        for _ in range(self.step_in_epoch):  # resume mid-epoch: skip what was already seen
            next(self._it)

    def __iter__(self):
        return self

    def __next__(self):
        if self._it is None:
            self._start_epoch()
        if self.step_in_epoch >= self.steps_per_epoch:
            self.epoch, self.step_in_epoch = self.epoch + 1, 0
            self._start_epoch()
        self.step_in_epoch += 1
        return next(self._it)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "step_in_epoch": self.step_in_epoch}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.step_in_epoch = int(state["epoch"]), int(state["step_in_epoch"])
        self._it = None


def make_loader(
    dataset: CharWindows, batch_size: int, dp_rank: int = 0, dp_size: int = 1, seed: int = 0, shuffle: bool = True
) -> Loader:
    """An endless :class:`Loader`; ``batch_size`` is the *global* batch (split over ``dp_size`` ranks)."""
    return Loader(dataset, batch_size, dp_rank, dp_size, seed, shuffle)
