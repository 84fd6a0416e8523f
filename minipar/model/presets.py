"""Named GPT sizes that the lessons share: keyword arguments of :class:`minipar.model.gpt.GPTConfig`.

    from minipar.data import builtin_corpus
    from minipar.model.presets import SMALL
    cfg = GPTConfig(vocab_size=builtin_corpus().vocab_size, **SMALL)

The vocabulary is left out: it is the corpus's. A lesson that needs another value of one field
says so where it uses the preset, e.g. ``{**MEDIUM, "block_size": 128}``.
"""

SMALL = dict(n_layer=2, n_head=2, d_model=32, block_size=32)  # float64 proofs: a few seconds per run
MEDIUM = dict(n_layer=4, n_head=4, d_model=128, block_size=64)  # timings, timelines and throughput
