"""Position helpers: packed segments, padding masks, decode offsets, relative positions.

Expected positions are built independently, by construction of each random batch.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flax_posenc as fp

segment_positions = jax.jit(fp.positions_from_segment_ids)
mask_positions = jax.jit(fp.positions_from_padding_mask)


@st.composite
def packed_rows(draw, length=12):
    """One packed row: segments of random lengths, ids 1, 2, ..., then padding 0."""
    ids, positions = [], []
    segment = 0
    while len(ids) < length and draw(st.booleans()):
        segment += 1
        size = draw(st.integers(1, length - len(ids)))
        ids += [segment] * size
        positions += list(range(size))
    pad = length - len(ids)
    return ids + [0] * pad, positions + [0] * pad


@given(st.lists(packed_rows(), min_size=1, max_size=3))
def test_segment_positions_restart_per_segment(rows):
    ids = np.array([r[0] for r in rows], np.int32)
    expected = np.array([r[1] for r in rows], np.int32)
    got = segment_positions(ids)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(got, expected)


@given(st.lists(packed_rows(), min_size=1, max_size=3), st.integers(1, 1000))
def test_segment_positions_ignore_id_values(rows, shift):
    """Only changes of id matter: relabelling the real segments changes nothing."""
    ids = np.array([r[0] for r in rows], np.int32)
    relabelled = np.where(ids == 0, 0, ids * 7 + shift)
    np.testing.assert_array_equal(segment_positions(relabelled), segment_positions(ids))


def test_segment_positions_example_and_leading_dims():
    ids = jnp.array([1, 1, 1, 2, 2, 3, 0, 0])
    np.testing.assert_array_equal(
        fp.positions_from_segment_ids(ids), [0, 1, 2, 0, 1, 0, 0, 0]
    )
    stacked = jnp.stack([ids, ids[::-1]]).reshape(2, 1, 8)
    got = segment_positions(stacked)
    np.testing.assert_array_equal(got[1, 0], [0, 0, 0, 0, 1, 0, 1, 2])


@given(
    st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10)), min_size=1, max_size=4),
    st.booleans(),
)
def test_padding_mask_positions_left_and_right(rows, left):
    """Row = (real tokens, padding); positions count real tokens from 0."""
    width = 10
    masks, expected = [], []
    for real, _ in rows:
        real = min(real, width)
        pad = [False] * (width - real)
        mask = pad + [True] * real if left else [True] * real + pad
        zeros = [0] * (width - real)
        masks.append(mask)
        expected.append(
            zeros + list(range(real)) if left else list(range(real)) + zeros
        )
    got = mask_positions(jnp.array(masks))
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(got, np.array(expected, np.int32))
    np.testing.assert_array_equal(
        mask_positions(jnp.array(masks, jnp.int32)), np.array(expected)
    )


@given(st.lists(st.integers(0, 8), min_size=1, max_size=4), st.integers(1, 4))
def test_decode_step_continues_the_prompt(prompt_lengths, steps):
    """Positions of left-padded prompt + decode steps == positions of the full mask."""
    width = 8
    prompt = np.array([[False] * (width - n) + [True] * n for n in prompt_lengths])
    full = np.concatenate([prompt, np.ones((len(prompt), steps), bool)], axis=1)
    offsets = jnp.asarray(prompt.sum(-1), jnp.int32)
    got = jax.jit(fp.positions_from_offsets, static_argnums=1)(offsets, steps)
    np.testing.assert_array_equal(got, mask_positions(jnp.array(full))[:, width:])


def test_offsets_scalar_cache_index():
    got = fp.positions_from_offsets(jnp.int32(5), 3)
    assert got.shape == (3,)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(got, [5, 6, 7])
    np.testing.assert_array_equal(
        fp.positions_from_offsets(jnp.array([0, 9])), [[0], [9]]
    )


@given(st.integers(1, 5), st.integers(1, 5), st.integers(-50, 50))
def test_relative_positions(length, keys, offset):
    q = np.arange(length) + offset
    k = np.arange(keys)
    got = jax.jit(fp.relative_positions)(jnp.array(q)[None], jnp.array(k))
    assert got.shape == (1, length, keys)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(got[0], k[None, :] - q[:, None])


@pytest.mark.parametrize(
    ("fn", "args", "error", "match"),
    [
        (fp.positions_from_segment_ids, (jnp.ones((2, 3)),), TypeError, "segment_ids"),
        (fp.positions_from_segment_ids, (jnp.int32(1),), ValueError, "segment_ids"),
        (fp.positions_from_padding_mask, (jnp.ones((2, 3)),), TypeError, "`mask`"),
        (fp.positions_from_padding_mask, (True,), ValueError, "`mask`"),
        (fp.positions_from_offsets, (jnp.array([1.0]),), TypeError, "offsets"),
        (fp.positions_from_offsets, (jnp.array([1, -2]),), ValueError, "offsets"),
        (fp.positions_from_offsets, (jnp.array([1]), 0), ValueError, "length"),
        (fp.positions_from_offsets, (jnp.array([1]), 2.0), TypeError, "length"),
        (
            fp.relative_positions,
            (jnp.arange(3.0), jnp.arange(3)),
            TypeError,
            "q_positions",
        ),
        (
            fp.relative_positions,
            (jnp.zeros((2, 3), int), jnp.zeros((3, 3), int)),
            ValueError,
            "must broadcast",
        ),
        (fp.relative_positions, (jnp.arange(3), jnp.int32(0)), ValueError, "k_pos"),
    ],
)
def test_bad_inputs(fn, args, error, match):
    with pytest.raises(error, match=match):
        fn(*args)
