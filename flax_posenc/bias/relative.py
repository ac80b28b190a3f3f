"""T5 relative position buckets and the learned bias they index (Raffel et al., 2020).

A relative position ``r = k_pos - q_pos`` (T5's ``memory - query``) maps to one of
``num_buckets`` buckets. Bidirectional: half of the buckets are for ``r > 0`` and
half for ``r <= 0``; unidirectional (causal): all are for ``r <= 0`` and every
``r > 0`` shares bucket 0. Within a direction of ``b`` buckets, distance
``d = |r|`` gets its own bucket while ``d < b // 2``; larger distances are spaced
logarithmically up to ``max_distance``, and all ``d >= max_distance`` share the last
bucket::

    bucket(d) = d                                         if d < b // 2
              = min(b // 2 + floor(log(d / (b // 2)) / log(max_distance / (b // 2))
                                   * (b - b // 2)),
                    b - 1)                                 otherwise

Precision: the bucket of each distance ``0..max_distance`` is computed once per trace
on the host in float64 (static sizes only) and looked up, so the result does not
depend on the backend's float32 ``log``. It equals Hugging Face's T5 (float32 in
PyTorch) for every configuration in ``tests/fixtures/hf_bias.json`` and T5X (float64
numpy). Implementations in float32 can land a hair above or below an exact integer
and differ by one bucket at single distances for a few unusual sizes (e.g. ``b = 36``
per direction with ``max_distance = 32``); the common T5 sizes are unaffected.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core import cpu as _cpu
from flax_posenc._core.gather import take_rows
from flax_posenc._core.offsets import offsets
from flax_posenc._core.pytree import register_fields
from flax_posenc._core.validation import (
    check_bucket_sizes,
    check_float_array,
    check_integer_array,
    check_position_pairs,
    check_positive_int,
)
from flax_posenc.bias.position_bias import KernelBias, Scalar

__all__ = [
    "RelativeBias",
    "relative_position_bias",
    "relative_position_bucket",
]


def _distance_buckets(buckets: int, max_distance: int) -> np.ndarray:
    """int32 ``[max_distance + 1]``: the bucket of each distance in one direction."""
    max_exact = buckets // 2
    distance = np.arange(max_distance + 1, dtype=np.float64)
    scaled = np.log(np.maximum(distance, max_exact) / max_exact)
    scaled = scaled / math.log(max_distance / max_exact) * (buckets - max_exact)
    large = np.minimum(max_exact + scaled.astype(np.int64), buckets - 1)
    return np.where(distance < max_exact, distance, large).astype(np.int32)


_MAX_COMPARES = 32  # past this many log buckets, CPU keeps the table lookup too


def _bucket_thresholds(table: np.ndarray, max_exact: int) -> list[np.int32]:
    """The first distance of each bucket past the exact ones.

    ``table`` is nondecreasing (a floor of a log), so ``table[d] = min(d, max_exact)
    + #{t in thresholds : t <= d}`` for every ``d``.
    """
    return [
        np.int32(np.argmax(table >= v))
        for v in range(max_exact + 1, int(table[-1]) + 1)
    ]


def relative_position_bucket(
    relative_position: jax.Array,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> jax.Array:
    """T5's bucket of each relative position ``k_pos - q_pos``.

    See the module docstring for the rule. Defaults are T5's.

    Args:
      relative_position: integer ``[...]``, ``key_position - query_position`` (e.g.
        :func:`flax_posenc.relative_positions`).
      bidirectional: encoder attention (True) or causal decoder attention (False).
      num_buckets: total number of buckets; even when ``bidirectional``.
      max_distance: distances from here on share the last bucket of their direction.

    Returns:
      int32 ``relative_position.shape``, values in ``[0, num_buckets)``.

    Raises:
      TypeError: non-integer ``relative_position``, non-int sizes, non-bool
        ``bidirectional``.
      ValueError: odd ``num_buckets`` when bidirectional, fewer than 2 buckets per
        direction, or ``max_distance <= num_buckets_per_direction // 2``.

    Examples:
      >>> r = jnp.array([-200, -3, 0, 3, 200])
      >>> fp.relative_position_bucket(r).tolist()
      [15, 3, 0, 19, 31]
      >>> fp.relative_position_bucket(r, bidirectional=False).tolist()
      [31, 3, 0, 0, 0]

    Reference: Raffel et al., "Exploring the Limits of Transfer Learning with a
    Unified Text-to-Text Transformer", JMLR 2020; mesh-tensorflow's
    ``_relative_position_bucket``.
    """
    relative_position = check_integer_array("relative_position", relative_position)
    buckets = check_bucket_sizes(num_buckets, max_distance, bidirectional)
    return _buckets(relative_position, buckets, max_distance, bidirectional)


@functools.partial(
    jax.jit, static_argnames=("buckets", "max_distance", "bidirectional")
)
def _buckets(
    relative_position: jax.Array, buckets: int, max_distance: int, bidirectional: bool
) -> jax.Array:
    """:func:`relative_position_bucket` of checked arguments (``buckets`` per
    direction)."""
    offset, distance = _direction(
        relative_position.astype(jnp.int32), buckets, bidirectional
    )
    table = _distance_buckets(buckets, max_distance)
    thresholds = _bucket_thresholds(table, buckets // 2)

    def lookup(distance: jax.Array) -> jax.Array:  # the reference
        # In bounds by construction: 0 <= min(distance, max_distance) <= max_distance.
        return take_rows(jnp.asarray(table), jnp.minimum(distance, max_distance))

    if len(thresholds) <= _MAX_COMPARES:
        # On CPU: min(d, b // 2) + #{thresholds <= d}, the same buckets by compares.
        bucket = _cpu.on_cpu(
            lambda d: _cpu.t5_buckets(d, buckets // 2, thresholds), lookup, distance
        )
    else:
        bucket = lookup(distance)
    return (offset + bucket).astype(jnp.int32)


def _direction(
    relative_position: jax.Array, buckets: int, bidirectional: bool
) -> tuple[jax.Array, jax.Array]:
    """The bucket offset of the direction and the distance in it, int32."""
    if bidirectional:
        offset = jnp.where(relative_position > 0, buckets, 0)
        distance = jnp.where(
            relative_position < 0, -relative_position, relative_position
        )
    else:
        offset = jnp.zeros_like(relative_position)
        distance = jnp.maximum(-relative_position, 0)
    return offset, distance


@dataclasses.dataclass(frozen=True)
class _BucketTile:
    """One head's float32 ``[l, s]`` tile (:class:`flax_posenc.KernelBias`): the
    bucket by compares (no gather), then the head's table entry by selects."""

    buckets: int  # per direction
    max_distance: int
    bidirectional: bool

    def __call__(
        self,
        head: Scalar,
        shared: Scalar,
        q_positions: jax.Array,
        k_positions: jax.Array,
    ) -> jax.Array:
        del shared
        offset, distance = _direction(
            k_positions - q_positions, self.buckets, self.bidirectional
        )
        max_exact = self.buckets // 2
        table = _distance_buckets(self.buckets, self.max_distance)
        thresholds = _bucket_thresholds(table, max_exact)
        bucket = offset + _cpu.t5_buckets(distance, max_exact, thresholds)
        out = jnp.zeros(bucket.shape, jnp.float32)
        for index in range(self.buckets * (2 if self.bidirectional else 1)):
            out = jnp.where(bucket == index, head(index), out)
        return out


