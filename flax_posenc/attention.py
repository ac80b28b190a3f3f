"""Positional encodings inside Flax's own attention, without rewriting it.

:func:`positional_attention_fn` wraps an attention function (Flax's
``dot_product_attention`` by default, or ``jax.nn.dot_product_attention``) so that it
rotates q and k with RoPE and/or adds a position bias (ALiBi, T5) before attending.
Pass the result as ``attention_fn=`` to ``flax.linen.MultiHeadDotProductAttention`` or
``flax.nnx.MultiHeadAttention``.

KV-cache decoding. Positions are explicit, so a cache is correct by construction:
keys are rotated (or biased) at their own positions and the query at the current one.
With Flax's ``decode=True`` attention the cache holds *unrotated* keys, so pass
``k_positions`` for every cache slot (``[B, S]``, e.g. ``jnp.arange(S)``) and
``q_positions`` for the new token (``[B, 1]``, the cache index); slots not yet
written are masked by Flax. With a hand-written cache, rotate k once with
:func:`flax_posenc.apply_rope` before writing it and q at its step. For dynamic NTK
and LongRoPE choose the decode policy: a fixed ``seq_len`` keeps every step on the
same frequencies; :func:`flax_posenc.hf_decode_seq_lens` reproduces transformers'
``generate``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from flax_posenc._validation import check_integer_array
from flax_posenc.rope import RopeConfig, apply_rope_qk
from flax_posenc.rope_scaling import SeqLen

__all__ = [
    "attention_fn_override",
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
    attention_fn: Callable[..., jax.Array] = nnx.dot_product_attention,
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
        :func:`flax_posenc.alibi_bias` or a T5 ``RelativePositionBias``.
      seq_len: for dynamic NTK and LongRoPE, one length for q and k; None means
        ``max(q_positions, k_positions) + 1``, so both share their frequencies.
        Per-token lengths (with ``k_seq_len``) follow transformers' decode policy:
        see :func:`flax_posenc.hf_decode_seq_lens`.
      k_seq_len: k's own lengths; None means ``seq_len``.
      attention_fn: the attention to wrap, with Flax's signature ``(query, key,
        value, bias=None, mask=None, ...)`` and q/k/v ``[B, L, N, H]``. The default,
        ``flax.nnx.dot_product_attention``, takes the keywords both
        ``linen.MultiHeadDotProductAttention`` and ``nnx.MultiHeadAttention`` pass.

    Returns:
      A function with ``attention_fn``'s signature (Flax inspects it to decide which
      keyword arguments to pass).

    Raises:
      ValueError: neither ``rope`` nor ``bias`` given, ``rope`` without
        ``q_positions``, or (when called) a ``bias`` that does not broadcast to the
        logits ``[B, N, L, S]``.
      TypeError: non-integer positions.

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
    rotate: Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]] | None = None
    if rope is not None:
        if q_positions is None:
            raise ValueError("`q_positions` is required with `rope`.")
        q_pos = check_integer_array("q_positions", q_positions)
        k_pos = (
            None
            if k_positions is None
            else check_integer_array("k_positions", k_positions)
        )

        def rotate_qk(query, key):
            return apply_rope_qk(
                query,
                key,
                q_pos,
                rope,
                k_positions=k_pos,
                seq_len=seq_len,
                k_seq_len=k_seq_len,
            )

        rotate = rotate_qk

    @functools.wraps(attention_fn)
    def attend(query, key, value, *args, **kwargs):
        if rotate is not None:
            query, key = rotate(query, key)
        if bias is not None:
            logits_shape = query.shape[:-3] + (query.shape[-2], query.shape[-3])
            logits_shape += (key.shape[-3],)
            extra = _broadcast_bias(bias, logits_shape)
            given = kwargs.pop("bias", None)
            kwargs["bias"] = extra if given is None else given + extra
        return attention_fn(query, key, value, *args, **kwargs)

    return attend


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
