"""Test helpers for the JAX versions between the declared floor and the pin."""

from __future__ import annotations

import jax


def enable_x64():
    """``jax.enable_x64(True)``; ``jax.experimental.enable_x64()`` before jax 0.8."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64 as experimental_enable_x64

    return experimental_enable_x64()
