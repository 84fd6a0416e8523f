"""Megatron-Bridge's performance archive and Megatron-MoE-ModelZoo's H100 runs: the TEST rows of
:mod:`minipar.perf.nemo` (which turns each into a layout, :func:`~minipar.perf.nemo.nemo_rows`), and the one FIT row
of the host's floor under a MoE block.

Each row: ``(source, model, GPUs, (tp, pp, cp, v, ep), micro-batch, global batch, recompute layers, fp8, metric,
published)``, dp = GPUs / (tp·pp·cp), metric ``"tps"`` (tokens/s/GPU) or ``"tflops"`` (Megatron-LM's count); each
setting given by the table or the release's recipe, or ASSUMED, below. The shapes: :mod:`minipar.perf.nemo_shapes`.

Sources (read in the repositories, commit named):

- **TEST: Megatron-Bridge** (github.com/NVIDIA-NeMo/Megatron-Bridge, ``docs/performance-summary-archive.md`` as at
  067f987): the DGX-H100 dense rows of releases 25.09 to 26.06, Llama 3 70B (64 GPUs, TP 4, PP 8, VP 5) and
  Llama 3.1 405B (1,024 GPUs, TP 8, PP 8, CP 2, VP 8), FP8; the 25.11 recipe (tag v0.2.0,
  ``scripts/performance/configs/llama*/``): no recomputation, no Megatron-FSDP, ``tp_comm_overlap`` on, Transformer
  Engine's fused cross-entropy (``scripts/performance/utils/helpers.py``: ``cross_entropy_fusion_impl = "te"``).
  (25.09 has no precision column: its rows are ASSUMED FP8, their 1,619 and 302 tokens/s/GPU within 4 % of
  25.11's FP8-CS rows for the same layouts, 1,602 and 292.)
  And LLAMA3_8B, 8 GPUs, FP8-CS, 14,451 tokens/s/GPU (25.11): the release's recipe runs CP 1 and
  ``recompute_num_layers=5`` (``recompute_method = "block"``) without Megatron-FSDP; the table's FSDP column says
  8 (the recipe before 8aed9a2: ``use_megatron_fsdp=True``, no recomputation). Modelled as the release's recipe
  and labelled ``MISS:provenance`` (rule: the table and the release's recipe disagree on the layout).
- **TEST: Megatron-MoE-ModelZoo** (github.com/yanring/Megatron-MoE-ModelZoo, commit e865051, 2026-05-16; NVIDIA's
  Megatron-Core MoE recipes): ``best_practice/mixtral/run_mixtral_8x22B.sh`` publishes, for H100, "Dropless training
  with forced balancing, performance should be around 465 TFLOPS" (BF16) and "Use PR=fp8 to enable block-wise FP8
  training, performance should be around 560 TFLOPS" (rounded numbers: "around"). GIVEN by
  ``runtime_configs/benchmarking/runtime.conf`` (Mixtral-8x22B: TP 2, PP 8, EP 8, CP 1, VPP 7 = 56 layers / PP / 1 layer
  per virtual stage, MBS 1, GBS 256, 16 nodes = 128 GPUs, alltoall dispatcher, grouped GEMM, s = 4096),
  ``model_configs/benchmarking/Mixtral-8x22B.yaml`` (56 layers, h 6,144, FFN 16,384, 48 heads, 8 query groups, SwiGLU,
  RMSNorm, no biases, no dropout, 8 experts, top-2, expert TP 1, distributed optimizer with
  ``--overlap-grad-reduce``/``--overlap-param-gather``, sequence parallelism, flash attention, Llama2Tokenizer: V =
  32,000; no recompute flag) and ``sbatch_benchmarking.sh`` (fp8: ``--fp8-recipe blockwise``). The shape is
  Mixtral-8x22B-v0.1's published config. TFLOP/s as Megatron-LM counts them (``num_floating_point_operations``,
  megatron/training/training.py at ff45bd4, 2025-12-15: :func:`~minipar.perf.flops.megatron_flops_per_token`), turned
  into tokens/s, then into this model's MFU count. TP communication not overlapped (no such flag in the run: given).
- **TEST: Megatron-Bridge's Qwen3 30B-A3B rows** (the same archive: DGX-H100, FP8, releases 26.02 to 26.06, added
  2026-11-28): 16 GPUs, GBS 1,024, MBS 1, s 4,096, TP 1 and PP 1 · EP 16 (26.04-26.06) or PP 2 · VP 12 · EP 8 (26.02,
  26.02.01), tokens/s per GPU, all given; each row's "Model TFLOP / sec / GPU" is its tokens/s in Megatron-LM's count
  with Qwen3's heads (:func:`~minipar.perf.flops.megatron_flops_per_token`; a test checks all five). The shape: Qwen3
  30B-A3B's Hugging Face config (48 layers, h 2,048, 32 query heads of 128 on it: ``kv_channels``; 4 kv heads, 128
  experts of FFN 768, top-8, V 151,936, untied, rotary), whose model card's 30.5B / 3.3B parameters it reproduces. The
  recipes (FP8 current scaling, forced load balancing; 26.02: ``scripts/performance/configs/qwen/`` at tag v0.3.0, PP 2
  · VP 12 · EP 8, DeepEP's flex dispatcher, ``moe_a2a_overlap=True``; 26.02.01: v0.3.1, whose H100 recipe is already
  26.04's (commit 5c38201, "qwen x86 flex backend": PP 1 · EP 16, HybridEP, ``moe_a2a_overlap=False``); 26.04 to 26.06:
  v0.4.0, v0.5.0 and ``src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py`` at 067f987, HybridEP's flex
  dispatcher, ``moe_a2a_overlap=False``): ``Layout.dispatcher`` "flex" and "ep" in ``Layout.overlap`` as given
  (:data:`FLEX`). 26.02.01's table keeps 26.02's layout while its recipe and its 9,058 tokens/s (26.04's rows:
  8,826-8,960) are EP 16's: by the Llama 3 8B rule it is modelled as the recipe and labelled ``MISS:provenance`` (read
  2026-11-29, after its error as the table's layout, -3.9 %, had been seen; as the recipe, -0.9 %).
  **FIT**: the 26.04.01 row (:data:`MOE_HOST_FIT`) chose the host's floor under a MoE block,
  :data:`minipar.perf.moe.MOE_HOST_S`, after the five rows' errors were seen (below); the other four are its test.
- **TEST: Megatron-Bridge's Qwen3 235B-A22B rows** (the same archive, DGX-H100, FP8, 26.02.01, 26.04, 26.04.01; added
  2026-11-28, once the model carved EP out of tp·dp with the experts' mesh folded): 256 GPUs, GBS 8,192, MBS 1, s 4,096,
  TP 2, PP 8, VP 4, EP 32, all given; the recipe (``qwen3_235b_a22b_pretrain_config_h100`` at v0.3.1, v0.4.0-v0.4.2,
  v0.5.0): expert TP 1, NCCL's ``alltoall`` dispatcher, ``moe_a2a_overlap=True``, ``tp_comm_overlap=False``. The
  shape: its Hugging Face config (94 blocks, h 4,096, 64 heads of 128, 4 kv heads, 128 experts of FFN 1,536, top-8),
  235.2B / 22.2B parameters as its model card; 94 blocks on 32 chunks as 405B's (the embedding and the loss count as
  a block each, ASSUMED the recipe's default here too).
- **TEST, added 2026-11-29, declared before their errors were computed**: the archive's other DGX-H100 rows of models
  this file has, Qwen3 235B-A22B in 26.02 (GBS 8,192, 1,633 tokens/s/GPU; ``qwen3_235b_a22b_pretrain_config_h100`` V2 at
  v0.3.0, the settings above) and 25.11 (GBS 2,048, 1,575; v0.2.0's ``QWEN3_235B_A22B_H100_FP8_CS_BASE_CONFIG``, the
  same settings), and Qwen3 30B-A3B in 25.11 (5,275). For that last one the rule of the Llama 3 8B row holds (set
  before): the table (MBS 2, VP 24) and the release's recipe (v0.2.0: MBS 1, VP 12, GBS 512, NCCL's ``alltoall``
  dispatcher, ``moe_a2a_overlap=True``) disagree, so it is modelled as the recipe and labelled ``MISS:provenance``.
  Their errors: -5.0 % and -2.5 % (235B); the 30B row +65 %, as 26.02's on the same layout (``MISS:seen``, below):
  both releases that ran PP 2 · VP 12 · EP 8 ran it at about 5,200 tokens/s/GPU.
- **TEST: GPT-OSS 120B** (the archive's DGX-H100 rows, BF16, 64 GPUs, 26.02 to 26.04.01: GBS 1,280, MBS 1, TP 1, PP 4,
  EP 8; 5,993, 5,984, 5,810, 5,824 tokens/s/GPU), modelled once sliding-window attention was (2026-11-29). The recipe
  (``GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2`` at v0.3.0-v0.4.2): expert TP 1, ``recompute_modules=["layernorm",
  "moe_act"]``, NCCL's ``alltoall`` dispatcher, no ``moe_a2a_overlap``, gradients reduced in bf16, Megatron's native
  fused cross-entropy; the shape its provider's (``GPTOSSProvider120B``: 36 blocks, h 2,880, 64 heads of 64, 8 kv heads,
  128 experts of FFN 2,880, top-4, biases, V 201,088, untied, YaRN rotary, a window of 128 tokens in every other block:
  ``window_size=(128, 0)``, ``window_attn_skip_freq=2``; its learnable attention sinks add a logit per head, no GEMM),
  whose 116.8B parameters the model card states (OpenAI 2025, arXiv:2508.10925, §2). The 25.11 row (5,630; the table's
  MBS 4 and GA 2 contradict each other and v0.2.0's MBS 1, GBS 512) is modelled as that recipe, ``MISS:provenance`` (the
  rule above). Known miss, labelled after its error was seen (``MISS:seen``): the model reads the four rows +49 to +53 %
  optimistic (the 25.11 row +50 %); Megatron-Bridge's B200 row of the same model (26.04.01: MBS 4, PP 1, 13,568
  tokens/s/GPU) runs at the same fraction of its peak (21 % of the bf16 peak in this model's count, the H100's 20 %)
  with four times the micro-batch and no pipeline, so the time is the kernels', not the host's, the bubble's or the
  network's. Candidates, none measured here: heads of 64 (the attention rate is measured at 128), the learnable sinks
  and the window in cuDNN's kernel (Transformer Engine runs sinks in cuDNN's fused attention from cuDNN 9.13.1,
  ``fused_attn.cpp``; FlashAttention has none), the biases of the 16 local experts' grouped GEMMs. Read 2026-11-29 and
  ruled out as unfused: the clamped SwiGLU with its bias and the routing weights is one fused kernel (the provider's
  ``bias_activation_fusion=True``; Megatron-Core's ``TEGroupedMLP`` calls ``weighted_bias_quick_geglu_impl`` with the
  clamp, ``experts.py`` at core_v0.15.0).
- **TEST: DeepSeek-V3** (the archive's 25.09 DGX-H100 row: 1,024 GPUs, GBS 8,192, MBS 1, s 4,096, TP 2, PP 8, VP 4,
  EP 64, FP8 with DeepSeek's blockwise scaling (the table's note), 1,297 tokens/s/GPU; added 2026-11-29 once the model
  had MLA, the dense first blocks, the shared expert and MTP). Its recipe, read in v0.1.0rc4's
  ``scripts/performance/run_script.py`` and ``deepseek_v3.py`` (given): the pipeline layout ``Et|(tt|)*30mL`` (the
  first model chunk the embedding and 1 block, 30 chunks of 2, the last MTP and the loss: ``RECIPES``' ``layout``,
  read by :func:`minipar.perf.pp_layout.parse_layout` as ``--pipeline-model-parallel-layout`` reads it), one MTP
  layer, DeepEP (``"flex"``) with forced balancing, ``overlap_moe_expert_parallel_comm`` (``"ep"``), no
  ``overlap_grad_reduce`` (the whole DP reduction exposed, ASSUMED for its parameter all-gather too), no TP overlap,
  expert TP 1, gradients reduced in bf16, ``recompute_modules=["mla_up_proj", "mlp"]``
  (:mod:`minipar.perf.recompute_modules`). The shape is DeepSeek-V3's Hugging Face config (671B / 37B
  parameters and the table's FLOP count, 260.6 GFLOP per token with MTP, reproduced: ``tests/test_plan_mtp.py``).
  Computed once before that recipe was read, with NCCL's all-to-all and no overlap (-31 %), and with DeepEP and the
  overlap (-4.7 %); as the recipe says, -7.2 % before the model had those two modules (2026-11-29: the blocks kept
  what they free, 71.6 GiB, and skipped their re-run), -8.6 % and 54.5 GiB with them; -0.7 % with its node-limited
  routing (2026-11-29: its config's ``n_group`` 8, ``topk_group`` 4, a token on at most 4 of 8 nodes, §2.1.2,
  :func:`minipar.perf.moe.node_hit`; read in the paper and Megatron-Core's router after the -8.6 % was seen, nothing
  chosen on the row); -1.0 % with each rank's dispatched rows as Megatron-Core keeps them
  (:func:`minipar.perf.moe.dispatched_rows`). Adam's moments in bf16 (the recipe's ``use_precision_aware_optimizer``,
  ``exp_avg_dtype``/``exp_avg_sq_dtype`` bf16: ``optimizer_dtypes``, memory only): 44.2 GiB. Blockwise FP8 is modelled
  at per-tensor FP8's rate (ASSUMED). Megatron-Bridge's BF16 card of the model (:mod:`minipar.perf.mb_cards`)
  reads -5.9 % (-7.1 % before the dispatched rows were counted per rank).

- **TEST, added 2026-11-29 (stop 66), declared here before their errors were computed**: the archive's DGX-H100 rows
  not yet in this set. (a) Llama 3 70B in 26.02.01 and 26.04 (GBS 256; 1,639 and 1,633 tokens/s/GPU) and Llama 3.1
  405B in 26.04.01 (GBS 1,536; 328): the layouts and recipes of the rows above (their releases' recipes unchanged
  for these models). (b) 25.09's rows, its recipes read in v0.1.0rc4's ``scripts/performance`` (``run_script.py``
  and ``configs/*/*_llm_pretrain.yaml``'s ``perf_matrix.h100``). Llama 3 8B: 8 GPUs, GBS 128, MBS 1, s 8,192, TP 1,
  CP 1, Megatron-FSDP over the 8 GPUs (``use_megatron_fsdp: true``: ZeRO-3, ``zero`` 3, parameters gathered and
  gradients reduce-scattered behind compute: ``overlap_param_gather``/``overlap_grad_reduce`` in the recipe), no
  recomputation (the recipe sets none), TE's fused cross-entropy, gradients reduced in bf16: 14,079. The table's
  FSDP 8 and CP 1 are the yaml's FP8 variants (``fp8_ds``/``fp8_cs``; BF16 runs CP 2 without FSDP), so FP8 (given).
  Qwen3 30B-A3B and 235B-A22B ("tokendrop"): ``apply_moe_token_drop`` (capacity factor 1.0, every expert's input
  padded to capacity: each expert computes and receives exactly tokens·k/E rows, this model's balanced routing,
  given), NCCL's ``alltoall`` dispatcher (the token drop asserts it), no all-to-all overlap (set only for DeepSeek-V3),
  ``tp_comm_overlap=True``, no recomputation (the yaml's ``recompute_granularity: null``); 235B: 256 GPUs, GBS 2,048,
  MBS 1, TP 2, PP 8, VP 4, EP 32, expert TP 1, the embedding and the loss counted in the pipeline split (its recipe's
  ``account_for_*_in_pipeline_split=True``, given), 1,204 tokens/s/GPU, precision ASSUMED FP8 (25.09's table has no
  precision column; the release's Llama rows are ASSUMED FP8 too, above). 30B: 16 GPUs, GBS 512, PP 2, EP 8, expert
  TP 1, 10,494 tokens/s/GPU; the table's MBS 2 is the yaml's ``fp8_cs`` variant (BF16 runs MBS 1), so FP8 (given);
  the table says VP 24, the yaml 12: by the Llama 3 8B rule it is modelled as the recipe (VP 12) and labelled
  ``MISS:provenance``. Their errors, computed after the above was written: Llama 3 70B -8.7 % and -8.4 %, 405B -6.4 %
  (-6.1 % since FP8 weights, the recipes' ``fp8_param_gather``, are modelled), Llama 3 8B with Megatron-FSDP -6.2 %
  (-6.1 %), Qwen3 235B-A22B +13.7 % (its all-to-all over 4 nodes not overlapped: 15.8 s of
  the model's 23.9 s step), Qwen3 30B-A3B +41 %. That last row says something about the PP 2 · EP 8 miss (below): the
  three releases that ran that layout (25.09 at micro-batch 2, with token dropping and NCCL's all-to-all not overlapped;
  25.11 and 26.02 at micro-batch 1, the all-to-all overlapped, 26.02's on DeepEP) all took 16.2-16.7 ms per block and
  micro-batch, so twice the tokens per micro-batch cost no time: the missing cost is one per block and micro-batch, as
  the host's floor is (9.2 ms on EP 16 without a pipeline), not one per token. The model's 11.5 ms a block at
  micro-batch 2 is its GPU time and exposed all-to-all, above that floor.

Known misses. ``MISS:provenance`` (Llama 3 8B, 25.11: the rule above, set before its error was computed).
The Qwen3 235B-A22B rows were ``MISS:a2a`` (+16 to +23 %, labelled after seen) until 2026-11-29: their EP 32 all-to-all
spans 4 nodes over NCCL, overlapped (``moe_a2a_overlap``), and the model hid all of it that the other micro-batch's
compute could hide. The sources found for the NIC's all-to-all rate (NCCL's maintainers: "46-48GB/s per NIC" at NDR,
NVIDIA/nccl-tests#290; DeepEP's README, 43-45 GB/s across the NIC) agree with the model's 44 GB/s (``IB_EFF``), so the
rate did not explain it. Megatron-MoE-ModelZoo's table of the same model (:mod:`minipar.perf.moe_zoo`, another team,
bf16, DeepEP) has the same run with and without the overlap: it saves 2.1 s of a 19.7 s step, where the model had 7.4 s
of all-to-all to hide. The fraction hidden, chosen on that pair (:data:`minipar.perf.moe.EP_OVERLAP_HIDES`, 0.4, then
0.35), puts these rows at -9 to -4 % (-10 to -3 % at 0.35, with each rank's dispatched rows counted as Megatron-Core
keeps them); the label is gone. Qwen3 30B in 26.02 (+70 %, labelled after seen) was ``MISS:release``
("26.02.01 runs the same layout 1.8x faster") until 2026-11-29, when 26.02.01's recipe was read: it runs EP 16, not the
table's PP 2 · VP 12 · EP 8 (above). No run left says PP 2 · VP 12 · EP 8 is faster than ~5,200 tokens/s/GPU; the
model's ~8,700 misses it, cause unknown (candidates: 24 model chunks of 2 blocks each, 128 micro-batches, the
overlapped all-to-all's schedule under interleaving): ``MISS:seen``.
The Qwen3 rows read -41 % (EP 16) and +57 % / +178 % (EP 8) until 2026-11-28, when three things came in, each from a
source: EP 16's all-to-all moves its intra-node bytes on NVLink while the rest crosses the NIC, and HybridEP / DeepEP
send a token across the network once per node (:func:`minipar.perf.moe.a2a_seconds`), which left the rows +56 % and
+109 % optimistic; 26.02 overlaps the all-to-all (its recipe). What was left is one gap, on an H100 and on a B200:
the published throughput hardly moves between EP 16 over two nodes on H100s (8,826-8,960 tokens/s per GPU) and EP 8
inside one node of B200s at micro-batch 1 (25.11: 9,299), about 9.2 ms per block and micro-batch whatever the GPU does:
the host's floor (:data:`minipar.perf.moe.MOE_HOST_S`, chosen on 26.04.01): then 26.04 and 26.06 read +0.9 % and
+1.7 %, the B200 row -1.7 % (``tests/test_plan_moe.py``; 26.02.01, read then as the table's EP 8 at -3.9 %, is EP 16's
run, above). Two labels were written AFTER
their errors were seen and are gone. ``MISS:moe``, the Mixtral rows: -20 % bf16 and -13 % FP8 while the model ASSUMED
expert TP = TP (2), whose EP group of 8 ranks 2 apart spans two nodes, so every all-to-all crossed InfiniBand; the run's
expert TP is 1 (given), and Megatron-Core then folds the experts' mesh (an EP group is 8 consecutive ranks, one node's
NVLink: :class:`minipar.perf.layout.Layout` ``etp``): -3 % and +11 %. Megatron-Bridge's Llama 3 70B rows (TP 4, PP 8, VP
5), ``MISS:last-stage``: -13 to -16 % with the H100's attention at the FA3 paper's 35 %; with the attention core at its
measured rate for Megatron-Core's kernel (:data:`minipar.perf.gemm.ATTN_EFF_H100`, "cudnn") and the efficiency re-chosen
on NeMo's table (0.60), -8 to -10 %.
"""

