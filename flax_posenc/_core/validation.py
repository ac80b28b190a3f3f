"""Input checks shared by every encoding; they run at trace time, before any work.

Each raises ``ValueError`` or ``TypeError`` with the argument's name, what was expected
and what was given.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

_T = TypeVar("_T")


def check_positive_int(name: str, value: Any) -> int:
    """Returns ``value`` as an int, or raises if it is not an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"`{name}` must be a positive Python int, got {value!r} "
            f"({type(value).__name__})."
        )
    if value <= 0:
        raise ValueError(f"`{name}` must be a positive int, got {value}.")
    return int(value)


def check_float(name: str, value: Any) -> float:
    """Returns ``value`` as a finite Python float, or raises.

    Bools, strings (as read from JSON), arrays and other non-numbers are a
    ``TypeError``; nan and inf are a ``ValueError``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise TypeError(
            f"`{name}` must be a number, got {value!r} ({type(value).__name__})."
        )
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"`{name}` must be finite, got {value}.")
    return value


def check_length(name: str, value: Any) -> int:
    """A length: an int >= 1; a whole float from JSON (``4096.0``) is read as one,
    ``4096.7`` is a ``TypeError``."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        value = int(value)
    return check_positive_int(name, value)


def check_positive_float(name: str, value: Any) -> float:
    """Returns ``value`` as a float, or raises if it is not a finite number > 0."""
    value = check_float(name, value)
    if value <= 0:
        raise ValueError(f"`{name}` must be a finite number > 0, got {value}.")
    return value


