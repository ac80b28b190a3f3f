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
* :func:`randomized_positions` and :func:`pose_positions`: *training* positions
  that cover a longer range than the training window (randomized positional
  encodings, Ruoss et al. 2023; positional skip-wise training, Zhu et al. 2023), for
  any encoding. A PRNG key in, sorted int32 positions out, static sizes, jit-able.
* :func:`load_balanced_permutation` and its inverse: the token order that gives
  every device of causal ring attention the same work; tokens and their positions
  are permuted together.

Padding tokens get position ``0`` (as seqio's packed ``*_positions`` features do):
it is a valid index for any table, and padded tokens are masked out of attention.
All positions are ``int32``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core.offsets import offsets
from flax_posenc._core.validation import (
    check_integer_array,
    check_position_pairs,
    check_positive_int,
    is_traced,
)

__all__ = [
    "grid_positions",
    "inverse_load_balanced_permutation",
    "load_balanced_permutation",
    "pose_positions",
    "positions_from_offsets",
    "positions_from_padding_mask",
    "positions_from_segment_ids",
    "randomized_positions",
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
    return _segment_positions(segment_ids)


@jax.jit
def _segment_positions(segment_ids: jax.Array) -> jax.Array:
    """:func:`positions_from_segment_ids` of checked ids, as one compiled program."""
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
    if not isinstance(mask, jax.Array):  # jnp.asarray would compile a copy program
        mask = np.asarray(mask)
    if mask.dtype != jnp.bool_ and not jnp.issubdtype(mask.dtype, jnp.integer):
        raise TypeError(
            f"`mask` must be a bool or integer array, got dtype {mask.dtype} with "
            f"shape {tuple(mask.shape)}."
        )
    if isinstance(mask, np.ndarray):
        mask = mask != 0  # on the host: an int64 mask is not narrowed first
    _check_sequences("mask", mask)
    return _padding_positions(mask)


@jax.jit
def _padding_positions(mask: jax.Array) -> jax.Array:
    """:func:`positions_from_padding_mask` of a checked mask, as one compiled
    program."""
    mask = mask != 0
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
    if not is_traced(offsets) and offsets.size:
        lowest = int(np.asarray(offsets).min())  # on the host: no program
        if lowest < 0:
            raise ValueError(f"`offsets` must be >= 0, got a minimum of {lowest}.")
    return _offset_positions(offsets, length)


@functools.partial(jax.jit, static_argnames="length")
def _offset_positions(offsets: jax.Array, length: int) -> jax.Array:
    """:func:`positions_from_offsets` of checked arguments, as one compiled program."""
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
    return offsets(*check_position_pairs(q_positions, k_positions))


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
    # Built on the host and placed as is: jnp.asarray would compile a copy program.
    return jax.device_put(coordinates.astype(np.int32))


def _check_window(
    length: Any, max_len: Any, batch_shape: Any
) -> tuple[int, int, tuple[int, ...]]:
    length = check_positive_int("length", length)
    max_len = check_positive_int("max_len", max_len)
    if length > max_len:
        raise ValueError(
            f"`length` ({length}) must be <= `max_len` ({max_len}): positions are "
            f"drawn from [0, max_len). Hint: max_len = a multiple of length, e.g. "
            f"{4 * length}."
        )
    if isinstance(batch_shape, (int, np.integer)):
        batch_shape = (batch_shape,)
    if not isinstance(batch_shape, Sequence) or isinstance(batch_shape, str):
        raise TypeError(f"`batch_shape` must be a tuple of ints, got {batch_shape!r}.")
    batch_shape = tuple(
        check_positive_int(f"batch_shape[{i}]", n) for i, n in enumerate(batch_shape)
    )
    return length, max_len, batch_shape


def _check_key(key: Any) -> jax.Array:
    dtype = getattr(key, "dtype", None)
    if dtype is None or not (
        jnp.issubdtype(dtype, jax.dtypes.prng_key)
        or (dtype == jnp.uint32 and key.shape[-1:] == (2,))
    ):
        raise TypeError(
            f"`key` must be a JAX PRNG key, got {type(key).__name__} of dtype "
            f"{dtype}. Hint: jax.random.key(0)."
        )
    if jnp.issubdtype(dtype, jax.dtypes.prng_key) and key.shape != ():
        raise ValueError(
            f"`key` must be a single key (shape ()), got shape {key.shape}. Hint: "
            "pass batch_shape instead of a batch of keys."
        )
    return key


def randomized_positions(
    key: jax.Array,
    length: int,
    max_len: int,
    *,
    batch_shape: Sequence[int] = (),
) -> jax.Array:
    """Randomized positional encodings' training positions: a sorted random subset.

    ``length`` distinct positions drawn uniformly without replacement from ``[0,
    max_len)``, in increasing order, independently for each sequence. Training on
    them exposes every position up to ``max_len`` while keeping the order, so the
    encoding has seen the positions of longer test sequences; evaluate with
    ``jnp.arange`` as usual.

    Args:
      key: a JAX PRNG key (``jax.random.key``), traced or concrete.
      length: ``L``, the training sequence length.
      max_len: the range drawn from, ``>= L`` (the longest length to test).
      batch_shape: leading axes, e.g. ``(B,)``; one subset per sequence.

    Returns:
      int32 ``batch_shape + (L,)``, strictly increasing along the last axis, in
      ``[0, max_len)``.

    Raises:
      TypeError: ``key`` not a PRNG key, non-int sizes.
      ValueError: ``length > max_len``, sizes ``<= 0``, a batch of keys.

    Examples:
      >>> p = fp.randomized_positions(jax.random.key(0), 4, 16, batch_shape=(2,))
      >>> p.shape, bool(jnp.all(jnp.diff(p) > 0)), bool(p.max() < 16)
      ((2, 4), True, True)

    Reference: Ruoss, Deletang, Genewein, Grau-Moya, Csordas, Bennani, Legg, Veness,
    "Randomized Positional Encodings Boost Length Generalization of Transformers",
    ACL 2023 (Section 3).
    """
    key = _check_key(key)
    length, max_len, batch = _check_window(length, max_len, batch_shape)
    return _randomized(key, length, max_len, batch)


@functools.partial(jax.jit, static_argnames=("length", "max_len", "batch"))
def _randomized(
    key: jax.Array, length: int, max_len: int, batch: tuple[int, ...]
) -> jax.Array:
    """:func:`randomized_positions` of checked arguments, as one compiled program."""
    scores = jax.random.uniform(key, batch + (max_len,))
    chosen = jax.lax.top_k(scores, length)[1]  # L distinct indices per sequence
    return jnp.sort(chosen, axis=-1).astype(jnp.int32)


def pose_positions(
    key: jax.Array,
    length: int,
    max_len: int,
    *,
    num_chunks: int = 2,
    batch_shape: Sequence[int] = (),
) -> jax.Array:
    """PoSE's training positions: ``num_chunks`` contiguous chunks with random skips.

    The window of ``L`` tokens is cut into chunks ``l_0, ..., l_{C-1}`` of at least
    one token, drawn one after another: ``l_i ~ U{1, ..., L - st_i - (C - 1 -
    i)}`` with ``st_i = l_0 + ... + l_{i-1}`` (room left for the later chunks), the
    last chunk takes the rest. Chunk ``i`` is moved right by a skipping bias ``u_i``,
    also drawn one after another: ``u_0 = 0`` and ``u_i ~ U{u_{i-1}, ..., max_len -
    L}`` (eq. 4 of the paper; both ends reachable). So ``positions[t] = t +
    u_{chunk(t)}``: contiguous inside each chunk, strictly increasing, the last below
    ``max_len``. Relative distances up to ``max_len - 1`` appear while the window
    stays ``L`` long. This is the paper's distribution for any ``C`` (its Figure 6
    code for 2 and 3 chunks); its released training script draws 2 chunks with the
    first at most ``(L + 1) // 2`` long.

    Args:
      key: a JAX PRNG key, traced or concrete.
      length: ``L``, the training window.
      max_len: the target context length, ``>= L``.
      num_chunks: ``C``, between 1 and ``L`` (the paper uses 2).
      batch_shape: leading axes, e.g. ``(B,)``; independent draws per sequence.

    Returns:
      int32 ``batch_shape + (L,)``, strictly increasing, in ``[0, max_len)``.

    Raises:
      TypeError: ``key`` not a PRNG key, non-int sizes.
      ValueError: ``length > max_len``, ``num_chunks`` outside ``[1, L]``, sizes
        ``<= 0``.

    Examples:
      >>> p = fp.pose_positions(jax.random.key(0), 8, 64)
      >>> int(p[0]), bool(jnp.all(jnp.diff(p) > 0)), bool(p[-1] < 64)
      (0, True, True)

    Reference: Zhu, Yang, Wang, Song, Wu, Wei, Li, "PoSE: Efficient Context Window
    Extension of LLMs via Positional Skip-wise Training", ICLR 2024 (Section 3.2,
    eqs. 3-4; Appendix B, Figure 6).
    """
    key = _check_key(key)
    length, max_len, batch = _check_window(length, max_len, batch_shape)
    num_chunks = check_positive_int("num_chunks", num_chunks)
    if num_chunks > length:
        raise ValueError(
            f"`num_chunks` must be <= length ({length}): every chunk holds a token, "
            f"got {num_chunks}."
        )
    return _pose(
        key, length=length, top=max_len - length, num_chunks=num_chunks, batch=batch
    )


@functools.partial(jax.jit, static_argnames=("length", "top", "num_chunks", "batch"))
def _pose(
    key: jax.Array, *, length: int, top: int, num_chunks: int, batch: tuple[int, ...]
) -> jax.Array:
    """``t + u_{chunk(t)}`` for every token ``t`` of the window, as one program."""
    index = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), batch + (length,))
    if num_chunks == 1:
        return index
    starts, skips = _pose_chunks(key, length, top, num_chunks, batch)
    chunk = jnp.sum(
        index[..., None, :] >= starts[..., :, None], axis=-2, dtype=jnp.int32
    )  # [..., L]: how many later chunks start at or before each token
    skips = jnp.concatenate([jnp.zeros(batch + (1,), jnp.int32), skips], axis=-1)
    return index + jnp.take_along_axis(skips, chunk, axis=-1)


