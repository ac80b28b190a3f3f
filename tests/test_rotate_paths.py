"""Every internal path of ``rope_rotate`` against a float64 formula.

The rotation has two code paths chosen by layout and head-dim parity, and the
interleaved one two partner reads chosen by dtype width (``flax_posenc/rope/_core.py``).
Each is checked against ``a cos - b sin, b cos + a sin`` in float64, with features
past the rotary dim passed through bit for bit (inf and NaN included), compiled at
XLA:CPU's default vector width and at the 512 bits the CPU guide recommends, with
both forms of the backend switches: the CPU sin/cos and bfloat16 casts, and the
reference every accelerator runs (``tests/branches.py``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import rope_reference as ref
from branches import BRANCHES, run_branch
from cpu_vector_width import VECTOR_WIDTH_PARAMS
from helpers import normal

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


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("vector_width", VECTOR_WIDTH_PARAMS)
@pytest.mark.parametrize(
    "dtype",
    [jnp.float32, jnp.bfloat16, pytest.param(jnp.float16, marks=pytest.mark.slow)],
)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(
    ("head_dim", "rotary_dim"),
    [(16, 16), (15, 6)]
    + [
        pytest.param(16, 8, marks=pytest.mark.slow),
        pytest.param(16, 4, marks=pytest.mark.slow),
        pytest.param(18, 8, marks=pytest.mark.slow),
    ],
)
def test_rotate_paths_match_float64(
    dtype, layout, head_dim, rotary_dim, vector_width, branch
):
    x = normal((2, 7, 3, head_dim), jnp.float32, seed=0)
    x = x.astype(dtype)
    # inf / NaN / -0 in the pass-through features must come out unchanged.
    if rotary_dim < head_dim:
        x = x.at[..., rotary_dim].set(jnp.inf).at[..., -1].set(jnp.nan)
    config = fp.RopeConfig(head_dim=head_dim, rotary_dim=rotary_dim, layout=layout)
    positions = jnp.arange(7) * 37
    cos, sin = run_branch(
        lambda p: fp.rope_cos_sin(p, config), positions, branch=branch
    )
    got = run_branch(
        lambda x, c, s: fp.rope_rotate(x, c, s, layout=layout),
        x,
        cos,
        sin,
        branch=branch,
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


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("family", ["plain", "yarn", "dynamic_ntk"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [16, pytest.param(8, marks=pytest.mark.slow)])
def test_apply_rope_matches_float64(rotary_dim, layout, family, branch):
    """The public path end to end, float32 and bfloat16 q in one compiled call."""
    config = ref.make_config(family, rotary_dim=rotary_dim, layout=layout)
    positions = jnp.array([[0, 1, 2, 3, 4], [7, 100, 999, 2500, 4095]])
    xs = [
        normal((2, 5, 3, 16), seed=0).astype(dtype)
        for dtype in (jnp.float32, jnp.bfloat16)
    ]
    outs = run_branch(
        lambda xs, p: [fp.apply_rope(x, p, config) for x in xs],
        xs,
        positions,
        branch=branch,
    )
    inv_freq, attention = ref.frequencies(config, seq_len=4096)
    ulps = 16 if family == "dynamic_ntk" else 2  # as in tests/test_rope.py
    for x, got in zip(xs, outs, strict=True):
        assert got.dtype == x.dtype
        truth, angles = ref.rope(x, positions, inv_freq, attention, layout)
        ref.assert_close_to_rope(
            got, x, truth, angles, attention, layout, angle_ulps=ulps
        )