def check_bool(name: str, value: Any) -> bool:
    """Returns ``value`` if it is a bool; the string ``"false"`` of a JSON file is not."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(
            f"`{name}` must be true or false (a bool), got {value!r} "
            f"({type(value).__name__})."
        )
    return bool(value)


def check_float_dtype(name: str, dtype: Any) -> Any:
    """Returns ``dtype`` if it is a floating-point dtype (None passes through)."""
    if dtype is None:
        return None
    try:
        canonical = jnp.dtype(dtype)
    except TypeError:
        raise TypeError(f"`{name}` must be a floating dtype, got {dtype!r}.") from None
    if not jnp.issubdtype(canonical, jnp.floating):
        raise TypeError(
            f"`{name}` must be a floating dtype (e.g. jnp.float32 or jnp.bfloat16), "
            f"got {canonical}."
        )
    return dtype


def check_float_array(name: str, value: Any) -> None:
    """Raises ``TypeError`` unless ``value`` is a floating-point array.

    An integer q or embedding would have its rotation truncated back to integers.
    """
    dtype = getattr(value, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(
            f"`{name}` must be a floating-point array, got "
            f"{type(value).__name__} of dtype {dtype}. Hint: cast with "
            f"{name}.astype(jnp.float32)."
        )


def check_rope_config(name: str, value: Any, config_type: type) -> None:
    """Raises ``TypeError`` unless ``value`` is a ``config_type`` (the
    :class:`flax_posenc.RopeConfig`, passed in: this module sits below it).

    A ``config.json`` dict in its place used to fail on ``.head_dim`` with an
    ``AttributeError``.
    """
    if isinstance(value, config_type):
        return
    if isinstance(value, Mapping):
        hint = (
            "read a Hugging Face config.json dict with "
            "fp.rope_config_from_hf(config_dict)"
        )
    else:
        hint = "build one with fp.RopeConfig(head_dim=..., theta=...)"
    shown = " ".join(repr(value).split())  # one line
    shown = shown if len(shown) <= 80 else shown[:76] + " ..."
    raise TypeError(
        f"`{name}` must be a flax_posenc.RopeConfig, got {type(value).__name__} "
        f"{shown}. Hint: {hint}."
    )


def check_instance(name: str, value: Any, cls: type) -> None:
    """Raises ``TypeError`` unless ``value`` is a ``cls`` (a flax_posenc type)."""
    if not isinstance(value, cls):
        raise TypeError(
            f"`{name}` must be a flax_posenc.{cls.__name__}, got "
            f"{type(value).__name__}. Hint: fp.{cls.__name__}(...), see its docstring."
        )


def check_choice(name: str, value: Any, choices: Collection[_T]) -> _T:
    """Raises unless ``value`` is one of ``choices``."""
    if value not in choices:
        expected = ", ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}` must be one of {expected}, got {value!r}.")
    return value


def _graph_int() -> np.dtype:
    """The integer type concrete values enter a graph as: int32, int64 with x64."""
    return jnp.dtype(jax.dtypes.canonicalize_dtype(jnp.int64))


def _integer_hint(name: str) -> str:
    """What an integer argument named ``name`` holds, for a dtype error."""
    if "segment_ids" in name:
        return (
            "segment ids are one integer id per token, equal within a packed "
            "sequence (e.g. 1 1 1 2 2, padding its own id such as 0); a boolean "
            "padding mask goes to `mask`."
        )
    if "positions" in name:
        return "build positions with jnp.arange or flax_posenc.positions helpers."
    return f"pass whole numbers as an integer dtype, e.g. jnp.asarray({name}, int)."


def check_integer_array(name: str, value: Any) -> jax.Array:
    """Returns ``value`` as a JAX integer array of at least 32 bits, or raises.

    Positions are indices: a float or bool array almost always means a caller passed
    the wrong thing (e.g. embeddings or a mask), so it is a ``TypeError`` rather than
    truncated. Narrow integers (int8, uint16, ...) are widened to int32 before any
    arithmetic (``max(positions) + 1`` of int8 127 would wrap to -128). Concrete
    values that the JAX integer type cannot hold (int64 numpy positions with x64
    off, uint32 above ``2**31 - 1``) are a ``ValueError`` instead of wrapping.
    """
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        value = np.asarray(value)
        dtype = value.dtype
    if not jnp.issubdtype(dtype, jnp.integer):
        shape = getattr(value, "shape", ())
        raise TypeError(
            f"`{name}` must be an integer array, got dtype {dtype} with shape "
            f"{tuple(shape)}. Hint: {_integer_hint(name)}"
        )
    if not is_traced(value) and not isinstance(value, jax.Array):
        value = np.asarray(value)
        target = _graph_int()
        bounds = np.iinfo(target)
        if value.size and (value.min() < bounds.min or value.max() > bounds.max):
            raise ValueError(
                f"`{name}` must fit in {target} (values in [{bounds.min}, "
                f"{bounds.max}]), got values in [{value.min()}, {value.max()}]. "
                "Hint: positions past 2**31 need jax_enable_x64."
            )
        # Widened on the host and placed as is: jnp.asarray of a numpy array
        # compiles a copy program per new shape.
        return jax.device_put(value.astype(target))
    value = jnp.asarray(value)
    if value.dtype.itemsize < 4 or value.dtype == jnp.uint32:
        if value.dtype == jnp.uint32 and not is_traced(value) and value.size:
            if int(value.max()) > np.iinfo(np.int32).max:
                raise ValueError(
                    f"`{name}` must fit in int32, got uint32 values up to "
                    f"{int(value.max())}."
                )
        value = value.astype(jnp.int32)
    return value


def check_positions(
    name: str, positions: Any, target_name: str, target: tuple[int, ...]
) -> jax.Array:
    """Integer positions ``[..., L]`` for an input whose leading shape is ``target``
    (:func:`check_integer_array`, then :func:`check_positions_shape`)."""
    positions = check_integer_array(name, positions)
    check_positions_shape(name, positions, target_name, target)
    return positions


def check_positions_shape(
    name: str, positions: Any, target_name: str, target: tuple[int, ...]
) -> None:
    """Raises unless checked integer ``positions`` obey the positions rule for an
    input whose leading shape is ``target``.

    The positions rule of the whole library: the trailing length axis equals the
    input's length exactly (a ``[1]`` does not stand for every token), only leading
    (batch) axes broadcast, and the result is never larger than the input.
    """
    target = tuple(target)
    shape = tuple(positions.shape)
    if not obeys_positions_rule(shape, target):
        length = target[-1] if target else "L"
        hint = f"jnp.arange({length}), or [B, L] positions."
        if len(target) >= 2 and shape and shape[-1] != length:
            # [B, N, L, H] (PyTorch's layout) reads as L = N here.
            hint = (
                f"flax_posenc reads L from axis -3 of [..., L, N, H] (Flax's "
                f"layout), {length} here; an array in PyTorch's [B, N, L, H] layout "
                f"needs jnp.swapaxes({target_name.split('.')[0]}, -3, -2) first. "
                f"Otherwise {hint}"
            )
        raise ValueError(
            f"`{name}` must be [..., L] with L = {length}, one position per token, "
            f"and leading axes that broadcast to {target_name} = {target}; got shape "
            f"{shape}. Hint: {hint}"
        )


def obeys_positions_rule(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether ``shape [..., L]`` (positions, or a table's leading axes) obeys the
    positions rule for an input of leading shape ``target``: same trailing length,
    leading axes that broadcast, never a larger result."""
    if not shape or not target or len(shape) > len(target):
        return False
    if shape[-1] != target[-1]:
        return False
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def check_broadcastable(
    name: str, shape: tuple[int, ...], target_name: str, target: tuple[int, ...]
) -> None:
    """Raises unless ``shape`` broadcasts to exactly ``target`` (numpy rules)."""
    try:
        result = np.broadcast_shapes(shape, target)
    except ValueError:
        result = None
    if result != tuple(target):
        raise ValueError(
            f"`{name}` with shape {tuple(shape)} must broadcast to {target_name} "
            f"with shape {tuple(target)}."
        )