def _pose_chunks(
    key: jax.Array, length: int, top: int, num_chunks: int, batch: tuple[int, ...]
) -> tuple[jax.Array, jax.Array]:
    """The sequential draws of :func:`pose_positions`: the starts ``st_1..st_{C-1}``
    and skips ``u_1..u_{C-1}``, int32 ``batch + (C - 1,)``, two draws per chunk."""

    def draw(carry, step):
        start, skip = carry
        later, keys = step  # the chunks after this one; two keys
        size = jax.random.randint(keys[0], batch, 1, length - start - later + 1)
        skip = jax.random.randint(keys[1], batch, skip, top + 1)
        return (start + size, skip), (start + size, skip)

    zeros = jnp.zeros(batch, jnp.int32)
    later = jnp.arange(num_chunks - 1, 0, -1, dtype=jnp.int32)
    keys = jax.random.split(key, (num_chunks - 1, 2))
    _, (starts, skips) = jax.lax.scan(draw, (zeros, zeros), (later, keys))
    return jnp.moveaxis(starts, 0, -1), jnp.moveaxis(skips, 0, -1)


def load_balanced_permutation(seq_len: int, num_shards: int) -> np.ndarray:
    """The token order that balances causal ring attention over ``num_shards``.

    Cut the sequence into ``2 n`` chunks; device ``i`` holds chunks ``i`` and
    ``2 n - 1 - i``, so every device has one early and one late chunk and the same
    number of unmasked causal tiles (``2 n + 1`` chunk pairs each, instead of ``1``
    for the first device and ``2 n - 1`` for the last with a plain split).
    Permute tokens *and their positions* (and segment ids, targets, ...) with it
    before sharding; causal masks and biases follow from the positions, so nothing
    else changes. :func:`inverse_load_balanced_permutation` undoes it.

    Args:
      seq_len: ``L``, a multiple of ``2 * num_shards``.
      num_shards: ``n``, the size of the ring axis.

    Returns:
      int ``[L]`` indices: ``x_balanced = jnp.take(x, perm, axis=1)`` for ``[B, L,
      ...]``.

    Raises:
      TypeError: non-int arguments.
      ValueError: non-positive arguments, ``seq_len`` not a multiple of
        ``2 * num_shards``.

    Examples:
      >>> fp.load_balanced_permutation(8, 2).tolist()  # chunks 0, 3 | 1, 2
      [0, 1, 6, 7, 2, 3, 4, 5]
    """
    return _balanced_order(seq_len, num_shards)


