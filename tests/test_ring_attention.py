"""Ring attention with the sequence sharded over 8 host devices.

Truth: the float64 dense softmax of ``tests/test_blockwise.py`` (the bias from the
float64 ALiBi / T5 transcriptions, masks written out pair by pair), and single-device
``blockwise_attention`` of the same arguments (values and gradients, T5 table
included). The ring's program is checked too: its collectives are the ring's
permutes only (n - 1 per K/V tensor per forward, counted in the jaxpr), never an
all-gather of K/V.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import normal
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from jax_compat import jaxprs_in_params
from test_blockwise import (
    alibi_reference,
    dense_jax,
    dense_reference,
    pairs,
    qkv,
    t5_reference,
)
from test_fire import spread_params
from test_sharding import hlo_collectives

import flax_posenc as fp

DEVICES = 8
TABLE = np.random.default_rng(3).standard_normal((32, 6)).astype(np.float32)
# float32 tiles summed in another order than one device's (a few ulp of |v| <= 4).
TOL = {"atol": 2e-5, "rtol": 2e-5}


def mesh_of(axis_type=AxisType.Auto, shape=(DEVICES,), names=("seq",)):
    return jax.make_mesh(shape, names, axis_types=(axis_type,) * len(names))


def packed_segments(batch, length):
    """Segment ids [B, L] whose boundaries fall inside shards (L / 8 per shard),
    and their restarting positions."""
    cuts = np.array([[0, 11, 20, 37], [0, 5, 29, 30]])[:batch]
    ids = (np.arange(length)[None, None, :] >= cuts[:, :, None]).sum(1)
    positions = np.asarray(fp.positions_from_segment_ids(jnp.asarray(ids)))
    return ids, positions


def left_padding(batch, length):
    """Left-padded rows: segment id 0 for padding, 1 for tokens; positions from 0
    at each row's first token."""
    valid = np.arange(length)[None] >= np.array([[9], [0]])[:batch]
    positions = np.asarray(fp.positions_from_padding_mask(jnp.asarray(valid)))
    return valid.astype(np.int32), positions


def make_case(name):
    """(q, k, v, kwargs for both attentions, float64 bias, allowed [B, N, L, S])."""
    batch, length, heads, kv_heads, head_dim = 2, 48, 6, 2, 8
    q, k, v = qkv((batch,), length, length, heads, kv_heads, head_dim, seed=1)
    kwargs = {"block_q": 4, "block_k": 4}  # 6 rows per shard: blocks overlap
    allowed = np.ones((batch, heads, length, length), bool)
    bias = 0.0
    positions = np.broadcast_to(np.arange(length), (batch, length))
    if name == "alibi_causal_packed":  # ALiBi with 6 heads, packing across shards
        ids, positions = packed_segments(batch, length)
        kwargs.update(bias=fp.AlibiBias(heads), causal=True, q_segment_ids=ids)
        bias = alibi_reference(positions, positions, heads)
        allowed &= pairs(positions, positions, np.less_equal)
        allowed &= pairs(ids, ids, np.equal)
    elif name == "t5_left_padded":  # T5 buckets, bidirectional, left padding
        ids, positions = left_padding(batch, length)
        kwargs.update(bias=fp.RelativeBias(TABLE), q_segment_ids=ids)
        bias = t5_reference(TABLE, positions, positions)
        allowed &= pairs(ids, ids, np.equal)
    elif name == "t5_causal":
        table = TABLE[:, :heads]
        kwargs.update(
            bias=fp.RelativeBias(table, bidirectional=False, max_distance=20),
            causal=True,
        )
        bias = t5_reference(table, positions, positions, False, 20)
        allowed &= pairs(positions, positions, np.less_equal)
    elif name in ("rope_causal", "rope"):  # RoPE'd q/k, no bias
        config = fp.RopeConfig(head_dim=head_dim)
        q, k = (np.asarray(x) for x in fp.apply_rope_qk(q, k, positions, config))
        kwargs.update(causal=name == "rope_causal")
        if name == "rope_causal":
            allowed &= pairs(positions, positions, np.less_equal)
    else:
        raise KeyError(name)
    kwargs["q_positions"] = positions
    return q, k, v, kwargs, bias, allowed


