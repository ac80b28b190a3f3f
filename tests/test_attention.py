"""positional_attention_fn as the attention_fn of Flax's attention modules."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import normal, normals

import flax_posenc as fp

B, L, N, H = 2, 7, 4, 8
D = N * H
X = normal((B, L, D), seed=0)
POSITIONS = jnp.array([list(range(L)), [3, 4, 5, 0, 1, 2, 3]])
CONFIG = fp.RopeConfig(head_dim=H, theta=500.0)


def reference_attention(q, k, v, bias):
    """Plain float32 softmax attention, q/k already rotated; bias [B, N, L, S]."""
    logits = jnp.einsum("blnh,bsnh->bnls", q, k) / np.sqrt(H) + bias
    return jnp.einsum("bnls,bsnh->blnh", jax.nn.softmax(logits, -1), v)


def projections(params):
    q, k, v = (
        jnp.einsum("bld,dnh->blnh", X, params[name]["kernel"])
        + params[name]["bias"][None, None]
        for name in ("query", "key", "value")
    )
    return q, k, v


def output(params, attended):
    out = params["out"]
    return (
        jnp.einsum("blnh,nhd->bld", attended, out["kernel"]) + out["bias"][None, None]
    )


@pytest.mark.parametrize(
    "encoding", ["rope", "alibi", pytest.param("both", marks=pytest.mark.slow)]
)
def test_linen_and_nnx_attention_with_positions(encoding):
    rope = CONFIG if encoding in ("rope", "both") else None
    bias = fp.alibi_bias(POSITIONS, POSITIONS, N) if encoding != "rope" else None
    attention_fn = fp.positional_attention_fn(
        rope=rope, q_positions=POSITIONS, bias=bias
    )

    module = nn.MultiHeadDotProductAttention(num_heads=N, attention_fn=attention_fn)
    variables = module.init(jax.random.key(1), X)
    got_linen = jax.jit(module.apply)(variables, X)

    params = variables["params"]
    q, k, v = projections(params)
    if rope is not None:
        q, k = fp.apply_rope(q, POSITIONS, rope), fp.apply_rope(k, POSITIONS, rope)
    zero = jnp.zeros((B, N, L, L))
    expected = output(
        params, reference_attention(q, k, v, zero if bias is None else bias)
    )
    np.testing.assert_allclose(got_linen, expected, atol=1e-5, rtol=1e-5)

    nnx_module = nnx.MultiHeadAttention(
        num_heads=N, in_features=D, decode=False, rngs=nnx.Rngs(0)
    )
    for name in ("query", "key", "value", "out"):
        getattr(nnx_module, name).kernel[...] = params[name]["kernel"]
        getattr(nnx_module, name).bias[...] = params[name]["bias"]
    with fp.attention_fn_override(nnx_module, attention_fn):
        got_nnx = nnx_module(X)
    assert nnx_module.attention_fn is not attention_fn  # restored on exit
    np.testing.assert_allclose(got_nnx, got_linen, atol=1e-6, rtol=1e-6)


def test_wraps_jax_nn_dot_product_attention_with_bias():
    q, k, v = normals(3, (B, L, N, H), seed=2)
    bias = fp.alibi_bias(POSITIONS, POSITIONS, N)
    attend = fp.positional_attention_fn(
        rope=CONFIG,
        q_positions=POSITIONS,
        bias=bias,
        attention_fn=jax.nn.dot_product_attention,
    )
    got = jax.jit(attend)(q, k, v)
    rotated_q, rotated_k = (
        fp.apply_rope(q, POSITIONS, CONFIG),
        fp.apply_rope(k, POSITIONS, CONFIG),
    )
    np.testing.assert_allclose(
        got, reference_attention(rotated_q, rotated_k, v, bias), atol=1e-5
    )


def test_caller_bias_and_position_bias_add_up():
    q, k, v = normals(3, (B, L, N, H), seed=3)
    position_bias = fp.alibi_bias(POSITIONS, POSITIONS, N)
    caller_bias = normal((B, N, L, L), seed=4)
    attend = fp.positional_attention_fn(bias=position_bias)
    got = attend(q, k, v, bias=caller_bias)
    np.testing.assert_allclose(
        got, reference_attention(q, k, v, position_bias + caller_bias), atol=1e-5
    )


@pytest.mark.slow
def test_decode_query_position_differs_from_keys():
    q = normal((B, 1, N, H), seed=5)
    k, v = normals(2, (B, L, N, H), seed=6)
    q_positions = jnp.full((B, 1), L - 1)
    k_positions = jnp.arange(L)[None]
    attend = fp.positional_attention_fn(
        rope=CONFIG, q_positions=q_positions, k_positions=k_positions
    )
    got = attend(q, k, v)
    rotated_q = fp.apply_rope(q, q_positions, CONFIG)
    rotated_k = fp.apply_rope(k, k_positions, CONFIG)
    np.testing.assert_allclose(
        got,
        reference_attention(rotated_q, rotated_k, v, jnp.zeros((B, N, 1, L))),
        atol=1e-5,
    )


def test_decode_query_and_keys_share_dynamic_frequencies():
    """One decode query against all keys: both sides see seq_len = max(k) + 1."""
    config = fp.RopeConfig(
        head_dim=H,
        scaling=fp.DynamicNTKScaling(factor=4.0, original_max_position_embeddings=4),
    )
    q = normal((B, 1, N, H), seed=7)
    k, v = normals(2, (B, L, N, H), seed=8)
    q_positions, k_positions = jnp.full((B, 1), 2), jnp.arange(L)[None]
    got = fp.positional_attention_fn(
        rope=config, q_positions=q_positions, k_positions=k_positions
    )(q, k, v)
    rotated_q = fp.apply_rope(q, q_positions, config, seq_len=L)
    rotated_k = fp.apply_rope(k, k_positions, config, seq_len=L)
    expected = reference_attention(rotated_q, rotated_k, v, jnp.zeros((B, N, 1, L)))
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(), "Give `rope`, `bias` or both"),
        (dict(rope=CONFIG), "`q_positions` is required"),
        (
            dict(rope=CONFIG, q_positions=jnp.arange(L) * 1.0),
            "`q_positions` must be an integer",
        ),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        fp.positional_attention_fn(**kwargs)


def test_bias_of_wrong_shape_is_rejected():
    attend = fp.positional_attention_fn(bias=jnp.zeros((N, L + 1, L)))
    q = jnp.zeros((B, L, N, H))
    with pytest.raises(ValueError, match=r"does not broadcast to the logits"):
        attend(q, q, q)


@pytest.mark.slow
def test_positional_attention_fn_forwards_k_seq_len():
    """Dynamic NTK with transformers' decode policy: q at the current length, each
    cached key at its own. The attention function rotates as apply_rope_qk given
    both lengths; dropping ``k_seq_len`` would rotate the keys at q's length."""
    config = fp.RopeConfig(
        head_dim=H,
        scaling=fp.DynamicNTKScaling(factor=2.0, original_max_position_embeddings=4),
    )
    q = normal((1, 1, N, H), seed=3)
    k = normal((1, 12, N, H), seed=4)
    q_positions, k_positions = jnp.array([[11]]), jnp.arange(12)[None]
    seq_len, k_seq_len = fp.hf_decode_seq_lens(
        config, q_positions, k_positions, prompt_length=6
    )

    def rotated(query, key, value, **kwargs):
        del value, kwargs
        return query, key

    attend = fp.positional_attention_fn(
        rope=config,
        q_positions=q_positions,
        k_positions=k_positions,
        seq_len=seq_len,
        k_seq_len=k_seq_len,
        attention_fn=rotated,
    )
    got_q, got_k = attend(q, k, k)
    want_q, want_k = fp.apply_rope_qk(
        q,
        k,
        q_positions,
        config,
        k_positions=k_positions,
        seq_len=seq_len,
        k_seq_len=k_seq_len,
    )
    np.testing.assert_array_equal(got_q, want_q)
    np.testing.assert_array_equal(got_k, want_k)
    _, shared = fp.apply_rope_qk(
        q, k, q_positions, config, k_positions=k_positions, seq_len=12
    )  # q's length 12 for every key
    assert np.abs(np.asarray(shared - want_k)).max() > 1e-2  # the lengths matter


