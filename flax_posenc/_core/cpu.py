"""The CPU forms of four ops, and the one switch that picks them.

XLA:CPU lowers a few ops to code much slower than the pass over the data around them.
Each such op has one plain reference form, in the module that uses it, which every
other backend runs and the tests use as their oracle; this module holds the CPU forms,
each picked by one :func:`on_cpu` switch:

* sin and cos of float32 angles, :func:`sin_cos` and :func:`sin_cos_quadrant`: a
  range reduction and multiply/add polynomials. Reference: ``jnp.sin``/``jnp.cos``
  (switched in ``_sincos.py``).
* the RoPE rotation, :func:`rotate`: partner reads at ``i +- d`` (the pad-shift
  form) or a pairs view, with bfloat16 widened and rounded by bit operations
  (:func:`widen_bfloat16`, :func:`narrow_bfloat16`: the bits of ``astype``).
  Reference: the pairs sliced, rotated, concatenated, cast with ``astype``
  (``_rope._reference``, switched in ``_rope.rotate``).
* the sinusoidal encoding, :func:`sinusoidal_rows`: one elementwise pass of
  :func:`sin_quarter_turns`. Reference: sin and cos stacked or concatenated, an odd
  ``D`` padded (``sinusoidal._encoding``).
* T5 buckets, :func:`t5_buckets`: compares against the thresholds. Reference: a
  lookup in the host table (``relative.relative_position_bucket``).

Every CPU form gives the reference's value exactly (casts, buckets) or within the
stated bound (sin/cos). ``jax.lax.platform_dependent`` picks the branch when the
program is lowered, so accelerators never compile a CPU form
(``tests/test_accelerator_export.py``). The tests compute both on CPU: a program
lowered for CUDA holds only the reference forms, in plain StableHLO that XLA:CPU
compiles too (``tests/branches.py``). Timings: ``benchmarks/README.md``.

sin and cos
-----------
XLA:CPU lowers ``jnp.sin``/``jnp.cos`` to one scalar libm call per element, so a
``[B, L, R/2]`` table of them costs as much as a pass over q. Here they are evaluated
with elementwise multiply/add (which LLVM vectorises) after a range reduction. For a
float32 angle ``x``:

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
   :func:`sin_quarter_turns`, which needs one of sin and cos per element, reduces
   by ``pi`` instead and evaluates one polynomial on ``[-pi/2, pi/2]``.

Error against float64 truth of the same float32 angle: within 2 ulp of the result
plus ``|x| * 2^-24`` for every finite float32 angle (``tests/test_sincos.py``). The
forms are ``jax.jit``-wrapped: one compiled program in eager mode too, so LLVM's FMA
contraction (and the last bit of the result) is the same as under an outer jit.

bfloat16 casts
--------------
XLA:CPU lowers ``convert`` between bfloat16 and float32 to code LLVM does not
vectorise well inside a large elementwise loop. Both conversions are integer
operations on the bits here, which LLVM does vectorise:

* widening is exact: the bfloat16 bits are the top half of the float32 ones
  (``f32_bits = bf16_bits << 16``);
* narrowing rounds to nearest, ties to even, as IEEE and XLA do: add ``0x7FFF`` plus
  the lowest kept bit, keep the top half (carries round up through the exponent,
  to infinity past the largest bfloat16); NaN stays NaN (its quiet bit is set, sign
  kept), where the rounding add could otherwise turn a NaN with only low payload
  bits into infinity. Subnormals round like normal numbers (no flush to zero).

Both give the bits of ``astype`` (``tests/test_bfloat16.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core.angles import position_angles

__all__ = [
    "narrow_bfloat16",
    "on_cpu",
    "quadrant",
    "rotate",
    "sin_cos",
    "sin_cos_quadrant",
    "sin_quarter_turns",
    "sinusoidal_rows",
    "t5_buckets",
    "widen_bfloat16",
]


def on_cpu(
    cpu_fn: Callable[..., Any], default_fn: Callable[..., Any], *args: Any
) -> Any:
    """``cpu_fn(*args)`` in a program lowered for CPU, ``default_fn(*args)`` elsewhere.

    The one backend switch of the package: ``jax.lax.platform_dependent``, which
    picks the branch when the program is lowered, so the other one is never
    compiled. A program lowered for an accelerator holds ``default_fn`` alone.
    """
    return jax.lax.platform_dependent(*args, cpu=cpu_fn, default=default_fn)


# sin and cos ------------------------------------------------------------------------

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


def quadrant(s: jax.Array, c: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sin, cos)`` of ``r + q pi/2`` from ``s = sin r``, ``c = cos r``, int32 ``q``.

    Exact (a select and sign flips); both forms of :func:`sin_cos_quadrant` use it.
    """
    odd = (q & _I1) == _I1
    sin = _negate_if(jnp.where(odd, c, s), q, bit=1)
    cos = _negate_if(jnp.where(odd, s, c), q + _I1, bit=1)
    return sin, cos


