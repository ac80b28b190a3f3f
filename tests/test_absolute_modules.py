"""linen and nnx modules that add an absolute encoding: values, dtypes, linen == nnx."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import normal

import flax_posenc as fp
from flax_posenc import linen as pl
from flax_posenc import nnx as pn

X = normal((2, 5, 8), seed=0)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_sinusoidal_modules_add_the_encoding(dtype, layout):
    x = X.astype(dtype)
    positions = jnp.array([[0, 1, 2, 3, 4], [7, 8, 9, 0, 1]])
    expected = (
        x.astype(jnp.float32) + fp.sinusoidal_encoding(positions, 8, layout=layout)
    ).astype(dtype)
    linen_module = pl.SinusoidalPositionalEncoding(layout=layout)
    got_linen = jax.jit(linen_module.apply)({}, x, positions)
    got_nnx = pn.SinusoidalPositionalEncoding(layout=layout)(x, positions)
    for got in (got_linen, got_nnx):
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, expected)
    fp.testing.assert_module_shapes(
        x, got_nnx, dims=chex.Dimensions(B=2, L=5, D=8), spec="BLD"
    )


def test_default_positions_are_arange():
    got = pn.SinusoidalPositionalEncoding()(X)
    np.testing.assert_allclose(got, X + fp.sinusoidal_table(5, 8)[None], atol=1e-6)


def test_learned_linen_equals_nnx_with_copied_parameters():
    positions = jnp.array([[3, 4, 5, 6, 7]])
    linen_module = pl.LearnedPositionalEmbedding(max_len=16, features=8)
    variables = linen_module.init(jax.random.key(1), X, positions)
    table = variables["params"]["embedding"]
    assert table.shape == (16, 8)
    assert 0.015 < float(jnp.std(table)) < 0.025  # N(0, 0.02^2) initialiser
    nnx_module = pn.LearnedPositionalEmbedding(16, 8, rngs=nnx.Rngs(2))
    nnx_module.embedding[...] = table
    got_linen = linen_module.apply(variables, X, positions)
    got_nnx = nnx_module(X, positions)
    np.testing.assert_array_equal(got_linen, got_nnx)
    np.testing.assert_allclose(got_nnx, X + table[positions], atol=1e-6)


@pytest.mark.parametrize("param_dtype", [jnp.float32, jnp.bfloat16])
def test_learned_dtypes_follow_flax_conventions(param_dtype):
    x = X.astype(jnp.bfloat16)
    module = pn.LearnedPositionalEmbedding(
        16, 8, param_dtype=param_dtype, rngs=nnx.Rngs(0)
    )
    assert module.embedding[...].dtype == param_dtype
    assert module(x).dtype == jnp.bfloat16
    module32 = pn.LearnedPositionalEmbedding(
        16, 8, param_dtype=param_dtype, dtype=jnp.float32, rngs=nnx.Rngs(0)
    )
    assert module32(x).dtype == jnp.float32


def test_learned_module_gradients_reach_only_used_rows():
    module = pn.LearnedPositionalEmbedding(16, 8, rngs=nnx.Rngs(0))
    positions = jnp.array([[1, 2, 3, 4, 5]])

    def loss(m):
        return jnp.sum(m(X, positions) ** 2)

    grads = nnx.grad(loss)(module)
    row_norms = jnp.linalg.norm(grads.embedding[...], axis=-1)
    assert np.all(np.asarray(row_norms[1:6]) > 0)
    np.testing.assert_array_equal(row_norms[jnp.array([0, *range(6, 16)])], 0.0)


def test_learned_module_rejects_positions_past_the_table():
    module = pn.LearnedPositionalEmbedding(4, 8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"max_len=4"):
        module(X)  # default positions 0..4 reach past a 4-row table


@pytest.mark.parametrize(
    ("positions", "error", "match"),
    [
        (jnp.arange(6), ValueError, r"must be \[\.\.\., L\] with L = 5"),
        (jnp.arange(5.0), TypeError, "must be an integer"),
    ],
)
def test_modules_reject_bad_positions(positions, error, match):
    with pytest.raises(error, match=match):
        pn.SinusoidalPositionalEncoding()(X, positions)


def test_modules_reject_bad_shapes():
    module = pn.LearnedPositionalEmbedding(16, 4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="features=4"):
        module(X)
    with pytest.raises(ValueError, match=r"\[\.\.\., L, D\]"):
        pn.SinusoidalPositionalEncoding()(X[0, 0])
    with pytest.raises(ValueError, match="`max_len` must be a positive"):
        pl.LearnedPositionalEmbedding(max_len=0, features=8).init(jax.random.key(0), X)
