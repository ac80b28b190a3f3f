"""Self-Extend (Jin et al. 2024) and dual chunk attention (An et al. 2024, as vLLM
runs it): against float64 transcriptions of the authors' / vLLM's formulas, the
config's validation, blockwise tiling, traced positions, bf16, gradients."""

import re

import chex
import jax
import jax.numpy as jnp
import length_reference as ref
import numpy as np
import pytest
from helpers import normal

import flax_posenc as fp

ROPE = fp.RopeConfig(head_dim=8)
DECODE = dict(rope=ROPE, config=fp.DualChunkAttentionConfig(8, 2, 4))


def qkv(length, heads=2, kv_heads=2, seed=0, dtype=jnp.float32):
    q = normal((length, heads, 8), dtype, seed=3 * seed)
    k = normal((length, kv_heads, 8), dtype, seed=3 * seed + 1)
    v = normal((length, kv_heads, 8), dtype, seed=3 * seed + 2)
    return q, k, v


@pytest.mark.parametrize(
    "group_size, window",
    [
        (4, 8),
        (3, 7),  # a window that is not a multiple of G: W // G rounds down
        pytest.param(2, 5, marks=pytest.mark.slow),
        pytest.param(3, 40, marks=pytest.mark.slow),
    ],
)
def test_self_extend_matches_the_authors_formulas(group_size, window):
    q, k, v = qkv(37)
    positions = np.arange(37)
    got = jax.jit(
        lambda q, k, v, p: fp.self_extend_attention(
            q,
            k,
            v,
            q_positions=p,
            rope=ROPE,
            group_size=group_size,
            window=window,
            block_q=16,
            block_k=8,
        )
    )(q, k, v, positions)
    want = ref.self_extend(q, k, v, positions, group_size, window, 1 / np.sqrt(8))
    np.testing.assert_allclose(got, want, atol=2e-5)


@pytest.mark.slow
def test_self_extend_with_a_wide_window_is_plain_rope():
    q, k, v = qkv(24, heads=4, kv_heads=2)
    positions = jnp.arange(24)
    got = jax.jit(
        lambda q, k, v: fp.self_extend_attention(
            q, k, v, q_positions=positions, rope=ROPE, group_size=4, window=24
        )
    )(q, k, v)
    qr, kr = fp.apply_rope_qk(q, k, positions, ROPE)
    want = jax.nn.dot_product_attention(qr, kr, v, is_causal=True)
    np.testing.assert_allclose(got, want, atol=2e-6)


@pytest.mark.slow
def test_self_extend_decode_step_equals_the_full_sequence_row():
    q, k, v = qkv(30)
    positions = jnp.arange(30)
    kwargs = dict(rope=ROPE, group_size=4, window=6)
    full = fp.self_extend_attention(q, k, v, q_positions=positions, **kwargs)
    step = fp.self_extend_attention(
        q[-1:], k, v, q_positions=positions[-1:], k_positions=positions, **kwargs
    )
    np.testing.assert_allclose(step[0], full[-1], atol=2e-6)


def dca(chunk_size, local_size, original):
    return fp.DualChunkAttentionConfig(
        chunk_size=chunk_size,
        local_size=local_size,
        original_max_position_embeddings=original,
    )


@pytest.mark.parametrize(
    "chunk_size, local_size, original, length",
    [
        (8, 2, 8, 29),  # factor 1.13 (squared); inter at chunk_size (clamped)
        (16, 9, 8, 40),  # inter at 2 c - 1 = 13 < chunk_size
        (8, 2, 64, 29),  # shorter than the original length: factor 1, not 0.92
        pytest.param(10, 3, 0, 33, marks=pytest.mark.slow),  # no factor
    ],
)
def test_dual_chunk_prefill_matches_vllm(chunk_size, local_size, original, length):
    q, k, v = qkv(length, heads=4)
    config = dca(chunk_size, local_size, original)
    got = jax.jit(
        lambda q, k, v, p: fp.dual_chunk_attention(
            q, k, v, q_positions=p, rope=ROPE, config=config, block_q=8, block_k=4
        )
    )(q, k, v, np.arange(length))
    want = ref.vllm_dual_chunk_prefill(q, k, v, chunk_size, local_size, original)
    np.testing.assert_allclose(got, want, atol=2e-5)


