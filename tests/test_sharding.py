"""The encodings under JAX's SPMD partitioner: sharded over batch, sequence and heads.

Position encodings are elementwise in batch, sequence and heads, so with positions
sharded like the activations they must compile to programs without any collective,
give the unsharded values, and keep the input's sharding. Checked with
``NamedSharding`` on meshes with ``Auto`` axes (sharding propagation) and ``Explicit``
axes (sharding in types, the default of ``jax.make_mesh``), and inside ``shard_map``.

The one reduction in the encodings: dynamic NTK (and LongRoPE) default ``seq_len`` to
``max(positions) + 1``. Under ``jit`` that is a scalar all-reduce over the devices
holding positions (latency, no bandwidth), with the global value; inside
``shard_map`` it is the shard-local maximum, so every shard gets its own frequencies.
An explicit ``seq_len`` (static, or ``lax.pmax`` of the local maxima inside
``shard_map``) restores the unsharded result, without communication when static.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import assert_close, normal
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import flax_posenc as fp
from flax_posenc import linen as pl
from flax_posenc import nnx as pn

B, L, N, H, D = 4, 16, 8, 8, 8
X = normal((B, L, N, H), seed=0)
EMBEDDINGS = normal((B, L, D), seed=1)
TABLE = normal((64, D), seed=2)
# Packed rows: per-sequence offsets, so a wrong shard of positions shows in values.
POSITIONS = jnp.arange(L)[None, :] + jnp.array([[0], [3], [17], [40]])

BIAS_TABLE = normal((32, N), seed=4)  # T5 [num_buckets, N]

PLAIN = fp.RopeConfig(head_dim=H)
DYNAMIC = fp.RopeConfig(
    head_dim=H,
    scaling=fp.DynamicNTKScaling(factor=4.0, original_max_position_embeddings=8),
)

COLLECTIVE_OPS = (
    "all-gather",
    "all-reduce",
    "all-to-all",
    "collective-broadcast",
    "collective-permute",
    "ragged-all-to-all",
    "reduce-scatter",
)
# An HLO instruction reads `%name = type opcode(operands)`; async forms add -start/-done.
_OPCODE = re.compile(
    r"(?<![\w.-])(" + "|".join(COLLECTIVE_OPS) + r")(?:-start|-done)?\("
)


def hlo_collectives(hlo_text: str) -> list[str]:
    """The collective opcodes in HLO text, sorted, each once."""
    return sorted(set(_OPCODE.findall(hlo_text)))


def compile_checked(fn, *args, collectives=()):
    """Compiles ``jax.jit(fn)`` for ``args``; asserts its collectives, returns it."""
    compiled = jax.jit(fn).lower(*args).compile()
    found = hlo_collectives(compiled.as_text())
    assert found == sorted(collectives), (
        f"expected collectives {sorted(collectives)}, compiled HLO has {found}"
    )
    return compiled


def assert_sharding(array, mesh, spec):
    want = NamedSharding(mesh, spec)
    assert array.sharding.is_equivalent_to(want, array.ndim), (
        f"output sharding {array.sharding.spec}, expected {spec}"
    )


def mesh_of(shape, names, axis_type=AxisType.Auto):
    return jax.make_mesh(shape, names, axis_types=(axis_type,) * len(names))


def put(array, mesh, spec):
    # From the host: resharding a device array would compile a program per call.
    return jax.device_put(np.asarray(array), NamedSharding(mesh, spec))


def test_hlo_collectives_finds_opcodes_not_names():
    text = (
        "%all-reduce.3 = f32[] all-reduce(f32[] %p), to_apply=%add\n"
        "%ags = (f32[2], f32[8]) all-gather-start(f32[2] %x)\n"
        "%fusion.all-to-all = f32[2] fusion(f32[2] %y)\n"
    )
    assert hlo_collectives(text) == ["all-gather", "all-reduce"]
    mesh = mesh_of((8,), ("data",))
    summed = jax.shard_map(
        lambda v: jax.lax.psum(v, "data"), mesh=mesh, in_specs=P("data"), out_specs=P()
    )
    with pytest.raises(AssertionError, match=r"HLO has \['all-reduce'\]"):
        compile_checked(summed, jnp.ones(8))


# (mesh shape, axis names, x spec [B, L, N, H], positions spec, positions rank)
LAYOUTS = {
    "data_seq": ((2, 4), ("data", "seq"), P("data", "seq"), P("data", "seq"), 2),
    "seq_1d_positions": ((8,), ("seq",), P(None, "seq"), P("seq"), 1),
    "data_heads": ((2, 4), ("data", "heads"), P("data", None, "heads"), P("data"), 2),
    "heads": ((8,), ("heads",), P(None, None, "heads"), P(), 1),
    "data_seq_heads": (
        (2, 2, 2),
        ("data", "seq", "heads"),
        P("data", "seq", "heads"),
        P("data", "seq"),
        2,
    ),
}
# Explicit axes (sharding in the types) with the `slow` tests.
AXIS_TYPES = [AxisType.Auto, pytest.param(AxisType.Explicit, marks=pytest.mark.slow)]


def sharded_rope_inputs(layout, axis_type):
    shape, names, x_spec, positions_spec, positions_rank = LAYOUTS[layout]
    mesh = mesh_of(shape, names, axis_type)
    positions = POSITIONS if positions_rank == 2 else POSITIONS[0]
    return put(X, mesh, x_spec), put(positions, mesh, positions_spec), positions


@pytest.mark.parametrize("axis_type", AXIS_TYPES, ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize(
    "config, seq_len",
    [(PLAIN, None), pytest.param(DYNAMIC, 64, marks=pytest.mark.slow)],
    ids=["plain", "dynamic_ntk"],
)
def test_apply_rope_sharded_needs_no_communication(layout, axis_type, config, seq_len):
    x, positions, unsharded_positions = sharded_rope_inputs(layout, axis_type)

    def rope(x, positions):
        return fp.apply_rope(x, positions, config, seq_len=seq_len)

    got = compile_checked(rope, x, positions)(x, positions)
    assert_sharding(got, x.sharding.mesh, x.sharding.spec)
    assert_close(got, jax.jit(rope)(X, unsharded_positions))


# Position-based RoPE variants: (apply, positions from [B, L] ones, their spec from
# the [B, L] spec). M-RoPE's rows lead, axial coordinates trail.
ROPE_VARIANTS = {
    "mrope": (
        lambda x, p: fp.apply_mrope(x, p, PLAIN, mrope_section=(1, 1, 2)),
        lambda p: jnp.stack([p, p // 2, p % 3]),
        lambda spec: P(None, *spec),
    ),
    "axial": (
        lambda x, p: fp.apply_axial_rope(x, p, PLAIN),
        lambda p: jnp.stack([p // 4, p % 4], axis=-1),
        lambda spec: P(*spec, None),
    ),
    "xpos_key": (
        lambda x, p: fp.apply_xpos(x, p, PLAIN, is_key=True, center=8),
        lambda p: p,
        lambda spec: P(*spec),
    ),
}


@pytest.mark.parametrize("axis_type", AXIS_TYPES, ids=str)
@pytest.mark.parametrize("variant", sorted(ROPE_VARIANTS))
def test_rope_variants_sharded_need_no_communication(variant, axis_type):
    rope, make_positions, positions_spec = ROPE_VARIANTS[variant]
    mesh = mesh_of((2, 2, 2), ("data", "seq", "heads"), axis_type)
    x = put(X, mesh, P("data", "seq", "heads"))
    positions = put(make_positions(POSITIONS), mesh, positions_spec(("data", "seq")))
    got = compile_checked(rope, x, positions)(x, positions)
    assert_sharding(got, mesh, P("data", "seq", "heads"))
    assert_close(got, jax.jit(rope)(X, make_positions(POSITIONS)))


@pytest.mark.parametrize("axis_type", AXIS_TYPES, ids=str)
def test_dynamic_ntk_default_seq_len_is_one_scalar_all_reduce(axis_type):
    x, positions, unsharded_positions = sharded_rope_inputs("data_seq", axis_type)

    def rope(x, positions):
        return fp.apply_rope(x, positions, DYNAMIC)

    compiled = compile_checked(rope, x, positions, collectives=["all-reduce"])
    reductions = re.findall(r"= (\S+) all-reduce(?:-start)?\(", compiled.as_text())
    assert reductions and all(r in ("s32[]", "f32[]") for r in reductions), reductions
    # The reduction is global: max(positions) = 55 > orig = 8 scales the frequencies.
    want = jax.jit(rope)(X, unsharded_positions)
    assert_close(compiled(x, positions), want)
    assert_close(want, fp.apply_rope(X, unsharded_positions, DYNAMIC, seq_len=56))


@pytest.mark.parametrize("axis_type", AXIS_TYPES, ids=str)
@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_sinusoidal_encoding_sharded_needs_no_communication(axis_type, layout):
    mesh = mesh_of((2, 4), ("data", "seq"), axis_type)
    positions = put(POSITIONS, mesh, P("data", "seq"))

    def encode(positions):
        return fp.sinusoidal_encoding(positions, D, layout=layout)

    got = compile_checked(encode, positions)(positions)
    assert_sharding(got, mesh, P("data", "seq", None))
    assert_close(got, jax.jit(encode)(POSITIONS))


@pytest.mark.parametrize("axis_type", AXIS_TYPES, ids=str)
@pytest.mark.parametrize("out_of_range", ["nan", "clip"])
def test_learned_lookup_replicated_table_needs_no_communication(
    out_of_range, axis_type
):
    mesh = mesh_of((2, 4), ("data", "seq"), axis_type)
    table = put(TABLE, mesh, P())
    positions = put(POSITIONS, mesh, P("data", "seq"))

    def lookup(table, positions):
        return fp.learned_embedding_lookup(table, positions, out_of_range=out_of_range)

    got = compile_checked(lookup, table, positions)(table, positions)
    assert_sharding(got, mesh, P("data", "seq", None))
    np.testing.assert_array_equal(got, TABLE[POSITIONS])


def linen_learned():
    module = pl.LearnedPositionalEmbedding(max_len=TABLE.shape[0], features=D)
    return module, {"params": {"embedding": TABLE}}


def nnx_learned():
    module = pn.LearnedPositionalEmbedding(TABLE.shape[0], D, rngs=nnx.Rngs(0))
    module.embedding[...] = TABLE
    return module


def module_fns():
    """name -> (fn(embeddings, positions), fn's state); each adds PE to embeddings."""
    linen_sin = pl.SinusoidalPositionalEncoding()
    nnx_sin = pn.SinusoidalPositionalEncoding()
    linen_emb, variables = linen_learned()
    graphdef, state = nnx.split(nnx_learned())
    return {
        "linen_sinusoidal": (lambda s, e, p: linen_sin.apply({}, e, p), {}),
        "nnx_sinusoidal": (lambda s, e, p: nnx_sin(e, p), {}),
        "linen_learned": (lambda s, e, p: linen_emb.apply(s, e, p), variables),
        "nnx_learned": (lambda s, e, p: nnx.merge(graphdef, s)(e, p), state),
    }


MODULES = ["linen_sinusoidal", "nnx_sinusoidal", "linen_learned", "nnx_learned"]


@pytest.mark.parametrize("axis_type", AXIS_TYPES, ids=str)
@pytest.mark.parametrize("default_positions", [False, True])
@pytest.mark.parametrize("name", MODULES)
def test_modules_on_sharded_embeddings_need_no_communication(
    name, default_positions, axis_type
):
    fn, state = module_fns()[name]
    mesh = mesh_of((2, 4), ("data", "seq"), axis_type)
    unsharded_positions = None if default_positions else POSITIONS
    want = jax.jit(fn)(state, EMBEDDINGS, unsharded_positions)
    state = jax.device_put(state, NamedSharding(mesh, P()))  # replicated table
    embeddings = put(EMBEDDINGS, mesh, P("data", "seq"))
    positions = None if default_positions else put(POSITIONS, mesh, P("data", "seq"))
    compiled = compile_checked(fn, state, embeddings, positions)
    got = compiled(state, embeddings, positions)
    assert_sharding(got, mesh, P("data", "seq", None))
    assert_close(got, want)


def test_sinusoidal_module_with_feature_sharded_embeddings():
    # D sharded too (tensor parallel): each device computes only its features.
    mesh = mesh_of((2, 4), ("data", "model"))
    embeddings = put(EMBEDDINGS, mesh, P("data", None, "model"))
    positions = put(POSITIONS, mesh, P("data"))
    module = pn.SinusoidalPositionalEncoding()
    got = compile_checked(module, embeddings, positions)(embeddings, positions)
    assert_sharding(got, mesh, P("data", None, "model"))
    assert_close(got, jax.jit(module)(EMBEDDINGS, POSITIONS))


SHARD_MAP_MESH = ((2, 4), ("data", "seq"))


def in_shard_map(fn, in_specs, out_specs):
    mesh = mesh_of(*SHARD_MAP_MESH)
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs)


