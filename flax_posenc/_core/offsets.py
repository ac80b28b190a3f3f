"""The unchecked pairwise offsets every relative bias starts from (compiled once per
shape, so an eager caller runs one program, not five)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


@jax.jit
def offsets(q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    """int32 ``[..., L, S]``: ``k_positions[..., j] - q_positions[..., i]``, for
    checked integer ``[..., L]`` and ``[..., S]`` whose leading axes broadcast (see
    :func:`flax_posenc.relative_positions`)."""
    batch = jnp.broadcast_shapes(q_positions.shape[:-1], k_positions.shape[:-1])
    q = jnp.broadcast_to(q_positions, batch + q_positions.shape[-1:])
    k = jnp.broadcast_to(k_positions, batch + k_positions.shape[-1:])
    return k.astype(jnp.int32)[..., None, :] - q.astype(jnp.int32)[..., :, None]