@pytest.mark.parametrize(
    "chunk_size, local_size, original",
    [(16, 9, 4), pytest.param(8, 2, 64, marks=pytest.mark.slow)],
)
def test_dual_chunk_decode_matches_vllm_with_keys_cached_at_each_length(
    chunk_size, local_size, original
):
    """Two sequences of 40 tokens, prompts of 20 and 31: the last 9 tokens are
    decode steps of both, over caches whose keys carry the factors of the steps
    that wrote them."""
    length, prompts, steps = 40, np.array([20, 31]), 9
    pairs = zip(qkv(length, 4, seed=0), qkv(length, 4, seed=1), strict=True)
    q, k, v = (np.stack(pair) for pair in pairs)  # [2, 40, N, H]
    config = dca(chunk_size, local_size, original)
    got = jax.jit(
        lambda q, k, v, prompt: fp.dual_chunk_attention(
            q[:, -steps:],
            k,
            v,
            q_positions=np.arange(length - steps, length),
            k_positions=np.arange(length),
            prompt_length=prompt,
            rope=ROPE,
            config=config,
            block_q=4,
            block_k=8,
        )
    )(q, k, v, prompts)
    for b, prompt in enumerate(prompts):
        want = ref.vllm_dual_chunk_decode(
            q[b], k[b], v[b], int(prompt), chunk_size, local_size, original
        )
        np.testing.assert_allclose(got[b], want[-steps:], atol=2e-5)


@pytest.mark.parametrize("local_size", [4, 9])  # inter clamped at 16; 2 c - 1 = 13
def test_dual_chunk_positions_are_vllms_caches(local_size):
    config = fp.DualChunkAttentionConfig(chunk_size=16, local_size=local_size)
    c = 16 - local_size
    p = np.arange(100)
    got = fp.dual_chunk_positions(p, config)
    q_t, qc_t = np.arange(c), np.minimum(np.arange(c) + c, 16)
    np.testing.assert_array_equal(got.intra, q_t[p % c])
    np.testing.assert_array_equal(got.successive, qc_t[p % c])
    np.testing.assert_array_equal(got.inter, np.full(100, qc_t[c - 1]))
    np.testing.assert_array_equal(got.key, np.arange(100) % c)
    # Every remapped distance a query sees is at most chunk_size.
    assert int(np.max(got.inter - got.key)) <= 16
    assert int(np.max(got.successive - got.key)) <= 16


@pytest.mark.slow
def test_dual_chunk_within_one_chunk_is_plain_rope():
    q, k, v = qkv(12)
    config = fp.DualChunkAttentionConfig(chunk_size=16, local_size=4)
    got = fp.dual_chunk_attention(
        q, k, v, q_positions=jnp.arange(12), rope=ROPE, config=config
    )
    qr, kr = fp.apply_rope_qk(q, k, jnp.arange(12), ROPE)
    want = jax.nn.dot_product_attention(qr, kr, v, is_causal=True)
    np.testing.assert_allclose(got, want, atol=2e-6)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(chunk_size=0, local_size=0), ValueError, "chunk_size"),
        (dict(chunk_size=8, local_size=8), ValueError, r"local_size.*\[0, chunk_size"),
        (dict(chunk_size=8, local_size=-1), ValueError, "local_size"),
        (dict(chunk_size="8", local_size=2), TypeError, "chunk_size"),
        (
            dict(chunk_size=8, local_size=2, original_max_position_embeddings=-4),
            ValueError,
            "original_max_position_embeddings",
        ),
    ],
)
def test_dual_chunk_config_is_validated(kwargs, error, match):
    with pytest.raises(error, match=match):
        fp.DualChunkAttentionConfig(**kwargs)


def test_dual_chunk_config_is_frozen_hashable_and_reads_json_floats():
    config = fp.DualChunkAttentionConfig(
        chunk_size=262144.0, local_size=8192, original_max_position_embeddings=262144
    )
    assert config.chunk_size == 262144 and isinstance(config.chunk_size, int)
    assert hash(config) == hash(fp.DualChunkAttentionConfig(262144, 8192, 262144))
    with pytest.raises(AttributeError):
        config.chunk_size = 4  # frozen


