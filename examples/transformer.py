"""A compact decoder-only transformer whose positional encoding is one argument.

``Config(encoding=...)`` picks where position information enters:

* ``none``: nowhere (causal masking alone is the only hint of order);
* ``sinusoidal``, ``learned``: added to the token embeddings
  (``flax_posenc.nnx.SinusoidalPositionalEncoding``, ``LearnedPositionalEmbedding``);
* ``rope``: q and k rotated at their own positions (``flax_posenc.rope_cos_sin`` once
  per forward, ``flax_posenc.rope_rotate`` in every layer);
* ``rope_linear``, ``rope_yarn``: trained as plain ``rope``; :func:`extend_context`
  applies the scaling family (``LinearScaling`` / ``YarnScaling``) at evaluation time
  on sequences longer than the training ones;
* ``alibi``: ``flax_posenc.alibi_bias`` added to the attention logits;
* ``t5``: ``flax_posenc.nnx.RelativePositionBias`` (learned, shared by all layers)
  added to the attention logits;
* ``fire``, ``kerple_log``: ``flax_posenc.nnx.FIRE`` / ``Kerple`` (learned, shared
  by all layers, as the T5 table) added to the attention logits; FIRE's threshold
  starts at a quarter of the training length (the authors' 512 for 2048);
* ``cope``: ``flax_posenc.nnx.CoPE`` in every layer (its gates read that layer's q
  and k), added to ``q . k`` before the ``1 / sqrt(H)`` scale as the authors do,
  with ``train_len + 1`` embedded positions (their default, block size + 1);
* ``rope_randomized``, ``rope_pose``: plain RoPE, trained at positions drawn by
  ``flax_posenc.randomized_positions`` / ``pose_positions`` over ``[0, max_len)``
  (:attr:`Config.position_sampling`), evaluated at ``0..L-1``.

Positions are explicit everywhere: :meth:`Transformer.__call__` takes integer
``positions [B, L]`` and a ``valid [B, L]`` mask of real (non-padding) tokens. With a
:class:`Cache` each sequence writes its new tokens at its own running write index,
whatever their positions; the cache records every slot's position and whether it holds
a real token, so the new keys are rotated (or biased) at their own positions, the
cached ones keep theirs, and padding is never attended to. Cached greedy decoding of a
left-padded batch then equals full recomputation (``examples/decode.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

import flax_posenc as fp
from flax_posenc import nnx as pnnx

ENCODINGS = (
    "none",
    "sinusoidal",
    "learned",
    "rope",
    "rope_linear",
    "rope_yarn",
    "alibi",
    "t5",
    "fire",
    "kerple_log",
    "cope",
    "rope_randomized",
    "rope_pose",
)
ROPE_ENCODINGS = ("rope", "rope_linear", "rope_yarn")
"""Trained once: the scaling families only change evaluation."""
SAMPLED_ROPE_ENCODINGS = ("rope_randomized", "rope_pose")
"""RoPE trained at sampled positions (each trained on its own)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """Hyper-parameters of :class:`Transformer`.

    ``train_len`` is the sequence length the model is trained at: the RoPE scaling
    families use it as ``original_max_position_embeddings``. ``max_len`` is the number
    of rows of the learned position table (the longest sequence ever evaluated), so
    positions the model never trained on hit rows that stayed at their initial value.
    """

    vocab_size: int
    encoding: str = "rope"
    num_layers: int = 2
    d_model: int = 64
    num_heads: int = 4
    d_ff: int = 256
    train_len: int = 32
    max_len: int = 128
    rope_theta: float = 10000.0
    rope_layout: str = "half"
    t5_num_buckets: int = 32
    t5_max_distance: int = 128

    def __post_init__(self):
        if self.encoding not in ENCODINGS:
            raise ValueError(
                f"`encoding` must be one of {', '.join(ENCODINGS)}, "
                f"got {self.encoding!r}."
            )
        if self.d_model % self.num_heads:
            raise ValueError(
                f"`d_model` ({self.d_model}) must be a multiple of `num_heads` "
                f"({self.num_heads})."
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def position_sampling(self) -> str:
        """How training batches place their tokens: ``"arange"`` (``0..L-1``),
        ``"randomized"`` or ``"pose"`` (over ``[0, max_len)``)."""
        return {"rope_randomized": "randomized", "rope_pose": "pose"}.get(
            self.encoding, "arange"
        )

    @property
    def uses_rope(self) -> bool:
        return self.encoding in ROPE_ENCODINGS + SAMPLED_ROPE_ENCODINGS


def rope_config(config: Config, factor: float = 1.0) -> fp.RopeConfig:
    """The RoPE configuration for sequences ``factor`` times the training length.

    ``factor <= 1`` (or plain ``rope``) is unscaled RoPE; otherwise ``rope_linear``
    interpolates positions by ``factor`` and ``rope_yarn`` applies YaRN with
    ``original_max_position_embeddings = train_len``.
    """
    scaling = None
    if factor > 1 and config.encoding == "rope_linear":
        scaling = fp.LinearScaling(factor=factor)
    elif factor > 1 and config.encoding == "rope_yarn":
        scaling = fp.YarnScaling(
            factor=factor, original_max_position_embeddings=config.train_len
        )
    return fp.RopeConfig(
        head_dim=config.head_dim,
        theta=config.rope_theta,
        layout=config.rope_layout,
        scaling=scaling,
    )


class KVCache(NamedTuple):
    """Keys (already rotated for RoPE) and values of one layer: ``[B, S, N, H]``."""

    k: jax.Array
    v: jax.Array


class Cache(NamedTuple):
    """The KV cache of every layer and its bookkeeping, shared by the layers.

    Sequence ``b`` writes its next token to slot ``index[b]`` (then ``index[b] + 1``,
    ...), in arrival order and whatever its position: a left-padded prompt fills its
    padding slots too, and ``valid`` keeps them out of attention.
    """

    layers: tuple[KVCache, ...]
    positions: jax.Array  # int [B, S]: the position of each slot's token
    valid: jax.Array  # bool [B, S]: the slot holds a real token (written, no padding)
    index: jax.Array  # int [B]: the next slot each sequence writes


def init_cache(config: Config, batch: int, slots: int) -> Cache:
    """An empty cache of ``slots`` tokens per sequence, for every layer."""
    shape = (batch, slots, config.num_heads, config.head_dim)
    layers = tuple(
        KVCache(jnp.zeros(shape), jnp.zeros(shape)) for _ in range(config.num_layers)
    )
    return Cache(
        layers,
        positions=jnp.zeros((batch, slots), jnp.int32),
        valid=jnp.zeros((batch, slots), bool),
        index=jnp.zeros((batch,), jnp.int32),
    )


def write_slots(cache: Cache, length: int) -> jax.Array:
    """The slots ``[B, L]`` the next ``length`` tokens of each sequence go to.

    The cache must have room for them: JAX drops a scatter past the end.
    """
    return cache.index[:, None] + jnp.arange(length)[None]


def attend(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    rope: fp.RopeTables | None,
    rope_layout: str,
    bias: jax.Array | None,
    mask: jax.Array,
    cache: KVCache | None,
    slots: jax.Array | None,
    content_bias: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
) -> tuple[jax.Array, KVCache | None]:
    """The parameter-free core of attention, shared by the nnx and linen blocks.

    ``q, k, v [B, L, N, H]``: RoPE tables (of the tokens' positions) rotate q and k;
    with a cache, the new k/v are written into ``slots`` (int ``[B, L]``, from
    :func:`write_slots`) and the keys are all ``S`` slots. ``bias [B, N, L, S]`` is
    added to the logits, ``mask [B, 1, L, S]`` keeps the allowed pairs;
    ``content_bias(q, k)`` (CoPE) returns a bias added to ``q . k`` before the
    scale. Returns ``[B, L, N, H]`` and the cache.
    """
    if rope is not None:
        q = fp.rope_rotate(q, rope.cos, rope.sin, layout=rope_layout)
        k = fp.rope_rotate(k, rope.cos, rope.sin, layout=rope_layout)
    if cache is not None:
        rows = jnp.arange(q.shape[0])[:, None]
        cache = KVCache(cache.k.at[rows, slots].set(k), cache.v.at[rows, slots].set(v))
        k, v = cache.k, cache.v
    if content_bias is not None:
        scaled = content_bias(q, k) / jnp.sqrt(jnp.float32(q.shape[-1]))
        bias = scaled if bias is None else bias + scaled
    return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask), cache


