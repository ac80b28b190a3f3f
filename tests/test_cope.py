"""CoPE (Golovneva et al. 2024): the float64 equations written out per pair, the
property it has (positions count gated content: the bias changes with k while the
positions stay, and a key's position is at most its token distance + 1), the one it
lacks (shift invariance of q/k content at other positions fails, caught by the
helper), finite gradients at saturated gates, bf16, linen == nnx."""

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

L, N, H, P = 7, 2, 4, 5


def inputs(seed=0, scale=1.0):
    q = normal((L, N, H), seed=3 * seed) * scale
    k = normal((L, N, H), seed=3 * seed + 1) * scale
    pos_emb = normal((P, H), seed=3 * seed + 2)
    return q, k, pos_emb


@pytest.mark.parametrize("scale", [None, pytest.param(1.0, marks=pytest.mark.slow)])
def test_matches_the_paper_in_float64(scale):
    q, k, pos_emb = inputs()
    positions = np.arange(L) + 3
    got = jax.jit(fp.cope_bias, static_argnames="scale")(
        q, k, pos_emb, q_positions=positions, k_positions=positions, scale=scale
    )
    used = 1 / np.sqrt(H) if scale is None else scale
    want = ref.cope(q, k, pos_emb, positions, positions, used)
    allowed = positions[None, :] <= positions[:, None]
    np.testing.assert_allclose(np.where(allowed, got, 0), want, atol=1e-5)


@pytest.mark.slow
def test_attention_with_cope_matches_the_papers_eq_6():
    """softmax(q_i . (k_j + e[p_ij]) / sqrt(H)) as the authors add it."""
    q, k, pos_emb = inputs(1)
    positions = np.arange(L)
    bias = fp.cope_bias(q, k, pos_emb, q_positions=positions, k_positions=positions)
    allowed = positions[None, :] <= positions[:, None]
    got = jax.nn.dot_product_attention(
        q, k, k, bias=bias / np.sqrt(H), mask=allowed[None]
    )
    e_bias = ref.cope(q, k, pos_emb, positions, positions, 1 / np.sqrt(H))
    want = ref.attention(q, k, k, e_bias / np.sqrt(H), allowed[None], 1 / np.sqrt(H))
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_positions_depend_on_content_not_on_indices():
    """Gates all 1 (large q . k) count tokens: p_ij = i - j + 1; gates all 0 count
    nothing. Same positions, different content, different bias."""
    q = jnp.ones((L, 1, H))
    pos_emb = jnp.outer(jnp.arange(P, dtype=jnp.float32), jnp.array([1.0, 0, 0, 0]))
    positions = jnp.arange(L)
    counted = fp.cope_bias(
        q, 50 * q, pos_emb, q_positions=positions, k_positions=positions
    )
    ignored = fp.cope_bias(
        q, -50 * q, pos_emb, q_positions=positions, k_positions=positions
    )
    want = np.minimum(np.arange(L)[:, None] - np.arange(L)[None, :] + 1, P - 1)
    allowed = np.tril(np.ones((L, L), bool))
    np.testing.assert_allclose(
        np.where(allowed, counted[0], 0), np.where(allowed, want, 0), atol=1e-5
    )
    np.testing.assert_allclose(ignored[0], np.zeros((L, L)), atol=1e-5)


def test_not_a_function_of_positions_alone():
    """Shifting every position leaves CoPE unchanged (it never reads their values,
    only their order), but moving one key's content changes every count before it:
    what the shift-invariance helper asks of a rotation does not hold for content."""
    q, k, pos_emb = inputs(2)
    positions = jnp.arange(L)
    base = fp.cope_bias(q, k, pos_emb, q_positions=positions, k_positions=positions)
    shifted = fp.cope_bias(
        q, k, pos_emb, q_positions=positions + 9, k_positions=positions + 9
    )
    np.testing.assert_array_equal(base, shifted)
    k2 = k.at[3].set(-k[3])
    other = fp.cope_bias(q, k2, pos_emb, q_positions=positions, k_positions=positions)
    # rows i >= 3 change at keys j <= 3 (the count passes key 3), nowhere else
    changed = np.abs(np.asarray(other - base)).max(0) > 1e-6
    assert changed[3:, :4].all() and not changed[:3].any() and not changed[:, 4:].any()


def test_shift_invariance_helper_fails_on_cope():
    """As a "rotation" that appends the content-counted position embedding, CoPE's
    scores change when the window moves over different content."""
    from flax_posenc import testing

    tokens = normal((64, 1, H), seed=5)
    pos_emb = normal((P, H), seed=6)

    def rotate(x, positions):
        # content at each position is tokens[position]; q' . k' = q . k + CoPE bias
        content = tokens[positions % 64]
        bias = fp.cope_bias(
            content, content, pos_emb, q_positions=positions, k_positions=positions
        )  # [1, L, L]
        if x.shape[-2] == 1:  # k: the one-hot of its slot
            return jnp.eye(L)[:, None, :]
        return jnp.repeat(bias[0][:, None, :], 2, axis=1)  # q: its row of the bias

    positions = np.arange(L)
    q, k = jnp.ones((L, 2, L)), jnp.ones((L, 1, L))
    with pytest.raises(AssertionError, match="depends on absolute positions"):
        testing.assert_shift_invariance(rotate, q, k, positions, [5], rtol=1e-3)


def test_gradients_finite_at_saturated_gates():
    q, k, pos_emb = inputs(3, scale=30.0)  # |q . k| / sqrt(H) in the hundreds
    positions = jnp.arange(L)

    def loss(q, k, e):
        return jnp.sum(
            fp.cope_bias(q, k, e, q_positions=positions, k_positions=positions) ** 2
        )

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, pos_emb)
    chex.assert_tree_all_finite(grads)
    assert np.any(np.asarray(grads[2]) != 0)


def test_bfloat16_inputs_gqa_and_no_retrace():
    q, k, pos_emb = inputs(4)
    q = jnp.concatenate([q, q], axis=1).astype(jnp.bfloat16)  # N = 4, K = 2
    chex.clear_trace_counter()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def run(q, k, positions):
        return fp.cope_bias(q, k, pos_emb, q_positions=positions, k_positions=positions)

    for offset in (0, 3, 1000):
        out = run(q, k.astype(jnp.bfloat16), jnp.arange(L) + offset)
        assert out.dtype == jnp.float32 and out.shape == (4, L, L)
        chex.assert_tree_all_finite(out)


def test_linen_equals_nnx_with_copied_parameters():
    q, k, _ = inputs(5)
    positions = jnp.arange(L)
    linen_module = pl.CoPE(
        head_dim=H, num_positions=P, embedding_init=jax.nn.initializers.normal(1.0)
    )
    variables = linen_module.init(jax.random.key(0), q, k, positions)
    nnx_module = pn.CoPE(H, num_positions=P, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(
        nnx_module.pos_emb[...], np.zeros((P, H))
    )  # as theirs
    nnx_module.pos_emb[...] = variables["params"]["pos_emb"]
    got = nnx_module(q, k, positions)
    np.testing.assert_array_equal(linen_module.apply(variables, q, k, positions), got)