def is_traced(value: Any) -> bool:
    """Whether ``value`` is an abstract value inside a JAX transformation."""
    return isinstance(value, Tracer)


def check_heads_array(name: str, x: Any, head_dim: int) -> None:
    """Raises unless ``x`` is a floating ``[..., L, N, H]`` with ``H == head_dim``."""
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) < 3 or shape[-1] != head_dim:
        raise ValueError(
            f"`{name}` must be [..., L, N, H] with H = config.head_dim ({head_dim}), "
            f"got shape {shape}."
        )
    check_float_array(name, x)


def check_rotary_dim(rotary_dim: Any, head: int, head_name: str) -> int:
    """``rotary_dim`` as an int, or raises unless it is even, positive and at most
    ``head`` (named ``head_name`` in the message)."""
    rotary_dim = check_positive_int("rotary_dim", rotary_dim)
    if rotary_dim % 2 or rotary_dim > head:
        raise ValueError(
            f"`rotary_dim` must be even and <= {head_name} ({head}), got {rotary_dim}."
        )
    return rotary_dim


def check_seq_len(
    seq_len: Any,
    positions_name: str = "positions",
    positions_shape: Any = None,
    *,
    name: str = "seq_len",
) -> Any:
    """None, a positive int, or an integer array (traced or not) of per-token lengths
    whose shape obeys the positions rule for ``positions_shape`` when given
    (:func:`check_seq_len_shape`)."""
    if seq_len is None:
        return None
    if isinstance(seq_len, (int, np.integer)) and not isinstance(seq_len, bool):
        seq_len = check_positive_int(name, seq_len)
        target = _graph_int()
        if seq_len > np.iinfo(target).max:  # it enters the graph as a `target` scalar
            raise ValueError(
                f"`{name}` must fit in {target} (at most {np.iinfo(target).max}), "
                f"got {seq_len}. Hint: lengths past 2**31 need jax_enable_x64."
            )
        return seq_len
    dtype = getattr(seq_len, "dtype", None)
    if dtype is None and not isinstance(seq_len, (str, bytes, bool)):
        dtype = np.asarray(seq_len).dtype  # a list of per-token lengths
    if dtype is None or not jnp.issubdtype(dtype, jnp.integer):
        shown = f"dtype {dtype}" if hasattr(seq_len, "dtype") else repr(seq_len)
        raise TypeError(
            f"`{name}` must be a positive int, an int scalar or an integer array of "
            f"per-token lengths, got {shown} ({type(seq_len).__name__}). Hint: "
            f"{name}=<the sequence length> (e.g. 4096), or None for "
            "max(positions) + 1."
        )
    seq_len = check_integer_array(name, seq_len)
    if positions_shape is not None:
        check_seq_len_shape(seq_len, positions_name, positions_shape)
    return seq_len