def ring_on(mesh):
    """jit of sharded_ring_attention over ``mesh``'s "seq" axis."""

    @functools.partial(jax.jit, static_argnames="static")
    def ring(q, k, v, kwargs, static=()):
        return fp.sharded_ring_attention(
            q, k, v, mesh=mesh, axis_name="seq", **kwargs, **dict(static)
        )

    return ring


def split_static(kwargs):
    """Arrays (traced) and the rest (static: bias objects, flags, block sizes)."""
    arrays = {k: v for k, v in kwargs.items() if isinstance(v, np.ndarray)}
    static = tuple((k, v) for k, v in kwargs.items() if k not in arrays)
    return arrays, static


@pytest.mark.parametrize("kv_chunks", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_forward_equals_dense_and_blockwise_and_hlo_has_only_permutes(kv_chunks):
    """ALiBi (6 heads), causal, packed segments crossing shards, GQA, 6 rows per
    shard with 4-row blocks (chunks of 3 keys: shorter than a tile); the compiled
    program's only collective is the ring's collective-permute."""
    q, k, v, kwargs, bias, allowed = make_case("alibi_causal_packed")
    arrays, static = split_static(kwargs)
    static += (("kv_chunks", kv_chunks),)
    ring = ring_on(mesh_of())
    compiled = ring.lower(q, k, v, arrays, static=static).compile()
    assert hlo_collectives(compiled.as_text()) == ["collective-permute"]
    got = compiled(q, k, v, arrays)
    assert got.shape == q.shape and got.dtype == q.dtype
    np.testing.assert_allclose(got, dense_reference(q, k, v, bias, allowed), **TOL)
    want = fp.blockwise_attention(q, k, v, **kwargs)
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=2e-6)


def test_a_step_whose_earliest_key_is_the_latest_query_position_is_not_skipped():
    """Repeated positions (t + 1) // 2, causal: shard i holds positions i and
    i + 1, so the block of shard i + 1 starts at the last query position of shard
    i. Its key at that position is visible; a skip test of "every key later than
    every query" that ruled the block out on equality drops it."""
    q, k, v = qkv((1,), 16, 16, 4, 2, 8, seed=5)
    positions = (np.arange(16)[None] + 1) // 2
    allowed = pairs(positions, positions, np.less_equal)
    got = ring_on(mesh_of())(q, k, v, {"q_positions": positions}, (("causal", True),))
    np.testing.assert_allclose(got, dense_reference(q, k, v, 0.0, allowed), **TOL)


