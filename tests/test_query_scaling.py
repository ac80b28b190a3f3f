"""Position-dependent query scaling against float64 transcriptions of its formula."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

import flax_posenc as fp

# Llama 4's attn_temperature_tuning: attn_scale 0.1, floor_scale 8192, p + 1.
LLAMA4 = fp.QueryScaling(scale=0.1, floor_scale=8192.0, offset=1)


def test_bfloat16_query_is_rounded_once():
    """q = 1.5 at position 8191: factor ``1 + 0.1 ln(1 + floor(8192 / 8192))``;
    ``1.5 * factor = 1.60397`` rounds once to bfloat16 1.6015625. Rounding the
    factor to bfloat16 first (1.0703125) gives 1.5 * 1.0703125 = 1.60546875, a
    tie that rounds to 1.609375."""
    factor = 1 + 0.1 * math.log1p(math.floor((8191 + 1) / 8192))
    want = np.asarray(1.5 * factor, np.float64).astype(jnp.bfloat16)
    assert float(want) == 1.6015625
    twice = np.asarray(1.5 * float(np.asarray(factor).astype(jnp.bfloat16)))
    assert float(twice.astype(jnp.bfloat16)) == 1.609375  # what the test rules out
    q = jnp.full((1, 1, 1, 4), 1.5, jnp.bfloat16)  # [B, L, N, H]
    for run in (lambda f: f, jax.jit):
        got = run(lambda q, p: fp.apply_query_scaling(q, p, LLAMA4))(
            q, jnp.array([8191])
        )
        assert got.dtype == jnp.bfloat16
        np.testing.assert_array_equal(
            np.asarray(got, np.float32), np.full((1, 1, 1, 4), float(want))
        )