@pytest.mark.parametrize(
    "name", ["self_extend", pytest.param("dual_chunk", marks=pytest.mark.slow)]
)
def test_traced_positions_no_retrace_bf16_and_gradients(name):
    q, k, v = (x.astype(jnp.bfloat16) for x in qkv(20))
    config = fp.DualChunkAttentionConfig(chunk_size=8, local_size=2)

    def attend(q, k, v, positions):
        if name == "self_extend":
            return fp.self_extend_attention(
                q,
                k,
                v,
                q_positions=positions,
                rope=ROPE,
                group_size=2,
                window=4,
                block_q=8,
                block_k=8,
            )
        return fp.dual_chunk_attention(
            q,
            k,
            v,
            q_positions=positions,
            rope=ROPE,
            config=config,
            block_q=8,
            block_k=8,
        )

    chex.clear_trace_counter()
    run = jax.jit(chex.assert_max_traces(attend, n=1))
    for offset in (0, 7, 1000):
        out = run(q, k, v, jnp.arange(20) + offset)
        assert out.dtype == jnp.bfloat16 and out.shape == (20, 2, 8)
        chex.assert_tree_all_finite(out)
    grads = jax.jit(
        jax.grad(lambda q: jnp.sum(attend(q, k, v, jnp.arange(20)).astype(jnp.float32)))
    )(q)
    chex.assert_tree_all_finite(grads)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda q: fp.self_extend_attention(
                q, q, q, q_positions=jnp.arange(6), rope=ROPE, group_size=0, window=2
            ),
            ValueError,
            "group_size",
        ),
        (
            lambda q: fp.self_extend_attention(
                q,
                q,
                q,
                q_positions=jnp.arange(6),
                rope={"rope_theta": 1e4},
                group_size=2,
                window=2,
            ),
            TypeError,
            "rope",
        ),
        (
            lambda q: fp.self_extend_attention(
                q, q, q, q_positions=jnp.arange(5), rope=ROPE, group_size=2, window=2
            ),
            ValueError,
            "q_positions",
        ),
        (
            lambda q: fp.dual_chunk_attention(
                q, q, q, q_positions=jnp.arange(6), rope=ROPE, config={"chunk_size": 8}
            ),
            TypeError,
            "DualChunkAttentionConfig",
        ),
        (
            lambda q: fp.dual_chunk_attention(
                q.astype(jnp.int32),
                q,
                q,
                q_positions=jnp.arange(6),
                rope=ROPE,
                config=fp.DualChunkAttentionConfig(8, 2),
            ),
            TypeError,
            "`q`",
        ),
        (
            lambda q: fp.dual_chunk_attention(
                q[:1], q, q, q_positions=[5], k_positions=jnp.arange(6), **DECODE
            ),
            ValueError,
            r"`prompt_length` must be given with `k_positions`.*got None",
        ),
        (
            lambda q: fp.dual_chunk_attention(
                q, q, q, q_positions=jnp.arange(6), prompt_length=4.0, **DECODE
            ),
            TypeError,
            r"`prompt_length` must be an int or an integer array \[B\].*float 4.0",
        ),
        (
            lambda q: fp.dual_chunk_attention(
                q, q, q, q_positions=jnp.arange(6), prompt_length=True, **DECODE
            ),
            TypeError,
            "`prompt_length` must be an int",
        ),
        (
            lambda q: fp.dual_chunk_attention(
                q, q, q, q_positions=jnp.arange(6), prompt_length=[3, 4], **DECODE
            ),
            ValueError,
            r"`prompt_length` must be a scalar or one count per sequence, shape \(\)",
        ),
        (
            lambda q: fp.dual_chunk_attention(
                q, q, q, q_positions=jnp.arange(6), prompt_length=0, **DECODE
            ),
            ValueError,
            r"`prompt_length` must be >= 1.*minimum of 0",
        ),
        (
            lambda q: fp.dual_chunk_attention(
                q,
                q,
                q,
                q_positions=jnp.arange(6),
                rope=fp.RopeConfig(head_dim=4),
                config=fp.DualChunkAttentionConfig(8, 2),
            ),
            ValueError,
            r"`q` and `k` must have H = rope.head_dim \(4\), got H = 8",
        ),
    ],
)
def test_errors_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call(jnp.ones((6, 2, 8)))