def count_permutes(jaxpr, trips=1):
    """Executions of ppermute per operand, loops unrolled by their trip counts."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "ppermute":
            total += trips * len(eqn.invars)
        length = eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1
        for sub in jaxprs_in_params(eqn.params):
            total += count_permutes(sub, trips * length)
    return total


# (kv_heads of N = 8, kv_chunks, chunks): given, or chosen from the shapes (None):
# the fewest with a chunk of k and v within an eighth of the float32 accumulator
# (k and v are 2 K / N of it), or of at most block_k = 8 keys (of 64 per device).
CHUNKS = [(8, 1, 1), (8, 2, 2), (1, None, 2), (2, None, 4), (8, None, 8)]


@pytest.mark.parametrize(("kv_heads", "kv_chunks", "chunks"), CHUNKS)
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "grad"])
def test_ring_permutes_each_block_n_minus_1_times(grad, kv_heads, kv_chunks, chunks):
    """Forward: k, v, k positions, k segment ids each n - 1 times. Gradient: those
    again plus dk and dv n times (their last step home). Per chunk with
    ``kv_chunks``; None chooses the chunks from the shapes."""
    local_length = 64
    q = jax.ShapeDtypeStruct((1, local_length, 8, 4), jnp.float32)
    kv = jax.ShapeDtypeStruct((1, local_length, kv_heads, 4), jnp.float32)
    ids = jax.ShapeDtypeStruct((1, local_length), jnp.int32)

    def local(q, k, v, positions, segments):
        return fp.ring_attention(
            q, k, v, axis_name="seq", q_positions=positions, causal=True,
            q_segment_ids=segments, block_q=8, block_k=8, kv_chunks=kv_chunks,
        )  # fmt: skip

    fn = jax.grad(lambda *a: local(*a).sum(), argnums=(0, 1, 2)) if grad else local
    jaxpr = jax.make_jaxpr(fn, axis_env=[("seq", DEVICES)])(q, kv, kv, ids, ids)
    forward = 4 * (DEVICES - 1)
    want = chunks * (2 * forward + 2 * DEVICES if grad else forward)
    assert count_permutes(jaxpr.jaxpr) == want


@pytest.mark.parametrize("kv_chunks", [pytest.param(1, marks=pytest.mark.slow), 3])
def test_gradients_equal_dense_with_t5_table(kv_chunks):
    """Gradients of q, k, v and the T5 table through the transposed ring equal
    autodiff of dense float32 attention (causal T5 buckets, GQA; with 3 chunks of
    2 keys, each chunk's dk/dv home in its place). Against single-device
    blockwise_attention: the slow grid."""
    q, k, v, kwargs, _, allowed = make_case("t5_causal")
    del kwargs["bias"]
    kwargs["kv_chunks"] = kv_chunks
    positions = kwargs["q_positions"]
    table = jnp.asarray(TABLE)

    def ring(q, k, v, table):
        bias = fp.RelativeBias(table, bidirectional=False, max_distance=20)
        return fp.sharded_ring_attention(
            q, k, v, mesh=mesh_of(), axis_name="seq", bias=bias, **kwargs
        )

    def dense(q, k, v, table):
        bias = fp.relative_position_bias(
            table, positions, positions, bidirectional=False, max_distance=20
        )
        return dense_jax(q, k, v, bias, allowed)

    def grads(attend):
        loss = lambda *args: jnp.sum(jnp.sin(attend(*args)))
        return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(q, k, v, table)

    for got, want in zip(grads(ring), grads(dense), strict=True):
        np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.slow
def test_fire_tile_cases_through_the_ring_equal_blockwise():
    """FIRE, whose tiles pick the windowed MLP or the full one (tile_cases), through
    the ring: output and gradients w.r.t. q and the parameters equal single-device
    blockwise attention; both cases occur among the ring's tiles."""
    params = spread_params()
    length, block = 128, 8  # 16 rows per shard
    positions = jnp.arange(length)
    q = normal((1, length, 3, 8), seed=2)
    starts = range(0, length, block)
    index = jax.jit(
        lambda p, q, k: fp.FireBias(p, init_threshold=8.0).tile_cases(q, k)[0]
    )
    cases = {
        int(index(params, positions[i : i + block], positions[j : j + block]))
        for i in starts
        for j in starts
        if j <= i
    }
    assert cases == {0, 1, 2}  # windows of 2 and 8 units, the full MLP
    kwargs = dict(q_positions=positions, causal=True, block_q=block, block_k=block)

    def ring(q, p):
        bias = fp.FireBias(p, init_threshold=8.0)
        return fp.sharded_ring_attention(
            q, q, q, mesh=mesh_of(), axis_name="seq", bias=bias, **kwargs
        )

    def blockwise(q, p):
        bias = fp.FireBias(p, init_threshold=8.0)
        return fp.blockwise_attention(q, q, q, bias=bias, **kwargs)

    def value_and_grads(attend):
        loss = lambda q, p: jnp.sum(jnp.sin(attend(q, p)))
        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(q, params)

    got, want = value_and_grads(ring), value_and_grads(blockwise)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def tile_counts(positions, num_devices, block):
    """Per device: (query tile, key tile) pairs with any causal pair allowed, over
    all ring steps (what the kernel computes; the rest it skips)."""
    shards = positions.reshape(num_devices, -1)
    tiles = shards.reshape(num_devices, -1, block)
    counts = []
    for mine in tiles:
        counts.append(
            sum(
                int(k_tile.min() <= q_tile.max())
                for q_tile in mine
                for other in tiles
                for k_tile in other
            )
        )
    return counts


@pytest.mark.parametrize("num_devices", [2, 4, 8])
def test_load_balanced_layout_equalises_causal_tiles(num_devices):
    length, block = 64 * num_devices, 32
    perm = fp.load_balanced_permutation(length, num_devices)
    inverse = fp.inverse_load_balanced_permutation(length, num_devices)
    np.testing.assert_array_equal(perm[inverse], np.arange(length))
    assert sorted(perm.tolist()) == list(range(length))
    plain = tile_counts(np.arange(length), num_devices, block)
    balanced = tile_counts(np.arange(length)[perm], num_devices, block)
    assert max(balanced) - min(balanced) <= 1, balanced
    assert sum(balanced) == sum(plain)  # the same work, spread evenly
    assert max(plain) > 2 * min(plain) * (num_devices > 2), plain


def test_load_balanced_layout_gives_the_same_attention():
    """Tokens and positions permuted, ring attention, inverse permutation: equal to
    attention in the plain order (RoPE'd q/k, causal from the positions)."""
    q, k, v, kwargs, bias, allowed = make_case("rope_causal")
    perm = fp.load_balanced_permutation(48, 8)
    inverse = fp.inverse_load_balanced_permutation(48, 8)
    arrays, static = split_static(kwargs)
    arrays = {name: x[:, perm] for name, x in arrays.items()}
    got = ring_on(mesh_of())(q[:, perm], k[:, perm], v[:, perm], arrays, static=static)
    np.testing.assert_allclose(
        np.asarray(got)[:, inverse], dense_reference(q, k, v, bias, allowed), **TOL
    )


def sharded_decode(**options):
    """jit of sharded_kv_cache_attention (causal, 4-slot tiles) in shard_map over
    8 devices: ``(q, k, v, step, slots, written)``, the cache k/v ``[B, S, K, H]``,
    its slot positions ``[S]`` and ``written [B, 1, 1, S]`` split along S."""

    def local(q, k, v, step, slots, written):
        return fp.sharded_kv_cache_attention(
            q, k, v, axis_name="seq", q_positions=step, k_positions=slots,
            causal=True, mask=written, block_k=4, **options,
        )  # fmt: skip

    return jax.jit(
        jax.shard_map(
            local,
            mesh=mesh_of(),
            in_specs=(P(), P(None, "seq"), P(None, "seq"), P(), P("seq"),
                      P(None, None, None, "seq")),
            out_specs=P(),
            check_vma=False,
        )
    )  # fmt: skip


def test_sharded_kv_cache_decoding_equals_one_device():
    """One query token per row against a 64-slot cache split over 8 devices (ALiBi,
    GQA, slots not written masked): one all-gather merges the partial softmaxes."""
    q, k, v = qkv((2,), 1, 64, 6, 2, 8, seed=4)
    slots = np.arange(64)
    written = slots[None, None, None, :] < np.array([40, 57])[:, None, None, None]
    step = np.array([[39], [56]])
    decode = sharded_decode(bias=fp.AlibiBias(6))
    compiled = decode.lower(q, k, v, step, slots, written).compile()
    assert hlo_collectives(compiled.as_text()) == ["all-gather"]
    got = compiled(q, k, v, step, slots, written)
    want = fp.blockwise_attention(
        q, k, v, q_positions=step, k_positions=slots, bias=fp.AlibiBias(6),
        causal=True, mask=written,
    )  # fmt: skip
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=2e-6)
    bias = alibi_reference(step, np.broadcast_to(slots, (2, 64)), 6)
    allowed = np.broadcast_to(written, (2, 6, 1, 64))
    np.testing.assert_allclose(got, dense_reference(q, k, v, bias, allowed), **TOL)


