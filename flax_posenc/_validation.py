"""Input checks shared by every encoding; they run at trace time, before any work.

Each raises ``ValueError`` or ``TypeError`` with the argument's name, what was expected
and what was given.
"""

from __future__ import annotations

from collections.abc import Collection
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


def check_positive_float(name: str, value: Any) -> float:
    """Returns ``value`` as a float, or raises if it is not a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"`{name}` must be a number, got {value!r}.")
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"`{name}` must be a finite number > 0, got {value}.")
    return float(value)


def check_choice(name: str, value: Any, choices: Collection[str]) -> str:
    """Raises unless ``value`` is one of ``choices``."""
    if value not in choices:
        expected = ", ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}` must be one of {expected}, got {value!r}.")
    return value


def check_integer_array(name: str, value: Any) -> jax.Array:
    """Returns ``value`` as a JAX integer array, or raises ``TypeError``.

    Positions are indices: a float array almost always means a caller passed the
    wrong thing (e.g. embeddings), so floats are rejected rather than truncated.
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
    return jnp.asarray(value)


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
    """Raises unless ``x`` is ``[..., L, N, H]`` with ``H == head_dim``."""
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) < 3 or shape[-1] != head_dim:
        raise ValueError(
            f"`{name}` must be [..., L, N, H] with H = config.head_dim ({head_dim}), "
            f"got shape {shape}."
        )