def relative_position_bias(
    table: jax.Array,
    q_positions: jax.Array,
    k_positions: jax.Array,
    *,
    bidirectional: bool = True,
    max_distance: int = 128,
    num_heads: int | None = None,
) -> jax.Array:
    """T5's learned attention bias, ``bias[..., h, i, j] = table[bucket(k_j - q_i), h]``.

    Add it to attention logits ``[..., N, L, S]`` before the softmax. Positions are
    explicit, so decode steps and packed sequences are right.

    Args:
      table: ``[num_buckets, N]``, floating point (Hugging Face's
        ``relative_attention_bias.weight`` layout).
      q_positions: integer ``[..., L]``.
      k_positions: integer ``[..., S]``; leading dimensions broadcast with
        ``q_positions``'s.
      bidirectional: as in :func:`relative_position_bucket`.
      max_distance: as in :func:`relative_position_bucket` (``num_buckets`` is
        ``table.shape[0]``).
      num_heads: ``N`` as the model states it; the table must then be
        ``[num_buckets, num_heads]``. T5X and flaxformer store ``[N, num_buckets]``:
        stating the head count catches such a table whenever ``N != num_buckets``.
        A square table (T5-3B: 32 heads, 32 buckets) cannot tell its layout by its
        shape: transpose a T5X table (``table.T``) whatever its sizes.

    Returns:
      ``[..., N, L, S]`` in ``table.dtype``.

    Raises:
      TypeError: non-integer positions or a non-floating ``table``.
      ValueError: ``table`` not of rank 2 or not ``[num_buckets, num_heads]``
        when ``num_heads`` is given, bad bucket sizes (see
        :func:`relative_position_bucket`), positions of rank 0, or leading
        dimensions that do not broadcast.

    Examples:
      >>> table = jnp.arange(64.0).reshape(32, 2)  # [num_buckets, N]
      >>> fp.relative_position_bias(table, jnp.arange(2), jnp.arange(2))[0].tolist()
      [[0.0, 34.0], [2.0, 0.0]]

    Reference: Raffel et al., JMLR 2020.
    """
    if getattr(table, "ndim", None) != 2:
        raise ValueError(
            "`table` must be [num_buckets, N], got shape "
            f"{tuple(getattr(table, 'shape', ()))}."
        )
    if not jnp.issubdtype(table.dtype, jnp.floating):
        raise TypeError(f"`table` must be floating point, got dtype {table.dtype}.")
    if num_heads is not None:
        num_heads = check_positive_int("num_heads", num_heads)
        if table.shape[1] != num_heads:
            raise ValueError(
                f"`table` must be [num_buckets, num_heads = {num_heads}] (Hugging "
                f"Face's layout), got shape {tuple(table.shape)}. Hint: a T5X or "
                "flaxformer table is [num_heads, num_buckets]: pass table.T."
            )
    return _bias(
        table,  # numpy too: jit places it
        *check_position_pairs(q_positions, k_positions),
        check_bucket_sizes(table.shape[0], max_distance, bidirectional),
        max_distance,
        bidirectional,
    )