def test_sharded_kv_cache_decoding_with_no_visible_key_gives_zeros():
    """A query with no visible key on any device gives zeros, as dense attention's
    empty row (not NaN: every device's running max is -inf): row 0 precedes every
    slot (causal), row 1 has no slot written."""
    q, k, v = qkv((2,), 1, 64, 4, 2, 8, seed=6)
    slots = np.arange(1, 65)
    written = np.broadcast_to(
        np.array([True, False])[:, None, None, None], (2, 1, 1, 64)
    )
    got = sharded_decode()(q, k, v, np.array([[0], [50]]), slots, written)
    np.testing.assert_array_equal(got, np.zeros_like(q))


DYNAMIC = fp.RopeConfig(
    head_dim=8,
    scaling=fp.DynamicNTKScaling(factor=4.0, original_max_position_embeddings=8),
)


def test_rope_inside_the_ring_uses_the_global_seq_len():
    """Dynamic NTK inside ring_attention: seq_len=None is the global
    max(positions) + 1 (one scalar all-reduce besides the permutes), never the
    shard's; equal to rotating the unsharded q/k."""
    q, k, v = qkv((1,), 32, 32, 2, 2, 8, seed=5)
    positions = np.arange(32)

    def local(q, k, v, positions):
        return fp.ring_attention(
            q, k, v, axis_name="seq", q_positions=positions, rope=DYNAMIC,
            causal=True, block_q=4, block_k=4,
        )  # fmt: skip

    spec = P(None, "seq")
    ring = jax.jit(
        jax.shard_map(
            local,
            mesh=mesh_of(),
            in_specs=(spec, spec, spec, P("seq")),
            out_specs=spec,
            check_vma=False,
        )
    )
    compiled = ring.lower(q, k, v, positions).compile()
    assert hlo_collectives(compiled.as_text()) == ["all-reduce", "collective-permute"]
    rq, rk = fp.apply_rope_qk(q, k, positions, DYNAMIC)  # seq_len 32 > 8: scaled
    allowed = pairs(positions[None], positions[None], np.less_equal)
    want = dense_reference(rq, rk, v, 0.0, allowed)
    np.testing.assert_allclose(compiled(q, k, v, positions), want, **TOL)
    # What a local length gives: the first shard's own max(positions) + 1 = 4.
    shard_len = fp.apply_rope_qk(q[:, :4], k[:, :4], positions[:4], DYNAMIC)[0]
    assert not np.allclose(shard_len, rq[:, :4], atol=1e-3)