from __future__ import annotations

NEMO = [  # TEST rows (module doc)
    ("MB 25.09", "Llama3-70B", 64, (4, 8, 1, 5, 1), 1, 128, None, True, "tps", 1619),
    ("MB 25.09", "Llama3.1-405B", 1024, (8, 8, 2, 8, 1), 1, 512, None, True, "tps", 302),
    ("MB 25.11", "Llama3-70B", 64, (4, 8, 1, 5, 1), 1, 128, None, True, "tps", 1602),
    ("MB 25.11", "Llama3.1-405B", 1024, (8, 8, 2, 8, 1), 1, 512, None, True, "tps", 292),
    ("MB 26.02", "Llama3-70B", 64, (4, 8, 1, 5, 1), 1, 256, None, True, "tps", 1621),
    ("MB 26.02", "Llama3.1-405B", 1024, (8, 8, 2, 8, 1), 1, 1536, None, True, "tps", 311),
    ("MB 26.04.01", "Llama3-70B", 64, (4, 8, 1, 5, 1), 1, 256, None, True, "tps", 1664),
    ("MB 26.04", "Llama3-70B", 64, (4, 8, 1, 5, 1), 1, 256, None, True, "tps", 1633),  # added 2026-11-29 (stop 66)
    ("MB 26.02.01", "Llama3-70B", 64, (4, 8, 1, 5, 1), 1, 256, None, True, "tps", 1639),
    ("MB 26.04.01", "Llama3.1-405B", 1024, (8, 8, 2, 8, 1), 1, 1536, None, True, "tps", 328),
    ("MB 25.09", "Llama3-8B", 8, (1, 1, 1, 1, 1), 1, 128, None, True, "tps", 14079),  # Megatron-FSDP: SETTINGS
    ("MB 26.06", "Llama3.1-405B", 1024, (8, 8, 2, 8, 1), 1, 1536, None, True, "tps", 326),
    ("MB 25.11", "Llama3-8B", 8, (1, 1, 1, 1, 1), 1, 128, 5, True, "tps", 14451),
    ("MoE-Zoo", "Mixtral-8x22B", 128, (2, 8, 1, 7, 8), 1, 256, None, False, "tflops", 465),
    ("MoE-Zoo", "Mixtral-8x22B", 128, (2, 8, 1, 7, 8), 1, 256, None, True, "tflops", 560),
    ("MB 26.06", "Qwen3-30B-A3B", 16, (1, 1, 1, 1, 16), 1, 1024, None, True, "tps", 8826),
    ("MB 26.04", "Qwen3-30B-A3B", 16, (1, 1, 1, 1, 16), 1, 1024, None, True, "tps", 8901),
    ("MB 26.02.01", "Qwen3-30B-A3B", 16, (1, 1, 1, 1, 16), 1, 1024, None, True, "tps", 9058),  # the recipe's layout
    ("MB 26.02", "Qwen3-30B-A3B", 16, (1, 2, 1, 12, 8), 1, 1024, None, True, "tps", 5113),
    ("MB 26.04.01", "Qwen3-235B-A22B", 256, (2, 8, 1, 4, 32), 1, 8192, None, True, "tps", 1712),
    ("MB 26.04", "Qwen3-235B-A22B", 256, (2, 8, 1, 4, 32), 1, 8192, None, True, "tps", 1686),
    ("MB 26.02.01", "Qwen3-235B-A22B", 256, (2, 8, 1, 4, 32), 1, 8192, None, True, "tps", 1611),
    ("MB 26.02", "Qwen3-235B-A22B", 256, (2, 8, 1, 4, 32), 1, 8192, None, True, "tps", 1633),
    ("MB 25.11", "Qwen3-235B-A22B", 256, (2, 8, 1, 4, 32), 1, 2048, None, True, "tps", 1575),
    ("MB 25.11", "Qwen3-30B-A3B", 16, (1, 2, 1, 12, 8), 1, 512, None, True, "tps", 5275),  # the recipe's layout
    ("MB 26.04.01", "GPT-OSS-120B", 64, (1, 4, 1, 1, 8), 1, 1280, None, False, "tps", 5824),
    ("MB 26.04", "GPT-OSS-120B", 64, (1, 4, 1, 1, 8), 1, 1280, None, False, "tps", 5810),
    ("MB 26.02.01", "GPT-OSS-120B", 64, (1, 4, 1, 1, 8), 1, 1280, None, False, "tps", 5984),
    ("MB 26.02", "GPT-OSS-120B", 64, (1, 4, 1, 1, 8), 1, 1280, None, False, "tps", 5993),
    ("MB 25.11", "GPT-OSS-120B", 64, (1, 4, 1, 1, 8), 1, 512, None, False, "tps", 5630),  # the recipe's layout
    ("MB 25.09", "DeepSeek-V3", 1024, (2, 8, 1, 4, 64), 1, 8192, None, True, "tps", 1297),
    ("MB 25.09", "Qwen3-235B-A22B", 256, (2, 8, 1, 4, 32), 1, 2048, None, True, "tps", 1204),  # tokendrop: SETTINGS
    ("MB 25.09", "Qwen3-30B-A3B", 16, (1, 2, 1, 12, 8), 2, 512, None, True, "tps", 10494),  # the recipe's VP
]
# rows whose table and release recipe disagree (MISS:provenance, module doc): (source, model)
PROVENANCE = {
    ("MB 25.11", "Qwen3-30B-A3B"),
    ("MB 25.11", "GPT-OSS-120B"),
    ("MB 26.02.01", "Qwen3-30B-A3B"),
    ("MB 25.09", "Qwen3-30B-A3B"),
}

