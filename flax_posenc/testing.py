"""Assertions about positional encodings, for our tests and for yours.

They are built on chex and raise ``AssertionError`` with the offending value named
when the encoding under test lacks the property. Their own arguments are checked
first: a wrong type raises ``TypeError``, a wrong shape or value ``ValueError``, each
naming the argument, what was expected and what was given. Import them as
``from flax_posenc import testing``; this module needs chex (a runtime dependency)
and numpy only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import chex
import jax
import numpy as np
from jax.core import Tracer

from flax_posenc._core.exact_angles import ANGLE_PRECISIONS, AnglePrecision
from flax_posenc._core.validation import check_choice, check_positive_float

__all__ = [
    "DEFAULT_OFFSETS",
    "LARGEST_RTOL",
    "BiasFn",
    "EncodingFn",
    "RotateFn",
    "assert_bias_shift_invariance",
    "assert_encoding_shape",
    "assert_module_shapes",
    "assert_relative_offset_linearity",
    "assert_shift_invariance",
]


EncodingFn = Callable[[jax.Array], jax.Array]
RotateFn = Callable[[jax.Array, jax.Array], jax.Array]
BiasFn = Callable[[jax.Array, jax.Array], jax.Array]
"""An attention bias of positions, ``(q_positions [..., L], k_positions [..., S]) ->
[..., N, L, S]``: a :class:`flax_posenc.PositionBias` or any such function."""

DEFAULT_OFFSETS = (1, 2, 7, 100)
"""The offsets :func:`assert_relative_offset_linearity` tests when given none."""

_INT32_MAX = 2**31 - 1


def _check_callable(name: str, fn: Any) -> None:
    if not callable(fn):
        raise TypeError(
            f"`{name}` must be a function of the positions, got {fn!r} "
            f"({type(fn).__name__})."
        )


def _check_array(name: str, x: Any, *, floating: bool = False) -> np.dtype:
    """Raises unless ``x`` is an array (has a shape and a dtype); returns its dtype."""
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        raise TypeError(
            f"`{name}` must be a jax or numpy array, got {type(x).__name__}. Hint: "
            "wrap it in jnp.asarray."
        )
    dtype = np.dtype(x.dtype)
    if floating and not jax.numpy.issubdtype(dtype, jax.numpy.floating):
        raise TypeError(
            f"`{name}` must be floating point, got dtype {dtype} with shape "
            f"{tuple(x.shape)}."
        )
    return dtype


def _check_positions(name: str, positions: Any) -> np.ndarray:
    """Concrete, non-empty integer positions as a numpy array."""
    if isinstance(positions, Tracer):
        raise TypeError(
            f"`{name}` must be concrete (these assertions run outside jit), got a "
            f"traced value {positions}."
        )
    values = np.asarray(positions)
    if values.ndim == 0 or values.size == 0:
        raise ValueError(
            f"`{name}` must be a non-empty array of rank >= 1, got shape "
            f"{values.shape}: an assertion over no positions asserts nothing."
        )
    if not np.issubdtype(values.dtype, np.integer):
        raise TypeError(
            f"`{name}` must be integers, got dtype {values.dtype} with shape "
            f"{values.shape}. Hint: np.arange(...)."
        )
    return values.astype(np.int64)


def _check_offsets(offsets: Any, positions: np.ndarray) -> list[int]:
    """A non-empty list of int offsets whose shifted positions fit in int32."""
    if isinstance(offsets, (str, bytes)) or not isinstance(
        offsets, (Sequence, np.ndarray)
    ):
        raise TypeError(
            f"`offsets` must be a sequence of ints, got {type(offsets).__name__}."
        )
    if not len(offsets):
        raise ValueError(
            "`offsets` must name at least one offset, got none: an assertion over "
            "no offsets asserts nothing."
        )
    checked = []
    for offset in offsets:
        if isinstance(offset, (bool, np.bool_)) or not isinstance(
            offset, (int, np.integer)
        ):
            raise TypeError(
                f"`offsets` must hold ints, got {offset!r} ({type(offset).__name__}) "
                f"in {list(offsets)!r}."
            )
        offset = int(offset)
        low, high = int(positions.min()) + offset, int(positions.max()) + offset
        if low < -_INT32_MAX - 1 or high > _INT32_MAX:
            raise ValueError(
                f"`offsets`: positions + {offset} span [{low}, {high}], outside "
                "int32; use smaller offsets."
            )
        checked.append(offset)
    return checked


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
      TypeError: ``encoding`` or ``positions`` not an array, ``dim`` not an int, or
        ``dtype`` not a dtype.
      ValueError: ``dim < 1``.

    Examples:
      >>> positions = jnp.arange(6)
      >>> pe = fp.sinusoidal_encoding(positions, 4)
      >>> fp.testing.assert_encoding_shape(pe, positions, 4, dtype=jnp.float32)
    """
    _check_array("encoding", encoding)
    _check_array("positions", positions)
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise TypeError(f"`dim` must be a positive int, got {dim!r}.")
    if dim < 1:
        raise ValueError(f"`dim` must be a positive int, got {dim}.")
    if dtype is not None:
        try:
            np.dtype(dtype)
        except TypeError:
            raise TypeError(
                f"`dtype` must be a dtype (e.g. jnp.float32) or None, got {dtype!r}."
            ) from None
    chex.assert_shape(encoding, tuple(positions.shape) + (int(dim),))
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
      TypeError: ``inputs`` or ``outputs`` not an array, ``dims`` not a
        ``chex.Dimensions`` or ``spec`` not a string.
      ValueError: ``spec`` names a dimension ``dims`` does not define.

    Examples:
      >>> from flax_posenc import nnx as pnnx
      >>> x = jnp.zeros((2, 5, 8))  # [B, L, D]
      >>> module = pnnx.SinusoidalPositionalEncoding()
      >>> dims = chex.Dimensions(B=2, L=5, D=8)
      >>> fp.testing.assert_module_shapes(x, module(x), dims=dims, spec="BLD")
    """
    _check_array("inputs", inputs)
    _check_array("outputs", outputs)
    if not isinstance(dims, chex.Dimensions):
        raise TypeError(
            f"`dims` must be a chex.Dimensions, got {type(dims).__name__}. Hint: "
            "chex.Dimensions(B=2, L=5, D=8)."
        )
    if not isinstance(spec, str):
        raise TypeError(f'`spec` must be a string such as "BLD", got {spec!r}.')
    try:
        shape = dims[spec]
    except (KeyError, AttributeError) as error:
        raise ValueError(
            f"`spec` {spec!r} names dimension {error} that `dims` ({dims}) does not "
            "define."
        ) from None
    chex.assert_shape(inputs, shape)
    chex.assert_shape(outputs, shape)
    chex.assert_equal_shape([inputs, outputs])


def assert_relative_offset_linearity(
    encode: EncodingFn,
    positions: Sequence[int] | np.ndarray | None = None,
    offsets: Sequence[int] = DEFAULT_OFFSETS,
    *,
    rtol: float = 1e-4,
) -> None:
    """Asserts ``PE(p + k) = M(k) PE(p)`` for one matrix ``M(k)`` per offset ``k``.

    For each offset, ``M(k)`` is fitted by least squares (float64) over all the given
    positions at once, and the largest residual ``|PE(p + k) - M(k) PE(p)|`` must be at
    most ``rtol * max|PE|``. The sinusoidal encoding has this property exactly (the
    angle-addition formulas give a block-rotation ``M(k)``); a random table does not.

    The check is only meaningful with more positions than the encoding has independent
    features (otherwise any table fits), so fewer raise ``ValueError``. The defaults
    satisfy this for any encoding: ``positions`` ``0 .. 2D - 1`` (``D`` the features
    ``encode`` returns for one position, so ``2D > D >= rank``) and ``offsets``
    ``DEFAULT_OFFSETS`` ``(1, 2, 7, 100)``, one step, an even one, an odd one
    and a long one. The default ``rtol`` holds for float32 sinusoidal encodings up
    to ``D = 512`` at these positions (measured residuals ``<= 4.4e-5``).

    Args:
      encode: maps integer positions ``[P]`` to ``[P, D]``.
      positions: the positions ``p`` tested, integer ``[P]`` (``P >= 1``); None means
        ``0 .. 2D - 1``.
      offsets: the offsets ``k`` tested (ints, at least one).
      rtol: tolerance relative to the largest absolute encoding value.

    Raises:
      AssertionError: naming the offset, the residual and the tolerance.
      TypeError: ``encode`` not callable, non-integer ``positions`` or ``offsets``,
        non-numeric ``rtol``.
      ValueError: empty ``positions`` or ``offsets``, ``positions`` not of rank 1,
        ``rtol <= 0``, or too few positions for the check to mean anything.

    Examples:
      >>> encode = lambda p: fp.sinusoidal_encoding(p, 8)
      >>> fp.testing.assert_relative_offset_linearity(encode)  # p = 0..15
      >>> fp.testing.assert_relative_offset_linearity(encode, np.arange(32), [1, 5])

      A random table is no linear map of itself shifted:

      >>> table = jax.random.normal(jax.random.key(0), (64, 8))
      >>> fp.testing.assert_relative_offset_linearity(
      ...     lambda p: table[p], np.arange(32), [1])
      Traceback (most recent call last):
      ...
      AssertionError: PE(p + k) is not a linear map of PE(p) for offset k=1: ...
    """
    _check_callable("encode", encode)
    rtol = check_positive_float("rtol", rtol)
    if positions is None:
        probe = np.asarray(encode(jax.numpy.zeros((1,), jax.numpy.int32)))
        chex.assert_rank(probe, 2)
        positions = np.arange(2 * max(probe.shape[-1], 1))
    positions = _check_positions("positions", positions)
    if positions.ndim != 1:
        raise ValueError(
            f"`positions` must be [P] (rank 1), got shape {positions.shape}. Hint: "
            "pass positions.ravel()."
        )
    offsets = _check_offsets(offsets, positions)
    base = np.asarray(encode(jax.numpy.asarray(positions)), np.float64)
    chex.assert_rank(base, 2)
    rank = np.linalg.matrix_rank(base)
    if len(positions) <= rank:
        raise ValueError(
            f"`positions` must outnumber the encoding's rank ({rank}) for the "
            f"property to be testable, got {len(positions)} positions. Hint: pass "
            f"np.arange({2 * base.shape[-1]}), or leave `positions` at its default."
        )
    for k in offsets:
        shifted = np.asarray(encode(jax.numpy.asarray(positions + k)), np.float64)
        chex.assert_equal_shape([base, shifted])
        transform, *_ = np.linalg.lstsq(base, shifted, rcond=None)
        residual = np.max(np.abs(base @ transform - shifted))
        scale = max(np.max(np.abs(base)), np.max(np.abs(shifted)), 1e-30)
        if not residual <= rtol * scale:
            raise AssertionError(
                f"PE(p + k) is not a linear map of PE(p) for offset k={k}: "
                f"residual {residual:.3g} > rtol * max|PE| = {rtol * scale:.3g}."
            )


def _check_heads(q: Any, k: Any) -> int:
    """Checks ``q [..., L, N, H]`` against ``k [..., L, K, H]``; returns ``N // K``."""
    for name, x in (("q", q), ("k", k)):
        _check_array(name, x, floating=True)
        if x.ndim < 3:
            raise ValueError(
                f"`{name}` must be [..., L, N, H] (rank >= 3), got shape "
                f"{tuple(x.shape)}."
            )
    if q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"`k` must be [..., L, K, H] with the leading shape, length and head dim "
            f"of `q` {tuple(q.shape)}, got shape {tuple(k.shape)}."
        )
    num_q, num_k = q.shape[-2], k.shape[-2]
    if num_k == 0 or num_q % num_k:
        raise ValueError(
            f"`q` heads ({num_q}) must be a multiple of `k` heads ({num_k}) "
            f"(grouped-query attention: each k head serves {num_q} / {num_k} q heads), "
            f"got q shape {tuple(q.shape)} and k shape {tuple(k.shape)}."
        )
    return num_q // num_k