@pytest.mark.parametrize(
    "config",
    [
        DYNAMIC,
        fp.RopeConfig(
            head_dim=8,
            scaling=fp.LongRopeScaling(
                short_factor=(1.0,) * 4,
                long_factor=(2.0, 3.0, 4.0, 5.0),
                original_max_position_embeddings=8,
            ),
        ),
    ],
    ids=["dynamic_ntk", "longrope"],
)
def test_rope_on_sequence_sharded_qk_needs_no_collective(config):
    """apply_rope_qk on sequence-sharded q/k with global positions and a static
    seq_len compiles with no collective and gives the unsharded values."""
    q, k, _ = qkv((2,), 32, 32, 2, 2, 8, seed=6)
    mesh = mesh_of()
    spec = NamedSharding(mesh, P(None, "seq"))
    positions = jax.device_put(np.arange(32), NamedSharding(mesh, P("seq")))
    qs, ks = jax.device_put(q, spec), jax.device_put(k, spec)
    rope = jax.jit(lambda q, k, p: fp.apply_rope_qk(q, k, p, config, seq_len=32))
    compiled = rope.lower(qs, ks, positions).compile()
    assert hlo_collectives(compiled.as_text()) == []
    got = compiled(qs, ks, positions)
    want = fp.apply_rope_qk(q, k, np.arange(32), config, seq_len=32)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-6, rtol=1e-6)


Q, K, V = qkv((2,), 16, 16, 4, 2, 8)
POS = np.arange(16)


