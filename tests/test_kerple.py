"""Kerple (Chi et al. 2022): the float64 kernels, the constraints held by the
parameterisation, shift invariance, blockwise == dense, linen == nnx."""

import chex
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
from flax_posenc import testing

R1 = jnp.array([-3.0, -0.5, 0.0, 2.0])  # unconstrained, one per head
R2 = jnp.array([1.5, -1.0, 0.3, -4.0])


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_matches_the_papers_kernels_in_float64(kernel):
    q_pos = np.array([0, 3, 17, 200, 4095])
    k_pos = np.array([0, 1, 2, 17, 100, 4095, 5000])
    r1 = ref.softplus(R1)
    r2 = ref.softplus(R2) if kernel == "log" else 2 * ref.sigmoid(R2)
    want = ref.kerple(q_pos, k_pos, r1, r2, kernel)
    got = jax.jit(fp.kerple_bias, static_argnames="kernel")(
        q_pos, k_pos, R1, R2, kernel=kernel
    )
    assert got.shape == (4, 5, 7) and got.dtype == jnp.float32
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_constraints_hold_for_any_parameters(kernel):
    """r1 > 0 and r2 in the kernel's domain whatever the optimiser does: at -100
    and -1e4 softplus and sigmoid flush to 0, and the floor 2^-126 holds."""
    raw = jnp.array([-1e4, -100.0, -50.0, 0.0, 50.0, 1e4])
    r1, r2 = jax.jit(fp.kerple_parameters, static_argnames="kernel")(
        raw, raw, kernel=kernel
    )
    tiny = float(np.finfo(np.float32).tiny)
    np.testing.assert_array_equal(np.asarray(r1)[:2], [tiny, tiny])
    np.testing.assert_array_equal(np.asarray(r2)[:2], [tiny, tiny])
    assert np.all(np.asarray(r1) > 0) and np.all(np.asarray(r2) > 0)
    want_r1 = ref.softplus(np.asarray(raw[2:], np.float64))
    np.testing.assert_allclose(r1[2:], want_r1, rtol=2e-7)  # no change above it
    if kernel == "power":
        assert np.all(np.asarray(r2) <= 2)
    bias = fp.kerple_bias(jnp.arange(8), jnp.arange(8), raw, raw, kernel=kernel)
    assert np.all(np.asarray(bias) <= 0)  # a penalty that grows with distance
    assert np.all(np.isfinite(np.asarray(bias)))


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_shift_invariance_passes(kernel):
    testing.assert_bias_shift_invariance(
        fp.KerpleBias(R1, R2, kernel=kernel), np.arange(5) * 3, [1, 40, 1000]
    )


@pytest.mark.parametrize(
    "kernel", [pytest.param("log", marks=pytest.mark.slow), "power"]
)
def test_gradients_finite_at_distance_zero(kernel):
    def loss(r1, r2):
        return jnp.sum(
            fp.kerple_bias(jnp.arange(4), jnp.arange(4), r1, r2, kernel=kernel)
        )

    grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(R1, R2)
    chex.assert_tree_all_finite(grads)
    assert np.all(np.asarray(grads[0]) != 0) and np.all(np.asarray(grads[1]) != 0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kernel", ["log", pytest.param("power", marks=pytest.mark.slow)]
)
def test_blockwise_equals_dense(kernel):
    q = normal((2, 40, 4, 8), seed=0)
    k = normal((2, 40, 2, 8), seed=1)
    v = normal((2, 40, 2, 8), seed=2)
    positions = jnp.arange(40) + 7
    bias = fp.KerpleBias(R1, R2, kernel)
    got = jax.jit(
        lambda q, k, v, b: fp.blockwise_attention(
            q, k, v, q_positions=positions, bias=b, causal=True, block_q=16, block_k=8
        )
    )(q, k, v, bias)
    dense = fp.kerple_bias(positions, positions, R1, R2, kernel=kernel)
    mask = positions[None, :] <= positions[:, None]
    want = jax.nn.dot_product_attention(q, k, v, bias=dense[None], mask=mask)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.slow
def test_blockwise_gradients_reach_the_parameters():
    """The parameters are KerpleBias's pytree leaves: gradients reach them."""
    q = normal((1, 24, 4, 8))
    k, v = q[:, :, :2], q[:, :, 2:]
    positions = jnp.arange(24)
    bias = fp.KerpleBias(R1, R2)
    grads = jax.grad(
        lambda b: jnp.sum(
            fp.blockwise_attention(q, k, v, q_positions=positions, bias=b, causal=True)
        )
    )(bias)
    chex.assert_tree_all_finite(grads)
    assert np.any(np.asarray(grads.r1_unconstrained) != 0)


def test_no_retrace_across_position_values_and_traced_positions():
    chex.clear_trace_counter()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def run(q_pos, k_pos):
        return fp.kerple_bias(q_pos, k_pos, R1, R2)

    for offset in (0, 9, 10**6):
        run(jnp.arange(6) + offset, jnp.arange(6))


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_linen_equals_nnx_with_copied_parameters(kernel):
    positions = jnp.array([[0, 1, 2, 3, 9], [4, 5, 6, 7, 8]])
    linen_module = pl.Kerple(4, kernel=kernel)
    variables = linen_module.init(jax.random.key(0), positions)
    nnx_module = pn.Kerple(4, kernel=kernel, rngs=nnx.Rngs(1))
    for name in ("r1_unconstrained", "r2_unconstrained"):
        getattr(nnx_module, name)[...] = variables["params"][name]
    got_linen = linen_module.apply(variables, positions)
    got_nnx = nnx.jit(lambda m, p: m(p))(nnx_module, positions)
    assert got_nnx.shape == (2, 4, 5, 5)
    np.testing.assert_array_equal(got_linen, got_nnx)
    # Heads start different (uniform init), so they are not one kernel repeated.
    assert len(set(np.asarray(variables["params"]["r1_unconstrained"]).tolist())) == 4


def test_bfloat16_parameters_and_output():
    module = pn.Kerple(2, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    out = module(jnp.arange(5))
    assert out.dtype == jnp.bfloat16
    chex.assert_tree_all_finite(out)
