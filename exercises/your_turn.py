"""Insert a "Your turn" section into every lesson notebook (issue 13, item 3). For the lead.

    python -m exercises.your_turn [--dry-run] [NN ...]     (maintainers, from the repository root)

For each ``lessons/0N_*.ipynb`` (or only the lessons named), right after its *last* "Build it"
section (before the next ``## `` heading), four cells:

1. markdown, ``slide``: "## Your turn: ..." — the task, the file, the five-step workflow;
2. code, ``-``: runs the checker on the *reference solution* in-process
   (``exercises.check.check_lesson(NN, solutions=True)``): it prints one ``✓`` line per exercise,
   no timings and no paths, so its stored output passes strict nbval on any CPU; it asserts that
   every exercise passes (a broken solution fails the notebook loudly);
3. markdown, ``subslide``: "Predict, then measure" — a question to answer before measuring;
4. markdown, ``notes`` (speaker notes, so it adds no slide), collapsed in JupyterLab
   (``metadata.jupyter.source_hidden: true``): the answer.

Idempotent: cells carry fixed ids ``your-turn-NN-{task,check,predict,answer}``; a notebook that has
them is left alone. Cell ids of existing cells are kept. Afterwards run
``make execute NB=lessons/NN_x.ipynb`` (stores the checker's output), then strict nbval, then
``make slides``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from exercises.check import lessons

WORKFLOW = (
    '1. read "Build it" above; 2. edit `exercises/{file}` (replace each `raise NotImplementedError`); '
    "3. run `make check LESSON={nn}` in a terminal (or set `solutions=False` in the cell below); "
    "4. read the hint; 5. compare with `exercises/solutions/{file}`."
)

# The "Your turn" text of each lesson; the exercise file is its Lesson's (exercises/checks/lessonNN.py).
LESSONS = {
    "00": dict(
        title="the backward pass and AdamW by hand",
        task="Write `layer_norm_backward` (the gradients of LayerNorm), `cross_entropy_backward` "
        "(softmax + cross-entropy) and `adamw_step` (one AdamW update). The checker compares them "
        "with autograd and `torch.optim.AdamW` in float64.",
        predict="After the **first** AdamW step with `lr = 1e-3`, how far does a weight move if its gradient "
        "is `1e-6`? And if it is `1e3`? Predict, then measure with your `adamw_step` (weight decay 0).",
        answer="About `1e-3` in both cases: at step 1 the bias-corrected moments are m̂ = g and v̂ = g², so "
        "the update is lr · g/(|g| + eps) ≈ ±lr, whatever the gradient's size (until |g| comes near "
        "eps = 1e-8). Adam normalises the step per parameter; that is also why a gradient N times too "
        "large is nearly invisible to AdamW.",
    ),
    "01": dict(
        title="a ring reduce-scatter and all-gather from send/recv",
        task="Write `ring_reduce_scatter` and `ring_all_gather` with `isend`/`irecv` only. The checker runs "
        "them on N = 1, 3 and 4 real ranks, on sizes that do not divide by N, and on a sub-group.",
        predict="With N = 4 ranks and a 1000-element float64 tensor, how many bytes does each rank send in "
        "your reduce-scatter, and in a whole all-reduce? Predict, then count them (e.g. wrap "
        "`dist.isend` or use `minipar.comm.comm_log.CommLog`).",
        answer="Reduce-scatter: N − 1 = 3 steps of one 250-element chunk = 3 · 250 · 8 = 6000 bytes, i.e. "
        "(N−1)/N · S with S = 8000 bytes. The all-gather sends as much again: 12 000 bytes = 2(N−1)/N · S "
        "for the all-reduce, almost independent of N.",
    ),
    "02": dict(
        title="the bucketed, overlapped DDP hook",
        task="Write `make_buckets` (reverse order, frozen parameters skipped, a parameter larger than the cap "
        "alone), then `BucketedDDP.grad_ready` (launch a full bucket with `async_op=True`, in bucket "
        "order) and `BucketedDDP.finish` (wait, average, write `p.grad`).",
        predict="The checker's model has, in order: a tied embedding (88 float64 values), a frozen layer, "
        "`big` (512 + 64) and `small` (512 + 8). With a 1 KiB cap, how many buckets, of which sizes, in "
        "which order? Predict, then print `[sum(p.numel() for p in b) for b in ddp.buckets]`.",
        answer="Five buckets, sizes `[8, 512, 64, 512, 88]`: `small.bias`, `small.weight`, `big.bias`, "
        "`big.weight`, the tied embedding (counted once). The frozen layer gets no bucket. A 1 KiB cap holds "
        "128 float64 values, so each matrix gets a bucket of its own; bucket 0 (the last layer's "
        "bias) is full first and its all-reduce starts while backward is still running.",
    ),
    "03": dict(
        title="the ZeRO-1 step",
        task="Write `zero1_step`: reduce-scatter the gradients, AdamW on this rank's 1/N shard only, "
        "all-gather the updated weights. The checker compares 3 steps with `torch.optim.AdamW` on the "
        "mean gradient, for sizes that need padding.",
        predict="With N = 4 ranks and 10 parameters, how many elements of `exp_avg` does each rank keep, and "
        "how many padding elements exist? Predict, then print `state['exp_avg'].numel()` on each rank.",
        answer="The flat buffer is padded to 12 (a multiple of 4): 3 elements per rank, and 2 padding elements, "
        "both in rank 3's shard. Each rank keeps 2 · 3 moment values instead of 2 · 10: the optimizer "
        "state shrinks by N (ZeRO §5.1), the all-reduce's bytes are unchanged.",
    ),
    "04": dict(
        title="f, g and the column/row-parallel layers",
        task="Write Megatron's `CopyToTP` (f) and `ReduceFromTP` (g) as autograd functions, then "
        "`load_full_` and `forward` of `ColumnParallelLinear` and `RowParallelLinear`. The checker runs "
        "the MLP `Row(gelu(Column(x)))` on 1, 3, 4 ranks and on two groups of 2 against one device.",
        predict="In `Row(gelu(Column(x)))` with TP = 4 and x of shape (B, T, d), how many all-reduces run in "
        "forward, how many in backward, and on tensors of which shape? Predict, then count calls to "
        "`dist.all_reduce`.",
        answer="One each way: forward, g all-reduces the row layer's (B, T, d) partial output; backward, f "
        "all-reduces the (B, T, d) gradient of x. The (B, T, 4d/N) hidden activation never travels: "
        "that is why a column layer is followed by a row layer (Megatron-LM §3).",
    ),
    "05": dict(
        title="the GPipe schedule as data",
        task="Write `gpipe(p, m)` (a list of `Action`s per rank, as `minipar.pp.schedules`) and "
        "`bubble_fraction(p, m)`. The checker simulates your schedule for p = 1, 3, 4 and m = 1 to 8.",
        predict="With p = 4 stages, m = 8 micro-batches and a backward twice as long as a forward, what "
        "fraction of the step is bubble? Predict, then `simulate(gpipe(4, 8)).bubble`.",
        answer="(p − 1)/(m + p − 1) = 3/11 ≈ 0.273. Narayanan et al. 2021 (arXiv:2104.04473, §2.2.1) state the "
        "bubble relative to the ideal compute time, β = (p − 1)/m = 0.375; as a fraction of the whole step that is "
        "β/(1 + β) = 3/11.",
    ),
    "06": dict(
        title="the 1F1B schedule (and, as a stretch, interleaved)",
        task="Write `one_f_one_b(p, m)` and, as a stretch goal, `interleaved_1f1b(p, m, v)`. The checker "
        "simulates them (deadlocks, missing actions), checks the memory bound, compares with the "
        "reference order and runs your 1F1B on 3 real ranks.",
        predict="With p = 4 and m = 8, at most how many micro-batches' activations does rank 0 hold under "
        "GPipe, and under 1F1B? Predict, then read `simulate(...).peak_inflight`.",
        answer="GPipe: all m = 8 (every forward runs before the first backward). 1F1B: p − r = 4 on rank 0 "
        "(its 3 warm-up forwards plus one), and 1 on the last rank. The bubble is the same; the memory "
        "is bounded by p instead of m.",
    ),
    "07": dict(
        title="the mesh: coordinates and groups",
        task="Write `coords_of` (rank → (pp, dp, tp), Megatron-LM's order), `group_ranks` (every group along "
        "one dimension) and `build_groups` (create every group on every rank; return this rank's).",
        predict="On 8 ranks with (pp, dp, tp) = (2, 2, 2), what are rank 5's coordinates, and its tp, dp and "
        "pp groups? Predict, then print `coords_of(5, (2, 2, 2))` and `group_ranks`.",
        answer="5 = 1·4 + 0·2 + 1: pp 1, dp 0, tp 1. Its tp group is [4, 5] (adjacent ranks: one node), its "
        "dp group [5, 7] (stride tp = 2), its pp group [1, 5] (stride dp·tp = 4).",
    ),
    "09": dict(
        title="top-k with error feedback, and a PowerSGD round",
        after="compress",
        task="Write `topk_with_error_feedback` (send the k largest entries of gradient + error, keep the "
        "rest for the next step) and `powersgd_round` (P = M·Q, all-reduce, orthogonalize, Q = Mᵀ·P̂, "
        "all-reduce). The checker runs top-k in float64 for 3 steps and PowerSGD on 1, 2 and 3 real "
        "ranks against one device's round on the mean matrix.",
        predict="A 4096 × 4096 fp32 gradient on 8 ranks: how many bytes does each rank hand to the "
        "all-reduce with rank-4 PowerSGD, and with top-k at 1% (values fp32 + int64 indices)? "
        "Which one is smaller, and by how much? Predict, then compute with "
        "`minipar.dp.compression.compressed_bytes_formula`.",
        answer="PowerSGD sends r(n + m) = 4 · 8192 = 32 768 elements = 131 072 bytes (P and Q), 512× less "
        "than the 67 MB matrix. Top-k at 1% sends 167 773 values + indices = 167 773 · 12 ≈ 2.0 MB, "
        "and as an all-gather every rank receives all 8 ranks' pieces, ~16 MB: top-k's indices cost "
        "twice its values, and sparse vectors do not add up in a ring. That is why PowerSGD, whose P "
        "and Q are dense and summable, is the one PyTorch ships as a DDP hook.",
    ),
}


def cells_for(nn: str) -> list:
    spec = LESSONS[nn]
    file = lessons()[nn].file
    task = nbformat.v4.new_markdown_cell(
        f"## Your turn: {spec['title']}\n\n{spec['task']}\n\n"
        f"Workflow: {WORKFLOW.format(file=file, nn=nn)}\n\n"
        "The cell below runs the same checker on the reference solution, on real ranks.",
        id=f"your-turn-{nn}-task",
    )
    task.metadata["slideshow"] = {"slide_type": "slide"}
    check = nbformat.v4.new_code_cell(
        "import sys, pathlib\n"
        "sys.path.insert(0, str(pathlib.Path.cwd().parent))   # the repository root holds exercises/\n"
        "from exercises.check import check_lesson\n"
        f'status = check_lesson("{nn}", solutions=True)        # solutions=False: check your own file\n'
        'assert set(status.values()) == {"pass"}, status',
        id=f"your-turn-{nn}-check",
    )
    check.metadata["slideshow"] = {"slide_type": "-"}
    predict = nbformat.v4.new_markdown_cell(
        f"### Predict, then measure\n\n{spec['predict']}", id=f"your-turn-{nn}-predict"
    )
    predict.metadata["slideshow"] = {"slide_type": "subslide"}
    answer = nbformat.v4.new_markdown_cell(f"**Answer.** {spec['answer']}", id=f"your-turn-{nn}-answer")
    answer.metadata["slideshow"] = {"slide_type": "notes"}
    answer.metadata["jupyter"] = {"source_hidden": True}
    return [task, check, predict, answer]


def heading(cell) -> str | None:
    if cell.cell_type != "markdown":
        return None
    for line in cell.source.splitlines():
        if line.startswith("## "):
            return line[3:].strip()
    return None


def insert(nb, nn: str) -> bool:
    """Insert the section; False if it is there already. Raises SystemExit if no "Build it" heading."""
    if any(c.get("id", "").startswith(f"your-turn-{nn}-") for c in nb.cells):
        return False
    heads = [(i, heading(c)) for i, c in enumerate(nb.cells)]
    key = LESSONS[nn].get("after", "build it")
    build = [i for i, h in heads if h and h.lower().startswith(key)]
    if not build:
        raise SystemExit(f"lesson {nn}: no '## {key}' heading found")
    after = next((i for i, h in heads if i > build[-1] and h and not h.lower().startswith(key)), len(nb.cells))
    nb.cells[after:after] = cells_for(nn)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lessons", nargs="*", help="lesson numbers (default: 00..07)")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    root = Path.cwd()
    if not (root / "exercises" / "check.py").exists():
        raise SystemExit("run from a repository root that has exercises/check.py")
    for nn in a.lessons or sorted(LESSONS):
        nn = nn.zfill(2)
        [path] = sorted((root / "lessons").glob(f"{nn}_*.ipynb"))
        nb = nbformat.read(path, as_version=4)
        if insert(nb, nn):
            nbformat.validate(nb)
            if not a.dry_run:
                nbformat.write(nb, path)
            where = next(i for i, c in enumerate(nb.cells) if c.get("id") == f"your-turn-{nn}-task")
            print(f"{path.name}: 'Your turn' inserted at cell {where}")
        else:
            print(f"{path.name}: already has its 'Your turn' section")
    return 0


if __name__ == "__main__":
    sys.exit(main())
