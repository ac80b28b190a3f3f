"""ALiBi: attention with linear biases (Press et al., 2022).

Each head ``h`` adds ``-slope_h * |q_pos - k_pos|`` to its attention logits. The
slopes follow the paper's rule: for ``N`` a power of two, ``slope_h = 2^(-8h/N)``,
``h = 1..N``; otherwise take those of the closest lower power of two ``n`` and then
every other slope of ``2n`` (``2^(-8/(2n)), 2^(-24/(2n)), ...``) until there are ``N``.

Precision: each slope is computed in float64 and rounded once to float32, so it is
the float32 nearest the exact value. This equals MPT's slopes bit for bit for 1..64
heads; Bloom forms them with a float32 ``pow`` and is off by up to 6 ulp (relative
``5e-7``) for ``N >= 11`` (``tests/test_alibi.py`` pins both).

The bias is symmetric in ``|q_pos - k_pos|``, so it serves causal and bidirectional
attention alike. Causal implementations that add ``slope_h * k_pos`` instead (Bloom)
differ from it by a per-row constant, which softmax ignores.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core.offsets import offsets
from flax_posenc._core.validation import check_position_pairs, check_positive_int
from flax_posenc.bias.position_bias import KernelBias, Scalar

__all__ = [
    "AlibiBias",
    "alibi_bias",
    "alibi_slopes",
]


def alibi_slopes(num_heads: int) -> np.ndarray:
    """The ALiBi slope of each head, float32 ``[N]``, in head order.

    ``n = 2^floor(log2 N)``; ``slopes = [2^(-8i/n) for i = 1..n] +
    [2^(-8(2j-1)/(2n)) for j = 1..N-n]``. Computed in float64, rounded once.

    Args:
      num_heads: ``N`` >= 1.

    Returns:
      float32 ``[N]`` (a static numpy array).

    Raises:
      TypeError: non-int ``num_heads``.
      ValueError: ``num_heads <= 0``.

    Examples:
      >>> fp.alibi_slopes(8).tolist()  # 2^-1, 2^-2, ..., 2^-8
      [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
      >>> fp.alibi_slopes(12)[8:].tolist()  # 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
      [0.7071067690849304, 0.3535533845424652, 0.1767766922712326, 0.0883883461356163]

    Reference: Press, Smith, Lewis, "Train Short, Test Long: Attention with Linear
    Biases Enables Input Length Extrapolation", ICLR 2022.
    """
    return _slopes(check_positive_int("num_heads", num_heads))


def _slopes(num_heads: int) -> np.ndarray:
    """:func:`alibi_slopes` of a checked ``num_heads``."""
    power = 1 << (num_heads.bit_length() - 1)  # closest power of two <= num_heads
    exponents = 8.0 * np.arange(1, power + 1, dtype=np.float64) / power
    extra = 8.0 * np.arange(1, 2 * (num_heads - power), 2, dtype=np.float64)
    exponents = np.concatenate([exponents, extra / (2 * power)])
    return (2.0**-exponents).astype(np.float32)


def alibi_bias(
    q_positions: jax.Array, k_positions: jax.Array, num_heads: int
) -> jax.Array:
    """The ALiBi attention bias, ``bias[..., h, i, j] = -slope_h * |q_i - k_j|``.

    Add it to attention logits ``[..., N, L, S]`` before the softmax. Positions are
    explicit, so decode steps (``q_positions`` from the cache index) and packed
    sequences (positions restarting per segment; cross-segment pairs must be masked
    anyway) are right.

    Args:
      q_positions: integer ``[..., L]`` (e.g. ``[B, L]`` or ``[L]``).
      k_positions: integer ``[..., S]``; leading dimensions broadcast with
        ``q_positions``'s.
      num_heads: ``N``.

    Returns:
      float32 ``[..., N, L, S]``.

    Raises:
      TypeError: non-integer positions or non-int ``num_heads``.
      ValueError: ``num_heads <= 0``, positions of rank 0, or leading dimensions
        that do not broadcast.

    Examples:
      >>> bias = fp.alibi_bias(jnp.array([2]), jnp.arange(4), 2)  # [N=2, L=1, S=4]
      >>> bias[:, 0].tolist()
      [[-0.125, -0.0625, -0.0, -0.0625], [-0.0078125, -0.00390625, -0.0, -0.00390625]]

    Reference: Press et al., ICLR 2022.
    """
    num_heads = check_positive_int("num_heads", num_heads)
    return _alibi(*check_position_pairs(q_positions, k_positions), num_heads)


@functools.partial(jax.jit, static_argnames="num_heads")
def _alibi(q_positions: jax.Array, k_positions: jax.Array, num_heads: int) -> jax.Array:
    """:func:`alibi_bias` of checked arguments."""
    distance = jnp.abs(offsets(q_positions, k_positions))
    distance = distance.astype(jnp.float32)[..., None, :, :]
    slopes = jnp.asarray(_slopes(num_heads))
    slopes = slopes.reshape((1,) * (distance.ndim - 3) + (-1, 1, 1))
    return -slopes * distance


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class AlibiBias:
    """ALiBi with ``num_heads`` heads, as a :class:`flax_posenc.PositionBias`.

    ``AlibiBias(N)(q_positions, k_positions) == alibi_bias(q_positions, k_positions,
    N)``: ``-slope_h * |q_pos - k_pos|``, on the positions of one tile of blockwise
    or ring attention. Frozen, hashable and static under ``jit``.

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
        """float32 ``[..., N, L, S]``, see :func:`alibi_bias`."""
        return self.tile(*check_position_pairs(q_positions, k_positions))

    def tile(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
        """The call on checked integer positions (the kernels' tiles)."""
        return _alibi(q_positions, k_positions, self.num_heads)

    def kernel_form(self) -> KernelBias:
        """The bias for a Pallas kernel: each head's slope, ``-slope |q - k|``."""
        slopes = jnp.asarray(_slopes(self.num_heads), jnp.float32)[:, None]
        return KernelBias(slopes, jnp.zeros((1,), jnp.float32), _alibi_tile)


def _alibi_tile(
    head: Scalar, shared: Scalar, q_positions: jax.Array, k_positions: jax.Array
) -> jax.Array:
    """One head's float32 ``[l, s]`` tile (:class:`flax_posenc.KernelBias`)."""
    del shared
    return -head(0) * jnp.abs((k_positions - q_positions).astype(jnp.float32))