def test_a_bias_function_is_refused_and_names_blockwise_attention_fn():
    with pytest.raises(TypeError, match=r"got a bias function \(AlibiBias\)"):
        fp.positional_attention_fn(bias=fp.AlibiBias(N), q_positions=POSITIONS)
    with pytest.raises(TypeError, match=r"fp\.blockwise_attention_fn\(bias="):
        fp.positional_attention_fn(bias=lambda q, k: q, q_positions=POSITIONS)


BLOCKWISE = dict(bias=fp.AlibiBias(N), causal=True, block_q=4, block_k=3)


@pytest.mark.slow
def test_blockwise_attention_fn_in_linen_equals_blockwise_attention():
    attention_fn = fp.blockwise_attention_fn(
        rope=CONFIG, q_positions=POSITIONS, **BLOCKWISE
    )
    module = nn.MultiHeadDotProductAttention(num_heads=N, attention_fn=attention_fn)
    variables = module.init(jax.random.key(1), X)
    got = jax.jit(module.apply)(variables, X)

    params = variables["params"]
    q, k, v = projections(params)
    q, k = fp.apply_rope_qk(q, k, POSITIONS, CONFIG)
    attended = fp.blockwise_attention(q, k, v, q_positions=POSITIONS, **BLOCKWISE)
    np.testing.assert_allclose(got, output(params, attended), atol=1e-5, rtol=1e-5)


def test_blockwise_attention_fn_in_nnx_equals_blockwise_attention():
    """T5 buckets per tile, Flax's causal mask sliced per tile."""
    table = normal((32, N), seed=9)
    bias = fp.RelativeBias(table, bidirectional=False)
    module = nnx.MultiHeadAttention(
        num_heads=N, in_features=D, decode=False, rngs=nnx.Rngs(0)
    )
    mask = nnx.make_causal_mask(jnp.ones((B, L)))
    attention_fn = fp.blockwise_attention_fn(
        bias=bias, q_positions=POSITIONS, block_q=3, block_k=4
    )
    with fp.attention_fn_override(module, attention_fn):
        got = module(X, mask=mask)

    layers = {name: getattr(module, name) for name in ("query", "key", "value", "out")}
    params = {
        name: {"kernel": layer.kernel[...], "bias": layer.bias[...]}
        for name, layer in layers.items()
    }
    q, k, v = projections(params)
    attended = fp.blockwise_attention(
        q, k, v, q_positions=POSITIONS, bias=bias, mask=mask, block_q=3, block_k=4
    )
    np.testing.assert_allclose(got, output(params, attended), atol=1e-5, rtol=1e-5)
