"""T5 relative position buckets against Hugging Face's T5 (fixtures) and a float64
transcription of mesh-tensorflow's rule; the learned bias against a numpy gather."""

import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from branches import BRANCHES, run_branch
from helpers import normal

import flax_posenc as fp

FIXTURES = json.loads(
    (pathlib.Path(__file__).parent / "fixtures" / "hf_bias.json").read_text()
)["t5_relative_position_bucket"]


def t5_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """One relative position (memory - query), straight from the T5 paper's code."""
    bucket = 0
    n = -relative_position
    if bidirectional:
        num_buckets //= 2
        bucket += num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return bucket + n
    large = max_exact + int(
        math.log(n / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    )
    return bucket + min(large, num_buckets - 1)


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize(
    "case",
    FIXTURES["cases"],
    ids=lambda c: f"bi{c['bidirectional']}-nb{c['num_buckets']}-md{c['max_distance']}",
)
def test_buckets_match_hugging_face_t5(case, branch):
    relative = jnp.asarray(FIXTURES["relative_positions"], jnp.int32)
    got = run_branch(
        lambda r: fp.relative_position_bucket(
            r,
            bidirectional=case["bidirectional"],
            num_buckets=case["num_buckets"],
            max_distance=case["max_distance"],
        ),
        relative,
        branch=branch,
    )
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(got, np.asarray(case["buckets"], np.int32))


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(
    ("num_buckets", "max_distance"), [(32, 128), (8, 20), (16, 9), (6, 1000), (4, 3)]
)
def test_buckets_match_float64_rule(bidirectional, num_buckets, max_distance):
    relative = np.arange(-3 * max_distance, 3 * max_distance + 1)
    expected = [
        t5_bucket(int(r), bidirectional, num_buckets, max_distance) for r in relative
    ]
    got = fp.relative_position_bucket(
        jnp.asarray(relative),
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )
    np.testing.assert_array_equal(got, expected)


def test_buckets_at_and_past_max_distance():
    far = jnp.array([-(10**6), -129, -128, -127, 0, 127, 128, 129, 10**6])
    np.testing.assert_array_equal(
        fp.relative_position_bucket(far), [15, 15, 15, 15, 0, 31, 31, 31, 31]
    )
    # Causal: every future key shares bucket 0; the past uses all 32 buckets.
    np.testing.assert_array_equal(
        fp.relative_position_bucket(far, bidirectional=False),
        [31, 31, 31, 31, 0, 0, 0, 0, 0],
    )


def test_odd_num_buckets_allowed_when_causal():
    got = fp.relative_position_bucket(
        jnp.arange(-50, 1), bidirectional=False, num_buckets=7, max_distance=40
    )
    expected = [t5_bucket(r, False, 7, 40) for r in range(-50, 1)]
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("table_dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_bias_gathers_the_table(table_dtype, bidirectional, branch):
    table = normal((32, 3), table_dtype, seed=0)
    q = jnp.array([[0, 1, 2, 3], [7, 8, 9, 10]])  # [B=2, L=4]
    k = jnp.array([[0, 1, 2, 3, 4], [0, 1, 200, 3, 4]])  # [B=2, S=5]
    got = run_branch(
        lambda t, q, k: fp.relative_position_bias(t, q, k, bidirectional=bidirectional),
        table,
        q,
        k,
        branch=branch,
    )
    assert got.shape == (2, 3, 4, 5)
    assert got.dtype == table_dtype
    qn, kn = np.asarray(q), np.asarray(k)
    buckets = np.array(
        [
            [
                [
                    t5_bucket(kn[b, j] - qn[b, i], bidirectional, 32, 128)
                    for j in range(5)
                ]
                for i in range(4)
            ]
            for b in range(2)
        ]
    )
    expected = np.moveaxis(np.asarray(table)[buckets], -1, -3)
    np.testing.assert_array_equal(got, expected)


def test_bias_decode_step_equals_row_of_full_bias():
    table = normal((32, 2), seed=1)
    positions = jnp.arange(9) + 3
    bias = jax.jit(fp.relative_position_bias, static_argnames="bidirectional")
    full = bias(table, positions, positions, bidirectional=False)
    step = bias(table, positions[-1:], positions, bidirectional=False)
    np.testing.assert_array_equal(step[:, 0], full[:, -1])


def test_bias_gradient_reaches_only_used_buckets():
    table = jnp.ones((32, 2))
    positions = jnp.arange(3)  # relative positions -2..2: buckets 0, 1, 2, 17, 18

    grad = jax.grad(
        lambda t: jnp.sum(fp.relative_position_bias(t, positions, positions))
    )(table)
    used = np.flatnonzero(np.asarray(grad[:, 0]))
    np.testing.assert_array_equal(used, [0, 1, 2, 17, 18])
    np.testing.assert_array_equal(
        grad[jnp.array([0, 1, 2, 17, 18]), 0], [3, 2, 1, 2, 1]
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_buckets": 31}, ValueError, "even when bidirectional"),
        ({"num_buckets": 0}, ValueError, "num_buckets"),
        ({"num_buckets": 2}, ValueError, ">= 2 buckets per direction"),
        ({"num_buckets": 32.0}, TypeError, "num_buckets"),
        ({"max_distance": 8}, ValueError, "max_distance"),
        ({"max_distance": -1}, ValueError, "max_distance"),
        ({"bidirectional": 1}, TypeError, "bidirectional"),
    ],
)
def test_bucket_rejects_bad_sizes(kwargs, error, match):
    with pytest.raises(error, match=match):
        fp.relative_position_bucket(jnp.arange(4), **kwargs)


def test_rejects_bad_arrays():
    with pytest.raises(TypeError, match="relative_position"):
        fp.relative_position_bucket(jnp.arange(4.0))
    table = jnp.zeros((32, 2))
    with pytest.raises(ValueError, match=r"\[num_buckets, N\]"):
        fp.relative_position_bias(table[0], jnp.arange(3), jnp.arange(3))
    with pytest.raises(TypeError, match="floating"):
        fp.relative_position_bias(
            jnp.zeros((32, 2), jnp.int32), jnp.arange(3), jnp.arange(3)
        )
    with pytest.raises(TypeError, match="k_positions"):
        fp.relative_position_bias(table, jnp.arange(3), jnp.arange(3.0))
    with pytest.raises(ValueError, match="broadcast"):
        fp.relative_position_bias(table, jnp.zeros((2, 3), int), jnp.zeros((3, 3), int))
    with pytest.raises(ValueError, match="even when bidirectional"):
        fp.relative_position_bias(jnp.zeros((33, 2)), jnp.arange(3), jnp.arange(3))


def test_a_stated_head_count_catches_a_t5x_table():
    """T5X stores [N, num_buckets]: T5-base's 12 heads and 32 buckets read as 12
    buckets of 32 heads without the statement; with it, a ValueError says to
    transpose. The table in the right layout passes and gives the same bias."""
    t5x = normal((12, 32), seed=1)  # [N, num_buckets]
    q, k = jnp.arange(5), jnp.arange(7)
    with pytest.raises(
        ValueError,
        match=r"`table` must be \[num_buckets, num_heads = 12\] .* got shape "
        r"\(12, 32\)\. Hint: a T5X .* pass table\.T",
    ):
        fp.relative_position_bias(t5x, q, k, num_heads=12)
    np.testing.assert_array_equal(
        fp.relative_position_bias(t5x.T, q, k, num_heads=12),
        fp.relative_position_bias(t5x.T, q, k),
    )
    with pytest.raises(ValueError, match=r"`num_heads` must be a positive int"):
        fp.relative_position_bias(t5x.T, q, k, num_heads=0)
