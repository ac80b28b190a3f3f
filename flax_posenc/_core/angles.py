"""The one place angles are formed: float32 positions times float32 frequencies,
and the plain RoPE frequencies they start from."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def position_angles(positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
    """``angles[..., i] = float32(positions[...]) * inv_freq[i]``.

    An elementwise multiply in float32 (never a matmul, whose default precision is
    bf16 on TPU, and never in the activation dtype). Integer positions are exact in
    float32 up to 2**24.

    Args:
      positions: integer ``[...]``.
      inv_freq: float ``[F]``, or ``positions.shape + (F,)`` (per-token frequencies).

    Returns:
      float32 ``positions.shape + (F,)``.
    """
    positions = positions.astype(jnp.float32)[..., None]
    inv_freq = jnp.asarray(inv_freq, jnp.float32)
    inv_freq = inv_freq.reshape(
        (1,) * (positions.ndim - inv_freq.ndim) + inv_freq.shape
    )
    return positions * inv_freq


def default_inv_freq(theta: float, rotary_dim: int) -> np.ndarray:
    """``theta^(-2i/R)`` for ``i < R/2`` in float64 (round to float32 once, later)."""
    return theta ** -(np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
