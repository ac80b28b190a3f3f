"""Input checks shared by every encoding; they run at trace time, before any work.

Each raises ``ValueError`` or ``TypeError`` with the argument's name, what was expected
and what was given.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer


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


def check_choice(name: str, value: Any, choices: Collection[str]) -> str:
    """Raises unless ``value`` is one of ``choices``."""
    if value not in choices:
        expected = ", ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}` must be one of {expected}, got {value!r}.")
    return value


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
            f"{tuple(shape)}. Hint: build positions with jnp.arange or "
            "flax_posenc.positions helpers."
        )
    if not is_traced(value) and not isinstance(value, jax.Array):
        value = np.asarray(value)
        target = jnp.dtype(jax.dtypes.canonicalize_dtype(jnp.int64))
        bounds = np.iinfo(target)
        if value.size and (value.min() < bounds.min or value.max() > bounds.max):
            raise ValueError(
                f"`{name}` must fit in {target} (values in [{bounds.min}, "
                f"{bounds.max}]), got values in [{value.min()}, {value.max()}]. "
                "Hint: positions past 2**31 need jax_enable_x64."
            )
        value = value.astype(target)
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
    """Integer positions ``[..., L]`` for an input whose leading shape is ``target``.

    The positions rule of the whole library: the trailing length axis equals the
    input's length exactly (a ``[1]`` does not stand for every token), only leading
    (batch) axes broadcast, and the result is never larger than the input.
    """
    positions = check_integer_array(name, positions)
    target = tuple(target)
    shape = tuple(positions.shape)
    if not obeys_positions_rule(shape, target):
        length = target[-1] if target else "L"
        raise ValueError(
            f"`{name}` must be [..., L] with L = {length}, one position per token, "
            f"and leading axes that broadcast to {target_name} = {target}; got shape "
            f"{shape}. Hint: jnp.arange({length}), or [B, L] positions."
        )
    return positions


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