@functools.partial(
    jax.jit, static_argnames=("buckets", "max_distance", "bidirectional")
)
def _bias(
    table: jax.Array,
    q_positions: jax.Array,
    k_positions: jax.Array,
    buckets: int,
    max_distance: int,
    bidirectional: bool,
) -> jax.Array:
    """:func:`relative_position_bias` of checked arguments (``buckets`` per
    direction)."""
    indices = _buckets(
        offsets(q_positions, k_positions), buckets, max_distance, bidirectional
    )
    bias = take_rows(table, indices)  # 0 <= indices < num_buckets
    return jnp.moveaxis(bias, -1, -3)


@dataclasses.dataclass(frozen=True, eq=False)
class RelativeBias:
    """T5's learned relative position bias, as a :class:`flax_posenc.PositionBias`.

    ``RelativeBias(table, ...)(q_positions, k_positions) ==
    relative_position_bias(table, q_positions, k_positions, ...)``:
    ``table[bucket(k_pos - q_pos), h]``, on the positions of one tile of blockwise or
    ring attention. A pytree whose one leaf is ``table`` (so it passes through
    ``jit`` and ``grad``; the bucket sizes are static).

    Attributes:
      table: floating ``[num_buckets, N]`` (e.g. ``relative_attention_bias`` of
        :class:`flax_posenc.nnx.RelativePositionBias`, whose ``position_bias()``
        builds this with its own settings).
      bidirectional: encoder (True) or causal decoder (False) buckets.
      max_distance: distances from here on share the last bucket.

    Raises:
      TypeError: a non-floating ``table``, non-int ``max_distance``, non-bool
        ``bidirectional``.
      ValueError: ``table`` not of rank 2, or bucket sizes that
        :func:`relative_position_bucket` rejects.

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
        check_bucket_sizes(shape[0], self.max_distance, self.bidirectional)

    @property
    def num_heads(self) -> int:
        """``N``, the table's second axis."""
        return self.table.shape[1]

    def __call__(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
        """``[..., N, L, S]`` in ``table.dtype``, see :func:`relative_position_bias`."""
        return self.tile(*check_position_pairs(q_positions, k_positions))

    def tile(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
        """The call on checked integer positions (the kernels' tiles)."""
        buckets = self.table.shape[0] // (2 if self.bidirectional else 1)
        return _bias(
            self.table,
            q_positions,
            k_positions,
            buckets,
            self.max_distance,
            self.bidirectional,
        )

    def kernel_form(self) -> KernelBias:
        """The bias for a Pallas kernel: each head's column of the table."""
        buckets = self.table.shape[0] // (2 if self.bidirectional else 1)
        return KernelBias(
            jnp.asarray(self.table, jnp.float32).T,
            jnp.zeros((1,), jnp.float32),
            _BucketTile(buckets, self.max_distance, self.bidirectional),
        )


register_fields(RelativeBias, ("table",), ("bidirectional", "max_distance"))
