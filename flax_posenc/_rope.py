"""The unchecked RoPE core: frequencies, unit cos/sin tables and the rotation.

Callers check their inputs first (:mod:`flax_posenc.rope`, :mod:`flax_posenc.rope_nd`,
:mod:`flax_posenc.xpos`, :mod:`flax_posenc.cache_shift`); nothing here validates
again. ``config`` is a :class:`flax_posenc.RopeConfig` (read by attribute: this
module sits below it).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._angles import default_inv_freq, position_angles
from flax_posenc._bfloat16 import narrow, widen
from flax_posenc._exact_angles import exact_sin_cos
from flax_posenc._sincos import sin_cos


def frequencies(config: Any, seq_len: Any) -> tuple[jax.Array, Any]:
    """``(inv_freq float32 [R/2] or seq_len.shape + [R/2], attention_scaling)``."""
    if config.scaling is None:
        inv_freq = default_inv_freq(config.theta, config.rotated_features)
        return jnp.asarray(inv_freq, jnp.float32), 1.0
    return config.scaling.frequencies(config.theta, config.rotated_features, seq_len)


def _seq_len_of(positions: jax.Array, config: Any, seq_len: Any) -> Any:
    """``seq_len``, or ``max(positions) + 1`` in-graph for the families that need it."""
    if seq_len is None and config.depends_on_seq_len:
        return jnp.max(positions, initial=0) + 1
    return seq_len


def _frequencies_float64(config: Any, seq_len: Any) -> tuple[np.ndarray, float]:
    """The float64 host frequencies exact angles start from; a ``seq_len``-dependent
    family needs ``seq_len`` as an int (its frequencies are not known on the host
    otherwise)."""
    if config.scaling is None:
        return default_inv_freq(config.theta, config.rotated_features), 1.0
    if config.depends_on_seq_len and not isinstance(seq_len, int):
        given = "None" if seq_len is None else f"an array of shape {seq_len.shape}"
        raise ValueError(
            f"`seq_len` must be a Python int for {type(config.scaling).__name__} with "
            "angle_precision='exact' (its frequencies depend on seq_len, and exact "
            "angles need their float64 values on the host), got "
            f"{given}; None means max(positions) + 1, computed in the graph. Hint: "
            "pass seq_len=<the sequence length>, or use angle_precision='float32'."
        )
    return config.scaling.frequencies_float64(
        config.theta, config.rotated_features, seq_len
    )


def unit_cos_sin(
    positions: jax.Array, config: Any, seq_len: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``cos(p * inv_freq)``, ``sin(p * inv_freq)`` (unit magnitude) and the
    attention scaling, float32, shaped to multiply them.

    ``positions`` is a checked integer array; ``seq_len`` None, an int, or an integer
    array whose shape obeys the positions rule for ``positions``.
    """
    if config.angle_precision == "exact":
        inv_freq64, attention_scaling = _frequencies_float64(config, seq_len)
        sin, cos = exact_sin_cos(positions, inv_freq64)
    else:
        seq_len = _seq_len_of(positions, config, seq_len)
        if isinstance(seq_len, jax.Array) and seq_len.ndim:
            seq_len = jnp.broadcast_to(seq_len, positions.shape)
        inv_freq, attention_scaling = frequencies(config, seq_len)
        # XLA's sin/cos, or on CPU a vectorised polynomial (flax_posenc._cpu)
        sin, cos = sin_cos(position_angles(positions, inv_freq))
    scale = jnp.asarray(attention_scaling, jnp.float32)
    scale = scale.reshape(scale.shape + (1,) * (sin.ndim - scale.ndim))
    return cos, sin, scale


def tables(
    positions: jax.Array, config: Any, seq_len: Any
) -> tuple[jax.Array, jax.Array]:
    """``cos(p * inv_freq) * a`` and ``sin(p * inv_freq) * a`` (see
    :func:`flax_posenc.rope_cos_sin`)."""
    cos, sin, scale = unit_cos_sin(positions, config, seq_len)
    return cos * scale, sin * scale


def rotate(x: jax.Array, cos: jax.Array, sin: jax.Array, layout: str) -> jax.Array:
    """Rotates the first ``R = 2 * cos.shape[-1]`` features of ``x [..., L, N, H]``
    by the float ``[..., L, R/2]`` tables (see :func:`flax_posenc.rope_rotate`)."""
    if cos.shape[-1] == 0:
        return x
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
      widened and rounded by bit operations on CPU (:mod:`flax_posenc._bfloat16`:
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
    xf = widen(x)
    x_up = _pad_features(xf[..., shift:rotary_dim], 0, head_dim)
    x_down = _pad_features(xf[..., : rotary_dim - shift], shift, head_dim)
    rotated = jnp.where(
        first, xf * pairs - x_up * pairs_up, xf * pairs_down + x_down * pairs
    )
    if rotary_dim < head_dim:
        rotated = jnp.where(index < rotary_dim, rotated, xf)
    return narrow(rotated, x.dtype)


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