class Attention(nnx.Module):
    """Causal multi-head attention; RoPE tables rotate q/k, a bias enters the logits."""

    def __init__(self, config: Config, *, rngs: nnx.Rngs):
        n, h, d = config.num_heads, config.head_dim, config.d_model
        self.rope_layout = config.rope_layout
        self.qkv = nnx.LinearGeneral(d, (3, n, h), use_bias=False, rngs=rngs)
        self.out = nnx.LinearGeneral((n, h), d, axis=(-2, -1), rngs=rngs)
        self.cope = nnx.data(
            pnnx.CoPE(h, num_positions=config.train_len + 1, rngs=rngs)
            if config.encoding == "cope"
            else None
        )

    def __call__(
        self,
        x: jax.Array,
        *,
        rope: fp.RopeTables | None,
        bias: jax.Array | None,
        mask: jax.Array,
        cache: KVCache | None,
        slots: jax.Array | None,
        positions: tuple[jax.Array, jax.Array] | None = None,
    ) -> tuple[jax.Array, KVCache | None]:
        """``x [B, L, D]``; ``positions`` (q's ``[B, L]``, the keys' ``[B, S]``)
        are read by CoPE only. See :func:`attend`."""
        qkv = self.qkv(x)
        content_bias = None
        if self.cope is not None:
            q_positions, k_positions = positions

            def content_bias(q, k):
                return self.cope(q, k, q_positions, k_positions, mask=mask)

        out, cache = attend(
            qkv[:, :, 0],
            qkv[:, :, 1],
            qkv[:, :, 2],
            rope=rope,
            rope_layout=self.rope_layout,
            bias=bias,
            mask=mask,
            cache=cache,
            slots=slots,
            content_bias=content_bias,
        )
        return self.out(out), cache


