"""Integer positions for every encoding: packed segments, padding masks, decode steps.

Every encoding in :mod:`flax_posenc` takes explicit integer positions; these helpers
build them for the common batch layouts, so that packing, padding and KV-cache
decoding are right by construction:

* :func:`positions_from_segment_ids`: packed sequences, ``segment_ids [..., L]``
  with padding as segment ``0``; positions restart at ``0`` in each segment.
* :func:`positions_from_padding_mask`: left- or right-padded batches; a token's
  position is the number of real tokens before it.
* :func:`positions_from_offsets`: a decode step of ``L`` new tokens after a cache
  index or per-sequence lengths.
* :func:`relative_positions`: ``k_pos - q_pos`` for every query/key pair, the input
  of the attention-bias encodings (ALiBi, T5 buckets).

Padding tokens get position ``0`` (as seqio's packed ``*_positions`` features do):
it is a valid index for any table, and padded tokens are masked out of attention.
All outputs are ``int32``.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._validation import (
    check_integer_array,
    check_positive_int,
    is_traced,
)

__all__ = [
    "grid_positions",
    "positions_from_offsets",
    "positions_from_padding_mask",
    "positions_from_segment_ids",
    "relative_positions",
]


def _check_sequences(name: str, value: jax.Array) -> None:
    if value.ndim < 1:
        raise ValueError(
            f"`{name}` must be [..., L] (rank >= 1), got shape {tuple(value.shape)}."
        )


def _arange_like(value: jax.Array) -> jax.Array:
    """``0..L-1`` broadcast explicitly to ``value.shape`` ``[..., L]``."""
    length = value.shape[-1]
    index = jnp.arange(length, dtype=jnp.int32).reshape((1,) * (value.ndim - 1) + (-1,))
    return jnp.broadcast_to(index, value.shape)


def positions_from_segment_ids(segment_ids: jax.Array) -> jax.Array:
    """Positions of packed sequences: ``0, 1, 2, ...`` restarting at each new segment.

    A segment starts at index ``0`` and wherever ``segment_ids[..., i] !=
    segment_ids[..., i - 1]``, so consecutive segments must carry different ids
    (seqio packing numbers them 1, 2, 3, ...). Padding is segment ``0`` and gets
    position ``0``.

    Args:
      segment_ids: integer ``[..., L]`` (usually ``[B, L]``), ``0`` for padding.

    Returns:
      int32 ``[..., L]``.

    Raises:
      TypeError: non-integer ``segment_ids``.
      ValueError: ``segment_ids`` of rank 0.

    Examples:
      >>> segment_ids = jnp.array([1, 1, 1, 2, 2, 3, 0, 0])
      >>> fp.positions_from_segment_ids(segment_ids).tolist()
      [0, 1, 2, 0, 1, 0, 0, 0]

    Reference: sequence packing as in Raffel et al. 2020 (T5) and seqio.
    """
    segment_ids = check_integer_array("segment_ids", segment_ids)
    _check_sequences("segment_ids", segment_ids)
    index = _arange_like(segment_ids)
    previous = jnp.concatenate([segment_ids[..., :1], segment_ids[..., :-1]], axis=-1)
    starts = (index == 0) | (segment_ids != previous)
    segment_start = jax.lax.cummax(
        jnp.where(starts, index, 0), axis=segment_ids.ndim - 1
    )
    return jnp.where(segment_ids == 0, 0, index - segment_start).astype(jnp.int32)


def positions_from_padding_mask(mask: jax.Array) -> jax.Array:
    """Positions of a padded batch: the number of real tokens before each token.

    ``positions[..., i] = sum(mask[..., :i])`` for real tokens and ``0`` for padding,
    so left-padded ``[0, 0, 1, 1, 1]`` gives ``[0, 0, 0, 1, 2]`` and right-padded
    ``[1, 1, 1, 0, 0]`` gives ``[0, 1, 2, 0, 0]``: every sequence starts at 0 at its
    first real token, whichever side it is padded on.

    Args:
      mask: bool or integer ``[..., L]`` (usually ``[B, L]``); true / non-zero for
        real tokens.

    Returns:
      int32 ``[..., L]``.

    Raises:
      TypeError: a floating-point ``mask``.
      ValueError: ``mask`` of rank 0.

    Examples:
      >>> mask = jnp.array([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0]])  # left, right padded
      >>> fp.positions_from_padding_mask(mask).tolist()
      [[0, 0, 0, 1, 2], [0, 1, 2, 0, 0]]
    """
    mask = jnp.asarray(mask)
    if mask.dtype != jnp.bool_ and not jnp.issubdtype(mask.dtype, jnp.integer):
        raise TypeError(
            f"`mask` must be a bool or integer array, got dtype {mask.dtype} with "
            f"shape {tuple(mask.shape)}."
        )
    mask = mask != 0
    _check_sequences("mask", mask)
    counts = jnp.cumsum(mask.astype(jnp.int32), axis=-1)
    return jnp.where(mask, counts - 1, 0).astype(jnp.int32)


def positions_from_offsets(offsets: jax.Array | int, length: int = 1) -> jax.Array:
    """Positions of ``length`` new tokens that follow ``offsets`` earlier ones.

    ``positions[..., j] = offsets[...] + j`` for ``j < length``. For a KV-cache decode
    step, ``offsets`` is the cache index (a scalar shared by the batch) or, for
    ragged / left-padded batches, the per-sequence number of real tokens so far
    (e.g. ``mask.sum(-1)`` of the prompt mask), so the step continues exactly where
    :func:`positions_from_padding_mask` left off.

    Args:
      offsets: integer scalar or ``[...]`` (usually ``[B]``), traced or concrete.
      length: ``L``, the number of new tokens (1 for one decode step).

    Returns:
      int32 ``offsets.shape + (L,)``.

    Raises:
      TypeError: non-integer ``offsets`` or ``length``.
      ValueError: ``length <= 0`` or concrete negative ``offsets``.

    Examples:
      >>> fp.positions_from_offsets(7).tolist()  # one decode step at cache index 7
      [7]
      >>> fp.positions_from_offsets(jnp.array([3, 5]), 2).tolist()  # ragged batch
      [[3, 4], [5, 6]]
    """
    offsets = check_integer_array("offsets", offsets)
    length = check_positive_int("length", length)
    if not is_traced(offsets) and offsets.size and int(np.min(offsets)) < 0:
        raise ValueError(
            f"`offsets` must be >= 0, got a minimum of {int(np.min(offsets))}."
        )
    steps = jnp.arange(length, dtype=jnp.int32).reshape((1,) * offsets.ndim + (-1,))
    return offsets.astype(jnp.int32)[..., None] + steps


def relative_positions(q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    """``k_pos - q_pos`` for every query/key pair (T5's ``memory - query``).

    Leading (batch) dimensions broadcast by numpy rules, made explicit here.

    Args:
      q_positions: integer ``[..., L]``.
      k_positions: integer ``[..., S]``.

    Returns:
      int32 ``[..., L, S]``: ``out[..., i, j] = k_positions[..., j] -
      q_positions[..., i]``.

    Raises:
      TypeError: non-integer positions.
      ValueError: positions of rank 0, or leading dimensions that do not broadcast.

    Examples:
      >>> fp.relative_positions(jnp.arange(3), jnp.arange(4)).tolist()
      [[0, 1, 2, 3], [-1, 0, 1, 2], [-2, -1, 0, 1]]
    """
    q_positions = check_integer_array("q_positions", q_positions)
    k_positions = check_integer_array("k_positions", k_positions)
    _check_sequences("q_positions", q_positions)
    _check_sequences("k_positions", k_positions)
    try:
        batch = np.broadcast_shapes(q_positions.shape[:-1], k_positions.shape[:-1])
    except ValueError:
        raise ValueError(
            "The leading dimensions of `q_positions` [..., L] and `k_positions` "
            "[..., S] must broadcast, got shapes "
            f"{tuple(q_positions.shape)} and {tuple(k_positions.shape)}."
        ) from None
    q = jnp.broadcast_to(q_positions, batch + q_positions.shape[-1:])
    k = jnp.broadcast_to(k_positions, batch + k_positions.shape[-1:])
    return k.astype(jnp.int32)[..., None, :] - q.astype(jnp.int32)[..., :, None]


def grid_positions(grid_shape: Sequence[int]) -> jax.Array:
    """Integer coordinates of every cell of a grid, in row-major order.

    For an ``h x w`` patch grid flattened like ``patches.reshape(B, h * w, D)``,
    token ``t`` sits at ``(t // w, t % w)``.

    Args:
      grid_shape: the grid's size per axis, e.g. ``(h, w)`` for image patches or
        ``(frames, h, w)`` for video.

    Returns:
      int32 ``[prod(grid_shape), len(grid_shape)]``.

    Examples:
      >>> fp.grid_positions((2, 3)).tolist()
      [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    """
    if isinstance(grid_shape, (str, bytes)) or not isinstance(grid_shape, Sequence):
        raise TypeError(
            f"`grid_shape` must be a sequence of positive ints, got {grid_shape!r}."
        )
    if not grid_shape:
        raise ValueError("`grid_shape` must name at least one axis, got ().")
    sizes = [
        check_positive_int(f"grid_shape[{a}]", n) for a, n in enumerate(grid_shape)
    ]
    coordinates = np.indices(sizes).reshape(len(sizes), -1).T
    return jnp.asarray(coordinates, jnp.int32)
