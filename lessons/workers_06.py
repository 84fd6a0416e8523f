"""Experiment drivers for lesson 06 (1F1B). They only call minipar; child processes import them by
name, so they live in a module, not in the notebook."""

from __future__ import annotations

import torch

import minipar.dist as md
from minipar.data import CharCorpus, load_text, make_loader
from minipar.models import GPT, GPTConfig
from minipar.pp.executor import PipelineExecutor
from minipar.pp.schedules import Action
from minipar.pp.stages import build_stages


def run_schedule(schedule: list[list[Action]], timeout: float = 10.0):
    """One step of ``schedule`` (any per-rank action lists, one stage per rank) on a small GPT with
    minipar's executor. Returns the loss on the last rank, None elsewhere; a rank that only sees
    its peer fail returns None too, so the error a learner reads is the failing rank's own."""
    from minipar.comm.p2p import P2POrderError

    corpus = CharCorpus(load_text())
    torch.manual_seed(0)
    p, m = len(schedule), 1 + max(a.mb for acts in schedule for a in acts)
    model = GPT(GPTConfig(vocab_size=corpus.vocab_size, block_size=16, n_layer=p, n_head=2, d_model=16))
    x, y = next(make_loader(corpus.split("train", 16), batch_size=2 * m, seed=0))
    ex = PipelineExecutor(build_stages(model, p, [md.rank()]), schedule, timeout=timeout)
    try:
        return ex.step(x, y).loss
    except P2POrderError:
        raise
    except RuntimeError:
        return None