# FIT of the host's floor under a MoE block (minipar.perf.moe.MOE_HOST_S), chosen after the Qwen3 rows' errors were seen
MOE_HOST_FIT = [("MB 26.04.01", "Qwen3-30B-A3B", 16, (1, 1, 1, 1, 16), 1, 1024, None, True, "tps", 8960)]
# Megatron-Bridge releases whose Qwen3 30B recipes run the flex dispatcher (DeepEP in 26.02.x, HybridEP after): given
FLEX = ("MB 26.02", "MB 26.02.01", "MB 26.04", "MB 26.04.01", "MB 26.06")
A2A_OVERLAP = ("MB 25.11", "MB 26.02")  # ... and whose Qwen3 30B recipes set moe_a2a_overlap=True
# What a model's recipe sets in every release, over recipe()'s defaults (module doc): given
RECIPES = {
    "Qwen3-235B-A22B": {"tp_overlap": False, "a2a_overlap": True, "etp": 1, "flex": False},
    "GPT-OSS-120B": {"a2a_overlap": False, "etp": 1, "flex": False, "modules": ("layernorm", "moe_act")},
    # 25.09's run_script.py for H100: layout Et|(tt|)*30mL, DeepEP, A2A overlap, no grad-reduce overlap, no TP overlap
    "DeepSeek-V3": {
        "tp_overlap": False,
        "a2a_overlap": True,
        "etp": 1,
        "flex": True,
        "dp_overlap": False,
        "layout": "Et|(tt|)*30mL",
        "modules": ("mla_up_proj", "mlp"),
        "optimizer_dtypes": ("fp32", "bf16", "bf16"),  # the recipe's precision-aware optimizer, bf16 moments
    },  # fmt: skip
}
# One run's recipe where it differs from its model's in RECIPES (module doc: 25.09, given): (source, model) -> settings
SETTINGS = {
    ("MB 25.09", "Llama3-8B"): {"zero": 3},  # use_megatron_fsdp: true (the yaml's FP8 variants)
    ("MB 25.09", "Qwen3-235B-A22B"): {"tp_overlap": True, "a2a_overlap": False},  # tp_comm_overlap=True, token drop
    # blockwise FP8: the perf scripts' recipe "ss", bf16_with_fp8_subchannel_scaling_mixed: fp8_param_gather=False
    ("MB 25.09", "DeepSeek-V3"): {"fp8_params": False},
}
