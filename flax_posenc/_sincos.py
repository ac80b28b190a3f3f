"""float32 sin and cos of angles, vectorised on XLA:CPU.

XLA:CPU lowers ``jnp.sin``/``jnp.cos`` to one scalar libm call per element, so a
``[B, L, R/2]`` table of them costs as much as a pass over q. On the CPU backend this
module evaluates them with elementwise multiply/add (which LLVM vectorises) after a
range reduction; every other backend keeps XLA's own ``sin``/``cos``
(``jax.lax.platform_dependent`` picks the branch when the program is lowered, so the
other branch is never compiled).

The CPU path, for a float32 angle ``x``:

1. ``k = round(x * 2/pi)`` and ``r = x - k * pi/2`` (Cody-Waite), ``pi/2 = C1 + C2``
   to 2^-39 with ``C1`` of 8 significant bits. ``k`` is split by masking its low 12
   mantissa bits into ``k_hi`` and ``k_lo`` (12 bits each), so ``k_hi * C1`` and
   ``k_lo * C1`` are exact and the two subtractions that cancel most of ``x`` are
   exact (Sterbenz) whether or not LLVM contracts them into FMAs. What is left is
   below ``|x| * 2^-8``, so its roundings stay far below ``|x| * 2^-24``.
2. Below ``|x| = 2^21``, ``|r| <= pi/4 + 2^-20``. Past it ``x * 2/pi`` can round to
   a neighbour of ``k``, and past ``2^40`` ``r`` is not reduced at all; ``r`` is
   clamped to ``[-pi/2, pi/2]``, where the polynomials stay bounded and accurate to
   far better than the ``|x| * 2^-24`` the result is allowed there.
3. Cephes' minimax polynomials for ``sin`` and ``cos`` on ``[-pi/4, pi/4]``; the
   quadrant ``k mod 4`` (int32; XLA's convert saturates past 2^31, where any value
   in [-1, 1] is within the bound) picks one of them and flips its sign bit.

Error against float64 truth of the same float32 angle: within 2 ulp of the result
plus ``|x| * 2^-24`` for every finite float32 angle (``tests/test_sincos.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["sin_cos", "sin_cos_quadrant", "sin_quarter_turns_cpu"]

_TWO_OVER_PI = np.float32(0.6366197466850281)
# pi/2 = _C1 + _C2 to 2^-39 (relative); _C1 = 1.5703125 has 8 significant bits.
_C1 = np.float32(1.5703125)
_C2 = np.float32(0.0004838267923332751)
_LOW_MANTISSA = np.uint32(0xFFFFF000)  # keeps the top 12 significant bits
_R_MAX = np.float32(1.5707964)
_I1, _I2, _I30 = np.int32(1), np.int32(2), np.int32(30)  # int32 under x64 too
# Cephes sinf / cosf on [-pi/4, pi/4].
_S1, _S2, _S3 = (
    np.float32(v) for v in (-1.6666654611e-1, 8.3321608736e-3, -1.9515295891e-4)
)
_K1, _K2, _K3 = (
    np.float32(v)
    for v in (4.166664568298827e-2, -1.388731625493765e-3, 2.443315711809948e-5)
)


def _reduce(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(r, q)``: ``x = r + (q + 4m) pi/2``, ``|r| <~ pi/4``, ``q`` int32 (mod 4)."""
    k = jnp.round(x * _TWO_OVER_PI)
    k_hi = jax.lax.bitcast_convert_type(
        jax.lax.bitcast_convert_type(k, jnp.uint32) & _LOW_MANTISSA, jnp.float32
    )
    k_lo = k - k_hi
    r = (x - k_hi * _C1) - k_lo * _C1  # both exact
    r = r - k * _C2  # k * (pi/2 - _C1 - _C2) < |x| * 2^-37: left out
    # |r| <= pi/4 (+ 2^-20) below |x| = 2^21; past it x * 2/pi can round to a
    # neighbour of k. The clamp bounds r where it is not reduced (|x| >~ 2^21); there
    # the result stays within |x| * 2^-24 of the truth (tests/test_sincos.py).
    r = jnp.clip(r, -_R_MAX, _R_MAX)
    # Past 2^31 the convert saturates; any quadrant is then within the bound.
    return r, k.astype(jnp.int32)


def _polynomials(r: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sin r, cos r)`` for ``|r| <~ pi/4``."""
    z = r * r
    s = r + r * z * (_S1 + z * (_S2 + z * _S3))
    c = (1.0 - 0.5 * z) + z * z * (_K1 + z * (_K2 + z * _K3))
    return s, c


def _negate_if(value: jax.Array, flag: jax.Array) -> jax.Array:
    """``-value`` where bit 1 of int32 ``flag`` is set: an xor of the sign bit."""
    bits = jax.lax.bitcast_convert_type(value, jnp.int32)
    sign = jax.lax.shift_left(flag & _I2, _I30)
    return jax.lax.bitcast_convert_type(bits ^ sign, jnp.float32)


def _quadrant(s: jax.Array, c: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sin, cos)`` of ``r + q pi/2`` from ``s = sin r``, ``c = cos r``, int32 ``q``."""
    odd = (q & _I1) == _I1
    sin = _negate_if(jnp.where(odd, c, s), q)
    cos = _negate_if(jnp.where(odd, s, c), q + _I1)
    return sin, cos


# jit: one compiled program in eager mode too, so LLVM's FMA contraction (and the
# last bit of the result) is the same as under an outer jit.
@jax.jit
def _sin_cos_cpu(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    r, q = _reduce(x)
    sin, cos = _quadrant(*_polynomials(r), q)
    return jnp.where(x == 0.0, x, sin), cos  # sin(-0) = -0


def sin_cos(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sin x, cos x)`` of float32 angles ``x``, vectorised on CPU."""
    x = jnp.asarray(x, jnp.float32)
    return jax.lax.platform_dependent(
        x, cpu=_sin_cos_cpu, default=lambda x: (jnp.sin(x), jnp.cos(x))
    )


@jax.jit
def _sin_cos_quadrant_cpu(r: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
    return _quadrant(*_polynomials(r), q)


def sin_cos_quadrant(r: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sin, cos)`` of ``r + q pi/2`` for float32 ``|r| <= pi/4`` and int32 ``q``.

    For angles already reduced (the exact angles of :mod:`flax_posenc._exact_angles`):
    no range reduction, the quadrant ``q mod 4`` only swaps and negates (exact). CPU:
    the polynomials; elsewhere XLA's ``sin``/``cos`` of ``r``.
    """
    return jax.lax.platform_dependent(
        r,
        q,
        cpu=_sin_cos_quadrant_cpu,
        default=lambda r, q: _quadrant(jnp.sin(r), jnp.cos(r), q),
    )


@jax.jit
def sin_quarter_turns_cpu(x: jax.Array, turns: jax.Array) -> jax.Array:
    """``sin(x + turns * pi/2)`` on CPU, for int32 ``turns``.

    0 turns is ``sin x``, 1 is ``cos x``. ``turns`` broadcasts against ``x`` (e.g. a
    feature-parity row). The quarter turns move the quadrant, never the angle, so
    they are exact. Only for a ``platform_dependent`` CPU branch: elsewhere
    ``where(odd, cos, sin)`` would evaluate both.
    """
    r, q = _reduce(jnp.asarray(x, jnp.float32))
    s, c = _polynomials(r)
    q = q + turns
    return _negate_if(jnp.where((q & _I1) == _I1, c, s), q)
