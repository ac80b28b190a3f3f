"""Sinusoidal encoding against a float64 numpy transcription of the formulas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from branches import BRANCHES, run_branch

import flax_posenc as fp


def reference(positions, dim, base, layout, spacing):
    """float64 transcription: Vaswani et al. 2017 and tensor2tensor's timescales."""
    i = np.arange(dim // 2, dtype=np.float64)
    if spacing == "paper":
        inv_freq = 1.0 / base ** (2.0 * i / dim)
    else:  # tensor2tensor get_timing_signal_1d: log-spaced from 1 to base
        inv_freq = np.exp(-np.log(base) * i / max(dim // 2 - 1, 1))
    angles = np.asarray(positions, np.float64)[..., None] * inv_freq
    out = np.zeros(np.shape(positions) + (dim,))
    if layout == "interleaved":
        out[..., 0 : 2 * (dim // 2) : 2] = np.sin(angles)
        out[..., 1 : 2 * (dim // 2) : 2] = np.cos(angles)
    else:
        out[..., : dim // 2] = np.sin(angles)
        out[..., dim // 2 : 2 * (dim // 2)] = np.cos(angles)
    return out


def test_paper_walkthrough_rows():
    table = np.asarray(fp.sinusoidal_table(8, 6))
    np.testing.assert_allclose(table[0], [0, 1, 0, 1, 0, 1], atol=5e-5)
    np.testing.assert_allclose(
        table[1], [0.8415, 0.5403, 0.0464, 0.9989, 0.0022, 1.0000], atol=5e-5
    )
    np.testing.assert_allclose(
        table[7], [0.6570, 0.7539, 0.3192, 0.9477, 0.0151, 0.9999], atol=5e-5
    )


def test_flax_lm1b_example_table():
    """Flax's lm1b/wmt `sinusoidal_init`: concat layout, timescales 1..max_scale."""
    max_len, dim, max_scale = 16, 10, 10000.0
    position = np.arange(max_len)[:, None]
    scale_factor = -np.log(max_scale) / (dim // 2 - 1)
    div_term = np.exp(np.arange(dim // 2) * scale_factor)
    expected = np.concatenate(
        [np.sin(position * div_term), np.cos(position * div_term)], 1
    )
    got = fp.sinusoidal_table(max_len, dim, layout="half", spacing="tensor2tensor")
    np.testing.assert_allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("spacing", ["paper", "tensor2tensor"])
@pytest.mark.parametrize(
    "dim",
    [
        2,
        pytest.param(3, marks=pytest.mark.slow),
        pytest.param(8, marks=pytest.mark.slow),
        33,
        128,
    ],
)
@pytest.mark.parametrize("base", [10000.0, pytest.param(500.0, marks=pytest.mark.slow)])
def test_matches_float64_formula(layout, spacing, dim, base, branch):
    positions = jnp.array([[0, 1, 2, 5], [17, 100, 1023, 4095]])
    got = run_branch(
        lambda p: fp.sinusoidal_encoding(
            p, dim, base=base, layout=layout, spacing=spacing
        ),
        positions,
        branch=branch,
    )
    fp.testing.assert_encoding_shape(got, positions, dim, dtype=jnp.float32)
    # float32 angles up to 4095 rad: error <= angle * 2^-23 + 2e-7 <= 5e-4.
    np.testing.assert_allclose(
        got, reference(positions, dim, base, layout, spacing), atol=5e-4, rtol=0
    )


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("dim", [64, 512])
def test_float32_accuracy_bound_at_large_positions(dim, layout, branch):
    positions = np.arange(0, 100_001, 97)
    got = run_branch(
        lambda p: fp.sinusoidal_encoding(p, dim, layout=layout),
        jnp.asarray(positions),
        branch=branch,
    )
    got = np.asarray(got)
    truth = reference(positions, dim, 10000.0, layout, "paper")
    i = np.arange(dim // 2)
    angle = positions[:, None] / 10000.0 ** (2.0 * i / dim)
    if layout == "half":
        angle = np.concatenate([angle, angle], -1)
    else:
        angle = np.repeat(angle, 2, -1)
    bound = angle * 2.0**-23 + 2e-7
    assert np.all(np.abs(got - truth) <= bound)
    assert np.max(np.abs(got - truth)) < 1.2e-2


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_odd_dim_pads_last_feature_with_zero(layout, branch):
    table = run_branch(
        lambda p: fp.sinusoidal_encoding(p, 7, layout=layout),
        jnp.arange(10),
        branch=branch,
    )
    np.testing.assert_array_equal(table[:, -1], 0.0)
    np.testing.assert_allclose(
        table[:, :6],
        reference(np.arange(10), 7, 1e4, layout, "paper")[:, :6],
        atol=1e-6,
    )


def test_table_equals_encoding_of_arange():
    np.testing.assert_array_equal(
        fp.sinusoidal_table(32, 16), fp.sinusoidal_encoding(jnp.arange(32), 16)
    )


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_low_precision_dtype_is_rounded_float32(dtype, branch):
    positions = jnp.arange(0, 5000, 37)
    got = run_branch(
        lambda p: fp.sinusoidal_encoding(p, 64, dtype=dtype), positions, branch=branch
    )
    assert got.dtype == dtype
    expected = run_branch(
        lambda p: fp.sinusoidal_encoding(p, 64), positions, branch=branch
    ).astype(dtype)
    np.testing.assert_array_equal(got, expected)


def test_traced_positions_do_not_retrace():
    import chex

    @jax.jit
    @chex.assert_max_traces(n=1)
    def encode(p):
        return fp.sinusoidal_encoding(p, 16)

    for offset in range(3):
        encode(jnp.arange(8) + offset)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            dict(positions=jnp.arange(4.0), dim=8),
            TypeError,
            "`positions` must be an integer",
        ),
        (dict(positions=jnp.arange(4), dim=0), ValueError, "`dim` must be a positive"),
        (dict(positions=jnp.arange(4), dim=-3), ValueError, "`dim` must be a positive"),
        (dict(positions=jnp.arange(4), dim=8.0), TypeError, "`dim` must be a positive"),
        (dict(positions=jnp.arange(4), dim=8, layout="x"), ValueError, "`layout`"),
        (dict(positions=jnp.arange(4), dim=8, spacing="x"), ValueError, "`spacing`"),
        (dict(positions=jnp.arange(4), dim=8, base=0.0), ValueError, "`base`"),
        (
            dict(positions=jnp.arange(4), dim=8, angle_precision="float64"),
            ValueError,
            "`angle_precision` must be one of 'float32', 'exact', got 'float64'",
        ),
        (
            dict(positions=jnp.arange(4), dim=0, angle_precision="exact"),
            ValueError,
            "`dim` must be a positive",
        ),
    ],
)
def test_bad_input_is_rejected(kwargs, error, match):
    with pytest.raises(error, match=match):
        fp.sinusoidal_encoding(**kwargs)


def test_bad_max_len_is_rejected():
    with pytest.raises(ValueError, match="`max_len` must be a positive int, got 0"):
        fp.sinusoidal_table(0, 8)