def attend_remapped(name, q, k, v, **kwargs):
    """Self-Extend (G = 3, W = 5) or dual chunk attention (chunk 8, local 2, with
    the logit factor) of unrotated q, k, v."""
    if name == "self_extend":
        return fp.self_extend_attention(
            q, k, v, rope=ROPE, group_size=3, window=5, **kwargs
        )
    return fp.dual_chunk_attention(q, k, v, rope=ROPE, config=dca(8, 2, 8), **kwargs)


@pytest.mark.parametrize("name", ["self_extend", "dual_chunk"])
@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_kv_heads_equal_the_references_with_repeated_heads(name, kv_heads):
    """k/v with K < N heads: q head h reads k/v head h // (N / K), as the float64
    references with k/v repeated (a wrong grouping, h % K, differs)."""
    q, k, v = qkv(29, heads=4, kv_heads=kv_heads, seed=2)
    positions = np.arange(29)
    got = jax.jit(
        lambda q, k, v: attend_remapped(
            name, q, k, v, q_positions=positions, block_q=8, block_k=4
        )
    )(q, k, v)
    if name == "self_extend":
        rk, rv = (np.repeat(x, 4 // kv_heads, axis=-2) for x in (k, v))
        want = ref.self_extend(q, rk, rv, positions, 3, 5, 1 / np.sqrt(8))
    else:
        want = ref.vllm_dual_chunk_prefill(q, k, v, 8, 2, 8)  # repeats k/v itself
    np.testing.assert_allclose(got, want, atol=2e-5)


@pytest.mark.parametrize("name", ["self_extend", "dual_chunk"])
def test_grouped_kv_heads_are_never_repeated(name):
    """No array of the program has k/v's 20 keys with q's 4 heads: a jnp.repeat of
    k/v (N / K times their memory) would."""
    q, k, v = qkv(20, heads=4, kv_heads=1, seed=3)
    kwargs = dict(q_positions=np.arange(17, 20), k_positions=np.arange(20))
    if name == "dual_chunk":
        kwargs["prompt_length"] = np.array(17)
    jaxpr = jax.make_jaxpr(
        lambda q, k, v: attend_remapped(name, q, k, v, block_k=8, **kwargs)
    )(q[-3:], k, v)
    assert not re.search(r"\[(\d+,)*20,4,\d+\]", str(jaxpr))


@pytest.mark.parametrize("name", ["self_extend", "dual_chunk"])
def test_causal_tile_skipping_follows_positions_and_changes_no_value(name):
    """Tiles of 4 x 4 with keys stored in a shuffled order (their positions with
    them) equal one tile over the keys in order: a tile is skipped only when every
    pair in it is masked by the positions (skipping by index would drop keys), and
    the skipped tiles change nothing."""
    q, k, v = qkv(24, heads=4, kv_heads=2, seed=4)
    positions = np.arange(24)
    order = np.random.default_rng(0).permutation(24)
    kwargs = dict(q_positions=positions, prompt_length=24)
    if name == "self_extend":
        del kwargs["prompt_length"]
    whole = attend_remapped(
        name, q, k, v, k_positions=positions, block_q=24, block_k=24, **kwargs
    )
    tiled = attend_remapped(
        name, q, k[order], v[order], k_positions=order, block_q=4, block_k=4, **kwargs
    )
    np.testing.assert_allclose(tiled, whole, atol=2e-6)
    program = jax.make_jaxpr(
        lambda q: attend_remapped(name, q, k, v, block_q=4, block_k=4, **kwargs)
    )(q)
    assert "cond[" in str(program)  # the skip is there to be tested


@pytest.mark.parametrize("name", ["self_extend", "dual_chunk"])
def test_precision_reaches_both_matmuls(name):
    """HIGHEST by default (float32 logits on every backend, as before the keyword),
    the backend default with ``precision=None``."""
    q, k, v = qkv(8)

    def program(**kwargs):
        return str(
            jax.make_jaxpr(
                lambda q, k, v: attend_remapped(
                    name, q, k, v, q_positions=np.arange(8), **kwargs
                )
            )(q, k, v)
        )

    dots = re.findall(r"dot_general\[(.*?)\n\s*\]", program(), re.S)
    assert len(dots) >= 3 and all("HIGHEST" in d for d in dots), dots
    dots = re.findall(r"dot_general\[(.*?)\n\s*\]", program(precision=None), re.S)
    assert len(dots) >= 3 and not any("HIGHEST" in d for d in dots), dots
