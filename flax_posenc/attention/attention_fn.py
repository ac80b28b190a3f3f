"""Positional encodings inside Flax's own attention, without rewriting it.

:func:`positional_attention_fn` wraps an attention function (Flax's
``dot_product_attention`` by default, or ``jax.nn.dot_product_attention``) so that it
rotates q and k with RoPE and/or adds a position bias array; :func:`blockwise_attention_fn`
attends with :func:`flax_posenc.blockwise_attention` instead, a bias *function*
computed per tile. Pass either as ``attention_fn=`` to
``flax.linen.MultiHeadDotProductAttention`` or ``flax.nnx.MultiHeadAttention``.

Positions are explicit, so a KV cache is right by construction: with Flax's
``decode=True`` cache (unrotated keys) pass ``k_positions`` for every slot and
``q_positions`` for the new token; slots not written yet are masked by Flax. The
guide's "Attention drop-in" page shows both, with a KV cache.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp

from flax_posenc._core.validation import check_float_array
from flax_posenc.attention import _dispatch
from flax_posenc.attention._flax_signature import flax_attention_fn, require_positions
from flax_posenc.attention._spec import (
    AttentionImplementation,
    check_call,
    check_settings,
    rotate,
)
from flax_posenc.bias.position_bias import PositionBias
from flax_posenc.rope.config import RopeConfig
from flax_posenc.rope.scaling import SeqLen

__all__ = [
    "attention_fn_override",
    "blockwise_attention_fn",
    "positional_attention_fn",
]


def positional_attention_fn(
    *,
    rope: RopeConfig | None = None,
    q_positions: jax.Array | None = None,
    k_positions: jax.Array | None = None,
    bias: jax.Array | None = None,
    seq_len: SeqLen = None,
    k_seq_len: SeqLen = None,
    attention_fn: Callable[..., jax.Array] | None = None,
) -> Callable[..., jax.Array]:
    """An ``attention_fn`` that applies RoPE and/or an additive position bias.

    ``attn(q, k, v, ...) = attention_fn(RoPE(q, q_positions), RoPE(k, k_positions), v,
    bias=bias_in + bias, ...)``.

    Args:
      rope: RoPE configuration, or None for no rotation.
      q_positions: integer ``[B, L]`` or ``[L]`` positions of the queries; required
        with ``rope``.
      k_positions: integer ``[B, S]`` or ``[S]``; defaults to ``q_positions``
        (self-attention without a cache).
      bias: float ``[..., N, L, S]`` added to the logits, e.g.
        :func:`flax_posenc.alibi_bias` or a T5 ``RelativePositionBias``. A bias
        *function* of positions (:class:`flax_posenc.AlibiBias`, ...) goes to
        :func:`flax_posenc.blockwise_attention_fn` instead.
      seq_len: for dynamic NTK and LongRoPE, one length for q and k; None means
        ``max(q_positions, k_positions) + 1``, so both share their frequencies.
        Per-token lengths (with ``k_seq_len``) follow transformers' decode policy:
        see :func:`flax_posenc.hf_decode_seq_lens`.
      k_seq_len: k's own lengths; None means ``seq_len``.
      attention_fn: the attention to wrap, with Flax's signature ``(query, key,
        value, bias=None, mask=None, ...)`` and q/k/v ``[B, L, N, H]``. None means
        ``flax.nnx.dot_product_attention``, which takes the keywords both
        ``linen.MultiHeadDotProductAttention`` and ``nnx.MultiHeadAttention`` pass.

    Returns:
      A function with ``attention_fn``'s signature (Flax inspects it to decide which
      keyword arguments to pass).

    Raises:
      ValueError: neither ``rope`` nor ``bias`` given, ``rope`` without
        ``q_positions``, or (when called) a ``bias`` that does not broadcast to the
        logits ``[B, N, L, S]``.
      TypeError: non-integer positions, a ``rope`` that is not a
        :class:`flax_posenc.RopeConfig` (e.g. a ``config.json`` dict), a bias
        function (use :func:`flax_posenc.blockwise_attention_fn`) or a non-floating
        ``bias``.

    Examples:
      RoPE in ``flax.linen.MultiHeadDotProductAttention``:

      >>> positions = jnp.arange(16)[None]  # [B=1, L=16]
      >>> attention = flax.linen.MultiHeadDotProductAttention(
      ...     num_heads=4, attention_fn=fp.positional_attention_fn(
      ...         rope=fp.RopeConfig(head_dim=16), q_positions=positions))
      >>> x = jnp.ones((1, 16, 64))  # [B, L, D]: N * H = 4 * 16
      >>> params = attention.init(jax.random.key(0), x)
      >>> attention.apply(params, x).shape
      (1, 16, 64)

      An ALiBi bias with ``jax.nn.dot_product_attention``:

      >>> attend = fp.positional_attention_fn(
      ...     bias=fp.alibi_bias(jnp.arange(16), jnp.arange(16), 4),
      ...     attention_fn=jax.nn.dot_product_attention)
      >>> q = jnp.ones((1, 16, 4, 16))  # [B, L, N, H]
      >>> attend(q, q, q).shape
      (1, 16, 4, 16)
    """
    if rope is None and bias is None:
        raise ValueError("Give `rope`, `bias` or both; got neither.")
    if callable(bias):
        raise TypeError(
            "`bias` of positional_attention_fn must be a [..., N, L, S] array, got "
            f"a bias function ({type(bias).__name__}). Hint: "
            "fp.blockwise_attention_fn(bias=..., q_positions=...) computes it per "
            "tile."
        )
    if bias is not None:
        check_float_array("bias", bias)
    settings = check_settings(
        q_positions=q_positions,
        k_positions=k_positions,
        rope=rope,
        seq_len=seq_len,
        k_seq_len=k_seq_len,
    )
    if attention_fn is None:
        from flax import nnx  # here, so that importing flax_posenc needs no Flax

        attention_fn = nnx.dot_product_attention

    @functools.wraps(attention_fn)
    def attend(query, key, value, *args, **kwargs):
        if settings.rotation is not None:
            spec = check_call(settings, query, key, value)
            query, key = rotate(query, key, spec)
        if bias is not None:
            logits_shape = query.shape[:-3] + (query.shape[-2], query.shape[-3])
            logits_shape += (key.shape[-3],)
            extra = _broadcast_bias(bias, logits_shape)
            given = kwargs.pop("bias", None)
            kwargs["bias"] = extra if given is None else given + extra
        return attention_fn(query, key, value, *args, **kwargs)

    return attend


def blockwise_attention_fn(
    *,
    q_positions: jax.Array,
    k_positions: jax.Array | None = None,
    bias: PositionBias | None = None,
    rope: RopeConfig | None = None,
    seq_len: SeqLen = None,
    k_seq_len: SeqLen = None,
    causal: bool = False,
    q_segment_ids: jax.Array | None = None,
    k_segment_ids: jax.Array | None = None,
    scale: float | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
    implementation: AttentionImplementation = "xla",
) -> Callable[..., jax.Array]:
    """A Flax ``attention_fn`` that attends blockwise, the bias computed per tile.

    ``attn(q, k, v, mask=m, ...) = blockwise_attention(q, k, v, mask=m, ...)`` with
    the options given here: long contexts inside Flax's attention modules without an
    ``[B, N, L, S]`` bias. Flax's ``mask`` is sliced per tile, and its
    ``is_causal=True`` (nnx) means ``causal=True``. With Flax's ``decode=True``
    cache, ``k_positions`` gives every slot's position.

    Args:
      q_positions: as in :func:`flax_posenc.blockwise_attention`, whose arguments
        these are (required).
      k_positions: as there.
      bias: as there; a materialised array goes to :func:`positional_attention_fn`.
      rope: as there.
      seq_len: as there.
      k_seq_len: as there.
      causal: as there.
      q_segment_ids: as there.
      k_segment_ids: as there.
      scale: as there.
      block_q: as there.
      block_k: as there.
      implementation: as there (a Pallas kernel takes no Flax ``mask``).

    Returns:
      A function with the keywords of Flax's ``dot_product_attention`` that
      ``linen.MultiHeadDotProductAttention`` and ``nnx.MultiHeadAttention`` pass:
      ``(query, key, value, mask=None, ..., dtype=None, precision=None,
      is_causal=False)``.

    Raises:
      ValueError: no ``q_positions``; what :func:`flax_posenc.blockwise_attention`
        rejects; (when called) dropout with ``deterministic=False`` or
        ``sow_weights=True``: blockwise attention has no dropout and forms no
        attention weights.
      TypeError: what :func:`flax_posenc.blockwise_attention` rejects.

    Examples:
      ALiBi per tile in ``flax.linen.MultiHeadDotProductAttention``, causal from the
      positions (no ``[N, L, S]`` bias, no ``[L, S]`` mask):

      >>> attention = flax.linen.MultiHeadDotProductAttention(
      ...     num_heads=4, attention_fn=fp.blockwise_attention_fn(
      ...         bias=fp.AlibiBias(4), q_positions=jnp.arange(16), causal=True))
      >>> x = jnp.ones((1, 16, 64))  # [B, L, D]
      >>> params = attention.init(jax.random.key(0), x)
      >>> attention.apply(params, x).shape
      (1, 16, 64)
    """
    require_positions(q_positions, "blockwise attention")
    settings = check_settings(
        q_positions=q_positions,
        k_positions=k_positions,
        q_segment_ids=q_segment_ids,
        k_segment_ids=k_segment_ids,
        bias=bias,
        rope=rope,
        seq_len=seq_len,
        k_seq_len=k_seq_len,
        causal=causal,
        scale=scale,
        block_q=block_q,
        block_k=block_k,
        implementation=implementation,
    )

    hint = "dropout_rate=0.0, or positional_attention_fn with a bias array."
    return flax_attention_fn(settings, _dispatch.attention, "Blockwise attention", hint)


@contextlib.contextmanager
def attention_fn_override(
    module: Any, attention_fn: Callable[..., jax.Array]
) -> Iterator[Any]:
    """Temporarily sets ``module.attention_fn`` (for ``flax.nnx.MultiHeadAttention``).

    nnx modules are built once, but positions change with every batch; inside the
    ``with`` block the module attends with ``attention_fn``, and the previous one is
    restored on exit, so no traced positions stay behind on the module.

    Args:
      module: a module with an ``attention_fn`` attribute, e.g.
        ``flax.nnx.MultiHeadAttention``.
      attention_fn: the attention function to use inside the block, e.g. from
        :func:`positional_attention_fn`.

    Yields:
      ``module``, attending with ``attention_fn``.

    Examples:
      >>> attention = nnx.MultiHeadAttention(num_heads=4, in_features=64,
      ...     decode=False, rngs=nnx.Rngs(0))
      >>> x = jnp.ones((2, 8, 64))  # [B, L, D]
      >>> rope = fp.positional_attention_fn(
      ...     rope=fp.RopeConfig(head_dim=16), q_positions=jnp.arange(8))
      >>> with fp.attention_fn_override(attention, rope):
      ...     y = attention(x)
      >>> y.shape
      (2, 8, 64)
      >>> attention.attention_fn is nnx.dot_product_attention  # restored
      True
    """
    previous = module.attention_fn
    module.attention_fn = attention_fn
    try:
        yield module
    finally:
        module.attention_fn = previous


def _broadcast_bias(bias: jax.Array, logits_shape: tuple[int, ...]) -> jax.Array:
    """Broadcasts ``[..., N, L, S]`` to the logits ``[B, N, L, S]`` explicitly."""
    if bias.ndim < 3 or bias.ndim > len(logits_shape):
        raise ValueError(
            f"`bias` must be [..., N, L, S] for logits {logits_shape}, got shape "
            f"{bias.shape}."
        )
    bias = bias.reshape((1,) * (len(logits_shape) - bias.ndim) + bias.shape)
    try:
        return jnp.broadcast_to(bias, logits_shape)
    except ValueError:
        raise ValueError(
            f"`bias` with shape {bias.shape} does not broadcast to the logits "
            f"{logits_shape} ([B, N, L, S])."
        ) from None
