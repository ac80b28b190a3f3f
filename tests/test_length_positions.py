"""Training positions for length generalisation: randomized positional encodings
(Ruoss et al. 2023) and PoSE (Zhu et al. 2023). Sorted, in range, distinct,
jit-able with a traced key and static sizes; the draws cover the whole range."""

import chex
import jax
import numpy as np
import pytest

import flax_posenc as fp


def test_randomized_positions_are_a_sorted_subset_covering_the_range():
    p = jax.jit(
        fp.randomized_positions, static_argnums=(1, 2), static_argnames="batch_shape"
    )(jax.random.key(0), 8, 64, batch_shape=(500,))
    p = np.asarray(p)
    assert p.shape == (500, 8) and p.dtype == np.int32
    assert np.all(np.diff(p, axis=-1) > 0)  # sorted and distinct
    assert p.min() >= 0 and p.max() < 64
    counts = np.bincount(p.ravel(), minlength=64)
    # uniform without replacement: each position appears 500 * 8 / 64 = 62.5 times
    # on average; a binomial's 5 sigma is about 38.
    assert counts.min() > 20 and counts.max() < 105, counts


def test_pose_positions_are_contiguous_chunks_with_skips():
    p = np.asarray(fp.pose_positions(jax.random.key(1), 16, 128, batch_shape=(400,)))
    assert p.shape == (400, 16) and p.dtype == np.int32
    steps = np.diff(p, axis=-1)
    assert np.all(steps >= 1) and p.max() < 128 and np.all(p[:, 0] == 0)
    jumps = np.sum(steps > 1, axis=-1)
    assert jumps.max() <= 1  # two chunks: at most one skip
    assert np.mean(jumps) > 0.9  # a skip of 0 is rare
    assert p[:, -1].max() > 120  # the far end of the range is reached
    three = np.asarray(
        fp.pose_positions(jax.random.key(2), 16, 128, num_chunks=3, batch_shape=(50,))
    )
    assert np.all(np.sum(np.diff(three, axis=-1) > 1, axis=-1) <= 2)
    np.testing.assert_array_equal(
        fp.pose_positions(jax.random.key(3), 5, 9, num_chunks=1), np.arange(5)
    )


@pytest.mark.parametrize("fn", [fp.randomized_positions, fp.pose_positions])
def test_traced_key_and_no_retrace(fn):
    chex.clear_trace_counter()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def draw(key):
        return fn(key, 6, 30, batch_shape=(2,))

    first, second = draw(jax.random.key(0)), draw(jax.random.key(1))
    assert first.shape == (2, 6)
    assert not np.array_equal(first, second)
    # length == max_len leaves one choice: 0..L-1
    np.testing.assert_array_equal(fn(jax.random.key(4), 6, 6), np.arange(6))


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda f: f(jax.random.key(0), 8, 4),
            ValueError,
            r"`length` \(8\) must be <= `max_len` \(4\)",
        ),
        (lambda f: f(jax.random.key(0), 0, 4), ValueError, "length"),
        (lambda f: f(jax.random.key(0), 4, 8.0), TypeError, "max_len"),
        (
            lambda f: f(0, 4, 8),
            TypeError,
            r"`key` must be a JAX PRNG key.*jax.random.key\(0\)",
        ),
        (
            lambda f: f(jax.random.split(jax.random.key(0)), 4, 8),
            ValueError,
            "batch_shape instead",
        ),
        (
            lambda f: f(jax.random.key(0), 4, 8, batch_shape="B"),
            TypeError,
            "batch_shape",
        ),
    ],
)
@pytest.mark.parametrize("fn", [fp.randomized_positions, fp.pose_positions])
def test_errors_name_the_argument(fn, call, error, match):
    with pytest.raises(error, match=match):
        call(fn)


def test_pose_rejects_more_chunks_than_tokens():
    with pytest.raises(ValueError, match=r"`num_chunks` must be <= length \(4\)"):
        fp.pose_positions(jax.random.key(0), 4, 16, num_chunks=5)