def check_seq_len_shape(
    seq_len: Any, positions_name: str, positions_shape: Any
) -> None:
    """Raises unless a checked per-token ``seq_len`` (an array with axes) obeys the
    positions rule for ``positions_name`` of shape ``positions_shape``; an int,
    a scalar or None passes."""
    if getattr(seq_len, "ndim", 0) and not obeys_positions_rule(
        tuple(seq_len.shape), tuple(positions_shape)
    ):
        raise ValueError(
            f"A per-token `seq_len` must have the shape of {positions_name} "
            f"{tuple(positions_shape)} (leading axes may broadcast), got shape "
            f"{seq_len.shape}."
        )


def check_seq_len_covers(
    seq_len: Any,
    positions: Any,
    positions_name: str,
    config: Any,
    *,
    name: str = "seq_len",
) -> None:
    """Raises where a concrete ``seq_len`` (checked) of a family whose frequencies
    follow it (dynamic NTK, LongRoPE) is not above a concrete position: transformers
    forms them at ``max(position_ids) + 1``, never below a token's own position."""
    if seq_len is None or not config.depends_on_seq_len:
        return
    if is_traced(seq_len) or is_traced(positions) or not np.size(positions):
        return
    lengths, values = np.asarray(seq_len), np.asarray(positions)
    short = lengths <= values  # per-token lengths obey the positions rule
    if np.any(short):
        at = np.unravel_index(
            np.argmax(np.broadcast_to(short, short.shape)), short.shape
        )
        length = int(np.broadcast_to(lengths, short.shape)[at])
        position = int(np.broadcast_to(values, short.shape)[at])
        raise ValueError(
            f"`{name}` must exceed every position it serves for "
            f"{type(config.scaling).__name__} (its frequencies follow the length, and "
            f"transformers forms them at max(position_ids) + 1), got seq_len {length} "
            f"for a token of {positions_name} at {position}. Hint: {name}=None for "
            f"max({positions_name}) + 1, or the length the sequence has."
        )


def check_bucket_sizes(num_buckets: Any, max_distance: Any, bidirectional: Any) -> int:
    """Validates T5's bucket hyper-parameters; returns the buckets per direction."""
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise TypeError(f"`bidirectional` must be a bool, got {bidirectional!r}.")
    num_buckets = check_positive_int("num_buckets", num_buckets)
    max_distance = check_positive_int("max_distance", max_distance)
    if bidirectional and num_buckets % 2:
        raise ValueError(
            "`num_buckets` must be even when bidirectional=True (half of the buckets "
            f"per direction), got {num_buckets}."
        )
    buckets = num_buckets // 2 if bidirectional else num_buckets
    if buckets < 2:
        raise ValueError(
            f"`num_buckets` must give >= 2 buckets per direction, got {num_buckets} "
            f"with bidirectional={bidirectional}."
        )
    if max_distance <= buckets // 2:
        raise ValueError(
            f"`max_distance` must exceed the {buckets // 2} exact buckets per "
            f"direction (num_buckets={num_buckets}, bidirectional={bidirectional}), "
            f"got {max_distance}."
        )
    return buckets


def check_position_pairs(
    q_positions: Any, k_positions: Any
) -> tuple[jax.Array, jax.Array]:
    """Integer ``[..., L]`` and ``[..., S]`` whose leading (batch) axes broadcast."""
    pairs = []
    for name, value in (("q_positions", q_positions), ("k_positions", k_positions)):
        value = check_integer_array(name, value)
        if value.ndim < 1:
            raise ValueError(
                f"`{name}` must be [..., L] (rank >= 1), got shape "
                f"{tuple(value.shape)}."
            )
        pairs.append(value)
    q_positions, k_positions = pairs
    try:
        np.broadcast_shapes(q_positions.shape[:-1], k_positions.shape[:-1])
    except ValueError:
        raise ValueError(
            "The leading dimensions of `q_positions` [..., L] and `k_positions` "
            "[..., S] must broadcast, got shapes "
            f"{tuple(q_positions.shape)} and {tuple(k_positions.shape)}."
        ) from None
    return q_positions, k_positions
