"""float32 casts of the rotation: the reference ``astype``, and the switch to the CPU
form for bfloat16 (bit operations, the same bits: :mod:`flax_posenc._cpu`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from flax_posenc import _cpu

__all__ = ["narrow", "widen"]


def _widen(x: jax.Array) -> jax.Array:
    return x.astype(jnp.float32)


def _narrow(y: jax.Array) -> jax.Array:
    return y.astype(jnp.bfloat16)


@jax.custom_jvp
def _widen_bfloat16(x: jax.Array) -> jax.Array:
    return _cpu.on_cpu(_cpu.widen_bfloat16, _widen, x)


@jax.custom_jvp
def _narrow_to_bfloat16(y: jax.Array) -> jax.Array:
    return _cpu.on_cpu(_cpu.narrow_bfloat16, _narrow, y)


# The bit operations have no derivative; the conversions' own is a cast of the
# tangent (linear, so grad transposes it).
_widen_bfloat16.defjvp(
    lambda primals, tangents: (
        _widen_bfloat16(primals[0]),
        tangents[0].astype(jnp.float32),
    )
)
_narrow_to_bfloat16.defjvp(
    lambda primals, tangents: (
        _narrow_to_bfloat16(primals[0]),
        tangents[0].astype(jnp.bfloat16),
    )
)


def widen(x: jax.Array) -> jax.Array:
    """``x.astype(float32)`` (for bfloat16 on CPU: by bit shifts, exact)."""
    if x.dtype != jnp.bfloat16:
        return x.astype(jnp.float32)
    return _widen_bfloat16(x)


def narrow(y: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """float32 ``y.astype(dtype)`` (for bfloat16 on CPU: rounded by integer ops)."""
    if jnp.dtype(dtype) != jnp.bfloat16:
        return y.astype(dtype)
    return _narrow_to_bfloat16(y)
