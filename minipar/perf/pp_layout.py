"""Megatron-Core's ``--pipeline-model-parallel-layout``: a string that places every block on a model chunk.

``"Et|(tt|)*30mL"`` (DeepSeek-V3's recipe on pp 8 · v 4) reads: model chunks separated by ``|``, in chunk order
k = 0 .. pp·v−1 (chunk k on pipeline rank k mod pp, its virtual stage k div pp), each a run of ``E`` (the embedding),
``t`` (a transformer block), ``m`` (a multi-token-prediction block) and ``L`` (the loss); ``(…)*n`` repeats a group,
``x*n`` one letter, commas are cosmetic (``megatron/core/transformer/pipeline_parallel_layer_layout.py``,
``PipelineParallelLayerLayout.parse_str_to_list`` and ``validate_layer_layout``). :func:`parse_layout` turns it into
the blocks of each model chunk (:attr:`minipar.perf.layout.Layout.stage_split`) and v. It is parsed, never evaluated,
and its expansion is bounded, so a hostile string costs nothing. Units: blocks.
"""

from __future__ import annotations

import re

from minipar.errors import ConfigError

MAX_CHARS = 100_000  # the longest expansion accepted (a layout of 100,000 letters and bars)
_GROUP = re.compile(r"\(([^()]+)\)\*(\d+)")  # Megatron-Core's two patterns, in its order
_LETTER = re.compile(r"([^()|*\d])\*(\d+)")


def _expand(text: str, flag: str) -> str:
    """``text`` with ``(…)*n`` and ``x*n`` unrolled (Megatron-Core's order: groups first), refusing an expansion
    beyond :data:`MAX_CHARS` before building it."""

    built = [len(text)]  # letters built so far, the unexpanded text counted once: the bound holds across groups

    def unroll(match: re.Match) -> str:
        body, n = match.group(1), int(match.group(2))
        built[0] += len(body) * n
        if built[0] > MAX_CHARS:
            raise ConfigError(f"{flag} {text[:60]}: ({body[:20]})*{n} expands past {MAX_CHARS:,} letters; shorten it")
        return body * n

    out = _LETTER.sub(unroll, _GROUP.sub(unroll, text.replace(",", "")))
    if len(out) > MAX_CHARS:
        raise ConfigError(f"{flag} {text[:60]}: expands past {MAX_CHARS:,} letters; shorten it")
    return out


def parse_layout(text: str, pp: int, layers: int | None, mtp: int = 0) -> tuple[int, tuple[int, ...]]:
    """(v, blocks of each model chunk) of a ``--pipeline-model-parallel-layout`` string for a model of ``layers``
    blocks (None: not checked here; :meth:`~minipar.perf.layout.Layout.chunk_layers` checks the sum) and ``mtp``
    multi-token-prediction blocks on ``pp`` pipeline ranks.

    Raises:
        ConfigError (one line, the value and the fix): a letter other than E, t, m, L; a chunk count that pp does not
            divide; E not the first letter of the first chunk or L not the last of the last, either not exactly once;
            a count of t other than ``layers`` or of m other than ``mtp``; an MTP block off the last chunk or before a
            transformer block (modelled: Megatron-Core's default, the MTP blocks after the last block); an expansion
            too long.
    """
    flag = "--pipeline-model-parallel-layout"
    bad = sorted(set(re.sub(r"[EtmL|(),*\d]", "", text)))
    if bad or not text.strip():
        raise ConfigError(f"{flag} {text[:60]!r}: use E, t, m, L, | and (…)*n only (got {''.join(bad) or 'nothing'})")
    chunks = _expand(text.strip(), flag).split("|")
    if re.search(r"[()*\d]", "".join(chunks)):
        raise ConfigError(f"{flag} {text[:60]}: a group is not (…)*n (nested groups are not Megatron-Core's)")
    if len(chunks) % pp:
        raise ConfigError(f"{flag} has {len(chunks)} model chunks, not a multiple of --pp {pp}: give pp·v of them")
    flat = "".join(chunks)
    if flat.count("E") != 1 or not chunks[0].startswith("E"):
        raise ConfigError(f"{flag}: the embedding E must open the first chunk, once (as {flag} 'Et|(tt|)*30mL')")
    if flat.count("L") != 1 or not chunks[-1].endswith("L"):
        raise ConfigError(f"{flag}: the loss L must close the last chunk, once (as {flag} 'Et|(tt|)*30mL')")
    if layers is not None and flat.count("t") != layers:
        raise ConfigError(f"{flag} places {flat.count('t')} transformer blocks (t); the model has {layers}")
    if flat.count("m") != mtp:
        raise ConfigError(f"{flag} places {flat.count('m')} MTP blocks (m); --mtp-num-layers is {mtp}")
    if mtp and (chunks[-1].count("m") != mtp or "t" in chunks[-1][chunks[-1].index("m") :]):
        raise ConfigError(f"{flag}: the MTP blocks (m) after the last t, on the last chunk (the one modelled)")
    return len(chunks) // pp, tuple(c.count("t") for c in chunks)