@pytest.mark.parametrize("config, seq_len", [(PLAIN, None), (DYNAMIC, 64)])
def test_apply_rope_in_shard_map(config, seq_len):
    def rope(x, positions):
        return fp.apply_rope(x, positions, config, seq_len=seq_len)

    spec = P("data", "seq")
    mapped = in_shard_map(rope, (spec, spec), spec)
    got = compile_checked(mapped, X, POSITIONS)(X, POSITIONS)
    assert_close(got, jax.jit(rope)(X, POSITIONS))


def test_dynamic_ntk_in_shard_map_default_seq_len_is_shard_local():
    spec = P("data", "seq")

    def rope(x, positions):
        return fp.apply_rope(x, positions, DYNAMIC)

    def rope_global_seq_len(x, positions):
        seq_len = jax.lax.pmax(jnp.max(positions), ("data", "seq")) + 1
        return fp.apply_rope(x, positions, DYNAMIC, seq_len=seq_len)

    want = jax.jit(rope)(X, POSITIONS)
    local = jax.jit(in_shard_map(rope, (spec, spec), spec))(X, POSITIONS)
    # Each [2, 4] block used its own max(positions) + 1 as seq_len.
    rope_at = jax.jit(lambda x, p, n: fp.apply_rope(x, p, DYNAMIC, seq_len=n))
    for b in range(0, B, 2):
        for s in range(0, L, 4):
            block = (slice(b, b + 2), slice(s, s + 4))
            seq_len = POSITIONS[block].max() + 1
            assert_close(local[block], rope_at(X[block], POSITIONS[block], seq_len))
    assert not np.allclose(local, want, atol=1e-3)
    mapped = in_shard_map(rope_global_seq_len, (spec, spec), spec)
    fixed = compile_checked(mapped, X, POSITIONS, collectives=["all-reduce"])
    assert_close(fixed(X, POSITIONS), want)


