"""Exact angles: ``p * inv_freq`` reduced mod 2 pi for any int32 ``p``, without x64.

A float32 angle ``float32(p) * float32(inv_freq)`` is off by up to ``|p| inv_freq
2^-23`` rad (two roundings); past ``2^24`` even ``p`` is not exact. Here the angle is
formed in fixed point, in turns (one turn is 2 pi), where reducing mod one turn is
the wraparound of uint32 arithmetic: exact, with no float error-free transformations
that FMA contraction could break, and the same on every backend (TPU included).

1. Host, in Python integers: each float64 inverse frequency ``f`` (the family's
   formula, not rounded to float32) becomes ``N = floor(frac(f / 2pi) * 2^64)``, the
   turns per position to 64 bits, stored as two uint32 words ``N = hi 2^32 + lo``
   (pi to 76 digits, ``floor(pi 2^192)``).
2. Graph, for ``u = p mod 2^32`` (uint32): ``T = u hi + mulhi(u, lo)`` (mod 2^32),
   the top word of ``u N / 2^64``; where ``p < 0``, ``u = p + 2^32`` adds ``2^32 N /
   2^64 = hi + lo / 2^32`` turns, so ``T -= lo``. ``T / 2^32`` is the fraction of a
   turn. ``mulhi`` (the high word of a 32 x 32-bit product) from 16-bit halves
   ``u = u1 2^16 + u0`` and ``lo = l1 2^16 + l0``: ``u1 l1 + (u1 l0 >> 16) + (u0 l1
   >> 16)``, at most 2 below the true high word (it drops ``u0 l0`` and two low
   halves). Four uint32 multiplies per (position, frequency).
3. ``T + 2^29`` splits into the quadrant ``q`` (its top two bits) and ``r`` (the
   other 30, less ``2^29``: int32 in ``[-2^29, 2^29)``, an eighth of a turn either
   side); ``x = float32(r) * float32(2 pi / 2^32)`` has ``|x| <= pi/4``, and
   :func:`flax_posenc._core.sincos.sin_cos_quadrant` takes sin and cos of ``x + q pi/2``
   (the quadrant swaps and negates, exactly).

Error, against ``p * f`` mod 2 pi (``f`` the float64 frequency, ``p`` any int32):
``N``'s truncation (``|p| 2^-64 <= 2^-33`` turns), ``mulhi`` and the floor (``< 3 *
2^-32`` turns): below ``2^-30`` turns, 6e-9 rad. float32 radians: ``float32(r)``, the
constant and the product round (``2^-24`` relative each), ``3 * 2^-24 * pi/4 <=
1.5e-7`` rad. sin and cos of ``|x| <= pi/4`` add 1-2 ulp (``<= 1.2e-7``). In all,
cos and sin are within ``3e-7`` of the truth at every int32 position
(``tests/test_exact_angles.py`` measures it against Python integers), where float32
angles are off by 6e-3 at ``p = 1e5``, 0.06 at 1e6 and O(1) from 1e7 on.
"""

from __future__ import annotations

import math
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core.sincos import sin_cos_quadrant
from flax_posenc._core.validation import is_traced

__all__ = ["ANGLE_PRECISIONS", "AnglePrecision", "exact_sin_cos", "turn_words"]

AnglePrecision = Literal["float32", "exact"]
"""How angles ``p * inv_freq`` are formed. ``"float32"``: a float32 product of float32
``p`` and ``inv_freq`` (transformers' rounding, off by about ``|p| inv_freq 2^-23``
rad: 6e-3 at ``p = 1e5``, meaningless past ``2^24``). ``"exact"``: the float64
frequency times the int32 position, reduced mod 2 pi in 32-bit fixed point; cos and
sin within 3e-7 at every int32 position, on every backend, without x64."""
ANGLE_PRECISIONS = ("float32", "exact")