class Block(nnx.Module):
    """Pre-norm transformer block: attention and a GELU MLP, each residual."""

    def __init__(self, config: Config, *, rngs: nnx.Rngs):
        d = config.d_model
        self.norm1 = nnx.LayerNorm(d, rngs=rngs)
        self.attention = Attention(config, rngs=rngs)
        self.norm2 = nnx.LayerNorm(d, rngs=rngs)
        self.mlp_in = nnx.Linear(d, config.d_ff, rngs=rngs)
        self.mlp_out = nnx.Linear(config.d_ff, d, rngs=rngs)

    def __call__(self, x, *, rope, bias, mask, cache, slots, positions=None):
        y, cache = self.attention(
            self.norm1(x),
            rope=rope,
            bias=bias,
            mask=mask,
            cache=cache,
            slots=slots,
            positions=positions,
        )
        x = x + y
        x = x + self.mlp_out(jax.nn.gelu(self.mlp_in(self.norm2(x))))
        return x, cache


def absolute_encoding(config: Config, *, rngs: nnx.Rngs) -> nnx.Module | None:
    """The module adding an absolute encoding to the embeddings, if any."""
    if config.encoding == "sinusoidal":
        return pnnx.SinusoidalPositionalEncoding()
    if config.encoding == "learned":
        return pnnx.LearnedPositionalEmbedding(
            config.max_len, config.d_model, rngs=rngs
        )
    return None


def relative_bias(config: Config, *, rngs: nnx.Rngs) -> nnx.Module | None:
    """The learned bias of positions (one module shared by all layers), if used:
    T5's buckets, FIRE or Kerple."""
    if config.encoding == "fire":
        return pnnx.FIRE(
            config.num_heads, init_threshold=config.train_len / 4, rngs=rngs
        )
    if config.encoding == "kerple_log":
        return pnnx.Kerple(config.num_heads, kernel="log", rngs=rngs)
    if config.encoding != "t5":
        return None
    return pnnx.RelativePositionBias(
        config.num_heads,
        num_buckets=config.t5_num_buckets,
        max_distance=config.t5_max_distance,
        bidirectional=False,
        rngs=rngs,
    )