@jax.jit
def sin_cos(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sin x, cos x)`` of float32 angles ``x`` (module docstring, steps 1-3)."""
    r, q = _reduce(x)
    sin, cos = quadrant(*_polynomials(r), q)
    return jnp.where(x == 0.0, x, sin), cos  # sin(-0) = -0


@jax.jit
def sin_cos_quadrant(r: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sin, cos)`` of ``r + q pi/2`` for float32 ``|r| <= pi/4``: step 3 only."""
    return quadrant(*_polynomials(r), q)


@jax.jit
def sin_quarter_turns(x: jax.Array, turns: jax.Array) -> jax.Array:
    """``sin(x + turns * pi/2)`` on CPU, for int32 ``turns``: one polynomial.

    0 turns is ``sin x``, 1 is ``cos x``. ``turns`` broadcasts against ``x`` (e.g. a
    feature-parity row). The CPU form of the sinusoidal encoding, whose reference
    evaluates sin and cos of each angle and lays them out.

    ``sin(x + t pi/2) = (-1)^n sin r`` with ``n = round(x/pi + t/2)`` and ``r = x -
    (2n - t) pi/2``. The quarter turns move the reduction point, not the angle. Past
    ``|x| = 2^23 pi``, ``2n - t`` can round to even in float32: an error of a quarter
    turn, at most ``sqrt(2)``, where the bound allows ``|x| 2^-24 >= 1.57``.

    One odd polynomial on ``[-pi/2, pi/2]`` replaces the two of :func:`sin_cos` and
    the select between them (timings: ``benchmarks/README.md``). Where ``x/pi`` rounds to a
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


# bfloat16 casts ---------------------------------------------------------------------


@jax.custom_jvp
def widen_bfloat16(x: jax.Array) -> jax.Array:
    """bfloat16 ``x.astype(float32)`` by a shift of the bits (exact)."""
    bits = jax.lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32)
    return jax.lax.bitcast_convert_type(bits << 16, jnp.float32)


@jax.custom_jvp
def narrow_bfloat16(y: jax.Array) -> jax.Array:
    """float32 ``y.astype(bfloat16)`` by integer rounding of the bits."""
    bits = jax.lax.bitcast_convert_type(y, jnp.uint32)
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> 16) & 1))) >> 16
    quiet_nan = (bits >> 16) | np.uint32(0x0040)
    out = jnp.where(jnp.isnan(y), quiet_nan, rounded).astype(jnp.uint16)
    return jax.lax.bitcast_convert_type(out, jnp.bfloat16)


# The bit operations have no derivative; the conversions' own is a cast of the
# tangent (linear, so grad transposes it).
widen_bfloat16.defjvp(
    lambda primals, tangents: (
        widen_bfloat16(primals[0]),
        tangents[0].astype(jnp.float32),
    )
)
narrow_bfloat16.defjvp(
    lambda primals, tangents: (
        narrow_bfloat16(primals[0]),
        tangents[0].astype(jnp.bfloat16),
    )
)


def _widen(x: jax.Array) -> jax.Array:
    return widen_bfloat16(x) if x.dtype == jnp.bfloat16 else x.astype(jnp.float32)


def _narrow(y: jax.Array, dtype: Any) -> jax.Array:
    if jnp.dtype(dtype) == jnp.bfloat16:
        return narrow_bfloat16(y)
    return y.astype(dtype)


# The RoPE rotation ------------------------------------------------------------------


def rotate(x: jax.Array, cos: jax.Array, sin: jax.Array, layout: str) -> jax.Array:
    """The rotation of ``_rope.rotate`` in the forms XLA:CPU vectorises: the pairs
    view of :func:`_rotate_pairs` for an interleaved even head, the partner reads at
    ``i +- d`` of :func:`_rotate_shifted` otherwise."""
    if layout == "interleaved" and x.shape[-1] % 2 == 0:
        return _rotate_pairs(x, cos, sin)
    return _rotate_shifted(x, cos, sin, layout)


def _table(t: jax.Array, x_ndim: int, tail: tuple[int, ...]) -> jax.Array:
    """A float32 cos/sin table ``[..., L, *tail]`` as ``[1.., L, 1 (N), *tail]``."""
    lead = (1,) * (x_ndim - 2 - (t.ndim - len(tail)))
    return t.reshape(lead + t.shape[: t.ndim - len(tail)] + (1,) + tail)


def _rotate_shifted(
    x: jax.Array, cos: jax.Array, sin: jax.Array, layout: str
) -> jax.Array:
    """``half`` (and ``interleaved`` with an odd H): partners read at ``i +- d``.

    One elementwise pass over the flat feature axis in which every read is at feature
    ``i`` or ``i +- d`` (``d = R/2``, or 1): XLA:CPU collapses a ``[..., 2, R/2]`` view
    back into the feature axis with ``i & (R/2 - 1)`` indices, which LLVM does not
    vectorise, while reads at ``i +- d`` are plain (masked) vector loads.

    * ``P`` (width R) holds ``(cos_j, sin_j)`` where x holds pair ``j``; ``P[i - d]``,
      ``P[i]`` and ``P[i + d]`` are zero pads of its slices, read in the loop like the
      partners. It is built by a concatenate (the stack), which XLA keeps out of the
      loop over x: cos/sin are materialised once per position, not recomputed for
      every head and feature (a table pre-padded to ``H + 2d`` is twice the bytes).
    * ``x_up[i] = x[i + d]`` (for ``i < R - d``) and ``x_down[i] = x[i - d]`` (for
      ``d <= i < R``) are zero pads of slices of the rotary features only: bounds at
      the rotary edge keep the partial-rotary loop vectorised (bounds at ``H`` made
      the bfloat16 loop scalar).
    * ``out[i] = x[i] P[i] - x[i + d] P[i + d]`` for the first of a pair, ``x[i]
      P[i - d] + x[i - d] P[i]`` for the second (``a cos - b sin``, ``b cos + a sin``);
      features past ``R`` pass through. float32, rounded once; a bfloat16 x is
      widened and rounded by bit operations (:func:`widen_bfloat16`,
      the same bits as ``astype``).

    Timings of these choices on XLA:CPU: ``benchmarks/README.md``.
    """
    half = cos.shape[-1]
    rotary_dim, head_dim = 2 * half, x.shape[-1]
    shift, pair_axis = (half, -2) if layout == "half" else (1, -1)
    index = jax.lax.broadcasted_iota(
        jnp.int32, (1,) * (x.ndim - 1) + (head_dim,), x.ndim - 1
    )
    first = index < half if layout == "half" else index % 2 == 0
    pairs = jnp.stack([cos.astype(jnp.float32), sin.astype(jnp.float32)], pair_axis)
    pairs = _table(pairs.reshape(cos.shape[:-1] + (rotary_dim,)), x.ndim, (rotary_dim,))
    pairs_up = _pad_features(pairs[..., shift:], 0, head_dim)
    pairs_down = _pad_features(pairs[..., : rotary_dim - shift], shift, head_dim)
    pairs = _pad_features(pairs, 0, head_dim)
    xf = _widen(x)
    x_up = _pad_features(xf[..., shift:rotary_dim], 0, head_dim)
    x_down = _pad_features(xf[..., : rotary_dim - shift], shift, head_dim)
    rotated = jnp.where(
        first, xf * pairs - x_up * pairs_up, xf * pairs_down + x_down * pairs
    )
    if rotary_dim < head_dim:
        rotated = jnp.where(index < rotary_dim, rotated, xf)
    return _narrow(rotated, x.dtype)


def _rotate_pairs(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """``interleaved`` with an even H: pairs ``(2j, 2j + 1)`` in a ``[..., H/2, 2]`` view.

    ``out[2j] = x[2j] c_j - x[2j + 1] s_j`` and ``out[2j + 1] = x[2j + 1] c_j + x[2j]
    s_j`` for ``j < R/2``; pairs past ``R/2`` pass through. float32, rounded once. The
    table is a stack (a concatenate), materialised once per position as in
    :func:`_rotate_shifted`. The partner reads differ by width, as measured on
    XLA:CPU (``benchmarks/README.md``): the pad form of :func:`_rotate_shifted`
    turns ``x[i +- 1]`` into gathers with peeled scalar edges.

    * 16-bit x: ``even = x[2j]`` and ``odd = x[2j + 1]`` (strided slices of the view),
      and the two results stacked back: bfloat16 loads stay vector loads plus shuffles
      (the ``rev`` form below is slower in bfloat16).
    * wider x: ``swapped[j, b] = x[2j + 1 - b]`` (a ``rev`` of the pair axis) and
      ``out = x * (c_j, c_j) + swapped * (-s_j, s_j)``: one read of x per output.
    """
    half, npairs = cos.shape[-1], x.shape[-1] // 2
    view = x.reshape(x.shape[:-1] + (npairs, 2))
    pair = jax.lax.broadcasted_iota(
        jnp.int32, (1,) * (view.ndim - 2) + (npairs, 1), view.ndim - 2
    )
    c, s = (_pad_features(t.astype(jnp.float32), 0, npairs) for t in (cos, sin))
    if jnp.dtype(x.dtype).itemsize == 2:
        table = _table(jnp.stack([c, s], -2), x.ndim, (2, npairs))
        c, s = table[..., 0, :], table[..., 1, :]  # [..., L, 1, H/2]
        even, odd = (view[..., b].astype(jnp.float32) for b in (0, 1))
        rotated = jnp.stack([even * c - odd * s, odd * c + even * s], -1)
    else:
        both = jnp.stack([jnp.stack([c, c], -1), jnp.stack([-s, s], -1)], -3)
        table = _table(both, x.ndim, (2, npairs, 2))
        c, s = table[..., 0, :, :], table[..., 1, :, :]  # [..., L, 1, H/2, 2]
        xf = view.astype(jnp.float32)
        swapped = jax.lax.rev(xf, (xf.ndim - 1,))
        rotated = xf * c + swapped * s
    if half < npairs:
        rotated = jnp.where(pair < half, rotated, view.astype(jnp.float32))
    return rotated.astype(x.dtype).reshape(x.shape)


def _pad_features(t: jax.Array, low: int, size: int) -> jax.Array:
    """Zero-pads the last axis of ``t`` to ``size``, ``low`` zeros in front."""
    pad = [(0, 0, 0)] * (t.ndim - 1) + [(low, size - low - t.shape[-1], 0)]
    return jax.lax.pad(t, jnp.zeros((), t.dtype), pad)


# The sinusoidal encoding ------------------------------------------------------------


def sinusoidal_rows(
    positions: jax.Array, freq: np.ndarray, turns: np.ndarray
) -> jax.Array:
    """float32 ``[..., D]``: feature ``i`` is ``sin(p * freq[i] + turns[i] * pi/2)``.

    One elementwise pass over the output for the static rows ``freq, turns [D]`` of
    the layout: the same float32 angles as the reference, and no stack or
    concatenate, which XLA:CPU would not fuse into the write.
    """
    turns = turns.reshape((1,) * positions.ndim + turns.shape)
    return sin_quarter_turns(
        position_angles(positions, jnp.asarray(freq)), jnp.asarray(turns)
    )


# T5 buckets -------------------------------------------------------------------------


def t5_buckets(
    distance: jax.Array, max_exact: int, thresholds: list[np.int32]
) -> jax.Array:
    """``min(d, max_exact) + #{t in thresholds : t <= d}`` for int32 ``distance``.

    Elementwise compares that vectorise, where the reference's lookup is a dependent
    gather per element. Exact: the thresholds are read off the same host table.
    """
    bucket = jnp.minimum(distance, jnp.int32(max_exact))
    for first_distance in thresholds:
        bucket = bucket + (distance >= first_distance).astype(jnp.int32)
    return bucket
