"""What many test modules share: random data and a tolerance in ulps.

Random data comes from numpy, not ``jax.random``: ``jax.random.normal`` compiles
once per shape (about a second each at import on a 2-core CPU, for data no test
needs to be bit-identical to JAX's generator).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def normal(shape, dtype=jnp.float32, seed=0) -> jax.Array:
    """Standard normal ``shape`` in ``dtype`` (drawn in float32, rounded once)."""
    values = np.random.default_rng(seed).standard_normal(shape, np.float32)
    # Rounded on the host and placed as is: jnp.asarray compiles a copy per shape.
    return jax.device_put(values.astype(dtype))


def normals(count, shape, dtype=jnp.float32, seed=0) -> tuple[jax.Array, ...]:
    """``count`` independent :func:`normal` arrays of one shape."""
    values = np.random.default_rng(seed).standard_normal((count, *shape), np.float32)
    return tuple(jax.device_put(v.astype(dtype)) for v in values)


def assert_close(got, want, ulps=4):
    """Equal within ``ulps`` units of ``got.dtype``'s epsilon, relative to the
    largest magnitude of ``want``: the same float math fused differently (jit or
    a partitioned program against eager) differs by a few of them."""
    eps = float(jnp.finfo(jnp.asarray(got).dtype).eps)
    scale = float(np.max(np.abs(np.asarray(want, np.float64)), initial=1.0))
    np.testing.assert_allclose(
        np.asarray(got, np.float64),
        np.asarray(want, np.float64),
        rtol=0,
        atol=ulps * eps * scale,
    )
