"""linen and nnx attention-bias modules (ALiBi, T5 relative, and the tile form of
every bias module): values, dtypes, linen == nnx with copied parameters."""

import functools

import jax
import jax.numpy as jnp
import length_reference as ref
import numpy as np
import pytest
from flax import nnx
from helpers import normal

import flax_posenc as fp
from flax_posenc import linen as pl
from flax_posenc import nnx as pn

Q = jnp.array([[0, 1, 2, 3], [5, 6, 7, 8]])  # [B=2, L=4]
K = jnp.array([[0, 1, 2, 3, 4, 5], [0, 0, 5, 6, 7, 8]])  # [B=2, S=6]


@pytest.mark.parametrize("dtype", [None, jnp.bfloat16])
def test_alibi_modules_equal_the_function(dtype):
    expected = fp.alibi_bias(Q, K, 12).astype(dtype or jnp.float32)
    got_linen = jax.jit(pl.ALiBi(12, dtype=dtype).apply)({}, Q, K)
    got_nnx = pn.ALiBi(12, dtype=dtype)(Q, K)
    for got in (got_linen, got_nnx):
        assert got.shape == (2, 12, 4, 6)
        assert got.dtype == (dtype or jnp.float32)
        np.testing.assert_array_equal(got, expected)


def test_modules_default_keys_are_the_queries():
    np.testing.assert_array_equal(pn.ALiBi(4)(Q), fp.alibi_bias(Q, Q, 4))
    module = pn.RelativePositionBias(4, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(module(Q), module(Q, Q))


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_linen_equals_nnx_with_copied_parameters(bidirectional):
    kwargs = dict(num_buckets=16, max_distance=20, bidirectional=bidirectional)
    linen_module = pl.RelativePositionBias(3, **kwargs)
    variables = linen_module.init(jax.random.key(1), Q, K)
    table = variables["params"]["relative_attention_bias"]
    assert table.shape == (16, 3)
    assert table.dtype == jnp.float32
    nnx_module = pn.RelativePositionBias(3, **kwargs, rngs=nnx.Rngs(2))
    nnx_module.relative_attention_bias[...] = table
    got_linen = jax.jit(linen_module.apply)(variables, Q, K)
    got_nnx = nnx.jit(lambda m, q, k: m(q, k))(nnx_module, Q, K)
    assert got_nnx.shape == (2, 3, 4, 6)
    np.testing.assert_array_equal(got_linen, got_nnx)
    expected = fp.relative_position_bias(
        table, Q, K, bidirectional=bidirectional, max_distance=20
    )
    np.testing.assert_array_equal(got_nnx, expected)


@pytest.mark.parametrize(
    ("param_dtype", "dtype", "out"),
    [
        (jnp.float32, None, jnp.float32),
        (jnp.bfloat16, None, jnp.bfloat16),
        (jnp.float32, jnp.bfloat16, jnp.bfloat16),
    ],
)
def test_relative_dtypes_follow_flax_conventions(param_dtype, dtype, out):
    module = pn.RelativePositionBias(
        2, param_dtype=param_dtype, dtype=dtype, rngs=nnx.Rngs(0)
    )
    assert module.relative_attention_bias[...].dtype == param_dtype
    assert module(Q, K).dtype == out
    variables = pl.RelativePositionBias(2, param_dtype=param_dtype, dtype=dtype).init(
        jax.random.key(0), Q, K
    )
    assert variables["params"]["relative_attention_bias"].dtype == param_dtype


def test_relative_module_trains():
    module = pn.RelativePositionBias(2, rngs=nnx.Rngs(0))
    positions = jnp.arange(3)

    def loss(m):
        return jnp.sum(m(positions) ** 2)

    grads = nnx.grad(loss)(module)
    rows = np.flatnonzero(np.linalg.norm(grads.relative_attention_bias[...], axis=-1))
    np.testing.assert_array_equal(rows, [0, 1, 2, 17, 18])  # relative -2..2


def test_modules_reject_bad_arguments():
    with pytest.raises(ValueError, match="num_heads"):
        pn.ALiBi(0)
    with pytest.raises(ValueError, match="num_heads"):
        pl.ALiBi(0).apply({}, Q)
    with pytest.raises(ValueError, match="num_heads"):
        pn.RelativePositionBias(-1, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="even when bidirectional"):
        pn.RelativePositionBias(2, num_buckets=31, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="even when bidirectional"):
        pl.RelativePositionBias(2, num_buckets=31).init(jax.random.key(0), Q)
    with pytest.raises(TypeError, match="q_positions"):
        pn.ALiBi(2)(Q.astype(jnp.float32))
    with pytest.raises(ValueError, match="broadcast"):
        pn.RelativePositionBias(2, rngs=nnx.Rngs(0))(Q, K[:1].repeat(3, axis=0))


HEADS = 6
BIAS_MODULES = {  # every setting away from its default, so a dropped one shows
    "alibi": (pl.ALiBi(HEADS), lambda rngs: pn.ALiBi(HEADS)),
    "t5": (
        pl.RelativePositionBias(
            HEADS, num_buckets=16, max_distance=20, bidirectional=False
        ),
        lambda rngs: pn.RelativePositionBias(
            HEADS, num_buckets=16, max_distance=20, bidirectional=False, rngs=rngs
        ),
    ),
    "kerple": (
        pl.Kerple(HEADS, kernel="power"),
        lambda rngs: pn.Kerple(HEADS, kernel="power", rngs=rngs),
    ),
    "fire": (
        pl.FIRE(HEADS, mlp_width=8, init_threshold=64.0, eps=1e-3),
        lambda rngs: pn.FIRE(
            HEADS, mlp_width=8, init_threshold=64.0, eps=1e-3, rngs=rngs
        ),
    ),
}


def the_function(name, params, q_positions, k_positions):
    """The bias function of ``name`` with the settings of BIAS_MODULES, spelt out."""
    if name == "alibi":
        return fp.alibi_bias(q_positions, k_positions, HEADS)
    if name == "t5":
        return fp.relative_position_bias(
            params["relative_attention_bias"],
            q_positions,
            k_positions,
            bidirectional=False,
            max_distance=20,
        )
    if name == "kerple":
        r1, r2 = params["r1_unconstrained"], params["r2_unconstrained"]
        return fp.kerple_bias(q_positions, k_positions, r1, r2, kernel="power")
    fire = fp.FireParams(*(params[field] for field in fp.FireParams._fields))
    return fp.fire_bias(q_positions, k_positions, fire, init_threshold=64.0, eps=1e-3)


@pytest.mark.parametrize("name", list(BIAS_MODULES))
def test_a_modules_tile_form_keeps_every_setting(name):
    """``position_bias()`` is the module's own bias (parameters and settings), so
    blockwise attention through it equals dense attention with the module's bias:
    a model trained through one is evaluated through the same encoding."""
    linen_module, make_nnx = BIAS_MODULES[name]
    variables = linen_module.init(jax.random.key(0), Q, K)
    nnx_module = make_nnx(nnx.Rngs(0))
    nnx_params = {k: v[...] for k, v in nnx.state(nnx_module, nnx.Param).items()}
    positions = jnp.arange(40)
    q, k, v = (normal((1, 40, HEADS, 8), seed=seed) for seed in range(3))
    for module, tile, params in (
        (
            functools.partial(linen_module.apply, variables),
            linen_module.apply(variables, method="position_bias"),
            variables.get("params", {}),
        ),
        (nnx_module, nnx_module.position_bias(), nnx_params),
    ):
        want = the_function(name, params, Q, K)
        np.testing.assert_array_equal(tile(Q, K), want)
        np.testing.assert_array_equal(module(Q, K), want)
        got = fp.blockwise_attention(
            q,
            k,
            v,
            q_positions=positions,
            bias=tile,
            causal=True,
            block_q=16,
            block_k=16,
        )
        allowed = positions[None, :] <= positions[:, None]
        bias = the_function(name, params, positions, positions)
        want = ref.attention(q[0], k[0], v[0], bias, allowed, 8**-0.5)
        np.testing.assert_allclose(got[0], want, rtol=2e-5, atol=2e-6)
