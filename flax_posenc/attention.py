"""Positional encodings inside Flax's own attention, without rewriting it.

:func:`positional_attention_fn` wraps an attention function (Flax's
``dot_product_attention`` by default, or ``jax.nn.dot_product_attention``) so that it
rotates q and k with RoPE and/or adds a position bias (ALiBi, T5) before attending.
Pass the result as ``attention_fn=`` to ``flax.linen.MultiHeadDotProductAttention`` or
``flax.nnx.MultiHeadAttention``. Given a bias *function* of positions
(:class:`flax_posenc.AlibiBias`, :class:`flax_posenc.RelativeBias`) instead of an
array, it attends with :func:`flax_posenc.blockwise_attention`, which computes the
bias tile by tile: long contexts without an ``[B, N, L, S]`` array.

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

from flax_posenc._validation import check_integer_array, check_rope_config
from flax_posenc.blockwise import PositionBias, blockwise_attention
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
    bias: jax.Array | PositionBias | None = None,
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
        with ``rope`` or a bias function.
      k_positions: integer ``[B, S]`` or ``[S]``; defaults to ``q_positions``
        (self-attention without a cache).
      bias: float ``[..., N, L, S]`` added to the logits, e.g.
        :func:`flax_posenc.alibi_bias` or a T5 ``RelativePositionBias``; or a bias
        function of positions (:class:`flax_posenc.AlibiBias`,
        :class:`flax_posenc.RelativeBias`, any :data:`flax_posenc.PositionBias`),
        computed per tile inside :func:`flax_posenc.blockwise_attention`.
      seq_len: for dynamic NTK and LongRoPE, one length for q and k; None means
        ``max(q_positions, k_positions) + 1``, so both share their frequencies.
        Per-token lengths (with ``k_seq_len``) follow transformers' decode policy:
        see :func:`flax_posenc.hf_decode_seq_lens`.
      k_seq_len: k's own lengths; None means ``seq_len``.
      attention_fn: the attention to wrap, with Flax's signature ``(query, key,
        value, bias=None, mask=None, ...)`` and q/k/v ``[B, L, N, H]``. None means
        ``flax.nnx.dot_product_attention``, which takes the keywords both
        ``linen.MultiHeadDotProductAttention`` and ``nnx.MultiHeadAttention`` pass.
        With a bias function: None means :func:`flax_posenc.blockwise_attention`;
        pass ``functools.partial(fp.blockwise_attention, causal=True, ...)`` for its
        options. Flax's ``mask`` is sliced per tile and its ``is_causal`` means
        ``causal=True``; dropout and ``sow_weights`` are not supported there.

    Returns:
      A function with ``attention_fn``'s signature (Flax inspects it to decide which
      keyword arguments to pass); with a bias function, the keywords of Flax's
      ``dot_product_attention`` that Flax's modules pass.

    Raises:
      ValueError: neither ``rope`` nor ``bias`` given, ``rope`` or a bias function
        without ``q_positions``, or (when called) a ``bias`` that does not broadcast
        to the logits ``[B, N, L, S]``, or dropout / ``sow_weights`` with a bias
        function.
      TypeError: non-integer positions, or a ``rope`` that is not a
        :class:`flax_posenc.RopeConfig` (e.g. a ``config.json`` dict).

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

      ALiBi computed per tile, causal from the positions (no ``[N, L, S]`` bias):

      >>> import functools
      >>> attend = fp.positional_attention_fn(
      ...     bias=fp.AlibiBias(4), q_positions=jnp.arange(16),
      ...     attention_fn=functools.partial(fp.blockwise_attention, causal=True))
      >>> attend(q, q, q).shape
      (1, 16, 4, 16)
    """
    if rope is None and bias is None:
        raise ValueError("Give `rope`, `bias` or both; got neither.")
    if rope is not None:
        check_rope_config("rope", rope, RopeConfig)
    if q_positions is None and (rope is not None or callable(bias)):
        what = (
            "`rope`" if rope is not None else f"a bias function ({type(bias).__name__})"
        )
        raise ValueError(f"`q_positions` is required with {what}.")
    q_pos = k_pos = None
    if q_positions is not None:
        q_pos = check_integer_array("q_positions", q_positions)
    if k_positions is not None:
        k_pos = check_integer_array("k_positions", k_positions)
    rotate: Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]] | None = None
    if rope is not None and q_pos is not None:

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

    if callable(bias):
        return _blockwise_attention_fn(
            rotate, bias, q_pos, k_pos, attention_fn or blockwise_attention
        )
    if attention_fn is None:
        from flax import nnx  # here, so that importing flax_posenc needs no Flax

        attention_fn = nnx.dot_product_attention

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


def _blockwise_attention_fn(
    rotate: Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]] | None,
    bias: PositionBias,
    q_positions: jax.Array | None,
    k_positions: jax.Array | None,
    attention_fn: Callable[..., jax.Array],
) -> Callable[..., jax.Array]:
    """Flax's ``attention_fn`` signature, attending with a blockwise-style function."""

    def attend(
        query: jax.Array,
        key: jax.Array,
        value: jax.Array,
        mask: jax.Array | None = None,
        dropout_rng: jax.Array | None = None,
        dropout_rate: float = 0.0,
        broadcast_dropout: bool = True,
        deterministic: bool = False,
        dtype: Any = None,
        precision: Any = None,
        module: Any = None,
        is_causal: bool = False,
    ) -> jax.Array:
        """``attention_fn(RoPE(query), RoPE(key), value, bias=<per tile>, ...)``."""
        del dropout_rng, broadcast_dropout  # only meaningful with dropout
        if dropout_rate > 0.0 and not deterministic:
            raise ValueError(
                "Attention with a bias function (blockwise) has no dropout, got "
                f"dropout_rate={dropout_rate} with deterministic=False. Hint: "
                "dropout_rate=0.0, or a materialised bias array."
            )
        if module is not None:
            raise ValueError(
                "Attention with a bias function (blockwise) forms no attention "
                "weights to sow; use sow_weights=False."
            )
        if dtype is not None:
            query, key, value = (x.astype(dtype) for x in (query, key, value))
        if rotate is not None:
            query, key = rotate(query, key)
        options: dict[str, Any] = {"mask": mask, "precision": precision}
        if is_causal:
            options["causal"] = True
        return attention_fn(
            query,
            key,
            value,
            q_positions=q_positions,
            k_positions=k_positions,
            bias=bias,
            **options,
        )

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