# pi to 76 decimals; floor(pi * 2^192) in Python integers (an error below 2^-190).
_PI = "3.1415926535897932384626433832795028841971693993751058209749445923078164062862"
_PI_BITS = 192
_PI_FIXED = int(_PI.replace(".", "")) * 2**_PI_BITS // 10 ** (len(_PI) - 2)
_WORD = 1 << 32
_EIGHTH = 1 << 29  # an eighth of a turn, in units of 2^-32 turn
_LOW_30 = np.uint32((1 << 30) - 1)
_HALF_MASK = np.uint32(0xFFFF)
_RADIANS_PER_UNIT = np.float32(2 * math.pi / _WORD)
_INT32 = np.iinfo(np.int32)


def turn_words(inv_freq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``floor(frac(f / 2pi) * 2^64)`` of float64 ``inv_freq [...]``, as uint32 words.

    Exact in Python integers (``f`` read as the exact binary fraction it is).

    Returns:
      ``(hi, lo)``, uint32 numpy arrays of ``inv_freq``'s shape.
    """
    freq = np.asarray(inv_freq, np.float64)
    words = []
    for value in freq.reshape(-1).tolist():
        num, den = value.as_integer_ratio()
        turns = (num << (64 + _PI_BITS)) // (2 * den * _PI_FIXED)
        words.append(turns % (1 << 64))
    hi = np.array([w >> 32 for w in words], np.uint32).reshape(freq.shape)
    lo = np.array([w % _WORD for w in words], np.uint32).reshape(freq.shape)
    return hi, lo


def int32_positions(positions: jax.Array) -> jax.Array:
    """Positions as int32; concrete 64-bit ones (x64) must hold int32 values (checked
    where the caller is not traced yet: inside ``jit`` they are cast)."""
    if positions.dtype.itemsize > 4:
        if not is_traced(positions) and positions.size:
            low, high = int(positions.min()), int(positions.max())
            if low < _INT32.min or high > _INT32.max:
                raise ValueError(
                    "`positions` must be in the int32 range for "
                    f"angle_precision='exact', got values in [{low}, {high}]."
                )
        positions = positions.astype(jnp.int32)
    return positions


def exact_sin_cos(
    positions: jax.Array,
    inv_freq: np.ndarray,
    *,
    quarter_turns: np.ndarray | None = None,
) -> tuple[jax.Array, jax.Array]:
    """``(sin, cos)`` of ``p * inv_freq + quarter_turns * pi/2``, reduced exactly.

    Args:
      positions: integer ``[...]`` (int32 values), traced or concrete.
      inv_freq: float64 host ``[F]``: the unrounded frequencies.
      quarter_turns: int host ``[F]`` added exactly (1 turns sin into cos), or None.

    Returns:
      float32 ``positions.shape + (F,)`` each.
    """
    p = int32_positions(positions)[..., None]
    freq = np.asarray(inv_freq, np.float64)
    hi, lo = turn_words(freq)
    offset = np.full(freq.shape, _EIGHTH, np.uint32)
    if quarter_turns is not None:
        offset += (np.asarray(quarter_turns, np.uint32) % 4) << 30
    shape = (1,) * (p.ndim - 1) + freq.shape
    hi, lo, offset = (w.reshape(shape) for w in (hi, lo, offset))
    lo_1, lo_0 = lo >> 16, lo & _HALF_MASK
    u = jax.lax.bitcast_convert_type(p, jnp.uint32)
    u_1, u_0 = u >> 16, u & _HALF_MASK
    t = u * hi + u_1 * lo_1 + ((u_1 * lo_0) >> 16) + ((u_0 * lo_1) >> 16)
    t = t - jnp.where(p < 0, lo, np.uint32(0)) + offset
    quadrant = (t >> 30).astype(jnp.int32)
    r = (t & _LOW_30).astype(jnp.int32) - _EIGHTH
    return sin_cos_quadrant(r.astype(jnp.float32) * _RADIANS_PER_UNIT, quadrant)
