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
   mantissa bits into ``k_hi`` and ``k_lo = k - k_hi`` (12 bits each), so ``k_hi *
   C1`` and ``k_lo * C1`` are exact and the two subtractions that cancel most of
   ``x`` are exact (Sterbenz) whether or not LLVM contracts them into FMAs. What is
   left is below ``|x| * 2^-8``, so its roundings stay far below ``|x| * 2^-24``.
2. Below ``|x| = 2^21``, ``|r| <= pi/4 + 2^-20``. Past it ``x * 2/pi`` can round to
   a neighbour of ``k``, and past ``2^40`` ``r`` is not reduced at all; ``r`` is
   clamped to ``[-pi/2, pi/2]``, where the polynomials stay bounded and accurate to
   far better than the ``|x| * 2^-24`` the result is allowed there.
3. Cephes' minimax polynomials for ``sin`` and ``cos`` on ``[-pi/4, pi/4]``; the
   quadrant ``k mod 4`` (int32; XLA's convert saturates past 2^31, where any value
   in [-1, 1] is within the bound) picks one of them and flips its sign bit.
   :func:`sin_quarter_turns_cpu`, which needs one of sin and cos per element,
   reduces by ``pi`` instead and evaluates one polynomial on ``[-pi/2, pi/2]``.

Error against float64 truth of the same float32 angle: within 2 ulp of the result
plus ``|x| * 2^-24`` for every finite float32 angle (``tests/test_sincos.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["sin_cos", "sin_cos_quadrant", "sin_quarter_turns_cpu"]

_TWO_OVER_PI = np.float32(0.6366197466850281)
_ONE_OVER_PI = np.float32(0.31830987334251404)
# pi/2 = _C1 + _C2 to 2^-39 (relative); _C1 = 1.5703125 has 8 significant bits.
_C1 = np.float32(1.5703125)
_C2 = np.float32(0.0004838267923332751)
_LOW_MANTISSA = np.uint32(0xFFFFF000)  # keeps the top 12 significant bits
_R_MAX = np.float32(1.5707964)  # pi/2 rounded up
_I1 = np.int32(1)  # int32 under x64 too
# Cephes sinf / cosf on [-pi/4, pi/4].
_S1, _S2, _S3 = (
    np.float32(v) for v in (-1.6666654611e-1, 8.3321608736e-3, -1.9515295891e-4)
)
_K1, _K2, _K3 = (
    np.float32(v)
    for v in (4.166664568298827e-2, -1.388731625493765e-3, 2.443315711809948e-5)
)
# sin r = r + r z (H1 + H2 z + H3 z^2 + H4 z^3), z = r^2, on [-pi/2, pi/2]: fitted to
# the relative error (6e-9; minimax by reweighted least squares), rounded to float32.
_H1, _H2, _H3, _H4 = (
    np.float32(v)
    for v in (
        -1.6666659712791443e-1,
        8.333065547049046e-3,
        -1.980952511075884e-4,
        2.605597046567709e-6,
    )
)


def _minus_quarter_turns(x: jax.Array, m: jax.Array) -> jax.Array:
    """``x - m pi/2`` for an integer-valued float32 ``m`` within 1 of ``x * 2/pi``.

    Cody-Waite, step 1 of the module docstring, with ``m`` for ``k``: the products
    ``m_hi * C1`` and ``m_lo * C1`` are exact, and so are the subtractions where
    they cancel most of ``x`` (``|x| >= pi/4``). Where they do not (a small ``x``
    reduced around ``pi/2``), they round below ``2^-24`` absolute.
    """
    m_hi = jax.lax.bitcast_convert_type(
        jax.lax.bitcast_convert_type(m, jnp.uint32) & _LOW_MANTISSA, jnp.float32
    )
    m_lo = m - m_hi
    r = (x - m_hi * _C1) - m_lo * _C1
    return r - m * _C2  # m * (pi/2 - _C1 - _C2) < |x| * 2^-37: left out


def _reduce(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(r, q)``: ``x = r + (q + 4m) pi/2``, ``|r| <~ pi/4``, ``q`` int32 (mod 4)."""
    k = jnp.round(x * _TWO_OVER_PI)
    # |r| <= pi/4 (+ 2^-20) below |x| = 2^21; past it x * 2/pi can round to a
    # neighbour of k. The clamp bounds r where it is not reduced (|x| >~ 2^21); there
    # the result stays within |x| * 2^-24 of the truth (tests/test_sincos.py).
    r = jnp.clip(_minus_quarter_turns(x, k), -_R_MAX, _R_MAX)
    # Past 2^31 the convert saturates; any quadrant is then within the bound.
    return r, k.astype(jnp.int32)


def _polynomials(r: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sin r, cos r)`` for ``|r| <~ pi/4``."""
    z = r * r
    s = r + r * z * (_S1 + z * (_S2 + z * _S3))
    c = (1.0 - 0.5 * z) + z * z * (_K1 + z * (_K2 + z * _K3))
    return s, c


def _negate_if(value: jax.Array, flag: jax.Array, bit: int) -> jax.Array:
    """``-value`` where bit ``bit`` of int32 ``flag`` is set: an xor of the sign bit."""
    bits = jax.lax.bitcast_convert_type(value, jnp.int32)
    sign = jax.lax.shift_left(flag & np.int32(1 << bit), np.int32(31 - bit))
    return jax.lax.bitcast_convert_type(bits ^ sign, jnp.float32)


def _quadrant(s: jax.Array, c: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sin, cos)`` of ``r + q pi/2`` from ``s = sin r``, ``c = cos r``, int32 ``q``."""
    odd = (q & _I1) == _I1
    sin = _negate_if(jnp.where(odd, c, s), q, bit=1)
    cos = _negate_if(jnp.where(odd, s, c), q + _I1, bit=1)
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
    """``sin(x + turns * pi/2)`` on CPU, for int32 ``turns``: one polynomial.

    0 turns is ``sin x``, 1 is ``cos x``. ``turns`` broadcasts against ``x`` (e.g. a
    feature-parity row). Only for a ``platform_dependent`` CPU branch: elsewhere
    ``where(odd, cos, sin)`` would evaluate both.

    ``sin(x + t pi/2) = (-1)^n sin r`` with ``n = round(x/pi + t/2)`` and ``r = x -
    (2n - t) pi/2``. The quarter turns move the reduction point, not the angle. Past
    ``|x| = 2^23 pi``, ``2n - t`` can round to even in float32: an error of a quarter
    turn, at most ``sqrt(2)``, where the bound allows ``|x| 2^-24 >= 1.57``.

    One odd polynomial on ``[-pi/2, pi/2]`` replaces the two of :func:`sin_cos` and
    the select between them: about a fifth fewer operations in the optimized HLO,
    1.27x faster for a ``[4, 2048] x 1024`` encoding. Where ``x/pi`` rounds to a
    neighbour of ``n``, ``r`` passes ``pi/2`` by up to about ``|x| 2^-23`` and is
    clamped there. The error this leaves stays within the bound: a test checks every
    float32 of either sign in ``[2^22, 2^26)``, where it comes closest (0.95 of it;
    ``tests/test_sincos.py``).
    """
    x = jnp.asarray(x, jnp.float32)
    t = jnp.asarray(turns).astype(jnp.float32)
    n = jnp.round(x * _ONE_OVER_PI + 0.5 * t)
    r = jnp.clip(_minus_quarter_turns(x, 2.0 * n - t), -_R_MAX, _R_MAX)
    z = r * r
    s = r + (r * z) * (_H1 + z * (_H2 + z * (_H3 + z * _H4)))
    # (-1)^n (n saturates past 2^31, where any sign is within the bound).
    return _negate_if(s, n.astype(jnp.int32), bit=0)
