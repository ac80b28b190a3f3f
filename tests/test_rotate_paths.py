"""Every internal path of ``rope_rotate`` against a float64 formula.

The rotation has two code paths chosen by layout and head-dim parity, and the
interleaved one two partner reads chosen by dtype width (``flax_posenc/rope.py``).
Each is checked against ``a cos - b sin, b cos + a sin`` in float64, with features
past the rotary dim passed through bit for bit (inf and NaN included), compiled at
XLA:CPU's default vector width and at the 512 bits the CPU guide recommends.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cpu_vector_width import VECTOR_WIDTHS, run_at_width

import flax_posenc as fp


def _reference(x, cos, sin, layout):
    x = np.asarray(x, np.float64)
    cos = np.asarray(cos, np.float64)[..., None, :]
    sin = np.asarray(sin, np.float64)[..., None, :]
    half = cos.shape[-1]
    out = x.copy()
    if layout == "half":
        a, b = x[..., :half], x[..., half : 2 * half]
        out[..., :half] = a * cos - b * sin
        out[..., half : 2 * half] = b * cos + a * sin
    else:
        a, b = x[..., 0 : 2 * half : 2], x[..., 1 : 2 * half : 2]
        out[..., 0 : 2 * half : 2] = a * cos - b * sin
        out[..., 1 : 2 * half : 2] = b * cos + a * sin
    return out


@pytest.mark.parametrize("vector_width", VECTOR_WIDTHS)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(
    ("head_dim", "rotary_dim"), [(16, 16), (16, 4), (16, 8), (18, 8), (15, 6)]
)
def test_rotate_paths_match_float64(dtype, layout, head_dim, rotary_dim, vector_width):
    x = jax.random.normal(jax.random.key(0), (2, 7, 3, head_dim), jnp.float32)
    x = x.astype(dtype)
    # inf / NaN / -0 in the pass-through features must come out unchanged.
    if rotary_dim < head_dim:
        x = x.at[..., rotary_dim].set(jnp.inf).at[..., -1].set(jnp.nan)
    config = fp.RopeConfig(head_dim=head_dim, rotary_dim=rotary_dim, layout=layout)
    positions = jnp.arange(7) * 37
    cos, sin = fp.rope_cos_sin(positions, config)
    got = run_at_width(
        lambda x, c, s: fp.rope_rotate(x, c, s, layout=layout),
        x,
        cos,
        sin,
        vector_width=vector_width,
    )
    assert got.dtype == x.dtype
    want = _reference(np.asarray(x, np.float32), cos, sin, layout)
    tol = 1e-6 if dtype == jnp.float32 else 1e-2
    got = np.asarray(got, np.float64)
    np.testing.assert_allclose(
        got[..., :rotary_dim], want[..., :rotary_dim], rtol=tol, atol=tol
    )
    np.testing.assert_array_equal(
        got[..., rotary_dim:], np.asarray(x, np.float64)[..., rotary_dim:]
    )
