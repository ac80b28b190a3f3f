"""Blockwise attention: position biases computed per tile, never as ``[N, L, S]``.

``alibi_bias`` and ``relative_position_bias`` return ``[B, N, L, S]``: at
``L = S = 32768`` and 16 heads that is 64 GiB of float32. :func:`blockwise_attention`
instead walks over query blocks and, inside each, over key blocks, computes the bias
of each ``[block_q, block_k]`` tile from the positions, and accumulates the softmax
online (flash attention's algorithm, in pure JAX)::

    s    = scale * q_i . k_j + bias(q_pos_i, k_pos_j)     masked to -inf
    m'   = max(m, max_j s)                                 running row maximum
    l'   = l * exp(m - m') + sum_j exp(s - m')             running denominator
    acc' = acc * exp(m - m') + sum_j exp(s - m') v_j
    out  = acc / l                                         after the last key block

Statistics and accumulators are float32; only ``[block_q, block_k]`` tiles of logits
exist. Both loop bodies are rematerialised (``jax.checkpoint``), so the backward pass
recomputes tiles instead of storing them: it keeps one ``[block_q, N, H]``
accumulator per key block of the query block it is differentiating.

A bias is any function ``bias(q_positions [..., l], k_positions [..., s]) ->
[..., N, l, s]``; :class:`AlibiBias` and :class:`RelativeBias` give ALiBi and T5's
learned buckets with exactly the conventions of :func:`flax_posenc.alibi_bias` and
:func:`flax_posenc.relative_position_bias` (they call them on each tile). RoPE
composes: rotate q and k first (:func:`flax_posenc.apply_rope_qk`), or let
:func:`flax_posenc.positional_attention_fn` do both.

Reference: Dao et al., "FlashAttention", NeurIPS 2022; Rabe and Staats,
"Self-attention Does Not Need O(n^2) Memory", 2021.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._validation import (
    check_bool,
    check_broadcastable,
    check_float_array,
    check_integer_array,
    check_positions,
    check_positive_float,
    check_positive_int,
    obeys_positions_rule,
)
from flax_posenc.alibi import alibi_bias
from flax_posenc.relative import _check_bucket_sizes, relative_position_bias

__all__ = [
    "AlibiBias",
    "PositionBias",
    "RelativeBias",
    "blockwise_attention",
]

PositionBias = Callable[[jax.Array, jax.Array], jax.Array]
"""A bias as a function of positions: ``(q_positions [..., l], k_positions [..., s])
-> float [..., N, l, s]``, called on each tile by :func:`blockwise_attention`."""


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class AlibiBias:
    """ALiBi with ``num_heads`` heads, as a :data:`PositionBias`.

    ``AlibiBias(N)(q_positions, k_positions) == alibi_bias(q_positions, k_positions,
    N)``: ``-slope_h * |q_pos - k_pos|``. Frozen, hashable and static under ``jit``.

    Attributes:
      num_heads: ``N``, q's number of heads (the slopes depend on it).

    Raises:
      TypeError: non-int ``num_heads``.
      ValueError: ``num_heads <= 0``.

    Examples:
      >>> fp.AlibiBias(2)(jnp.array([2]), jnp.arange(4))[:, 0].tolist()
      [[-0.125, -0.0625, -0.0, -0.0625], [-0.0078125, -0.00390625, -0.0, -0.00390625]]
    """

    num_heads: int

    def __post_init__(self):
        num_heads = check_positive_int("num_heads", self.num_heads)
        object.__setattr__(self, "num_heads", num_heads)

    def __call__(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
        """float32 ``[..., N, L, S]``, see :func:`flax_posenc.alibi_bias`."""
        return alibi_bias(q_positions, k_positions, self.num_heads)


@dataclasses.dataclass(frozen=True, eq=False)
class RelativeBias:
    """T5's learned relative position bias, as a :data:`PositionBias`.

    ``RelativeBias(table, ...)(q_positions, k_positions) ==
    relative_position_bias(table, q_positions, k_positions, ...)``:
    ``table[bucket(k_pos - q_pos), h]``. A pytree whose one leaf is ``table`` (so it
    passes through ``jit`` and ``grad``; the bucket sizes are static).

    Attributes:
      table: floating ``[num_buckets, N]`` (e.g. ``relative_attention_bias`` of
        :class:`flax_posenc.nnx.RelativePositionBias`).
      bidirectional: encoder (True) or causal decoder (False) buckets.
      max_distance: distances from here on share the last bucket.

    Raises:
      TypeError: a non-floating ``table``, non-int ``max_distance``, non-bool
        ``bidirectional``.
      ValueError: ``table`` not of rank 2, or bucket sizes that
        :func:`flax_posenc.relative_position_bucket` rejects.

    Examples:
      >>> table = jnp.arange(64.0).reshape(32, 2)  # [num_buckets, N]
      >>> fp.RelativeBias(table)(jnp.arange(2), jnp.arange(2))[0].tolist()
      [[0.0, 34.0], [2.0, 0.0]]
    """

    table: jax.Array
    bidirectional: bool = True
    max_distance: int = 128

    def __post_init__(self):
        shape = tuple(getattr(self.table, "shape", ()))
        if len(shape) != 2:
            raise ValueError(f"`table` must be [num_buckets, N], got shape {shape}.")
        check_float_array("table", self.table)
        _check_bucket_sizes(shape[0], self.max_distance, self.bidirectional)

    @property
    def num_heads(self) -> int:
        """``N``, the table's second axis."""
        return self.table.shape[1]

    def __call__(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
        """``[..., N, L, S]`` in ``table.dtype``, see
        :func:`flax_posenc.relative_position_bias`."""
        return relative_position_bias(
            self.table,
            q_positions,
            k_positions,
            bidirectional=self.bidirectional,
            max_distance=self.max_distance,
        )


def _flatten_relative(bias: RelativeBias) -> tuple[tuple[Any], tuple[bool, int]]:
    return (bias.table,), (bias.bidirectional, bias.max_distance)


def _unflatten_relative(meta: tuple[bool, int], leaves: Any) -> RelativeBias:
    # Bypasses __post_init__: JAX rebuilds pytrees with gradients, placeholders, ...
    bias = object.__new__(RelativeBias)
    for name, value in zip(("bidirectional", "max_distance"), meta, strict=True):
        object.__setattr__(bias, name, value)
    object.__setattr__(bias, "table", leaves[0])
    return bias


jax.tree_util.register_pytree_node(RelativeBias, _flatten_relative, _unflatten_relative)


def blockwise_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    q_positions: jax.Array | None = None,
    k_positions: jax.Array | None = None,
    bias: PositionBias | None = None,
    causal: bool = False,
    q_segment_ids: jax.Array | None = None,
    k_segment_ids: jax.Array | None = None,
    mask: jax.Array | None = None,
    scale: float | None = None,
    block_q: int = 512,
    block_k: int = 512,
    precision: Any = None,
) -> jax.Array:
    """Softmax attention with a position bias computed tile by tile.

    ``out[..., i, h] = sum_j softmax_j(scale * q_i . k_j + bias(q_pos_i, k_pos_j)
    | allowed(i, j)) v_j``, over the keys ``j`` that query ``i`` may attend to:
    ``k_pos_j <= q_pos_i`` if ``causal``, equal segment ids if given, and ``mask``
    true. The result equals dense attention with the materialised bias within float32
    rounding; no ``[N, L, S]`` array is formed (see the module docstring).

    A query that may attend to no key gets zeros (and zero gradients), never NaN.
    Grouped-query attention: q head ``h`` reads k/v head ``h // (N // K)`` (as
    ``jnp.repeat(k, N // K, axis=-2)``). Lengths need not divide the block sizes.

    Args:
      q: floating ``[..., L, N, H]``.
      k: floating ``[..., S, K, H]``, the same leading dimensions as q; ``N`` a
        multiple of ``K``.
      v: floating ``[..., S, K, Hv]``.
      q_positions: integer ``[..., L]`` (leading axes broadcast to q's); required
        with ``bias`` or ``causal``. A decode step passes the cache index.
      k_positions: integer ``[..., S]``; None means ``q_positions`` (then ``S ==
        L``). For a KV cache, every slot's position.
      bias: a :data:`PositionBias`: :class:`AlibiBias`, :class:`RelativeBias` or any
        function of ``(q_positions [..., l], k_positions [..., s])`` returning
        ``[..., N, l, s]``; None for no bias.
      causal: mask keys at later positions, ``k_pos > q_pos`` (from the positions,
        so packed sequences and decode steps are right).
      q_segment_ids: integer ``[..., L]``; queries attend only to keys of the same
        segment id (packing; padding as its own id, e.g. 0).
      k_segment_ids: integer ``[..., S]``; None means ``q_segment_ids``.
      mask: bool or 0/1 numeric, broadcastable to ``[..., N, L, S]`` (Flax's masks,
        e.g. ``[B, 1, 1, S]`` of a KV cache), non-zero where attention is allowed;
        sliced per tile.
      scale: the logit scale; None means ``1 / sqrt(H)``.
      block_q: query rows per tile (``min(block_q, L)`` is used).
      block_k: keys per tile (``min(block_k, S)`` is used).
      precision: ``jax.lax.Precision`` of the two matmuls (as in
        ``jnp.einsum``); None is the backend default.

    Returns:
      ``[..., L, N, Hv]`` in q's dtype.

    Raises:
      TypeError: non-floating q/k/v, non-integer positions or segment ids, a
        non-numeric ``mask``, a non-bool ``causal``, a ``bias`` that is not
        callable, non-int block sizes.
      ValueError: mismatched shapes or heads (``N % K``, ``AlibiBias.num_heads`` or
        the table's heads against q's ``N``), ``bias``/``causal`` without
        ``q_positions``, positions or segment ids that break the positions rule, a
        bias tile of the wrong shape, a ``mask`` that does not broadcast, a
        ``scale <= 0``, block sizes ``<= 0``.

    Examples:
      ALiBi over 4096 tokens without the ``[4, 4096, 4096]`` bias:

      >>> q = jnp.ones((1, 4096, 4, 16))  # [B, L, N, H]
      >>> out = fp.blockwise_attention(q, q, q, q_positions=jnp.arange(4096),
      ...     bias=fp.AlibiBias(4), causal=True, block_q=1024, block_k=1024)
      >>> out.shape
      (1, 4096, 4, 16)

      A decode step against a 10-slot cache, T5 buckets, grouped-query k/v:

      >>> table = jnp.zeros((32, 4))  # [num_buckets, N]
      >>> out = fp.blockwise_attention(jnp.ones((2, 1, 4, 16)), jnp.ones((2, 10, 2, 16)),
      ...     jnp.ones((2, 10, 2, 16)), q_positions=jnp.full((2, 1), 9),
      ...     k_positions=jnp.arange(10), bias=fp.RelativeBias(table, bidirectional=False),
      ...     causal=True)
      >>> out.shape
      (2, 1, 4, 16)

    Reference: Dao et al., NeurIPS 2022; Press et al., ICLR 2022 (ALiBi); Raffel et
    al., JMLR 2020 (T5).
    """
    batch, length, heads, head_dim, kv_heads = _check_qkv(q, k, v)
    batch_shape = q.shape[:-3]
    keys = k.shape[-3]
    causal = check_bool("causal", causal)
    block_q = min(check_positive_int("block_q", block_q), length)
    block_k = min(check_positive_int("block_k", block_k), keys)
    scale = (
        1.0 / math.sqrt(head_dim)
        if scale is None
        else check_positive_float("scale", scale)
    )
    if bias is not None:
        if not callable(bias):
            raise TypeError(
                "`bias` must be a function of (q_positions, k_positions), e.g. "
                f"fp.AlibiBias(num_heads), got {type(bias).__name__}. Hint: pass a "
                "materialised [B, N, L, S] array to positional_attention_fn instead."
            )
        bias_heads = getattr(bias, "num_heads", heads)
        if bias_heads != heads:
            raise ValueError(
                f"`bias` has {bias_heads} heads, q has N = {heads}; they must match."
            )
    if (bias is not None or causal) and q_positions is None:
        raise ValueError("`q_positions` is required with `bias` or `causal=True`.")
    qp = kp = None
    if q_positions is not None:
        qp = check_positions("q_positions", q_positions, "q.shape[:-2]", q.shape[:-2])
        if k_positions is None:
            check_positions(
                "q_positions (also k's, as k_positions is None)",
                qp,
                "k.shape[:-2]",
                k.shape[:-2],
            )
            kp = qp
        else:
            kp = check_positions(
                "k_positions", k_positions, "k.shape[:-2]", k.shape[:-2]
            )
        qp, kp = _rows(qp, batch_shape), _rows(kp, batch_shape)
    elif k_positions is not None:
        raise ValueError("`k_positions` needs `q_positions`.")
    qs = ks = None
    if q_segment_ids is not None:
        qs = _check_segment_ids("q_segment_ids", q_segment_ids, q.shape[:-2])
        ks = qs
        if k_segment_ids is not None:
            ks = _check_segment_ids("k_segment_ids", k_segment_ids, k.shape[:-2])
        elif keys != length:
            raise ValueError(
                f"`k_segment_ids` is required when S ({keys}) != L ({length})."
            )
        qs, ks = _rows(qs, batch_shape), _rows(ks, batch_shape)
    elif k_segment_ids is not None:
        raise ValueError("`k_segment_ids` needs `q_segment_ids`.")
    if mask is not None:
        mask = _check_mask(mask, batch_shape, (heads, length, keys))

    groups = heads // kv_heads
    q = q.reshape(batch, length, kv_heads, groups, head_dim)
    k = k.reshape(batch, keys, kv_heads, head_dim)
    v = v.reshape(batch, keys, kv_heads, v.shape[-1])
    num_k_blocks = -(-keys // block_k)

    def allowed_pairs(q_start, k_start, k_index):
        """bool ``[B or 1, K or 1, G or 1, block_q, block_k]``, or None for all."""
        terms = []
        if keys % block_k:  # the last block overlaps the one before it
            index = k_start + jnp.arange(block_k, dtype=jnp.int32)
            terms.append((index >= k_index * block_k)[None, None, None, None, :])
        if causal and qp is not None and kp is not None:
            q_pos = jax.lax.dynamic_slice_in_dim(qp, q_start, block_q, axis=1)
            k_pos = jax.lax.dynamic_slice_in_dim(kp, k_start, block_k, axis=1)
            terms.append(_pairs(k_pos, q_pos, jnp.less_equal))
        if qs is not None and ks is not None:
            q_seg = jax.lax.dynamic_slice_in_dim(qs, q_start, block_q, axis=1)
            k_seg = jax.lax.dynamic_slice_in_dim(ks, k_start, block_k, axis=1)
            terms.append(_pairs(k_seg, q_seg, jnp.equal))
        if mask is not None:
            terms.append(_mask_tile(mask, q_start, block_q, k_start, block_k, groups))
        if not terms:
            return None
        keep = terms[0]
        for term in terms[1:]:
            keep = keep & term
        return keep

    def update(carry, q_block, k_block, v_block, q_start, k_start, keep):
        """One online-softmax step over the keys ``[k_start, k_start + block_k)``."""
        row_max, denominator, acc = carry
        logits = jnp.einsum(
            "blkgh,bskh->bkgls",
            q_block,
            k_block,
            precision=precision,
            preferred_element_type=jnp.float32,
        )
        logits = logits * jnp.float32(scale)
        if bias is not None and qp is not None and kp is not None:
            q_pos = jax.lax.dynamic_slice_in_dim(qp, q_start, block_q, axis=1)
            k_pos = jax.lax.dynamic_slice_in_dim(kp, k_start, block_k, axis=1)
            logits = logits + _bias_tile(bias, q_pos, k_pos, logits.shape)
        if keep is not None:
            logits = jnp.where(keep, logits, -jnp.inf)
        new_max = jax.lax.stop_gradient(jnp.maximum(row_max, logits.max(-1)))
        # A row masked so far has max -inf: subtract 0 instead (exp(-inf) = 0).
        shift = jnp.where(new_max == -jnp.inf, 0.0, new_max)
        probs = jnp.exp(logits - shift[..., None])
        correction = jnp.exp(row_max - shift)
        weighted = jnp.einsum(
            "bkgls,bskh->bkglh",
            probs.astype(v.dtype),
            v_block,
            precision=precision,
            preferred_element_type=jnp.float32,
        )
        denominator = denominator * correction + probs.sum(-1)
        return new_max, denominator, acc * correction[..., None] + weighted

    def attend_q_block(q_start):
        q_block = jax.lax.dynamic_slice_in_dim(q, q_start, block_q, axis=1)

        def k_step(carry, k_index):
            k_start = jnp.minimum(k_index * block_k, keys - block_k)
            keep = allowed_pairs(q_start, k_start, k_index)
            # Sliced outside the cond: their cotangents stay block-sized inside it.
            k_block = jax.lax.dynamic_slice_in_dim(k, k_start, block_k, axis=1)
            v_block = jax.lax.dynamic_slice_in_dim(v, k_start, block_k, axis=1)
            args = (q_block, k_block, v_block, q_start, k_start, keep)
            if keep is None:
                return update(carry, *args), None
            # Tiles where every pair is masked (half of them, causal) are skipped.
            skip = lambda carry, *_: carry
            return jax.lax.cond(jnp.any(keep), update, skip, carry, *args), None

        stats_shape = (batch, kv_heads, groups, block_q)
        init = (
            jnp.full(stats_shape, -jnp.inf, jnp.float32),
            jnp.zeros(stats_shape, jnp.float32),
            jnp.zeros((*stats_shape, v.shape[-1]), jnp.float32),
        )
        (_, denominator, acc), _ = jax.lax.scan(
            jax.checkpoint(k_step, prevent_cse=False),
            init,
            jnp.arange(num_k_blocks, dtype=jnp.int32),
        )
        safe = jnp.where(denominator == 0.0, 1.0, denominator)  # fully masked rows
        out = (acc / safe[..., None]).astype(q.dtype)  # [B, K, G, block_q, Hv]
        return jnp.moveaxis(out, 3, 1).reshape(batch, block_q, heads, v.shape[-1])

    # The last block starts at L - block_q, overlapping the one before it.
    q_starts = np.minimum(
        np.arange(0, length, block_q, dtype=np.int32), length - block_q
    )
    blocks = jax.lax.map(
        jax.checkpoint(attend_q_block, prevent_cse=False), jnp.asarray(q_starts)
    )
    out = jnp.moveaxis(blocks, 0, 1)  # [B, num_q_blocks, block_q, N, Hv]
    out = out.reshape(batch, len(q_starts) * block_q, heads, v.shape[-1])
    if length % block_q:
        overlap = len(q_starts) * block_q - length
        last = out[:, (len(q_starts) - 1) * block_q + overlap :]
        out = jnp.concatenate([out[:, : (len(q_starts) - 1) * block_q], last], axis=1)
    return out.reshape(*batch_shape, length, heads, v.shape[-1])


def _check_qkv(q: Any, k: Any, v: Any) -> tuple[int, int, int, int, int]:
    """Validates q/k/v; returns ``(B, L, N, H, K)`` with ``B`` the flattened batch."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_float_array(name, x)
    if q.ndim < 3 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ValueError(
            "`q`, `k`, `v` must be [..., L, N, H], [..., S, K, H], [..., S, K, Hv] "
            f"of one rank >= 3, got shapes {q.shape}, {k.shape}, {v.shape}."
        )
    length, heads, head_dim = q.shape[-3:]
    keys, kv_heads = k.shape[-3:-1]
    if (
        k.shape[:-3] != q.shape[:-3]
        or v.shape[:-3] != q.shape[:-3]
        or v.shape[-3:-1] != (keys, kv_heads)
        or k.shape[-1] != head_dim
    ):
        raise ValueError(
            "`q`, `k`, `v` must be [..., L, N, H], [..., S, K, H], [..., S, K, Hv] "
            f"with the same leading axes, got shapes {q.shape}, {k.shape}, {v.shape}."
        )
    if length == 0 or keys == 0:
        raise ValueError(f"`q` and `k` need L, S >= 1, got L = {length}, S = {keys}.")
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(
            f"q's heads N = {heads} must be a multiple of k/v's heads K = {kv_heads} "
            "(grouped-query attention)."
        )
    return math.prod(q.shape[:-3]), length, heads, head_dim, kv_heads


def _rows(x: jax.Array, batch_shape: tuple[int, ...]) -> jax.Array:
    """int32 ``[1, n]`` if shared by the batch, else ``[..., n]`` as ``[B, n]``."""
    x = x.astype(jnp.int32)
    n = x.shape[-1]
    if all(d == 1 for d in x.shape[:-1]):
        return x.reshape(1, n)
    x = x.reshape((1,) * (len(batch_shape) + 1 - x.ndim) + x.shape)
    return jnp.broadcast_to(x, batch_shape + (n,)).reshape(-1, n)


def _check_segment_ids(name: str, ids: Any, target: tuple[int, ...]) -> jax.Array:
    ids = check_integer_array(name, ids)
    if not obeys_positions_rule(tuple(ids.shape), tuple(target)):
        raise ValueError(
            f"`{name}` must be [..., {target[-1]}], one id per token, with leading "
            f"axes that broadcast to {tuple(target[:-1])}; got shape {ids.shape}."
        )
    return ids


def _check_mask(
    mask: Any, batch_shape: tuple[int, ...], tail: tuple[int, int, int]
) -> jax.Array:
    """``[B or 1, N or 1, L or 1, S or 1]`` from a mask broadcastable to
    ``[..., N, L, S]``."""
    dtype = getattr(mask, "dtype", None)
    if dtype is None or not (
        dtype == jnp.bool_
        or jnp.issubdtype(dtype, jnp.integer)
        or jnp.issubdtype(dtype, jnp.floating)
    ):
        raise TypeError(
            "`mask` must be a bool or 0/1 numeric array (non-zero: attend), got "
            f"{type(mask).__name__} of dtype {dtype}."
        )
    check_broadcastable("mask", mask.shape, "[..., N, L, S]", batch_shape + tail)
    mask = jnp.asarray(mask)
    mask = mask.reshape((1,) * (len(batch_shape) + 3 - mask.ndim) + mask.shape)
    if all(d == 1 for d in mask.shape[:-3]):
        return mask.reshape(1, *mask.shape[-3:])
    mask = jnp.broadcast_to(mask, batch_shape + mask.shape[-3:])
    return mask.reshape(-1, *mask.shape[-3:])


def _pairs(k_values: jax.Array, q_values: jax.Array, op: Callable) -> jax.Array:
    """bool ``[B, 1, 1, l, s]``: ``op(k_values[j], q_values[i])`` per pair."""
    pairs = op(k_values[:, None, :], q_values[:, :, None])
    return pairs[:, None, None]


def _mask_tile(
    mask: jax.Array,
    q_start: jax.Array,
    block_q: int,
    k_start: jax.Array,
    block_k: int,
    groups: int,
) -> jax.Array:
    """The bool ``[B or 1, K or 1, G or 1, l or 1, s or 1]`` tile of a normalised
    mask."""
    if mask.shape[2] != 1:
        mask = jax.lax.dynamic_slice_in_dim(mask, q_start, block_q, axis=2)
    if mask.shape[3] != 1:
        mask = jax.lax.dynamic_slice_in_dim(mask, k_start, block_k, axis=3)
    mask = mask != 0  # Flax's masks are float 0/1
    mask_heads = mask.shape[1]
    if mask_heads == 1:
        return mask[:, :, None]
    return mask.reshape(mask.shape[0], mask_heads // groups, groups, *mask.shape[2:])


def _bias_tile(
    bias: PositionBias,
    q_positions: jax.Array,
    k_positions: jax.Array,
    logits_shape: tuple[int, ...],
) -> jax.Array:
    """``bias`` of one tile, checked and shaped like the logits ``[B, K, G, l, s]``."""
    batch, kv_heads, groups, rows, cols = logits_shape
    tile = bias(q_positions, k_positions)
    shape = tuple(getattr(tile, "shape", ()))
    want = (kv_heads * groups, rows, cols)
    if (
        len(shape) < 3
        or shape[-3:] != want
        or len(shape) > 4
        or (len(shape) == 4 and shape[0] not in (1, batch))
    ):
        raise ValueError(
            f"`bias` must return [B, N, l, s] or [N, l, s] = {want} for positions "
            f"[B, {rows}] and [B, {cols}], got shape {shape}."
        )
    check_float_array("bias(q_positions, k_positions)", tile)
    tile = tile.reshape(-1, kv_heads, groups, rows, cols)
    return tile.astype(jnp.float32)
