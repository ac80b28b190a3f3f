"""Learned table lookups: values and every out-of-range branch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import normal
from jax.experimental import checkify

import flax_posenc as fp

TABLE = normal((10, 4), seed=0)


def test_lookup_returns_rows_under_jit():
    positions = jnp.array([[0, 3, 9], [2, 2, 1]])
    got = jax.jit(fp.learned_embedding_lookup)(TABLE, positions)
    np.testing.assert_array_equal(got, np.asarray(TABLE)[np.asarray(positions)])


@pytest.mark.parametrize("bad", [[0, 10], [-1, 3]])
def test_concrete_out_of_range_raises(bad):
    with pytest.raises(ValueError, match=r"\[0, max_len=10\)"):
        fp.learned_embedding_lookup(TABLE, jnp.array(bad))


@pytest.mark.parametrize("bad", [10, 11, -1])
def test_traced_out_of_range_gives_nan_rows(bad):
    got = jax.jit(fp.learned_embedding_lookup)(TABLE, jnp.array([1, bad]))
    np.testing.assert_array_equal(got[0], TABLE[1])
    assert np.all(np.isnan(got[1]))


def test_clip_is_an_explicit_opt_in():
    got = fp.learned_embedding_lookup(TABLE, jnp.array([-4, 12]), out_of_range="clip")
    np.testing.assert_array_equal(got, TABLE[jnp.array([0, 9])])


@pytest.mark.parametrize("dtype", [jnp.int8, jnp.uint8, jnp.int16])
def test_clip_of_narrow_positions_on_a_longer_table(dtype):
    # max_len - 1 = 299 does not fit int8/uint8: the clamp must not overflow.
    table = normal((300, 2), seed=1)
    info = np.iinfo(dtype)
    values = np.array([info.min, 0, 5, info.max])
    got = jax.jit(lambda p: fp.learned_embedding_lookup(table, p, out_of_range="clip"))(
        jnp.asarray(values, dtype)
    )
    np.testing.assert_array_equal(got, np.asarray(table)[np.clip(values, 0, 299)])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
def test_nan_policy_with_narrow_positions_on_a_longer_table(dtype):
    # max_len = 300 does not fit int8/uint8: in-range rows must not become NaN.
    table = normal((300, 2), seed=1)
    values = np.array([0, 5, min(np.iinfo(dtype).max, 299)])
    got = jax.jit(lambda p: fp.learned_embedding_lookup(table, p))(
        jnp.asarray(values, dtype)
    )
    np.testing.assert_array_equal(got, np.asarray(table)[values])


def test_checkify_reports_traced_out_of_range():
    lookup = checkify.checkify(
        jax.jit(
            lambda p: fp.learned_embedding_lookup(TABLE, p, out_of_range="checkify")
        )
    )
    err, _ = lookup(jnp.array([0, 3]))
    assert err.get() is None
    err, out = lookup(jnp.array([0, 13]))
    assert "got values in [0, 13]" in err.get()
    assert np.all(np.isnan(out[1]))


@pytest.mark.parametrize(
    ("table", "positions", "error", "match"),
    [
        (TABLE, jnp.array([0.0, 1.0]), TypeError, "`positions` must be an integer"),
        (TABLE[0], jnp.array([0]), ValueError, r"`table` must be \[max_len, D\]"),
        (jnp.zeros((3, 2), jnp.int32), jnp.array([0]), TypeError, "floating"),
    ],
)
def test_bad_input_is_rejected(table, positions, error, match):
    with pytest.raises(error, match=match):
        fp.learned_embedding_lookup(table, positions)


def test_unknown_policy_is_rejected():
    with pytest.raises(ValueError, match="`out_of_range` must be one of"):
        fp.learned_embedding_lookup(TABLE, jnp.array([0]), out_of_range="wrap")


@pytest.mark.parametrize("out_of_range", ["nan", "clip"])
def test_numpy_table_and_positions(out_of_range):
    # A checkpoint read with safetensors' numpy loader gives numpy tables.
    positions = np.array([0, 9, 4])
    got = fp.learned_embedding_lookup(
        np.asarray(TABLE), positions, out_of_range=out_of_range
    )
    np.testing.assert_array_equal(got, np.asarray(TABLE)[positions])
