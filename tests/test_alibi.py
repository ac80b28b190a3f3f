"""ALiBi slopes and bias against the paper's rule (float64) and Bloom / MPT fixtures."""

import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flax_posenc as fp

FIXTURES = json.loads(
    (pathlib.Path(__file__).parent / "fixtures" / "hf_bias.json").read_text()
)
alibi_jit = jax.jit(fp.alibi_bias, static_argnums=2)


def paper_slopes(num_heads):
    """Press et al. 2022: slopes of the closest lower power of two n, 2^(-8i/n),
    then every other slope of 2n for the remaining heads. float64."""
    n = 2 ** math.floor(math.log2(num_heads))
    slopes = [2.0 ** (-8.0 * i / n) for i in range(1, n + 1)]
    slopes_2n = [2.0 ** (-8.0 * i / (2 * n)) for i in range(1, 2 * n + 1)]
    return np.array(slopes + slopes_2n[0::2][: num_heads - n], np.float64)


@pytest.mark.parametrize("num_heads", [8, 12, 20, 24, 40])
def test_slopes_follow_the_paper_count_and_order(num_heads):
    got = fp.alibi_slopes(num_heads)
    expected = paper_slopes(num_heads)
    assert got.dtype == np.float32
    assert got.shape == (num_heads,)
    # Computed in float64 and rounded once: exactly the nearest float32.
    np.testing.assert_array_equal(got, expected.astype(np.float32))


def test_slopes_for_12_heads_by_hand():
    """The first 8 are 2^-1..2^-8 (n = 8); then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5."""
    expected = [2.0**-k for k in range(1, 9)] + [2.0 ** -(k + 0.5) for k in range(4)]
    np.testing.assert_array_equal(
        fp.alibi_slopes(12), np.array(expected).astype(np.float32)
    )


@pytest.mark.parametrize("num_heads", range(1, 65))
def test_slopes_match_mpt_exactly_and_bloom_within_6_ulp(num_heads):
    mpt = FIXTURES["alibi_mpt"]["cases"][num_heads - 1]
    bloom = FIXTURES["alibi_bloom"]["cases"][num_heads - 1]
    assert mpt["num_heads"] == bloom["num_heads"] == num_heads
    got = fp.alibi_slopes(num_heads)
    np.testing.assert_array_equal(got, np.asarray(mpt["slopes"], np.float32))
    # Bloom's float32 pow(base, k) is off by up to 6 ulp (relative 4.8e-7).
    np.testing.assert_allclose(got, np.asarray(bloom["slopes"], np.float32), rtol=6e-7)


@pytest.mark.parametrize("batch", [(), (2,)])
def test_bias_matches_float64_formula(batch):
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.integers(0, 3000, (*batch, 5)), jnp.int32)
    k = jnp.asarray(rng.integers(0, 3000, (*batch, 7)), jnp.int32)
    got = alibi_jit(q, k, 12)
    assert got.dtype == jnp.float32
    assert got.shape == (*batch, 12, 5, 7)
    qn, kn = np.asarray(q, np.float64), np.asarray(k, np.float64)
    distance = np.abs(qn[..., None, :, None] - kn[..., None, None, :])
    expected = -paper_slopes(12)[:, None, None] * distance
    # One float32 rounding of the slope and one of the product: 2 ulp.
    np.testing.assert_allclose(got, expected, rtol=2.5e-7, atol=0)


def test_bias_broadcasts_query_and_key_batches():
    q = jnp.arange(3)[None] + jnp.array([[0], [10]])  # [2, 3]
    k = jnp.arange(4)  # [4] shared by the batch
    got = fp.alibi_bias(q, k, 4)
    assert got.shape == (2, 4, 3, 4)
    np.testing.assert_array_equal(got[1], fp.alibi_bias(q[1], k, 4))


@given(st.integers(0, 10**6), st.integers(-1000, 1000))
def test_decode_step_equals_row_of_full_bias_and_shift_invariance(offset, shift):
    positions = jnp.arange(6) + offset
    full = alibi_jit(positions, positions, 5)
    step = alibi_jit(positions[-1:], positions, 5)
    np.testing.assert_array_equal(step[:, 0], full[:, -1])
    shifted = alibi_jit(positions + shift, positions + shift, 5)
    np.testing.assert_array_equal(shifted, full)


def test_causal_softmax_equals_bloom_form():
    """Bloom adds slope * k_pos under a causal mask: same softmax as -slope*|q-k|."""
    length, heads = 6, 5
    logits = np.random.default_rng(0).normal(size=(heads, length, length))
    causal = np.tril(np.ones((length, length), bool))
    bloom = logits + paper_slopes(heads)[:, None, None] * np.arange(length)

    def softmax(z):
        z = np.where(causal, z, -np.inf)
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    ours = logits + np.asarray(alibi_jit(jnp.arange(length), jnp.arange(length), heads))
    np.testing.assert_allclose(softmax(ours), softmax(bloom), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((jnp.arange(3), jnp.arange(3), 0), ValueError, "num_heads"),
        ((jnp.arange(3), jnp.arange(3), -2), ValueError, "num_heads"),
        ((jnp.arange(3), jnp.arange(3), 2.0), TypeError, "num_heads"),
        ((jnp.arange(3.0), jnp.arange(3), 2), TypeError, "q_positions"),
        ((jnp.arange(3), jnp.arange(3.0), 2), TypeError, "k_positions"),
        ((jnp.zeros((2, 3), int), jnp.zeros((3, 4), int), 2), ValueError, "broadcast"),
        ((jnp.int32(0), jnp.arange(3), 2), ValueError, "q_positions"),
    ],
)
def test_bad_inputs(args, error, match):
    with pytest.raises(error, match=match):
        fp.alibi_bias(*args)
    if isinstance(args[2], int) and args[2] <= 0:
        with pytest.raises(error, match=match):
            fp.alibi_slopes(args[2])