def test_sinusoidal_and_learned_in_shard_map():
    spec = P("data", "seq")

    def encode(table, positions):
        return fp.sinusoidal_encoding(positions, D) + fp.learned_embedding_lookup(
            table, positions
        )

    mapped = in_shard_map(encode, (P(), spec), spec)
    got = compile_checked(mapped, TABLE, POSITIONS)(TABLE, POSITIONS)
    assert_close(got, jax.jit(encode)(TABLE, POSITIONS))


@pytest.mark.parametrize("name", MODULES)
def test_modules_in_shard_map(name):
    fn, state = module_fns()[name]
    spec = P("data", "seq")
    mapped = in_shard_map(fn, (P(), spec, spec), spec)
    got = compile_checked(mapped, state, EMBEDDINGS, POSITIONS)
    assert_close(got(state, EMBEDDINGS, POSITIONS), fn(state, EMBEDDINGS, POSITIONS))


def test_module_default_positions_in_shard_map_are_shard_local():
    # positions=None means 0..L-1 of the block the shard sees: pass them explicitly.
    module = pn.SinusoidalPositionalEncoding()
    mapped = in_shard_map(module, P("data", "seq"), P("data", "seq"))
    local_length = L // 4
    want = EMBEDDINGS + jnp.tile(fp.sinusoidal_table(local_length, D), (1, 4, 1))
    assert_close(jax.jit(mapped)(EMBEDDINGS), want)


