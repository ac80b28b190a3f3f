"""sin and cos of float32 angles: the reference, and the switch to the CPU form.

The reference is XLA's ``jnp.sin``/``jnp.cos``, which every backend but CPU runs. On
CPU, :mod:`flax_posenc._core.cpu` evaluates them by range reduction and multiply/add
polynomials, within 2 ulp plus ``|x| * 2^-24`` of float64 truth of the same float32
angle (``tests/test_sincos.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from flax_posenc._core import cpu as _cpu

__all__ = ["sin_cos", "sin_cos_quadrant"]


def _sin_cos(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jnp.sin(x), jnp.cos(x)


def _sin_cos_quadrant(r: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
    return _cpu.quadrant(jnp.sin(r), jnp.cos(r), q)


def sin_cos(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sin x, cos x)`` of float32 angles ``x``."""
    x = jnp.asarray(x, jnp.float32)
    return _cpu.on_cpu(_cpu.sin_cos, _sin_cos, x)


def sin_cos_quadrant(r: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sin, cos)`` of ``r + q pi/2`` for float32 ``|r| <= pi/4`` and int32 ``q``.

    For angles already reduced (the exact angles of :mod:`flax_posenc._core.exact_angles`):
    no range reduction, the quadrant ``q mod 4`` only swaps and negates (exact).
    """
    return _cpu.on_cpu(_cpu.sin_cos_quadrant, _sin_cos_quadrant, r, q)