def inverse_load_balanced_permutation(seq_len: int, num_shards: int) -> np.ndarray:
    """The inverse of :func:`load_balanced_permutation`: ``x ==
    jnp.take(x_balanced, inverse, axis=1)``.

    Args:
      seq_len: ``L``, a multiple of ``2 * num_shards``.
      num_shards: ``n``, the size of the ring axis.

    Returns:
      int ``[L]`` indices.

    Raises:
      TypeError: non-int arguments.
      ValueError: as :func:`load_balanced_permutation`.

    Examples:
      >>> fp.inverse_load_balanced_permutation(8, 2).tolist()
      [0, 1, 4, 5, 6, 7, 2, 3]
    """
    return np.argsort(_balanced_order(seq_len, num_shards))


def _balanced_order(seq_len: Any, num_shards: Any) -> np.ndarray:
    """Checks the sizes; chunks ``i`` and ``2 n - 1 - i`` of device ``i`` in turn."""
    seq_len = check_positive_int("seq_len", seq_len)
    num_shards = check_positive_int("num_shards", num_shards)
    if seq_len % (2 * num_shards):
        raise ValueError(
            f"`seq_len` ({seq_len}) must be a multiple of 2 * num_shards "
            f"({2 * num_shards}): two chunks per device. Hint: pad the sequence to "
            f"{-(-seq_len // (2 * num_shards)) * 2 * num_shards} tokens with a "
            "padding segment id."
        )
    chunk = seq_len // (2 * num_shards)
    order = [c for i in range(num_shards) for c in (i, 2 * num_shards - 1 - i)]
    return (np.asarray(order)[:, None] * chunk + np.arange(chunk)).reshape(-1)