def sharded(**kwargs):
    args = {"q": Q, "k": K, "v": V, "mesh": mesh_of(), "axis_name": "seq"}
    args.update(kwargs)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    return fp.sharded_ring_attention(q, k, v, **args)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: sharded(mesh="seq"), TypeError, r"`mesh` must be a jax.sharding.Mesh"),
        (lambda: sharded(axis_name=0), TypeError, r"`axis_name` must be a mesh axis"),
        (
            lambda: sharded(axis_name="sequence"),
            ValueError,
            r"`axis_name` must be an axis of the mesh \('seq',\), got 'sequence'",
        ),
        (
            lambda: sharded(q=Q[:, :12], k=K[:, :12], v=V[:, :12]),
            ValueError,
            r"L = 12 must be a multiple of the size of axis 'seq' \(8\). Hint: pad",
        ),
        (
            lambda: sharded(q=Q[0], k=K[0], v=V[0]),
            ValueError,
            r"must be \[B, L, N, H\] for a mesh, got rank 3",
        ),
        (
            lambda: sharded(causal=True),
            ValueError,
            r"`q_positions` is required with `bias` or `causal=True`",
        ),
        (
            lambda: sharded(rope=fp.RopeConfig(head_dim=8)),
            ValueError,
            r"`q_positions` is required with `rope`",
        ),
        (
            lambda: sharded(rope={"rope_theta": 1e4}, q_positions=POS),
            TypeError,
            r"`rope` must be",
        ),
        (
            lambda: sharded(q_positions=POS.astype(np.float32), causal=True),
            TypeError,
            r"`q_positions` must be an integer array",
        ),
        (
            lambda: sharded(bias=fp.AlibiBias(3), q_positions=POS),
            ValueError,
            r"`bias` has 3 heads, q has N = 4",
        ),
        (
            lambda: sharded(block_q=0),
            ValueError,
            r"`block_q` must be",
        ),
        (
            lambda: sharded(kv_chunks=0),
            ValueError,
            r"`kv_chunks` must be a positive int, got 0",
        ),
        (
            lambda: sharded(kv_chunks=3),
            ValueError,
            r"`kv_chunks` = 3 must divide this device's key length 2\. Hint: a "
            r"divisor of 2, e\.g\. kv_chunks=2",
        ),
        (
            lambda: fp.ring_attention_fn(
                mesh=mesh_of(), axis_name="seq", q_positions=POS, kv_chunks=2.0
            ),
            TypeError,
            r"`kv_chunks` must be None \(chosen from the shapes\) or a positive int, "
            r"got 2.0 \(float\)",
        ),
        (
            lambda: fp.ring_attention(Q, K, V, axis_name="seq"),
            ValueError,
            r"`axis_name` 'seq' is not bound: ring_attention runs inside "
            r"jax.shard_map.*Hint: fp.sharded_ring_attention",
        ),
        (
            lambda: fp.sharded_kv_cache_attention(Q, K, V, axis_name="seq"),
            ValueError,
            r"`axis_name` 'seq' is not bound: sharded_kv_cache_attention runs inside "
            r"jax.shard_map.*Hint: call it from the decode step inside jax.shard_map",
        ),
        (
            lambda: jax.shard_map(
                lambda q: fp.ring_attention(q, q, q, axis_name="seq"),
                mesh=mesh_of(),
                in_specs=P(None, "seq"),
                out_specs=P(None, "seq"),
            )(Q),
            ValueError,
            r"ring_attention runs inside jax.shard_map\(\.\.\., check_vma=False\), and "
            r"the enclosing shard_map over 'seq' checks varying axes.*Hint: "
            r"jax.shard_map\(f, .*check_vma=False\)",
        ),
        (
            lambda: jax.shard_map(
                lambda q: fp.sharded_kv_cache_attention(q, q, q, axis_name="seq"),
                mesh=mesh_of(),
                in_specs=P(),
                out_specs=P(),
            )(Q),
            ValueError,
            r"sharded_kv_cache_attention runs inside jax.shard_map\(\.\.\., "
            r"check_vma=False\)",
        ),
        (
            lambda: fp.load_balanced_permutation(20, 4),
            ValueError,
            r"`seq_len` \(20\) must be a multiple of 2 \* num_shards \(8\).*pad the "
            r"sequence to 24 tokens",
        ),
        (
            lambda: fp.inverse_load_balanced_permutation(16, 0),
            ValueError,
            r"`num_shards` must be",
        ),
        (
            lambda: fp.ring_attention_fn(
                mesh=mesh_of(), axis_name="seq", q_positions=None
            ),
            ValueError,
            r"`q_positions` is required: ring attention",
        ),
        (
            lambda: fp.ring_attention_fn(
                mesh=mesh_of(), axis_name="seq", q_positions=POS
            )(Q, K, V, mask=POS > 3),
            ValueError,
            r"takes no `mask` array, got shape \(16,\).*Hint: causal=True",
        ),
        (
            lambda: fp.ring_attention_fn(
                mesh=mesh_of(), axis_name="seq", q_positions=POS
            )(Q, K, V, dropout_rate=0.1),
            ValueError,
            r"has no dropout, got dropout_rate=0.1",
        ),
    ],
)
def test_rejects_bad_input(make, error, match):
    with pytest.raises(error, match=match):
        make()


