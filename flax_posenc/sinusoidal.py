"""Sinusoidal absolute position encoding (Vaswani et al., 2017).

Two frequency spacings and two feature layouts cover the tables found in the field:

* ``spacing="paper"``: ``inv_freq[i] = base^(-2i / D)`` as in the paper.
* ``spacing="tensor2tensor"``: ``inv_freq[i] = base^(-i / (D/2 - 1))``, the log-spaced
  timescales of tensor2tensor and of Flax's lm1b/wmt examples (the last timescale is
  exactly ``base``).
* ``layout="interleaved"``: ``PE[p, 2i] = sin(p * inv_freq[i])``,
  ``PE[p, 2i+1] = cos(p * inv_freq[i])`` (the paper).
* ``layout="half"``: ``[sin(p * inv_freq) | cos(p * inv_freq)]`` (tensor2tensor, Flax
  examples): feature ``i`` pairs with ``i + D/2``, the pairing RoPE's ``"half"``
  layout names. ``"concat"`` is its deprecated spelling.

Odd ``D``: the ``D // 2`` sin/cos pairs fill the first ``D - 1`` features and the last
feature is zero, as tensor2tensor and Flax's examples do. Exponents use the given ``D``.

Precision: angles are float32 products ``float32(p) * inv_freq[i]``. The product is
rounded to float32 and ``inv_freq`` itself carries a float32 rounding, so each feature
is within ``p * inv_freq[i] * 2^-23 + 2e-7`` of the float64 truth: at most ``1.2e-2``
at ``p = 1e5`` (measured: ``6.7e-3`` for ``D = 512``), and far less for the slow
frequencies. ``tests/test_sinusoidal.py`` pins this bound. ``angle_precision="exact"``
reduces the float64 angle mod 2 pi exactly instead: within 3e-7 at every int32
position (see :data:`flax_posenc.AnglePrecision`).
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from flax_posenc._core import cpu as _cpu
from flax_posenc._core.angles import position_angles
from flax_posenc._core.deprecation import warn_deprecated
from flax_posenc._core.exact_angles import (
    ANGLE_PRECISIONS,
    AnglePrecision,
    exact_sin_cos,
    int32_positions,
)
from flax_posenc._core.validation import (
    check_choice,
    check_float_dtype,
    check_integer_array,
    check_positive_float,
    check_positive_int,
)

__all__ = [
    "SinusoidalLayout",
    "SinusoidalSpacing",
    "sinusoidal_encoding",
    "sinusoidal_inv_freq",
    "sinusoidal_table",
]

SinusoidalLayout = Literal["interleaved", "half"]
"""``"interleaved"`` (sin, cos, sin, cos, ...) or ``"half"`` (sin... | cos...)."""
SinusoidalSpacing = Literal["paper", "tensor2tensor"]
"""``"paper"``: ``base^(-2i/D)``; ``"tensor2tensor"``: ``base^(-i/(D/2 - 1))``."""
_LAYOUTS = ("interleaved", "half")
_SPACINGS = ("paper", "tensor2tensor")


def _check_layout(layout: str) -> SinusoidalLayout:
    """``layout``, with the deprecated ``"concat"`` read as ``"half"``."""
    if layout == "concat":
        warn_deprecated(
            'layout="concat"', 'layout="half" (the same pairing)', stacklevel=4
        )
        return "half"
    check_choice("layout", layout, _LAYOUTS)
    return "half" if layout == "half" else "interleaved"


def sinusoidal_inv_freq(
    dim: int, *, base: float = 10000.0, spacing: SinusoidalSpacing = "paper"
) -> np.ndarray:
    """Inverse frequencies of the sinusoidal encoding, ``float32 [D // 2]``.

    ``paper``: ``base^(-2i / D)``; ``tensor2tensor``: ``base^(-i / max(D // 2 - 1, 1))``.
    Computed in float64 and rounded once to float32 (static sizes only).

    Args:
      dim: ``D``, the number of features.
      base: the base of the geometric frequency progression.
      spacing: ``"paper"`` or ``"tensor2tensor"``.

    Returns:
      float32 ``[D // 2]`` (a static numpy array).

    Raises:
      TypeError: non-int ``dim``.
      ValueError: ``dim <= 0``, ``base <= 0`` or an unknown ``spacing``.

    Examples:
      >>> fp.sinusoidal_inv_freq(6).tolist()  # 10000^(-i/3), rounded to float32
      [1.0, 0.04641588777303696, 0.002154434798285365]
      >>> fp.sinusoidal_inv_freq(6, spacing="tensor2tensor").tolist()
      [1.0, 0.009999999776482582, 9.999999747378752e-05]
    """
    dim, base, spacing = _check_frequencies(dim, base, spacing)
    return _inv_freq_float64(dim, base, spacing).astype(np.float32)


def _check_frequencies(
    dim: Any, base: Any, spacing: Any
) -> tuple[int, float, SinusoidalSpacing]:
    dim = check_positive_int("dim", dim)
    base = check_positive_float("base", base)
    return dim, base, check_choice("spacing", spacing, _SPACINGS)


def _inv_freq_float64(dim: int, base: float, spacing: SinusoidalSpacing) -> np.ndarray:
    """:func:`sinusoidal_inv_freq` of checked arguments, before its float32
    rounding."""
    i = np.arange(dim // 2, dtype=np.float64)
    if spacing == "paper":
        exponent = 2.0 * i / dim
    else:
        exponent = i / max(dim // 2 - 1, 1)
    return base**-exponent


def sinusoidal_encoding(
    positions: jax.Array,
    dim: int,
    *,
    base: float = 10000.0,
    layout: SinusoidalLayout = "interleaved",
    spacing: SinusoidalSpacing = "paper",
    dtype: DTypeLike = jnp.float32,
    angle_precision: AnglePrecision = "float32",
) -> jax.Array:
    """Sinusoidal encoding of integer positions.

    ``PE(p, 2i) = sin(p / base^(2i/D))``, ``PE(p, 2i+1) = cos(p / base^(2i/D))`` for the
    paper's spacing and layout; see the module docstring for the variants.

    Args:
      positions: integer ``[...]`` of any shape, traced or concrete (packed sequences,
        decode offsets, ``jnp.arange(L)``).
      dim: ``D``, the number of features.
      base: the base of the geometric frequency progression.
      layout: ``"interleaved"`` (sin, cos, sin, cos, ...) or ``"half"`` (sin... cos...).
      spacing: ``"paper"`` or ``"tensor2tensor"``.
      dtype: the floating output dtype; the computation is float32 regardless.
      angle_precision: ``"float32"`` angles (off by about ``p inv_freq 2^-23``) or
        ``"exact"`` ones, reduced mod 2 pi from the float64 frequencies (within
        3e-7 at any int32 position; see :data:`flax_posenc.AnglePrecision`).

    Returns:
      ``positions.shape + (D,)`` in ``dtype``.

    Raises:
      TypeError: non-integer ``positions``, non-int ``dim`` or a non-floating
        ``dtype``.
      ValueError: ``dim <= 0``, ``base <= 0``, unknown ``layout``, ``spacing`` or
        ``angle_precision``.

    Examples:
      >>> pe = fp.sinusoidal_encoding(jnp.arange(8), 6)
      >>> pe.shape
      (8, 6)
      >>> fp.sinusoidal_encoding(jnp.array([[0, 1]]), 4, dtype=jnp.bfloat16).dtype
      dtype(bfloat16)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, section 3.5.
    """
    positions = check_integer_array("positions", positions)
    dim, base, spacing = _check_frequencies(dim, base, spacing)
    layout = _check_layout(layout)
    dtype = check_float_dtype("dtype", dtype)
    check_choice("angle_precision", angle_precision, ANGLE_PRECISIONS)
    if angle_precision == "exact":
        int32_positions(positions)  # checked while concrete; the core casts
    return _encode(positions, dim, base, layout, spacing, dtype, angle_precision)


_STATIC = ("dim", "base", "layout", "spacing", "dtype", "angle_precision")


@functools.partial(jax.jit, static_argnames=_STATIC)
def _encode(
    positions: jax.Array,
    dim: int,
    base: float,
    layout: SinusoidalLayout,
    spacing: SinusoidalSpacing,
    dtype: Any,
    angle_precision: AnglePrecision,
) -> jax.Array:
    """:func:`sinusoidal_encoding` of checked arguments, as one compiled program."""
    inv_freq64 = _inv_freq_float64(dim, base, spacing)
    if angle_precision == "exact":
        freq, turns = _feature_rows(inv_freq64, dim, layout)
        sin, _ = exact_sin_cos(positions, freq, quarter_turns=turns)
        return sin.astype(dtype)
    inv_freq = inv_freq64.astype(np.float32)
    freq, turns = _feature_rows(inv_freq, dim, layout)
    return _cpu.on_cpu(
        lambda p: _cpu.sinusoidal_rows(p, freq, turns).astype(dtype),
        lambda p: _encoding(p, inv_freq, dim, layout).astype(dtype),
        positions,
    )


def _encoding(
    positions: jax.Array, inv_freq: np.ndarray, dim: int, layout: SinusoidalLayout
) -> jax.Array:
    """float32 ``[..., D]``: sin and cos of the ``D // 2`` angles, laid out.

    The reference form, which every backend but CPU runs; CPU runs
    :func:`flax_posenc._core.cpu.sinusoidal_rows` of the :func:`_feature_rows`.
    """
    angles = position_angles(positions, jnp.asarray(inv_freq))
    sin, cos = jnp.sin(angles), jnp.cos(angles)
    if layout == "interleaved":
        pe = jnp.stack([sin, cos], axis=-1).reshape(
            positions.shape + (2 * sin.shape[-1],)
        )
    else:
        pe = jnp.concatenate([sin, cos], axis=-1)
    if dim % 2:
        pe = jnp.pad(pe, [(0, 0)] * positions.ndim + [(0, 1)])
    return pe


def _feature_rows(
    inv_freq: np.ndarray, dim: int, layout: SinusoidalLayout
) -> tuple[np.ndarray, np.ndarray]:
    """Static rows ``(f [D], turns [D])``: feature ``i`` is ``sin(p * f[i] + turns[i]
    * pi/2)``, ``f`` each angle's frequency where the layout puts it and ``turns`` 0
    for sin, 1 for cos. An odd ``D``'s last feature has ``f = 0`` and ``turns = 0``:
    ``sin(0) = 0``."""
    half = inv_freq.shape[0]
    if layout == "interleaved":
        freq, turns = np.repeat(inv_freq, 2), np.tile(np.array([0, 1], np.int32), half)
    else:
        freq = np.concatenate([inv_freq, inv_freq])
        turns = np.repeat(np.array([0, 1], np.int32), half)
    return np.pad(freq, (0, dim % 2)), np.pad(turns, (0, dim % 2))


def sinusoidal_table(
    max_len: int,
    dim: int,
    *,
    base: float = 10000.0,
    layout: SinusoidalLayout = "interleaved",
    spacing: SinusoidalSpacing = "paper",
    dtype: DTypeLike = jnp.float32,
    angle_precision: AnglePrecision = "float32",
) -> jax.Array:
    """The table ``[max_len, D]`` of :func:`sinusoidal_encoding` for positions 0..max_len-1.

    Args:
      max_len: the number of positions (rows).
      dim: ``D``, the number of features.
      base: the base of the geometric frequency progression.
      layout: ``"interleaved"`` or ``"half"``.
      spacing: ``"paper"`` or ``"tensor2tensor"``.
      dtype: the floating output dtype; the computation is float32 regardless.
      angle_precision: ``"float32"`` or ``"exact"`` (see
        :func:`sinusoidal_encoding`).

    Returns:
      ``[max_len, D]`` in ``dtype``.

    Raises:
      TypeError: non-int ``max_len`` or ``dim``.
      ValueError: ``max_len <= 0`` or a bad argument of :func:`sinusoidal_encoding`.

    Examples:
      >>> table = fp.sinusoidal_table(8, 6)
      >>> [round(float(v), 4) for v in table[1]]  # sin(1), cos(1), sin(1/21.5), ...
      [0.8415, 0.5403, 0.0464, 0.9989, 0.0022, 1.0]
    """
    max_len = check_positive_int("max_len", max_len)
    dim, base, spacing = _check_frequencies(dim, base, spacing)
    layout = _check_layout(layout)
    dtype = check_float_dtype("dtype", dtype)
    check_choice("angle_precision", angle_precision, ANGLE_PRECISIONS)
    return _table(max_len, dim, base, layout, spacing, dtype, angle_precision)


@functools.partial(jax.jit, static_argnames=("max_len", *_STATIC))
def _table(
    max_len: int,
    dim: int,
    base: float,
    layout: SinusoidalLayout,
    spacing: SinusoidalSpacing,
    dtype: Any,
    angle_precision: AnglePrecision,
) -> jax.Array:
    """:func:`sinusoidal_table` of checked arguments, as one compiled program."""
    positions = jnp.arange(max_len)
    return _encode(positions, dim, base, layout, spacing, dtype, angle_precision)