class Transformer(nnx.Module):
    """Decoder-only transformer: ``tokens [B, L]`` at ``positions [B, L]`` -> logits."""

    def __init__(self, config: Config, *, rngs: nnx.Rngs):
        self.config = config
        self.embed = nnx.Embed(config.vocab_size, config.d_model, rngs=rngs)
        self.absolute = nnx.data(absolute_encoding(config, rngs=rngs))
        self.rope = rope_config(config) if config.uses_rope else None
        self.relative = nnx.data(relative_bias(config, rngs=rngs))
        self.blocks = nnx.List(
            [Block(config, rngs=rngs) for _ in range(config.num_layers)]
        )
        self.norm = nnx.LayerNorm(config.d_model, rngs=rngs)
        self.unembed = nnx.Linear(config.d_model, config.vocab_size, rngs=rngs)

    def attention_bias(
        self, q_positions: jax.Array, k_positions: jax.Array
    ) -> jax.Array | None:
        """The additive logit bias ``[B, N, L, S]`` of ALiBi, T5, FIRE or Kerple,
        else None."""
        if self.config.encoding == "alibi":
            return fp.alibi_bias(q_positions, k_positions, self.config.num_heads)
        if self.relative is not None:
            return self.relative(q_positions, k_positions)
        return None

    def __call__(
        self,
        tokens: jax.Array,
        positions: jax.Array,
        cache: Cache | None = None,
        valid: jax.Array | None = None,
    ) -> tuple[jax.Array, Cache | None]:
        """Logits ``[B, L, V]`` of ``tokens`` at ``positions`` (both int ``[B, L]``).

        ``valid`` (bool ``[B, L]``, default all true) marks the real tokens; padding
        is never attended to (its own logits are meaningless). Without a cache the
        keys are the same tokens (causal self-attention); with one
        (:func:`init_cache`) these tokens are written at each sequence's write index
        and the keys are all the cache's slots, at their recorded positions; the
        updated cache is returned.
        """
        if valid is None:
            valid = jnp.ones(tokens.shape, bool)
        x = self.embed(tokens)
        if self.absolute is not None:
            x = self.absolute(x, positions)
        slots = None
        if cache is None:
            k_positions, k_valid = positions, valid
        else:
            slots = write_slots(cache, tokens.shape[1])
            rows = jnp.arange(tokens.shape[0])[:, None]
            k_positions = cache.positions.at[rows, slots].set(positions)
            k_valid = cache.valid.at[rows, slots].set(valid)
        causal = k_positions[:, None, :] <= positions[:, :, None]  # [B, L, S]
        mask = (causal & k_valid[:, None, :])[:, None]
        bias = self.attention_bias(positions, k_positions)
        rope = None if self.rope is None else fp.rope_cos_sin(positions, self.rope)
        layers = []
        for i, block in enumerate(self.blocks):
            x, layer_cache = block(
                x,
                rope=rope,
                bias=bias,
                mask=mask,
                cache=None if cache is None else cache.layers[i],
                slots=slots,
                positions=(positions, k_positions),
            )
            layers.append(layer_cache)
        logits = self.unembed(self.norm(x))
        if cache is None:
            return logits, None
        index = cache.index + tokens.shape[1]
        return logits, Cache(tuple(layers), k_positions, k_valid, index)


def extend_context(model: Transformer, factor: float) -> Transformer:
    """``model`` for sequences ``factor`` times its training length.

    Identity unless the encoding is ``rope_linear``/``rope_yarn`` and ``factor > 1``:
    then a copy whose RoPE frequencies use that scaling family (same parameters).
    """
    if factor <= 1 or model.config.encoding not in ("rope_linear", "rope_yarn"):
        return model
    scaled = nnx.clone(model)
    scaled.rope = rope_config(model.config, factor)
    return scaled


def count_params(model: nnx.Module) -> int:
    """Number of trainable scalars."""
    params = nnx.state(model, nnx.Param)
    return sum(p.size for p in jax.tree.leaves(params))