def _attention_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """float64 ``s[..., n, m, l] = sum_h q[..., m, n, h] k[..., l, n // G, h]``.

    ``G = N // K`` q heads share each k head, as in Llama's ``repeat_kv``.
    """
    k = np.repeat(k, q.shape[-2] // k.shape[-2], axis=-2)
    return np.einsum("...mnh,...lnh->...nml", q, k)


# Score deviations are relative to |q_m| |k_l|, so a tolerance of 1 would allow a
# shift to move a score by its whole possible size; at 1/8 an encoding whose angles
# are off by more than about 1/8 rad (7 degrees) can still fail.
LARGEST_RTOL = 0.125
"""The largest tolerance :func:`assert_shift_invariance` accepts (see there)."""


def _angle_error(angle_precision: str, largest_position: int) -> float:
    """A bound on the error of one angle: ``2^-23 P`` rad for float32 angles (one
    radian per position, two roundings), ``2^-21`` for exact ones (within 3e-7)."""
    if angle_precision == "exact":
        return 2.0**-21
    return 2.0**-23 * largest_position


def _default_rtol(dtype: Any, angle_precision: str, offset: int, position: int):
    """``4 eps + 4 delta`` (see :func:`assert_shift_invariance`), or a ValueError
    where that exceeds ``LARGEST_RTOL``, so that the check could not fail."""
    eps = float(jax.numpy.finfo(dtype).eps)
    rtol = 4 * eps + 4 * _angle_error(angle_precision, position)
    if rtol <= LARGEST_RTOL:
        return rtol
    if angle_precision == "float32" and 4 * eps < LARGEST_RTOL:
        below = int((LARGEST_RTOL - 4 * eps) * 2**21)
        hint = (
            "Use exact angles (RopeConfig(angle_precision='exact') in `rotate` and "
            f"angle_precision='exact' here), or offsets that keep positions below "
            f"{below:,} ({np.dtype(dtype)} outputs)."
        )
    else:
        hint = "Use a more precise output dtype."
    hint += (
        " (An attention bias has no angles: check it with "
        "assert_bias_shift_invariance.)"
    )
    raise ValueError(
        f"`offsets`: at offset {offset} (largest position {position}) the default "
        f"tolerance is {rtol:.3g} |q_m| |k_l| (angle_precision={angle_precision!r}: "
        f"each angle off by up to {_angle_error(angle_precision, position):.3g} rad; "
        f"{np.dtype(dtype)} eps {eps:.3g}), above LARGEST_RTOL = {LARGEST_RTOL}, so "
        "the check could not tell a shift-invariant encoding from one that is not. "
        f"{hint}"
    )


def _check_shift_arguments(
    rotate: Any,
    q: Any,
    k: Any,
    positions: Any,
    offsets: Any,
    rtol: Any,
    angle_precision: Any,
) -> tuple[np.ndarray, list[int], float | None]:
    """Checks the arguments of :func:`assert_shift_invariance`; returns the checked
    ``positions``, ``offsets`` and ``rtol``."""
    _check_callable("rotate", rotate)
    _check_heads(q, k)
    positions = _check_positions("positions", positions)
    length = q.shape[-3]
    try:
        broadcast = np.broadcast_shapes(positions.shape, q.shape[:-2])
    except ValueError:
        broadcast = None
    if positions.shape[-1] != length or broadcast != tuple(q.shape[:-2]):
        raise ValueError(
            f"`positions` must be [..., L] with L = {length}, broadcastable to "
            f"q.shape[:-2] = {tuple(q.shape[:-2])}, got shape {positions.shape}."
        )
    offsets = _check_offsets(offsets, positions)
    if rtol is not None:
        rtol = check_positive_float("rtol", rtol)
        if rtol > LARGEST_RTOL:
            raise ValueError(
                f"`rtol` must be at most LARGEST_RTOL = {LARGEST_RTOL}, got {rtol}: a "
                "check that lets a shift move a score by more than |q_m| |k_l| / 8 "
                "would pass encodings that are not shift invariant."
            )
    check_choice("angle_precision", angle_precision, ANGLE_PRECISIONS)
    return positions, offsets, rtol


def _rotated(
    rotate: RotateFn, x: jax.Array, positions: np.ndarray
) -> tuple[np.ndarray, np.dtype]:
    """``rotate(x, positions)`` in float64, and its dtype; asserts ``x``'s shape."""
    out = rotate(x, jax.numpy.asarray(positions))
    chex.assert_equal_shape([x, out])
    return np.asarray(out, np.float64), np.dtype(out.dtype)


def _largest_position(positions: np.ndarray, offset: int) -> int:
    """``P_o = max(|p|, |p + o|)`` over ``positions``."""
    return max(int(np.max(np.abs(positions))), int(np.max(np.abs(positions + offset))))


def _score_shift_error(
    offset: int,
    deviation: float,
    tolerance: float,
    *,
    worst: tuple[int, ...],
    largest: int,
    default_rtol: bool,
    angle_precision: str,
) -> AssertionError:
    """The failure of :func:`assert_shift_invariance` at ``offset``: the largest
    deviation, where (``worst``: batch..., head, query, key) and the tolerance."""
    *batch, head, query, key = worst
    where = f"head {head}, query {query}, key {key}" + (
        f", batch index {tuple(batch)}" if batch else ""
    )
    sized = (
        f" (sized by the largest position, {largest}, and "
        f"angle_precision={angle_precision!r})"
        if default_rtol
        else ""
    )
    if default_rtol and angle_precision == "exact":
        sized += (
            ". That tolerance assumes exact angles: if `rotate` forms float32 "
            "angles (RopeConfig's default angle_precision='float32'), that "
            "alone fails it; pass angle_precision='float32' here, or build "
            "the config with angle_precision='exact'"
        )
    return AssertionError(
        f"q_m . k_l depends on absolute positions: shifting them by "
        f"offset={offset} changes the scores by up to {deviation:.3g} "
        f"|q_m| |k_l| ({where}) > rtol = {tolerance:.3g}{sized}. If `rotate` "
        "is RoPE with frequencies that follow the positions (dynamic NTK or "
        "LongRoPE with seq_len=None, where seq_len = max(positions) + 1), "
        "pass a fixed seq_len: only then is it shift invariant."
    )


def assert_shift_invariance(
    rotate: RotateFn,
    q: jax.Array,
    k: jax.Array,
    positions: Sequence[int] | np.ndarray | jax.Array,
    offsets: Sequence[int],
    *,
    rtol: float | None = None,
    angle_precision: AnglePrecision = "float32",
) -> None:
    """Asserts the scores ``q_m . k_l`` after ``rotate`` depend on ``m - l`` only.

    ``rotate(x, positions)`` maps ``x [..., L, N, H]`` and integer ``positions
    [..., L]`` to ``[..., L, N, H]`` (e.g. ``lambda x, p: apply_rope(x, p, config)``).
    With ``q' = rotate(q, p)`` and ``k' = rotate(k, p)``, the per-head scores
    ``s[..., n, m, l] = q'[..., m, n, :] . k'[..., l, n // G, :]`` (float64) must not
    change when every position moves by the same offset: for each offset ``o``,
    ``|s(p + o) - s(p)| <= rtol * |q'_m| |k'_l|`` entrywise, the norms taken at ``p``.
    RoPE has this property exactly (rotations by ``theta p`` compose to ``theta (m -
    l)``); adding an absolute encoding does not.

    Grouped-query attention: ``k`` may have fewer heads ``K`` than ``q`` has ``N``, when
    ``N`` is a multiple of ``K``; the ``G = N // K`` consecutive q heads ``n`` share k
    head ``n // G``, as in Llama (``repeat_kv``) and ``jax.nn.dot_product_attention``.

    The default tolerance for offset ``o`` is ``4 eps + 4 delta``: ``eps`` the output
    dtype's machine epsilon, ``delta`` a bound on the error of one angle. A difference
    of two scores involves four angles (q at ``m`` and k at ``l``, before and after the
    shift), and rounding the four rotated vectors to the output dtype adds at most
    ``2 eps``, so ``4 eps`` leaves a factor two.

    - ``angle_precision="float32"`` (``rotate`` forms ``float32(p) * inv_freq``):
      ``delta = 2^-23 P_o``, ``P_o = max(|p|, |p + o|)`` the largest position the two
      compared scores were computed at (two roundings of at most ``|p| inv_freq
      2^-24`` each, with RoPE's fastest frequency ``inv_freq = 1``). So the tolerance
      is ``4 eps + 2^-21 P_o``: about ``1e-4`` for offset 1 at positions below 200
      in float32, whatever larger offsets the same call tests.
    - ``angle_precision="exact"`` (``RopeConfig(angle_precision="exact")``, whose cos
      and sin are within ``3e-7`` at every int32 position): ``delta = 2^-21``, a
      tolerance of ``2.4e-6`` in float32 at any offset.

    A tolerance above :data:`LARGEST_RTOL` (``1/8``) raises ``ValueError`` instead of
    checking: a score change of ``|q_m| |k_l| / 8`` is what a rotation off by ``1/8``
    rad makes, so such a check would pass encodings that are not shift invariant. For
    float32 angles this happens from ``P_o`` of about 262000 (at ``4e6`` no score
    change could fail it): test large offsets with exact angles.

    Args:
      rotate: the position-dependent map under test.
      q: float ``[..., L, N, H]`` queries, e.g. random normal.
      k: float ``[..., L, K, H]`` keys, ``N`` a multiple of ``K``.
      positions: concrete integer ``[..., L]``, broadcastable to ``q.shape[:-2]``.
      offsets: the offsets ``o`` tested (ints, at least one).
      rtol: tolerance relative to ``|q'_m| |k'_l|``, for every offset; None sizes it
        per offset (above). At most :data:`LARGEST_RTOL`.
      angle_precision: how ``rotate`` forms its angles, ``"float32"`` or ``"exact"``
        (see :data:`flax_posenc.AnglePrecision`); it sizes the default tolerance.

    Raises:
      AssertionError: naming the offset, the largest deviation and the tolerance; or
        ``rotate`` changed the shape of ``q`` or ``k``.
      TypeError: ``rotate`` not callable, ``q``/``k`` not floating arrays,
        non-integer or traced ``positions``, non-int ``offsets``, non-numeric
        ``rtol``.
      ValueError: ``q``/``k`` not ``[..., L, N, H]``, their shapes disagree, ``N``
        not a multiple of ``K``, ``positions`` empty or not broadcastable to
        ``q.shape[:-2]``, no ``offsets``, shifted positions outside int32, ``rtol <=
        0``, an unknown ``angle_precision``, or a tolerance above
        :data:`LARGEST_RTOL`.

    Examples:
      >>> config = fp.RopeConfig(head_dim=8)
      >>> rotate = lambda x, p: fp.apply_rope(x, p, config)
      >>> q = jax.random.normal(jax.random.key(0), (6, 8, 8))  # [L, N=8, H]
      >>> k = jax.random.normal(jax.random.key(1), (6, 2, 8))  # [L, K=2, H]
      >>> fp.testing.assert_shift_invariance(rotate, q, k, np.arange(6), [1, 10**5])

      Far offsets need exact angles, which keep the check tight:

      >>> exact = fp.RopeConfig(head_dim=8, angle_precision="exact")
      >>> fp.testing.assert_shift_invariance(
      ...     lambda x, p: fp.apply_rope(x, p, exact), q, k, np.arange(6), [2**30],
      ...     angle_precision="exact")
    """
    positions, offsets, rtol = _check_shift_arguments(
        rotate, q, k, positions, offsets, rtol, angle_precision
    )
    q_rot, q_dtype = _rotated(rotate, q, positions)
    k_rot, k_dtype = _rotated(rotate, k, positions)
    eps_dtype = max(q_dtype, k_dtype, key=lambda d: jax.numpy.finfo(d).eps)
    if rtol is None:
        tolerances = {
            offset: _default_rtol(
                eps_dtype, angle_precision, offset, _largest_position(positions, offset)
            )
            for offset in offsets
        }
    else:
        tolerances = dict.fromkeys(offsets, rtol)
    base = _attention_scores(q_rot, k_rot)
    norms = _attention_scores(
        np.linalg.norm(q_rot, axis=-1, keepdims=True),
        np.linalg.norm(k_rot, axis=-1, keepdims=True),
    )
    for offset, tolerance in tolerances.items():
        shifted_positions = positions + offset
        shifted = _attention_scores(
            _rotated(rotate, q, shifted_positions)[0],
            _rotated(rotate, k, shifted_positions)[0],
        )
        deviations = np.abs(shifted - base) / np.maximum(norms, 1e-30)
        worst = np.unravel_index(np.argmax(deviations), deviations.shape)
        deviation = deviations[worst]
        if not deviation <= tolerance:
            raise _score_shift_error(
                offset,
                deviation,
                tolerance,
                worst=tuple(int(i) for i in worst),
                largest=_largest_position(positions, offset),
                default_rtol=rtol is None,
                angle_precision=angle_precision,
            )


def assert_bias_shift_invariance(
    bias: BiasFn,
    q_positions: Sequence[int] | np.ndarray | jax.Array,
    offsets: Sequence[int],
    *,
    k_positions: Sequence[int] | np.ndarray | jax.Array | None = None,
    atol: float | None = None,
) -> None:
    """Asserts an attention bias depends on ``q_pos - k_pos`` only.

    With ``b = bias(q_positions, k_positions)`` (float64 ``[..., N, L, S]``), for each
    offset ``o``: ``|bias(q_positions + o, k_positions + o) - b| <= atol`` entrywise,
    in logit units. ALiBi, T5 buckets and Kerple have this property exactly; FIRE has
    it only below its threshold (its normaliser follows the query's position).

    The default ``atol`` is ``4 eps max|b|`` per offset, ``eps`` the bias dtype's
    machine epsilon and the maximum over both compared biases: a bias formed from the
    integer distance is bit-identical after a shift, one formed in floating point is
    off by a few roundings of its largest value. An ``atol`` of ``a`` logits
    lets a shift scale a softmax weight by up to ``e^(2a)``. Biases have no
    angles, so, unlike :func:`assert_shift_invariance`, large offsets need no
    special care beyond int32.

    Args:
      bias: the bias under test, e.g. ``fp.AlibiBias(8)``, a bias module's
        ``position_bias()``, ``lambda q, k: fp.kerple_bias(q, k, r1, r2)``.
      q_positions: concrete integer ``[..., L]``.
      offsets: the offsets ``o`` tested (ints, at least one).
      k_positions: concrete integer ``[..., S]``; None means ``q_positions``.
      atol: the largest change allowed, in logits, for every offset; None sizes it
        per offset (above).

    Raises:
      AssertionError: naming the offset, the largest change and where, and the
        tolerance; or a shifted bias of another shape.
      TypeError: ``bias`` not callable or not returning an array, non-integer or
        traced positions, non-int ``offsets``, a non-numeric ``atol``.
      ValueError: empty positions, no ``offsets``, shifted positions outside
        int32, ``atol <= 0``.

    Examples:
      >>> fp.testing.assert_bias_shift_invariance(fp.AlibiBias(12), np.arange(8), [1, 10**6])
      >>> params = fp.FireParams(jnp.array(0.1), jnp.array(1.0), jnp.linspace(-1, 1, 8),
      ...     jnp.zeros(8), jnp.ones((8, 2)), jnp.zeros(2))
      >>> fp.testing.assert_bias_shift_invariance(  # FIRE past its threshold of 4
      ...     fp.FireBias(params, init_threshold=4.0), np.arange(6), [50])
      Traceback (most recent call last):
      ...
      AssertionError: bias(q_pos, k_pos) depends on absolute positions: ...
    """
    _check_callable("bias", bias)
    q_positions = _check_positions("q_positions", q_positions)
    k_positions = (
        q_positions
        if k_positions is None
        else _check_positions("k_positions", k_positions)
    )
    offsets = _check_offsets(offsets, np.concatenate([q_positions, k_positions], None))
    if atol is not None:
        atol = check_positive_float("atol", atol)

    def evaluated(offset: int) -> tuple[np.ndarray, np.dtype]:
        out = bias(
            jax.numpy.asarray(q_positions + offset),
            jax.numpy.asarray(k_positions + offset),
        )
        dtype = _check_array("bias(q_positions, k_positions)", out, floating=True)
        return np.asarray(out, np.float64), dtype

    base, dtype = evaluated(0)
    for offset in offsets:
        shifted = evaluated(offset)[0]
        chex.assert_equal_shape([base, shifted])
        tolerance = atol
        if tolerance is None:
            largest = max(np.max(np.abs(base)), np.max(np.abs(shifted)))
            tolerance = 4 * float(jax.numpy.finfo(dtype).eps) * float(largest)
        changes = np.abs(shifted - base)
        worst = np.unravel_index(np.argmax(changes), changes.shape)
        if not changes[worst] <= tolerance:
            *batch, head, query, key = (int(i) for i in worst)
            where = f"head {head}, query {query}, key {key}" + (
                f", batch index {tuple(batch)}" if batch else ""
            )
            sized = " (4 eps max|b|)" if atol is None else ""
            raise AssertionError(
                f"bias(q_pos, k_pos) depends on absolute positions: shifting both by "
                f"offset={offset} changes it by up to {changes[worst]:.3g} logits "
                f"({where}: {base[worst]:.6g} -> {shifted[worst]:.6g}) > atol = "
                f"{tolerance:.3g}{sized}."
            )
