"""Assertions about positional encodings, for our tests and for yours.

They are built on chex and raise ``AssertionError`` with the offending value named.
Import them as ``from flax_posenc import testing``; this module needs chex (a runtime
dependency) and numpy only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import chex
import jax
import numpy as np

EncodingFn = Callable[[jax.Array], jax.Array]


def assert_encoding_shape(
    encoding: jax.Array, positions: jax.Array, dim: int, *, dtype=None
) -> None:
    """Asserts ``encoding`` is ``positions.shape + (dim,)``, finite, of ``dtype``.

    Args:
      encoding: the output of an encoding function.
      positions: the integer positions it was computed for.
      dim: the expected number of features ``D``.
      dtype: the expected dtype, or None to skip the check.

    Raises:
      AssertionError: a wrong shape or dtype, or a non-finite value.

    Examples:
      >>> positions = jnp.arange(6)
      >>> pe = fp.sinusoidal_encoding(positions, 4)
      >>> fp.testing.assert_encoding_shape(pe, positions, 4, dtype=jnp.float32)
    """
    chex.assert_shape(encoding, tuple(positions.shape) + (dim,))
    chex.assert_tree_all_finite(encoding)
    if dtype is not None:
        chex.assert_type(encoding, dtype)


def assert_module_shapes(
    inputs: jax.Array, outputs: jax.Array, *, dims: chex.Dimensions, spec: str
) -> None:
    """Asserts ``inputs`` and ``outputs`` both have the named shape ``spec``.

    Args:
      inputs: a module's input.
      outputs: its output.
      dims: the sizes of the named dimensions.
      spec: the expected shape, one letter per dimension (e.g. ``"BLD"``).

    Raises:
      AssertionError: a shape differs from ``dims[spec]``.

    Examples:
      >>> from flax_posenc import nnx as pnnx
      >>> x = jnp.zeros((2, 5, 8))  # [B, L, D]
      >>> module = pnnx.SinusoidalPositionalEncoding()
      >>> dims = chex.Dimensions(B=2, L=5, D=8)
      >>> fp.testing.assert_module_shapes(x, module(x), dims=dims, spec="BLD")
    """
    chex.assert_shape(inputs, dims[spec])
    chex.assert_shape(outputs, dims[spec])
    chex.assert_equal_shape([inputs, outputs])


def assert_relative_offset_linearity(
    encode: EncodingFn,
    positions: Sequence[int] | np.ndarray,
    offsets: Sequence[int],
    *,
    rtol: float = 1e-4,
) -> None:
    """Asserts ``PE(p + k) = M(k) PE(p)`` for one matrix ``M(k)`` per offset ``k``.

    For each offset, ``M(k)`` is fitted by least squares (float64) over all the given
    positions at once, and the largest residual ``|PE(p + k) - M(k) PE(p)|`` must be at
    most ``rtol * max|PE|``. The sinusoidal encoding has this property exactly (the
    angle-addition formulas give a block-rotation ``M(k)``); a random table does not.

    The check is only meaningful with more positions than the encoding has independent
    features (otherwise any table fits), so fewer raise ``ValueError``.

    Args:
      encode: maps integer positions ``[P]`` to ``[P, D]``.
      positions: the positions ``p`` tested, ``P`` of them.
      offsets: the offsets ``k`` tested.
      rtol: tolerance relative to the largest absolute encoding value.

    Raises:
      AssertionError: naming the offset, the residual and the tolerance.
      ValueError: too few positions for the check to mean anything.

    Examples:
      >>> encode = lambda p: fp.sinusoidal_encoding(p, 8)
      >>> fp.testing.assert_relative_offset_linearity(encode, np.arange(32), [1, 5])

      A random table is no linear map of itself shifted:

      >>> table = jax.random.normal(jax.random.key(0), (64, 8))
      >>> fp.testing.assert_relative_offset_linearity(
      ...     lambda p: table[p], np.arange(32), [1])
      Traceback (most recent call last):
      ...
      AssertionError: PE(p + k) is not a linear map of PE(p) for offset k=1: ...
    """
    positions = np.asarray(positions)
    base = np.asarray(encode(jax.numpy.asarray(positions)), np.float64)
    chex.assert_rank(base, 2)
    rank = np.linalg.matrix_rank(base)
    if len(positions) <= rank:
        raise ValueError(
            f"`positions` must outnumber the encoding's rank ({rank}) for the "
            f"property to be testable, got {len(positions)} positions."
        )
    for k in offsets:
        shifted = np.asarray(encode(jax.numpy.asarray(positions + k)), np.float64)
        chex.assert_equal_shape([base, shifted])
        transform, *_ = np.linalg.lstsq(base, shifted, rcond=None)
        residual = np.max(np.abs(base @ transform - shifted))
        scale = max(np.max(np.abs(base)), np.max(np.abs(shifted)), 1e-30)
        if residual > rtol * scale:
            raise AssertionError(
                f"PE(p + k) is not a linear map of PE(p) for offset k={k}: "
                f"residual {residual:.3g} > rtol * max|PE| = {rtol * scale:.3g}."
            )


RotateFn = Callable[[jax.Array, jax.Array], jax.Array]


def _attention_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """float64 ``s[..., n, m, l] = sum_h q[..., m, n, h] k[..., l, n, h]``."""
    return np.einsum("...mnh,...lnh->...nml", q, k)


def assert_shift_invariance(
    rotate: RotateFn,
    q: jax.Array,
    k: jax.Array,
    positions: Sequence[int] | np.ndarray | jax.Array,
    offsets: Sequence[int],
    *,
    rtol: float | None = None,
) -> None:
    """Asserts the scores ``q_m . k_l`` after ``rotate`` depend on ``m - l`` only.

    ``rotate(x, positions)`` maps ``x [..., L, N, H]`` and integer ``positions
    [..., L]`` to ``[..., L, N, H]`` (e.g. ``lambda x, p: apply_rope(x, p, config)``).
    With ``q' = rotate(q, p)`` and ``k' = rotate(k, p)``, the per-head scores
    ``s[..., n, m, l] = q'[..., m, n, :] . k'[..., l, n, :]`` (float64) must not change
    when every position moves by the same offset: for each offset ``o``,
    ``|s(p + o) - s(p)| <= rtol * |q'_m| |k'_l|`` entrywise, the norms taken at ``p``.
    RoPE has this property exactly (rotations by ``theta p`` compose to ``theta (m -
    l)``); adding an absolute encoding does not.

    Args:
      rotate: the position-dependent map under test.
      q: ``[..., L, N, H]`` queries, e.g. random normal.
      k: ``[..., L, N, H]`` keys.
      positions: integer ``[..., L]``, broadcastable to ``q.shape[:-2]``.
      offsets: the offsets ``o`` tested.
      rtol: tolerance relative to ``|q'_m| |k'_l|``. None means ``4 eps + 2^-21 P``,
        ``eps`` the output dtype's machine epsilon and ``P`` the largest ``|p + o|``:
        rounding to the output dtype of the four rotated vectors behind a
        difference of scores, plus two float32 roundings (``inv_freq``, product) of
        each of their angles, which are at most ``P`` radians (RoPE's fastest
        frequency is one radian per position).

    Raises:
      AssertionError: naming the offset, the largest deviation and the tolerance.
    """
    positions = np.asarray(positions)
    q_rot = rotate(q, jax.numpy.asarray(positions))
    k_rot = rotate(k, jax.numpy.asarray(positions))
    chex.assert_equal_shape([q, q_rot])
    chex.assert_equal_shape([k, k_rot])
    if not len(offsets):
        raise ValueError("`offsets` must name at least one offset, got none.")
    if rtol is None:
        shifted = [positions] + [positions + o for o in offsets]
        largest = max(int(np.max(np.abs(p), initial=0)) for p in shifted)
        rtol = 4 * float(jax.numpy.finfo(q_rot.dtype).eps) + 2.0**-21 * largest
    q_rot = np.asarray(q_rot, np.float64)
    k_rot = np.asarray(k_rot, np.float64)
    base = _attention_scores(q_rot, k_rot)
    norms = np.einsum(
        "...mn,...ln->...nml",
        np.linalg.norm(q_rot, axis=-1),
        np.linalg.norm(k_rot, axis=-1),
    )
    for offset in offsets:
        shifted_positions = jax.numpy.asarray(positions + offset)
        shifted = _attention_scores(
            np.asarray(rotate(q, shifted_positions), np.float64),
            np.asarray(rotate(k, shifted_positions), np.float64),
        )
        deviation = np.max(np.abs(shifted - base) / np.maximum(norms, 1e-30))
        if not deviation <= rtol:
            raise AssertionError(
                f"q_m . k_l depends on absolute positions: shifting them by "
                f"offset={offset} changes the scores by up to {deviation:.3g} "
                f"|q_m| |k_l| > rtol = {rtol:.3g}."
            )
