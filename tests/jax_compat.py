"""Test helpers for the JAX versions between the declared floor and the pin."""

from __future__ import annotations

import jax


def enable_x64():
    """``jax.enable_x64(True)``; ``jax.experimental.enable_x64()`` before jax 0.8."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64 as experimental_enable_x64

    return experimental_enable_x64()


try:
    from jax.extend.core import jaxprs_in_params
except ImportError:  # jax < 0.8
    from jax.core import jaxprs_in_params  # type: ignore[no-redef]


def primitive_names(jaxpr) -> set[str]:
    """Every primitive of ``jaxpr`` and of the jaxprs in its equations' parameters
    (nested ``jit``, ``platform_dependent``'s branches, ``scan`` bodies, ...)."""
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for sub in jaxprs_in_params(eqn.params):
            names |= primitive_names(sub)
    return names