# The grid: every case, values and gradients, against dense float64 and blockwise.
CASES = ["alibi_causal_packed", "t5_left_padded", "t5_causal", "rope_causal", "rope"]


@pytest.mark.slow
@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit], ids=str)
@pytest.mark.parametrize("name", CASES)
def test_every_case_equals_dense_and_blockwise(name, axis_type):
    q, k, v, kwargs, bias, allowed = make_case(name)
    arrays, static = split_static(kwargs)
    got = ring_on(mesh_of(axis_type))(q, k, v, arrays, static=static)
    np.testing.assert_allclose(got, dense_reference(q, k, v, bias, allowed), **TOL)
    np.testing.assert_allclose(got, fp.blockwise_attention(q, k, v, **kwargs), **TOL)

    def loss(attend):
        return jax.jit(jax.grad(lambda q, k, v: jnp.sum(jnp.sin(attend(q, k, v)))))

    ring = lambda q, k, v: fp.sharded_ring_attention(
        q, k, v, mesh=mesh_of(axis_type), axis_name="seq", **kwargs
    )
    one = lambda q, k, v: fp.blockwise_attention(q, k, v, **kwargs)
    np.testing.assert_allclose(loss(ring)(q, k, v), loss(one)(q, k, v), **TOL)


def test_batch_axis_splits_per_example_positions_with_the_batch():
    """A (2, 4) mesh with ``batch_axis``: each example's own positions and segment
    ids go with its rows (replicated rows would pair the wrong example's)."""
    q, k, v, kwargs, _, _ = make_case("alibi_causal_packed")
    assert kwargs["q_positions"][0].tolist() != kwargs["q_positions"][1].tolist()
    mesh = mesh_of(shape=(2, 4), names=("data", "seq"))
    got = fp.sharded_ring_attention(
        q, k, v, mesh=mesh, axis_name="seq", batch_axis="data", **kwargs
    )
    np.testing.assert_allclose(got, fp.blockwise_attention(q, k, v, **kwargs), **TOL)


@pytest.mark.slow
def test_data_and_sequence_mesh_with_dynamic_ntk():
    """A (2, 4) mesh: batch over "data", sequence over "seq"; dynamic NTK with
    seq_len=None is the global length of the whole batch, as unsharded."""
    q, k, v, kwargs, _, _ = make_case("alibi_causal_packed")
    kwargs = dict(kwargs, rope=DYNAMIC, q_positions=kwargs["q_positions"] + 30)
    mesh = mesh_of(shape=(2, 4), names=("data", "seq"))
    got = jax.jit(
        lambda q, k, v: fp.sharded_ring_attention(
            q, k, v, mesh=mesh, axis_name="seq", batch_axis="data", **kwargs
        )
    )(q, k, v)
    rope = kwargs.pop("rope")
    rq, rk = fp.apply_rope_qk(q, k, kwargs["q_positions"], rope)
    want = fp.blockwise_attention(rq, rk, v, **kwargs)
    np.testing.assert_allclose(got, want, **TOL)


