"""Training positions for length generalisation: randomized positional encodings
(Ruoss et al. 2023) and PoSE (Zhu et al. 2023). Sorted, in range, distinct,
jit-able with a traced key and static sizes; the draws cover the whole range, and
PoSE's follow the paper's distribution (tests/length_reference.py enumerates it)."""

import chex
import jax
import length_reference as ref
import numpy as np
import pytest

import flax_posenc as fp

draw_pose = jax.jit(
    fp.pose_positions,
    static_argnums=(1, 2),
    static_argnames=("num_chunks", "batch_shape"),
)


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
    assert np.all(np.diff(three, axis=-1) >= 1)  # the skips never decrease
    assert np.all(np.sum(np.diff(three, axis=-1) > 1, axis=-1) <= 2)
    np.testing.assert_array_equal(
        fp.pose_positions(jax.random.key(3), 5, 9, num_chunks=1), np.arange(5)
    )


def marginal_ks(samples, cdfs):
    """The largest Kolmogorov-Smirnov distance between each token's empirical
    position distribution and ``cdfs [L, max_len]``."""
    counts = [np.bincount(column, minlength=cdfs.shape[1]) for column in samples.T]
    empirical = np.cumsum(np.stack(counts), axis=1) / len(samples)
    return float(np.max(np.abs(empirical - cdfs)))


def exact_cdfs(length, max_len, num_chunks):
    """Each token's position distribution under the paper's draws, [L, max_len]."""
    marginals = np.zeros((length, max_len))
    for positions, p in ref.pose_distribution(length, max_len, num_chunks).items():
        marginals[np.arange(length), list(positions)] += p
    return np.cumsum(marginals, axis=1)


@pytest.mark.parametrize("num_chunks", [1, 2, 3, 4])
def test_pose_positions_follow_the_papers_sequential_draws(num_chunks):
    """50000 windows of 6 tokens in [0, 10) against the exact distribution of the
    paper's draws: a sampling noise of about 1 / sqrt(50000) = 0.0045 per token
    (at most 0.012 over 5 seeds); sorted independent skips and uniform cut points
    are 0.1 away with 3 chunks, 0.25 with 4."""
    samples = draw_pose(
        jax.random.key(num_chunks), 6, 10, num_chunks=num_chunks, batch_shape=(50000,)
    )
    assert marginal_ks(np.asarray(samples), exact_cdfs(6, 10, num_chunks)) < 0.012


@pytest.mark.parametrize("num_chunks", [2, 3])
def test_pose_positions_reach_the_top_of_the_skip_range(num_chunks):
    """The last skip takes max_len - L (both ends of U{u_{i-1}, ..., max_len -
    L}): with 3 tokens in [0, 5) the last position is 4 in 1/3 (2 chunks) and 5/9
    (3 chunks) of the windows."""
    samples = np.asarray(
        draw_pose(jax.random.key(5), 3, 5, num_chunks=num_chunks, batch_shape=(900,))
    )
    assert samples.max() == 4 and np.mean(samples[:, -1] == 4) > 0.25


@pytest.mark.slow
@pytest.mark.parametrize("num_chunks", [2, 3, 4])
def test_pose_positions_match_a_sample_of_the_papers_draws_at_its_sizes(num_chunks):
    """16 tokens extended to 216 (the sizes of issue 31: with 3 chunks the mean
    last skip is 150 and the first chunk 7.5 tokens long on average), against
    200000 windows drawn by a numpy transcription of the paper's code."""
    rng = np.random.default_rng(num_chunks)
    want = ref.pose_sample(rng, 16, 216, num_chunks, 200_000)
    got = np.asarray(
        draw_pose(
            jax.random.key(7), 16, 216, num_chunks=num_chunks, batch_shape=(200_000,)
        )
    )
    counts = [np.bincount(column, minlength=216) for column in want.T]
    cdfs = np.cumsum(np.stack(counts), axis=1) / len(want)
    # two samples of 200000: a noise of about sqrt(2 / 200000) = 0.003
    assert marginal_ks(got, cdfs) < 0.01
    if num_chunks == 3:
        assert abs(np.mean(got[:, -1] - 15) - 150.0) < 1.0  # 6 standard errors


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
