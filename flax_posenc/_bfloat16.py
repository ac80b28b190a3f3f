"""bfloat16 <-> float32 conversions that XLA:CPU vectorises.

On the CPU backend, XLA lowers ``convert`` between bfloat16 and float32 to code LLVM
does not vectorise well inside a large elementwise loop; the RoPE rotation of a
bfloat16 q spends much of its time there. Both conversions are integer operations on
the bits, which LLVM does vectorise:

* widening is exact: the bfloat16 bits are the top half of the float32 ones
  (``f32_bits = bf16_bits << 16``);
* narrowing rounds to nearest, ties to even, as IEEE and XLA do: add ``0x7FFF`` plus
  the lowest kept bit, keep the top half (carries round up through the exponent,
  to infinity past the largest bfloat16); NaN stays NaN (its quiet bit is set, sign
  kept), where the rounding add could otherwise turn a NaN with only low payload
  bits into infinity. Subnormals round like normal numbers (no flush to zero).

Every other backend, and every other dtype, uses ``astype``
(``jax.lax.platform_dependent`` picks the branch when the program is lowered).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["narrow", "widen"]


def _widen_cpu(x: jax.Array) -> jax.Array:
    bits = jax.lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32)
    return jax.lax.bitcast_convert_type(bits << 16, jnp.float32)


def _narrow_cpu(y: jax.Array) -> jax.Array:
    bits = jax.lax.bitcast_convert_type(y, jnp.uint32)
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> 16) & 1))) >> 16
    quiet_nan = (bits >> 16) | np.uint32(0x0040)
    out = jnp.where(jnp.isnan(y), quiet_nan, rounded).astype(jnp.uint16)
    return jax.lax.bitcast_convert_type(out, jnp.bfloat16)


@jax.custom_jvp
def _widen_bfloat16(x: jax.Array) -> jax.Array:
    return jax.lax.platform_dependent(
        x, cpu=_widen_cpu, default=lambda x: x.astype(jnp.float32)
    )


@jax.custom_jvp
def _narrow_to_bfloat16(y: jax.Array) -> jax.Array:
    return jax.lax.platform_dependent(
        y, cpu=_narrow_cpu, default=lambda y: y.astype(jnp.bfloat16)
    )


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
    """``x.astype(float32)``, by bit shifts for bfloat16 on CPU (exact)."""
    if x.dtype != jnp.bfloat16:
        return x.astype(jnp.float32)
    return _widen_bfloat16(x)


def narrow(y: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """float32 ``y.astype(dtype)``, rounded by integer ops for bfloat16 on CPU."""
    if jnp.dtype(dtype) != jnp.bfloat16:
        return y.astype(dtype)
    return _narrow_to_bfloat16(y)