# Attention biases [B, N, L, S]: (mesh shape, axis names, q spec, k spec, bias spec).
BIAS_LAYOUTS = {
    "data_heads": ((2, 4), ("data", "heads"), P("data"), P("data"), P("data", "heads")),
    "heads": ((8,), ("heads",), P(), P(), P(None, "heads")),
    "data_query_seq": (
        (2, 4),
        ("data", "seq"),
        P("data", "seq"),
        P("data"),
        P("data", None, "seq"),
    ),
}


def bias_fns():
    """name -> (fn(state, q_positions, k_positions) -> [B, N, L, S], state)."""
    linen_t5 = pl.RelativePositionBias(num_heads=N)
    nnx_t5 = pn.RelativePositionBias(N, rngs=nnx.Rngs(0))
    nnx_t5.relative_attention_bias[...] = BIAS_TABLE
    graphdef, state = nnx.split(nnx_t5)
    t5_variables = {"params": {"relative_attention_bias": BIAS_TABLE}}
    return {
        "alibi_bias": (lambda s, q, k: fp.alibi_bias(q, k, N), {}),
        "relative_position_bias": (fp.relative_position_bias, BIAS_TABLE),
        "linen_alibi": (lambda s, q, k: pl.ALiBi(num_heads=N).apply({}, q, k), {}),
        "nnx_alibi": (lambda s, q, k: pn.ALiBi(N)(q, k), {}),
        "linen_t5": (lambda s, q, k: linen_t5.apply(s, q, k), t5_variables),
        "nnx_t5": (lambda s, q, k: nnx.merge(graphdef, s)(q, k), state),
    }


