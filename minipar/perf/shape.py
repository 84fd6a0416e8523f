"""What the performance model (:mod:`minipar.perf.model`) is asked about first: the model, its shape.

:class:`ModelShape` (a decoder-only transformer's sizes: its blocks, attention, MLP or experts, embeddings) and
:func:`shape_of` (minipar's own GPT's); how it is cut over devices is :class:`~minipar.perf.layout.Layout`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from minipar.errors import ConfigError

# Megatron-LM's --position-embedding-type (ModelShape.with_embeddings, --position-embedding-type); none: ALiBi, NoPE
POSITIONS = ("learned_absolute", "rope", "none")
UNTIED_ROPE = {"tied_embeddings": False, "learned_positions": False}  # a Llama-like shape's: own output layer, rotary
SIZES = ("layers", "hidden", "heads", "seq", "vocab", "kv_heads", "ffn", "kv_channels")  # ModelShape's integer sizes
MLA = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")  # multi-latent attention
NO_GROUPS = {"moe_router_num_groups": None, "moe_router_group_topk": None}  # a dense view has no routing


@dataclass(frozen=True)
class ModelShape:
    """A dense decoder-only transformer: ``layers`` blocks of width ``hidden``, ``heads`` query heads, sequence ``seq``,
    vocabulary ``vocab``; ``bias``: minipar's ``GPTConfig.bias`` (minipar counts only); ``kv_heads`` key/value heads
    (grouped-query attention, Ainslie et al. 2023, arXiv:2305.13245; None: = heads); ``ffn`` the MLP's inner width
    (None: 4·hidden); ``gated``: a gated MLP (SwiGLU, Shazeer 2020, arXiv:2002.05202: three h×ffn matrices instead of
    two), as in Llama; ``dropout``: the block keeps two dropout masks for backward (GPT-style; Llama has no dropout:
    False); ``experts`` E and ``top_k`` k: a mixture of experts, every block's MLP one of E MLPs of this shape, k per
    token (None: dense; :mod:`minipar.perf.moe`); ``tied_embeddings``: the output layer is the word embedding's
    transpose (GPT-2, MPT, BLOOM; Megatron-LM's default) or, False, its own V×h matrix (Llama: Megatron-LM's
    ``--untie-embeddings-and-output-weights``, Hugging Face's ``tie_word_embeddings=False``); ``learned_positions``: a
    learned s×h position table (GPT) or, False, positions without weights (rotary, Su et al. 2021, arXiv:2104.09864, or
    ALiBi; Megatron-LM's ``--position-embedding-type rope``); ``kv_channels`` the width of one attention head
    (Megatron-LM's ``--kv-channels``; None: hidden/heads, :attr:`head_dim`), so that the queries span heads·kv_channels
    (:attr:`q_width`), which need not be the hidden size (Qwen3 30B-A3B: 32 × 128 on h = 2,048); ``window_size`` w:
    sliding-window attention, a query sees the w tokens before it (Beltagy et al. 2020, arXiv:2004.05150, §3.1;
    Megatron-Core's ``window_size=(w, 0)``), in every block or, with ``window_attn_skip_freq`` N, all but every N-th
    (Megatron-Core's; GPT-OSS: 128 and 2, alternating): :func:`~minipar.perf.flops.attention_keys`; ``shared_ffn``: with
    experts, the width of the shared experts' MLP every token also passes through (DeepSeekMoE, Dai et al. 2024,
    arXiv:2401.06066, §3.2; Megatron-Core's ``moe_shared_expert_intermediate_size``, n shared experts of width f
    counting as one of n·f; Qwen2-57B-A14B: 20,480), TP-split as a dense MLP; ``moe_ffn``: the experts' width where it
    is not ``ffn`` (Megatron-Core's ``moe_ffn_hidden_size``), ``dense_layers`` k: the first k blocks keep a dense MLP
    of ``ffn`` (:meth:`block_kinds`); ``q_lora_rank``, ``kv_lora_rank``, ``qk_head_dim``, ``qk_pos_emb_head_dim``,
    ``v_head_dim``: multi-latent attention (:attr:`mla`); ``mtp_num_layers`` N: multi-token prediction (DeepSeek-V3,
    arXiv:2412.19437, §2.2; Megatron-Core's ``--mtp-num-layers``), N more blocks of the last kind on the last pipeline
    stage, each with a 2h → h projection and its own pass through the shared output layer and loss;
    ``moe_router_num_groups`` G and ``moe_router_group_topk`` M: group-limited routing (Megatron-Core's names; Hugging
    Face's ``n_group``, ``topk_group``): the E experts in G groups of consecutive experts, a token's k experts from its
    M best groups; set G to the nodes of the EP group and a token reaches at most M nodes (DeepSeek-V3's node-limited
    routing, arXiv:2412.19437, §2.1.2: 8 and 4; :func:`minipar.perf.moe.node_hit`). Its counts here (:attr:`params`
    ...) are the DENSE block's."""

    layers: int
    hidden: int
    heads: int
    seq: int = 2048
    vocab: int = 51200
    bias: bool = True
    kv_heads: int | None = None
    ffn: int | None = None
    gated: bool = False
    dropout: bool = True
    experts: int | None = None
    top_k: int = 1
    tied_embeddings: bool = True
    learned_positions: bool = True
    kv_channels: int | None = None
    window_size: int | None = None
    window_attn_skip_freq: int | None = None
    shared_ffn: int | None = None
    moe_ffn: int | None = None
    dense_layers: int = 0
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_head_dim: int | None = None
    qk_pos_emb_head_dim: int | None = None
    v_head_dim: int | None = None
    mtp_num_layers: int = 0
    moe_router_num_groups: int | None = None
    moe_router_group_topk: int | None = None

    def __post_init__(self):
        for k in (*SIZES, "window_size", "window_attn_skip_freq", "shared_ffn", "moe_ffn", *MLA):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ConfigError(f"ModelShape.{k}={v!r}: must be an integer >= 1")
        for k in ("bias", "gated", "dropout", "tied_embeddings", "learned_positions"):
            if not isinstance(getattr(self, k), bool):
                raise ConfigError(f"ModelShape.{k}={getattr(self, k)!r}: must be True or False")
        if self.hidden % self.heads and self.kv_channels is None:
            raise ConfigError(
                f"hidden={self.hidden} is not divisible by heads={self.heads}: pick heads dividing it, or give "
                "kv_channels (--kv-channels), the width of one head"
            )
        if self.window_attn_skip_freq and not self.window_size:
            raise ConfigError(f"window_attn_skip_freq={self.window_attn_skip_freq}: give window_size (--window-size)")
        if self.heads % self.kv:
            raise ConfigError(f"kv_heads={self.kv} must divide heads={self.heads} (each kv head serves a whole group)")
        if self.experts is not None and not (isinstance(self.experts, int) and self.experts >= 0):
            raise ConfigError(f"ModelShape.experts={self.experts!r}: must be an integer >= 1 (None or 0: dense)")
        if self.experts and not (isinstance(self.top_k, int) and 1 <= self.top_k <= self.experts):
            raise ConfigError(f"top_k={self.top_k!r}: between 1 and experts={self.experts} experts per token")
        if self.shared_ffn and not self.experts:
            raise ConfigError(f"shared_ffn={self.shared_ffn}: shared experts sit beside routed ones; give experts")
        given = [k for k in MLA[1:] if getattr(self, k) is not None]
        if (given or self.q_lora_rank) and (len(given) < 4 or self.kv != self.heads):
            raise ConfigError(
                f"multi-latent attention needs {', '.join(MLA[1:])} (given: {', '.join(given) or 'none'}) and a K "
                f"and V per head (kv_heads={self.kv}, heads={self.heads})"
            )
        if not isinstance(self.mtp_num_layers, int) or self.mtp_num_layers < 0:
            raise ConfigError(f"mtp_num_layers={self.mtp_num_layers!r}: multi-token-prediction blocks, an integer >= 0")
        g, m = self.moe_router_num_groups, self.moe_router_group_topk
        if (g, m) != (None, None):
            if g is None or m is None or not self.experts:
                raise ConfigError(
                    f"moe_router_num_groups={g}, moe_router_group_topk={m}: group-limited routing needs both and "
                    "experts; give --moe-experts, --moe-router-num-groups G and --moe-router-group-topk M, or neither"
                )
            if not (isinstance(g, int) and g >= 1 and self.experts % g == 0):
                raise ConfigError(f"moe_router_num_groups={g!r}: must divide experts={self.experts} (equal groups)")
            if not (isinstance(m, int) and 1 <= m <= g) or self.top_k > m * (self.experts // g):
                raise ConfigError(
                    f"moe_router_group_topk={m!r}: between 1 and {g} groups whose {self.experts // g} experts each "
                    f"hold the top_k={self.top_k}"
                )
        if self.moe_ffn and not self.experts:
            raise ConfigError(f"moe_ffn={self.moe_ffn}: the experts' MLP width needs experts; give experts or ffn")
        if not isinstance(self.dense_layers, int) or not 0 <= self.dense_layers < (self.layers if self.experts else 1):
            raise ConfigError(
                f"dense_layers={self.dense_layers!r}: the first blocks with a dense MLP, 0 to layers − 1 "
                f"({self.layers}) of a model with experts (0 without)"
            )

    def block_kinds(self) -> list[tuple[ModelShape, int]]:
        """The model's kinds of block in order, each as the shape of a model of that block alone and how many
        there are: the first ``dense_layers`` with a dense MLP of ``ffn``, then the rest with experts of ``moe_ffn``
        (Hugging Face's ``first_k_dense_replace``, DeepSeek-V3's 3; Megatron-Core's ``moe_layer_freq``
        [0]·k + [1]·(l − k)); ``[(self, layers)]`` when every block is alike. The views keep ``layers`` (a window's
        pattern counts over all the blocks)."""
        return list(_block_kinds(self))

    @property
    def kv(self) -> int:
        """Key/value heads (= heads without GQA)."""
        return self.kv_heads or self.heads

    @property
    def head_dim(self) -> int:
        """One attention head's width: ``kv_channels``, or hidden/heads."""
        return self.kv_channels or self.hidden // self.heads

    @property
    def q_width(self) -> int:
        """The queries' (and the attention output's) width, heads·head_dim (= hidden unless ``kv_channels``)."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """The keys' (and the values') width, h_kv = kv heads·head_dim."""
        return self.kv * self.head_dim

    @property
    def f(self) -> int:
        """The MLP's inner width (4·hidden unless given)."""
        return self.ffn or 4 * self.hidden

    @property
    def mla(self) -> bool:
        """Multi-latent attention (DeepSeek-V2, arXiv:2405.04434, §2.1; Megatron-Core's ``--multi-latent-attention``):
        K and V up-projected from a ``kv_lora_rank`` latent, Q from a ``q_lora_rank`` one (or from h), heads of
        ``qk_head_dim`` + ``qk_pos_emb_head_dim`` (the rotary part) for QKᵀ and ``v_head_dim`` for V."""
        return self.kv_lora_rank is not None

    @property
    def qk_dim(self) -> int:
        """One head's width in QKᵀ: ``qk_head_dim`` + ``qk_pos_emb_head_dim`` with MLA (DeepSeek-V3: 192), else
        :attr:`head_dim`."""
        return self.qk_head_dim + self.qk_pos_emb_head_dim if self.mla else self.head_dim

    @property
    def v_dim(self) -> int:
        """One head's width of V and of the attention output: ``v_head_dim`` with MLA, else :attr:`head_dim`."""
        return self.v_head_dim if self.mla else self.head_dim

    @property
    def core_width(self) -> float:
        """heads·(qk_dim + v_dim)/2: the attention core's FLOPs per query and key are 4·core_width (2·a·qk_dim for QKᵀ,
        2·a·v_dim for attention·V); :attr:`q_width` unless MLA."""
        return self.heads * (self.qk_dim + self.v_dim) / 2 if self.mla else self.q_width

    @functools.cached_property
    def attn_matrix_params(self) -> int:
        """Weights of one block's attention matrices: h·(q + 2·h_kv) (QKV; q = :attr:`q_width`, h unless
        ``kv_channels``) + q·h (output); with MLA (Megatron-Core's ``MLASelfAttention``) Q's down and up projections
        h·r_q + r_q·a·d_qk (h·a·d_qk without ``q_lora_rank``), K and V's h·(r_kv + d_rope) + r_kv·a·(d_nope + d_v) and
        the output a·d_v·h."""
        h, a = self.hidden, self.heads
        if not self.mla:
            return h * (self.q_width + 2 * self.kv_width) + self.q_width * h
        rq, rkv = self.q_lora_rank, self.kv_lora_rank
        q = h * rq + rq * a * self.qk_dim if rq else h * a * self.qk_dim
        kv = h * (rkv + self.qk_pos_emb_head_dim) + rkv * a * (self.qk_head_dim + self.v_dim)
        return q + kv + a * self.v_dim * h

    @functools.cached_property
    def layer_matrix_params(self) -> int:
        """Weights of one block's matrices: the attention's (:attr:`attn_matrix_params`) + (3 if gated else 2)·h·f
        (MLP); 12h² for a GPT (Narayanan et al. 2021, arXiv:2104.04473, §5.1, eq. 2)."""
        return self.attn_matrix_params + (3 if self.gated else 2) * self.hidden * self.f

    @functools.cached_property
    def layer_params(self) -> int:
        """One block: its matrices, biases (q + 2h_kv, h, f or 2f, h) and two LayerNorms (4h); 12h² + 13h for a GPT."""
        h, f = self.hidden, self.f
        lora = (self.q_lora_rank or 0) + self.kv_lora_rank if self.mla else 0  # MLA's two latent norms (no biases)
        qkv = 0 if self.mla else self.q_width + 2 * self.kv_width
        return self.layer_matrix_params + qkv + h + (2 * f if self.gated else f) + 5 * h + lora

    @functools.cached_property
    def params(self) -> float:
        """l·(block) + the embeddings (:attr:`embedding_params`): 12·l·h² + 13·l·h + (V + s)·h for a GPT, its head tied
        and its positions learned (Narayanan et al. 2021 §5.1, eq. 2)."""
        mtp = self.mtp_num_layers * (self.layer_params + self.mtp_projection_params)
        return self.layers * self.layer_params + self.embedding_params + mtp

    @property
    def mtp_projection_params(self) -> int:
        """What one multi-token-prediction block adds beyond a block (DeepSeek-V3, arXiv:2412.19437, §2.2): its 2h → h
        projection (2h²) and the two norms before it (2h)."""
        return 2 * self.hidden * self.hidden + 2 * self.hidden

    @property
    def embedding_params(self) -> int:
        """The word embedding V·h, the output layer's own V·h when untied, the position table s·h when learned."""
        v = self.vocab * (1 if self.tied_embeddings else 2) + (self.seq if self.learned_positions else 0)
        return v * self.hidden

    def with_embeddings(self, untie: bool = False, position_type: str | None = None) -> ModelShape:
        """This shape under Megatron-LM's ``--untie-embeddings-and-output-weights`` (``untie``) and
        ``--position-embedding-type`` (``learned_absolute``, ``rope`` or ``none``; None: as it is). Raises
        ConfigError for another position type."""
        if position_type is not None and position_type not in POSITIONS:
            raise ConfigError(f"position_type={position_type!r}: use learned_absolute, rope or none (ALiBi, NoPE)")
        learned = self.learned_positions if position_type is None else position_type == "learned_absolute"
        return replace(self, tied_embeddings=self.tied_embeddings and not untie, learned_positions=learned)

    @property
    def lookup_params(self) -> int:
        """Parameters a token only looks up, no FLOPs (6·N's N leaves them out): the position table when learned and the
        word embedding when untied (tied, it is the logit layer's matrix)."""
        return self.embedding_params - self.vocab * self.hidden  # all but the logit layer's V·h


def shape_of(cfg) -> ModelShape:
    """:class:`ModelShape` of a ``minipar.model.gpt.GPTConfig``."""
    return ModelShape(cfg.n_layer, cfg.d_model, cfg.n_head, cfg.block_size, cfg.vocab_size, cfg.bias)


@functools.lru_cache(maxsize=256)
def _block_kinds(model: ModelShape) -> tuple[tuple[ModelShape, int], ...]:
    """:meth:`ModelShape.block_kinds`, kept per shape (a search asks it ~10⁵ times; the views are built once)."""
    if not model.experts or (not model.dense_layers and model.moe_ffn is None):
        return ((model, model.layers),)
    moe = replace(model, ffn=model.moe_ffn or model.f, moe_ffn=None, dense_layers=0)
    dense = replace(model, experts=None, top_k=1, shared_ffn=None, moe_ffn=None, dense_layers=0, **NO_GROUPS)
    if model.dense_layers:
        return ((dense, model.dense_layers), (moe, model.layers - model.dense_layers))
    return ((moe, model.layers),)
