"""blockwise_attention against dense attention with the materialised bias.

Truth: a float64 numpy softmax over the dense ``[B, N, L, S]`` logits, with the bias
from ``alibi_bias`` / ``relative_position_bias`` and the masks written out pair by
pair; gradients against autodiff of a plain float32 dense attention.
"""

import functools
import re

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import flax_posenc as fp
from flax_posenc import nnx as pnnx

TABLE = np.random.default_rng(9).standard_normal((32, 4)).astype(np.float32)


def qkv(batch, length, keys, heads, kv_heads, head_dim, seed=0, dtype=np.float32):
    """Standard normal q [*batch, L, N, H], k/v [*batch, S, K, H] (numpy: no
    per-shape compile)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*batch, length, heads, head_dim))
    k, v = rng.standard_normal((2, *batch, keys, kv_heads, head_dim))
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)


def alibi_reference(q_pos, k_pos, heads):
    """float64 ``-slope_h * |q - k|`` [B, N, L, S] from [B, L], [B, S] positions."""
    distance = np.abs(k_pos[:, None, None, :] - q_pos[:, None, :, None])
    return -fp.alibi_slopes(heads).astype(np.float64)[:, None, None] * distance


def t5_reference(table, q_pos, k_pos, bidirectional=True, max_distance=128):
    """T5's bucket rule in float64 numpy, then the table lookup: [B, N, L, S]."""
    relative = k_pos[:, None, :] - q_pos[:, :, None]  # [B, L, S]
    buckets = len(table) // 2 if bidirectional else len(table)
    if bidirectional:
        offset, distance = np.where(relative > 0, buckets, 0), np.abs(relative)
    else:
        offset, distance = 0, np.maximum(-relative, 0)
    exact = buckets // 2
    scaled = np.log(np.maximum(distance, 1) / exact) / np.log(max_distance / exact)
    large = np.minimum(exact + np.floor(scaled * (buckets - exact)), buckets - 1)
    bucket = offset + np.where(distance < exact, distance, large).astype(int)
    return np.moveaxis(np.asarray(table, np.float64)[bucket], -1, 1)