BIASES = sorted(bias_fns())


# The functions on every layout; the modules, which wrap them, on one.
BIAS_CASES = [
    (name, layout)
    for name in BIASES
    for layout in sorted(BIAS_LAYOUTS)
    if name in ("alibi_bias", "relative_position_bias") or layout == "data_heads"
]


@pytest.mark.parametrize("axis_type", AXIS_TYPES, ids=str)
@pytest.mark.parametrize("name, layout", BIAS_CASES)
def test_attention_biases_sharded_need_no_communication(name, layout, axis_type):
    fn, state = bias_fns()[name]
    shape, names, q_spec, k_spec, bias_spec = BIAS_LAYOUTS[layout]
    mesh = mesh_of(shape, names, axis_type)
    want = jax.jit(fn)(state, POSITIONS, POSITIONS)
    state = jax.device_put(state, NamedSharding(mesh, P()))  # replicated table
    q_positions = put(POSITIONS, mesh, q_spec)
    k_positions = put(POSITIONS, mesh, k_spec)
    # Heads appear in no input: the output sharding asks each device for its heads.
    biased = jax.jit(fn, out_shardings=NamedSharding(mesh, bias_spec))
    compiled = biased.lower(state, q_positions, k_positions).compile()
    found = hlo_collectives(compiled.as_text())
    assert not found, f"compiled HLO has collectives {found}"
    got = compiled(state, q_positions, k_positions)
    assert_sharding(got, mesh, bias_spec)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis_type", AXIS_TYPES, ids=str)
def test_relative_bias_table_sharded_over_heads_gives_heads_sharded_bias(axis_type):
    mesh = mesh_of((2, 4), ("data", "heads"), axis_type)
    table = put(BIAS_TABLE, mesh, P(None, "heads"))
    positions = put(POSITIONS, mesh, P("data"))

    def bias(table, positions):
        return fp.relative_position_bias(table, positions, positions)

    compiled = compile_checked(bias, table, positions)
    got = compiled(table, positions)
    assert_sharding(got, mesh, P("data", "heads"))
    np.testing.assert_array_equal(got, bias(BIAS_TABLE, POSITIONS))


@pytest.mark.parametrize("name", BIASES)
def test_attention_biases_in_shard_map(name):
    fn, state = bias_fns()[name]
    spec = P("data", "seq")  # queries split over seq, keys whole per batch shard
    mapped = in_shard_map(fn, (P(), spec, P("data")), P("data", None, "seq"))
    got = compile_checked(mapped, state, POSITIONS, POSITIONS)
    np.testing.assert_array_equal(
        got(state, POSITIONS, POSITIONS), fn(state, POSITIONS, POSITIONS)
    )


def test_alibi_heads_in_shard_map_slice_the_full_bias():
    # alibi_bias has no head offset: a heads shard computes all N heads and keeps its
    # own (no communication; N / shards times the work of its slice).
    mesh = mesh_of((8,), ("heads",))
    local_heads = N // 8

    def local_alibi(positions):
        start = jax.lax.axis_index("heads") * local_heads
        bias = fp.alibi_bias(positions, positions, N)
        return jax.lax.dynamic_slice_in_dim(bias, start, local_heads, axis=-3)

    mapped = jax.shard_map(
        local_alibi, mesh=mesh, in_specs=P(), out_specs=P(None, "heads")
    )
    got = compile_checked(mapped, POSITIONS)(POSITIONS)
    np.testing.assert_array_equal(got, fp.alibi_bias(POSITIONS, POSITIONS, N))