# The ring double-buffers its K/V (the chunk in use and the one arriving; in the
# backward also dk/dv), which blockwise attention at L / n does not need. The
# default kv_chunks=None sends the block round in chunks small enough that this
# stays within 1.5x; with kv_chunks=1 the forward takes 1.59x (K = 1), 1.61x
# (K = 2) and 2.7x (K = N). benchmarks/ring_benchmark.py prints every combination.
# The sizes of docs/guide/context_parallel.md: 8 devices, N = 8, H = 64.
L_LONG, N_LONG, H_LONG = 65536, 8, 64


@pytest.mark.slow
@pytest.mark.parametrize("kv_heads", [1, 2, N_LONG], ids=["mqa", "gqa", "mha"])
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "grad"])
def test_memory_per_device_at_64k_is_that_of_one_device_at_l_over_n(grad, kv_heads):
    """Per-device compiled temp memory of the ring (default ``kv_chunks``) at L =
    65536 over 8 devices is within 1.5x of single-device blockwise attention at
    L / 8."""
    local = L_LONG // DEVICES

    def ring(q, k, v, positions):
        return fp.ring_attention(
            q, k, v, axis_name="seq", q_positions=positions,
            bias=fp.AlibiBias(N_LONG), causal=True,
        )  # fmt: skip

    def one(q, k, v, positions):
        return fp.blockwise_attention(
            q, k, v, q_positions=positions, bias=fp.AlibiBias(N_LONG), causal=True
        )

    def memory(fn, length, mapped):
        x = jax.ShapeDtypeStruct((1, length, N_LONG, H_LONG), jnp.float32)
        kv = jax.ShapeDtypeStruct((1, length, kv_heads, H_LONG), jnp.float32)
        positions = jax.ShapeDtypeStruct((length,), jnp.int32)
        if grad:
            fn = jax.grad(lambda *a, f=fn: f(*a).sum(), argnums=(0, 1, 2))
        if mapped:
            spec = P(None, "seq")
            out = (spec,) * 3 if grad else spec
            fn = jax.shard_map(
                fn, mesh=mesh_of(), in_specs=(spec, spec, spec, P("seq")),
                out_specs=out, check_vma=False,
            )  # fmt: skip
        compiled = jax.jit(fn).lower(x, kv, kv, positions).compile()
        return compiled.memory_analysis()

    ring_memory, one_memory = memory(ring, L_LONG, True), memory(one, local, False)
    if ring_memory is None or one_memory is None:
        pytest.skip("memory_analysis() is not available on this backend")
    ratio = ring_memory.temp_size_in_bytes / one_memory.temp_size_in_bytes
    assert ratio <= 1.5, (ring_memory.temp_size_in_bytes, one_memory.temp_size_in_bytes)


@pytest.mark.slow
def test_ring_attention_fn_in_nnx_equals_blockwise_attention_fn():
    """nnx.MultiHeadAttention with the ring as its attention_fn (RoPE with dynamic
    NTK, seq_len None: the global length; causal) equals the
    single-device blockwise_attention_fn, under jit with x sharded over "seq"."""
    from flax import nnx

    mesh = mesh_of()
    attention = nnx.MultiHeadAttention(
        num_heads=2, in_features=16, decode=False, rngs=nnx.Rngs(0)
    )
    x = normal((2, 32, 16), seed=1)
    positions = jnp.arange(32) + 3
    options = {"q_positions": positions, "rope": DYNAMIC, "causal": True}
    options |= {"block_q": 4, "block_k": 4}
    ring = fp.ring_attention_fn(mesh=mesh, axis_name="seq", **options)
    one = fp.blockwise_attention_fn(**options)
    graphdef, state = nnx.split(attention)

    def run(attention_fn, x):
        module = nnx.merge(graphdef, state)
        with fp.attention_fn_override(module, attention_fn):
            return module(x)

    sharded = jax.device_put(x, NamedSharding(mesh, P(None, "seq")))
    got = jax.jit(functools.partial(run, ring))(sharded)
    want = jax.jit(functools.partial(run, one))(x)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