def dense_reference(q, k, v, bias, allowed, scale=None):
    """float64 softmax attention; q [B, L, N, H], k/v [B, S, K, H], bias and allowed
    [B, N, L, S]. A row with no allowed key gives zeros."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    groups = q.shape[-2] // k.shape[-2]
    k, v = np.repeat(k, groups, axis=-2), np.repeat(v, groups, axis=-2)
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    logits = np.einsum("blnh,bsnh->bnls", q, k) * scale + bias
    logits = np.where(allowed, logits, -np.inf)
    row_max = logits.max(-1, keepdims=True)
    weights = np.exp(logits - np.where(np.isfinite(row_max), row_max, 0.0))
    total = weights.sum(-1, keepdims=True)
    weights = np.where(total > 0, weights / np.where(total > 0, total, 1.0), 0.0)
    return np.einsum("bnls,bsnh->blnh", weights, v)


def dense_jax(q, k, v, bias, allowed):
    """float32 dense attention in JAX, for gradients; masked rows give zeros."""
    groups = q.shape[-2] // k.shape[-2]
    k, v = jnp.repeat(k, groups, axis=-2), jnp.repeat(v, groups, axis=-2)
    logits = jnp.einsum("blnh,bsnh->bnls", q, k) / np.sqrt(q.shape[-1]) + bias
    any_key = allowed.any(-1, keepdims=True)
    logits = jnp.where(allowed, logits, -jnp.inf)
    weights = jax.nn.softmax(jnp.where(any_key, logits, 0.0), axis=-1)
    return jnp.einsum("bnls,bsnh->blnh", jnp.where(any_key, weights, 0.0), v)


def pairs(q_values, k_values, op):
    """[B, 1, L, S] op(k[j], q[i]) from [B, L] and [B, S] numpy values."""
    return op(k_values[:, None, None, :], q_values[:, None, :, None])


@pytest.mark.parametrize("bidirectional, max_distance", [(True, 128), (False, 20)])
def test_t5_reference_matches_relative_position_bias(bidirectional, max_distance):
    positions = np.arange(0, 400, 3)[None]
    want = fp.relative_position_bias(
        TABLE,
        positions,
        positions,
        bidirectional=bidirectional,
        max_distance=max_distance,
    )
    got = t5_reference(TABLE, positions, positions, bidirectional, max_distance)
    np.testing.assert_array_equal(got, want)


# float32 rounding of softmax(q.k) v with |v| <= ~4 over <= 24 keys: a few ulp.
TOL = {"atol": 4e-6, "rtol": 4e-6}


@st.composite
def cases(draw):
    batch = draw(st.sampled_from([1, 2]))
    keys = draw(st.integers(1, 24))
    decode = draw(st.booleans())
    length = 1 if decode else draw(st.integers(1, 24))
    kv_heads = draw(st.sampled_from([1, 2]))
    heads = kv_heads * draw(st.sampled_from([1, 2]))
    return {
        "shape": (batch, length, keys, heads, kv_heads, draw(st.sampled_from([4, 8]))),
        # q positions end near the last key; a negative shift leaves rows masked.
        "q_shift": draw(st.lists(st.integers(-3, 3), min_size=batch, max_size=batch)),
        "bias": draw(st.sampled_from(["none", "alibi", "t5", "t5_causal"])),
        "causal": draw(st.booleans()),
        "segments": draw(st.booleans()),
        "mask": draw(st.sampled_from(["none", "keys", "full"])),
        "block_q": draw(st.integers(1, 9)),
        "block_k": draw(st.integers(1, 9)),
        "seed": draw(st.integers(0, 2**16)),
    }


BIASES = {
    "none": (lambda heads: None, lambda q_pos, k_pos, heads: 0.0),
    "alibi": (fp.AlibiBias, alibi_reference),
    "t5": (
        lambda heads: fp.RelativeBias(TABLE[:, :heads]),
        lambda q_pos, k_pos, heads: t5_reference(TABLE[:, :heads], q_pos, k_pos),
    ),
    "t5_causal": (
        lambda heads: fp.RelativeBias(
            TABLE[:, :heads], bidirectional=False, max_distance=20
        ),
        lambda q_pos, k_pos, heads: t5_reference(
            TABLE[:, :heads], q_pos, k_pos, bidirectional=False, max_distance=20
        ),
    ),
}


# Each example compiles a new program: half the profile's budget.
@settings(max_examples=settings.default.max_examples // 2)
@given(cases())
def test_matches_dense_attention(case):
    batch, length, keys, heads, kv_heads, head_dim = case["shape"]
    q, k, v = qkv((batch,), length, keys, heads, kv_heads, head_dim, case["seed"])
    rng = np.random.default_rng(case["seed"])
    k_pos = np.broadcast_to(np.arange(keys), (batch, keys))
    q_pos = keys - length + np.arange(length)[None] + np.array(case["q_shift"])[:, None]
    make_bias, reference_bias = BIASES[case["bias"]]
    allowed = np.ones((batch, heads, length, keys), bool)
    kwargs = {}
    if case["causal"]:
        allowed &= pairs(q_pos, k_pos, np.less_equal)
    if case["segments"]:
        q_seg = rng.integers(0, 3, (batch, length))
        k_seg = rng.integers(0, 3, (batch, keys))
        allowed &= pairs(q_seg, k_seg, np.equal)
        kwargs.update(q_segment_ids=q_seg, k_segment_ids=k_seg)
    if case["mask"] != "none":
        shape = (batch, 1, 1, keys) if case["mask"] == "keys" else allowed.shape
        mask = rng.random(shape) < 0.7
        allowed &= mask
        kwargs["mask"] = mask

    @jax.jit
    def attend(q, k, v, q_pos, k_pos, kwargs):
        return fp.blockwise_attention(
            q,
            k,
            v,
            q_positions=q_pos,
            k_positions=k_pos,
            bias=make_bias(heads),
            causal=case["causal"],
            block_q=case["block_q"],
            block_k=case["block_k"],
            **kwargs,
        )

    got = attend(q, k, v, q_pos, k_pos, kwargs)
    assert got.shape == q.shape and got.dtype == q.dtype
    want = dense_reference(q, k, v, reference_bias(q_pos, k_pos, heads), allowed)
    np.testing.assert_allclose(got, want, **TOL)


def blockwise_jit(**options):
    """``jax.jit`` of blockwise_attention(q, k, v, **options) (positions traced)."""
    return jax.jit(
        lambda q, k, v, **kw: fp.blockwise_attention(q, k, v, **kw, **options)
    )


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_leading_axes_and_positions_broadcast(batch):
    q, k, v = qkv(batch, 7, 7, 4, 2, 8)
    positions = np.arange(7) + 5  # [L], shared by every sequence
    attend = blockwise_jit(bias=fp.AlibiBias(4), causal=True, block_q=3)
    got = attend(q, k, v, q_positions=positions)
    flat = [x.reshape(-1, *x.shape[-3:]) for x in (q, k, v)]
    rows = np.broadcast_to(positions, (len(flat[0]), 7))
    bias, allowed = alibi_reference(rows, rows, 4), pairs(rows, rows, np.less_equal)
    want = dense_reference(*flat, bias, allowed)
    np.testing.assert_allclose(got.reshape(want.shape), want, **TOL)


def test_scale_and_value_head_dim():
    q, k, _ = qkv((2,), 5, 6, 2, 2, 8)
    v = np.random.default_rng(3).standard_normal((2, 6, 2, 3)).astype(np.float32)
    got = blockwise_jit(scale=0.7, block_k=4)(q, k, v)  # Hv = 3 != H
    assert got.shape == (2, 5, 2, 3)
    want = dense_reference(q, k, v, 0.0, np.ones((2, 2, 5, 6), bool), scale=0.7)
    np.testing.assert_allclose(got, want, **TOL)


def test_custom_bias_function():
    # Any function of positions with the [..., N, l, s] contract, here without batch.
    def windowed(q_pos, k_pos):
        distance = (k_pos[0][None, :] - q_pos[0][:, None]).astype(jnp.float32)
        return jnp.stack([-jnp.abs(distance), -(distance**2) / 4])  # [N = 2, l, s]

    q, k, v = qkv((1,), 9, 9, 2, 1, 4)
    positions = np.arange(9)
    attend = blockwise_jit(bias=windowed, block_q=4, block_k=4)
    got = attend(q, k, v, q_positions=positions)
    distance = positions[None, :] - positions[:, None]
    bias = np.stack([-np.abs(distance), -(distance**2) / 4])[None]
    want = dense_reference(q, k, v, bias, np.ones((1, 2, 9, 9), bool))
    np.testing.assert_allclose(got, want, **TOL)


def test_fully_masked_rows_give_zeros_and_finite_gradients():
    q, k, v = qkv((1,), 6, 6, 2, 2, 4)
    # Query 0 sits before every key; query 3's segment has no key.
    options = {
        "q_positions": np.arange(6)[None] - 1,
        "k_positions": np.arange(6)[None],
        "q_segment_ids": np.array([[1, 1, 1, 3, 2, 2]]),
        "k_segment_ids": np.array([[1, 1, 1, 2, 2, 2]]),
    }
    attend = functools.partial(
        fp.blockwise_attention,
        bias=fp.AlibiBias(2),
        causal=True,
        block_q=2,
        block_k=2,
        **options,
    )
    grad = jax.grad(lambda *a: attend(*a).sum(), argnums=(0, 1, 2))
    out, grads = jax.jit(lambda *a: (attend(*a), grad(*a)))(q, k, v)
    np.testing.assert_array_equal(out[0, [0, 3]], 0.0)
    assert np.all(np.abs(out[0, [1, 2, 4, 5]]) > 0)
    for grad in grads:
        assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grads[0][0, [0, 3]], 0.0)


@pytest.mark.parametrize(
    "bad", [np.nan, pytest.param(np.inf, marks=pytest.mark.slow)], ids=["nan", "inf"]
)
def test_a_bias_on_masked_pairs_never_reaches_the_output(bad):
    """Pairs the causal mask removes stay removed whatever the bias says there (a
    bias is masked to 0, not added before the mask): the same output and
    gradients as a bias of 0 on those pairs."""

    def masked_bias(value):
        def bias(q_pos, k_pos):
            later = k_pos[0][None, :] > q_pos[0][:, None]
            tile = jnp.where(later, value, -0.1 * (q_pos[0][:, None] - k_pos[0][None]))
            return jnp.stack([tile, 2.0 * tile]).astype(jnp.float32)  # [N = 2, l, s]

        return bias

    q, k, v = qkv((1,), 10, 10, 2, 1, 4)
    positions = np.arange(10)

    def run(value):
        attend = lambda q, k, v: fp.blockwise_attention(
            q, k, v, q_positions=positions, bias=masked_bias(value), causal=True,
            block_q=4, block_k=4,
        )  # fmt: skip
        grad = jax.grad(lambda *a: jnp.sum(jnp.sin(attend(*a))), argnums=(0, 1, 2))
        return jax.jit(lambda *a: (attend(*a), grad(*a)))(q, k, v)

    got, want = run(bad), run(0.0)
    chex.assert_trees_all_equal(got, want)
    assert all(np.all(np.isfinite(x)) for x in jax.tree_util.tree_leaves(got))


# Biases an expensive op computes (log1p, power, FIRE's MLP, T5's lookup): XLA
# evaluates them once per tile and stores the biased, masked logits in the place of
# the q.k tile, as for ALiBi. Before, the expensive bias tile was stored next to
# the logits: one more [N, block, block] float32 tile (issue 20's memory target).
MEMORY_HEADS, MEMORY_BLOCK = 8, 256


def memory_biases():
    rng = np.random.default_rng(5)
    r = rng.standard_normal((2, MEMORY_HEADS)).astype(np.float32)
    fire = fp.FireParams(
        c=np.float32(0.1),
        threshold_multiplier=np.float32(1.0),
        hidden_kernel=rng.standard_normal(32).astype(np.float32),
        hidden_bias=0.1 * rng.standard_normal(32).astype(np.float32),
        output_kernel=rng.standard_normal((32, MEMORY_HEADS)).astype(np.float32),
        output_bias=np.zeros(MEMORY_HEADS, np.float32),
    )
    table = 0.1 * rng.standard_normal((32, MEMORY_HEADS)).astype(np.float32)
    return {
        "kerple_log": fp.KerpleBias(r[0], r[1], "log"),
        "kerple_power": fp.KerpleBias(r[0], r[1], "power"),
        "fire": fp.FireBias(fire, init_threshold=512.0),
        "t5": fp.RelativeBias(table, bidirectional=False),
    }


@pytest.mark.parametrize(
    "name",
    [
        name
        if name in ("kerple_log", "fire")
        else pytest.param(name, marks=pytest.mark.slow)
        for name in memory_biases()
    ],
)
def test_an_expensive_bias_stores_no_tile_beyond_alibi(name):
    """Compiled temp memory of causal blockwise attention with the bias is ALiBi's
    plus at most one [block, block] float32 array (a distance or FIRE's u shared by
    the heads), never a whole [N, block, block] bias tile."""
    if jax.default_backend() != "cpu":
        pytest.skip("pins XLA:CPU's fusion; other compilers fuse their own way")
    length = 4 * MEMORY_BLOCK
    x = jax.ShapeDtypeStruct((1, length, MEMORY_HEADS, 64), jnp.float32)
    positions = jax.ShapeDtypeStruct((length,), jnp.int32)

    def temp(bias):
        attend = lambda q, k, v, p: fp.blockwise_attention(
            q, k, v, q_positions=p, bias=bias, causal=True,
            block_q=MEMORY_BLOCK, block_k=MEMORY_BLOCK,
        )  # fmt: skip
        memory = jax.jit(attend).lower(x, x, x, positions).compile().memory_analysis()
        if memory is None:
            pytest.skip("memory_analysis() is not available on this backend")
        return memory.temp_size_in_bytes

    extra = temp(memory_biases()[name]) - temp(fp.AlibiBias(MEMORY_HEADS))
    assert extra <= MEMORY_BLOCK * MEMORY_BLOCK * 4 + 4096, f"{extra / 2**20:.2f} MiB"


def test_gradients_match_dense():
    q, k, v = qkv((2,), 11, 11, 4, 2, 8, seed=1)
    positions = np.array([list(range(11)), [5, 6, 7, 8, 0, 1, 2, 3, 4, 5, 6]])
    segments = np.array([[1] * 11, [1] * 4 + [2] * 7])
    allowed = pairs(positions, positions, np.less_equal)
    allowed = allowed & pairs(segments, segments, np.equal)
    cotangent = np.random.default_rng(5).standard_normal(q.shape).astype(np.float32)

    def blockwise(q, k, v, table):
        out = fp.blockwise_attention(
            q,
            k,
            v,
            q_positions=positions,
            bias=fp.RelativeBias(table, bidirectional=False),
            causal=True,
            q_segment_ids=segments,
            block_q=4,
            block_k=3,
        )
        return (out * cotangent).sum()

    def dense(q, k, v, table):
        bias = fp.relative_position_bias(
            table, positions, positions, bidirectional=False
        )
        return (dense_jax(q, k, v, bias, allowed) * cotangent).sum()

    got = jax.jit(jax.grad(blockwise, argnums=(0, 1, 2, 3)))(q, k, v, TABLE)
    want = jax.jit(jax.grad(dense, argnums=(0, 1, 2, 3)))(q, k, v, TABLE)
    for g, w in zip(got, want, strict=True):
        # float32 gradients of |x| <= ~30 through two softmax passes.
        np.testing.assert_allclose(g, w, atol=2e-5, rtol=2e-5)


def test_relative_bias_is_a_pytree_and_alibi_bias_is_static():
    q, k, v = qkv((1,), 5, 5, 4, 4, 8)
    positions = np.arange(5)

    @jax.jit
    def loss(bias):
        out = fp.blockwise_attention(q, k, v, q_positions=positions, bias=bias)
        return out.sum()

    grad = jax.grad(loss)(fp.RelativeBias(TABLE))
    assert isinstance(grad, fp.RelativeBias) and grad.table.shape == TABLE.shape
    assert grad.bidirectional and grad.max_distance == 128
    assert np.any(grad.table != 0)
    assert jax.tree_util.tree_leaves(fp.AlibiBias(4)) == []
    assert fp.AlibiBias(4) == fp.AlibiBias(4)
    assert hash(fp.AlibiBias(4)) == hash(fp.AlibiBias(4))


def test_decode_steps_equal_the_causal_forward_without_retracing():
    q, k, v = qkv((2,), 9, 9, 4, 2, 8, seed=2)
    positions = np.arange(9)
    attend = blockwise_jit(bias=fp.AlibiBias(4), causal=True, block_k=4)
    full = attend(q, k, v, q_positions=positions)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(q_step, index):
        return attend(
            q_step, k, v, q_positions=jnp.full((2, 1), index), k_positions=positions
        )

    for index in range(9):
        got = step(q[:, index : index + 1], index)
        np.testing.assert_allclose(got[:, 0], full[:, index], **TOL)


def test_bfloat16_keeps_dtype_within_bfloat16_rounding():
    q, k, v = qkv((1,), 16, 16, 2, 2, 16, seed=4)
    attend = blockwise_jit(bias=fp.AlibiBias(2), block_k=5)
    positions = np.arange(16)
    low = [jnp.asarray(x, jnp.bfloat16) for x in (q, k, v)]
    got = attend(*low, q_positions=positions)
    assert got.dtype == jnp.bfloat16
    want = attend(q, k, v, q_positions=positions)
    np.testing.assert_allclose(got.astype(np.float32), want, atol=3e-2)


L_LONG, N_LONG, H_LONG = 32768, 16, 64
DENSE_BIAS_BYTES = N_LONG * L_LONG * L_LONG * 4  # float32 [N, L, S]: 64 GiB


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "grad"])
def test_memory_at_32k_is_under_a_64th_of_the_dense_bias(grad):
    x = jax.ShapeDtypeStruct((1, L_LONG, N_LONG, H_LONG), jnp.float32)
    positions = jax.ShapeDtypeStruct((L_LONG,), jnp.int32)

    def attend(q, k, v, positions):
        return fp.blockwise_attention(
            q, k, v, q_positions=positions, bias=fp.AlibiBias(N_LONG), causal=True
        )

    fn = jax.grad(lambda *a: attend(*a).sum(), argnums=(0, 1, 2)) if grad else attend
    memory = jax.jit(fn).lower(x, x, x, positions).compile().memory_analysis()
    if memory is None:
        pytest.skip("memory_analysis() is not available on this backend")
    assert DENSE_BIAS_BYTES == 64 * 2**30
    assert memory.temp_size_in_bytes <= DENSE_BIAS_BYTES // 64, (
        f"temp {memory.temp_size_in_bytes / 2**20:.0f} MiB"
    )


COLLECTIVE = re.compile(r"= (\S+) (all-gather|all-reduce|all-to-all|collective-\w+)")


@pytest.mark.slow
@pytest.mark.parametrize(
    "axis_type, per_sequence",
    [(AxisType.Auto, False), (AxisType.Auto, True), (AxisType.Explicit, True)],
    ids=str,
)
def test_sharded_over_batch_and_heads_equals_unsharded(axis_type, per_sequence):
    q, k, v = qkv((4,), 12, 12, 8, 8, 4, seed=6)
    table = np.random.default_rng(7).standard_normal((32, 8)).astype(np.float32)
    # Packed rows: per-sequence offsets, so a wrong shard of positions shows.
    positions = np.arange(12)[None] + np.array([[0], [3], [17], [40]])
    segments = np.array([[1] * 5 + [2] * 7] * 4)
    if not per_sequence:
        positions, segments = positions[:1], segments[:1]  # shared by the batch

    def attend(q, k, v, table, positions, segments):
        return fp.blockwise_attention(
            q,
            k,
            v,
            q_positions=positions,
            bias=fp.RelativeBias(table, bidirectional=False),
            causal=True,
            q_segment_ids=segments,
            block_q=4,
            block_k=4,
        )

    args = (q, k, v, table, positions, segments)
    want = jax.jit(attend)(*args)
    mesh = jax.make_mesh((2, 4), ("data", "heads"), axis_types=(axis_type,) * 2)
    heads = P("data", None, "heads")
    rows = P("data") if per_sequence else P()
    specs = (heads, heads, heads, P(None, "heads"), rows, rows)
    sharded = [
        jax.device_put(x, NamedSharding(mesh, spec))
        for x, spec in zip(args, specs, strict=True)
    ]
    compiled = jax.jit(attend).lower(*sharded).compile()
    got = compiled(*sharded)
    assert got.sharding.is_equivalent_to(NamedSharding(mesh, heads), got.ndim)
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-6)
    # Skipping fully masked tiles: one scalar "any" over the batch shards when
    # positions differ per sequence, nothing when they are shared.
    collectives = set(COLLECTIVE.findall(compiled.as_text()))
    allowed = {("pred[]", "all-reduce")} if per_sequence else set()
    assert collectives <= allowed, collectives


@pytest.mark.slow
def test_blockwise_attention_fn_in_linen_equals_the_array_bias():
    batch, length, heads, dim = 2, 10, 4, 32
    x = np.random.default_rng(0).standard_normal((batch, length, dim))
    positions = np.array([list(range(length)), [3, 4, 5, 6, 7, 0, 1, 2, 3, 4]])
    rope = fp.RopeConfig(head_dim=dim // heads)
    mask = nn.make_causal_mask(np.ones((batch, length)))
    dense = fp.positional_attention_fn(
        rope=rope, q_positions=positions, bias=fp.alibi_bias(positions, positions, 4)
    )
    tiled = fp.blockwise_attention_fn(
        rope=rope, q_positions=positions, bias=fp.AlibiBias(heads)
    )
    from_positions = fp.blockwise_attention_fn(
        rope=rope,
        q_positions=positions,
        bias=fp.AlibiBias(heads),
        causal=True,
        block_q=4,
    )
    variables = nn.MultiHeadDotProductAttention(num_heads=heads).init(
        jax.random.key(1), x
    )

    @jax.jit
    def apply(variables):
        def run(attention_fn, mask):
            module = nn.MultiHeadDotProductAttention(
                num_heads=heads, attention_fn=attention_fn
            )
            return module.apply(variables, x, mask=mask)

        return run(dense, mask), run(tiled, mask), run(from_positions, None)

    want, got_mask, got_positions = apply(variables)
    # Flax's dense causal mask, sliced per tile.
    np.testing.assert_allclose(got_mask, want, atol=1e-5, rtol=1e-5)
    # Causal from the positions instead: the same where positions count up, and
    # not where they restart (row 1 is two packed sequences).
    np.testing.assert_allclose(got_positions[0], want[0], atol=1e-5, rtol=1e-5)
    assert not np.allclose(got_positions[1], want[1], atol=1e-3)


@pytest.mark.slow
def test_blockwise_attention_fn_nnx_decode_cache_with_t5_table():
    batch, steps, heads, dim = 1, 3, 2, 16
    t5 = pnnx.RelativePositionBias(heads, bidirectional=False, rngs=nnx.Rngs(3))
    bias = fp.RelativeBias(t5.relative_attention_bias[...], bidirectional=False)
    attention = nnx.MultiHeadAttention(
        num_heads=heads, in_features=dim, decode=True, rngs=nnx.Rngs(0)
    )
    attention.init_cache((batch, steps, dim))
    x = np.random.default_rng(2).standard_normal((batch, steps, dim))
    slots = np.arange(steps)
    decoded = []
    for index in range(steps):
        attention_fn = fp.blockwise_attention_fn(
            bias=bias, q_positions=jnp.full((batch, 1), index), k_positions=slots
        )
        with fp.attention_fn_override(attention, attention_fn):
            decoded.append(attention(x[:, index : index + 1]))
    dense_fn = fp.positional_attention_fn(bias=t5(slots, slots))
    with fp.attention_fn_override(attention, dense_fn):
        mask = nnx.make_causal_mask(jnp.ones((batch, steps)))
        want = attention(x, mask=mask, decode=False)
    np.testing.assert_allclose(jnp.concatenate(decoded, 1), want, atol=1e-5)


def test_blockwise_attention_fn_takes_flax_is_causal_and_dtype():
    q, k, v = qkv((2,), 6, 6, 4, 2, 8, seed=8)
    positions = np.arange(6)
    attend = jax.jit(
        fp.blockwise_attention_fn(bias=fp.AlibiBias(4), q_positions=positions),
        static_argnames=("is_causal", "dtype"),
    )
    want = blockwise_jit(bias=fp.AlibiBias(4), causal=True)(
        q, k, v, q_positions=positions
    )
    np.testing.assert_array_equal(attend(q, k, v, is_causal=True), want)
    low = attend(q, k, v, is_causal=True, dtype=jnp.bfloat16)
    assert low.dtype == jnp.bfloat16
    np.testing.assert_allclose(low.astype(np.float32), want, atol=3e-2)


Q, K, V = qkv((2,), 6, 6, 4, 2, 8)
POS = jnp.arange(6)


def call(**kwargs):
    args = {"q": Q, "k": K, "v": V}
    args.update({name: kwargs.pop(name) for name in ("q", "k", "v") if name in kwargs})
    return fp.blockwise_attention(args["q"], args["k"], args["v"], **kwargs)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: call(q=Q.astype(jnp.int32)), TypeError, r"`q` must be a floating"),
        (lambda: call(k=K[0]), ValueError, r"of one rank >= 3, got shapes"),
        (lambda: call(k=K[:, :, :, :4]), ValueError, r"same leading axes"),
        (lambda: call(v=V[:1]), ValueError, r"same leading axes"),
        (
            lambda: call(q=Q[:, :, :3]),
            ValueError,
            r"N = 3 must be a multiple of .*K = 2",
        ),
        (lambda: call(k=K[:, :0], v=V[:, :0]), ValueError, r"need L, S >= 1"),
        (lambda: call(bias=fp.AlibiBias(4)), ValueError, r"`q_positions` is required"),
        (lambda: call(causal=True), ValueError, r"`q_positions` is required"),
        (lambda: call(causal=1, q_positions=POS), TypeError, r"`causal` must be true"),
        (
            lambda: call(q_positions=POS, bias=fp.AlibiBias(8)),
            ValueError,
            r"`bias` has 8 heads, q has N = 4",
        ),
        (
            lambda: call(q_positions=POS, bias=fp.RelativeBias(TABLE[:, :2])),
            ValueError,
            r"`bias` has 2 heads",
        ),
        (
            lambda: call(q_positions=POS, bias=np.zeros((4, 6, 6))),
            TypeError,
            r"`bias` must be a function of \(q_positions, k_positions\).*ndarray",
        ),
        (
            lambda: call(q_positions=POS, bias=lambda q, k: jnp.zeros((4, 6, 5))),
            ValueError,
            r"`bias` must return \[B, N, l, s\] or \[N, l, s\] = \(4, 6, 6\) .*"
            r"got shape \(4, 6, 5\)",
        ),
        (
            lambda: call(q_positions=POS.astype(jnp.float32)),
            TypeError,
            r"`q_positions` must be an integer array",
        ),
        (lambda: call(q_positions=POS[:5]), ValueError, r"`q_positions` must be"),
        (
            lambda: call(q=Q[:, :5], q_positions=POS[:5]),
            ValueError,
            r"`q_positions \(also k's, as k_positions is None\)` must be",
        ),
        (lambda: call(k_positions=POS), ValueError, r"`k_positions` needs"),
        (
            lambda: call(q_segment_ids=jnp.ones((2, 5), int)),
            ValueError,
            r"`q_segment_ids` must be \[..., 6\], one id per token",
        ),
        (
            lambda: call(k_segment_ids=jnp.ones(6, int)),
            ValueError,
            r"`k_segment_ids` needs `q_segment_ids`",
        ),
        (
            lambda: call(q=Q[:, :5], q_segment_ids=jnp.ones(5, int)),
            ValueError,
            r"`k_segment_ids` is required when S \(6\) != L \(5\)",
        ),
        (
            lambda: call(mask=jnp.ones((6, 6), jnp.complex64)),
            TypeError,
            r"`mask` must be a bool or 0/1 numeric array .* complex64",
        ),
        (
            lambda: call(mask=jnp.ones((2, 4, 6, 5), bool)),
            ValueError,
            r"`mask` with shape \(2, 4, 6, 5\) must broadcast to \[..., N, L, S\]",
        ),
        (lambda: call(block_q=0), ValueError, r"`block_q` must be a positive int"),
        (lambda: call(block_k=2.0), TypeError, r"`block_k` must be a positive"),
        (lambda: call(scale=0.0), ValueError, r"`scale` must be a finite number > 0"),
        (lambda: fp.AlibiBias(0), ValueError, r"`num_heads` must be a positive"),
        (lambda: fp.RelativeBias(TABLE[0]), ValueError, r"`table` must be \[num_"),
        (
            lambda: fp.RelativeBias(jnp.zeros((32, 4), int)),
            TypeError,
            r"`table` must be a floating-point array",
        ),
        (
            lambda: fp.RelativeBias(TABLE, max_distance=8),
            ValueError,
            r"`max_distance` must exceed the 8 exact buckets",
        ),
        (
            lambda: fp.blockwise_attention_fn(bias=fp.AlibiBias(4), q_positions=None),
            ValueError,
            r"`q_positions` is required: blockwise attention computes its bias",
        ),
        (
            lambda: fp.blockwise_attention_fn(bias=fp.AlibiBias(4), q_positions=POS)(
                Q, K, V, dropout_rate=0.1
            ),
            ValueError,
            r"has no dropout, got dropout_rate=0.1 with deterministic=False",
        ),
        (
            lambda: fp.blockwise_attention_fn(bias=fp.AlibiBias(4), q_positions=POS)(
                Q, K, V, module=object()
            ),
            ValueError,
            r"no attention weights to sow",
        ),
    ],
)
def test_rejects_bad_input(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_default_scale_is_one_over_sqrt_of_the_qk_head_size():
    """``scale=None`` is ``1 / sqrt(H)`` of q and k (16 here), not of v's 4."""
    q, k, _ = qkv((1,), 6, 6, 2, 2, 16, seed=3)
    v = np.random.default_rng(4).standard_normal((1, 6, 2, 4)).astype(np.float32)
    got = fp.blockwise_attention(q, k, v, block_q=4, block_k=4)
    bias, allowed = np.zeros((1, 2, 6, 6)), np.ones((1, 2, 6, 6), bool)
    want = dense_reference(q, k, v, bias, allowed, scale=1 / np.sqrt(16))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    of_v = dense_reference(q, k, v, bias, allowed, scale=1 / np.sqrt(4))
    assert np.abs(of_v - want).max() > 1e-2


def test_a_mask_that_would_enlarge_the_output_is_refused():
    """An unbatched q ``[L, N, H]`` with a ``[1, N, L, S]`` mask: it broadcasts with
    the logits ``[N, L, S]`` but to a larger shape, so it is not a mask of them."""
    q = np.ones((5, 2, 8), np.float32)
    with pytest.raises(
        ValueError,
        match=r"`mask` with shape \(1, 2, 5, 5\) must broadcast to \[\.\.\., N, L, S\] "
        r"with shape \(2, 5, 5\)",
    ):
        fp.blockwise_attention(q, q, q, mask=np.ones((1, 2, 5, 5), bool))
