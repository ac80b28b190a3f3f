"""Public functions called eagerly run one compiled program per new shape (RoPE: one
for the tables, one for the rotation). Op by op, each of their operations compiled
on its own: 5 to 30 programs on a first call, and as many dispatches on every later
one (3 to 7 times slower).

Every public function of ``flax_posenc.__all__`` is classified here
(``test_every_public_function_is_classified``): a row of ``CALLS`` (its programs on
a first eager call, none on a second identical one, the same values), or a member of
``HOST`` (it computes on the host: numpy out, a configuration, a context manager;
calling it compiles nothing).

Positions may be numpy (the edge widens them on the host and places them as they
are); the tables and parameters here are device arrays: ``jnp.asarray`` of a numpy
array compiles a copy program of its own (JAX's ``stage``). Lengths (37, 41, 72) are
ones no other test module uses, so that no program of theirs is counted here."""

import functools
import inspect
import types

import jax
import numpy as np
import pytest
from jax import monitoring
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import flax_posenc as fp

_COMPILES: list[float] = []


def _listener(event: str, duration: float, **kwargs) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES.append(duration)


monitoring.register_event_duration_secs_listener(_listener)

HEADS = 3
F32 = np.float32
Q, K = np.arange(37), np.arange(41)  # lengths no other test module uses
X = jax.device_put(np.ones((37, HEADS, 8), F32))
XB = jax.device_put(np.ones((1, 37, HEADS, 8), F32))  # [B, L, N, H]
COS = jax.device_put(np.full((37, 4), 0.6, F32))
SIN = jax.device_put(np.full((37, 4), 0.8, F32))
POS_EMB = jax.device_put(np.ones((5, 8), F32))
ONES = jax.device_put(np.ones(HEADS, F32))
TABLE = jax.device_put(np.ones((64, HEADS), F32))
ROPE = fp.RopeConfig(head_dim=8)
EXACT = fp.RopeConfig(head_dim=8, angle_precision="exact")
DYNAMIC = fp.RopeConfig(
    head_dim=8,
    scaling=fp.DynamicNTKScaling(factor=2.0, original_max_position_embeddings=16),
)
KEY = jax.random.key(0)
DUAL_CHUNK = fp.DualChunkAttentionConfig(16, 4, 8)
GRID = np.stack([Q % 5, Q // 5], -1)  # [L, 2]: axial coordinates
ROWS = np.stack([Q, Q // 2, Q // 3])  # [3, L]: M-RoPE's rows
FIRE = jax.device_put(
    fp.FireParams(
        c=np.full(HEADS, 0.1, F32),
        threshold_multiplier=np.ones(HEADS, F32),
        hidden_kernel=np.linspace(-1, 1, 4, dtype=F32),
        hidden_bias=np.zeros(4, F32),
        output_kernel=np.ones((4, HEADS), F32),
        output_bias=np.zeros(HEADS, F32),
    )
)
HF_CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 8,
    "rope_theta": 10000.0,
    "max_position_embeddings": 128,
}

# Context parallelism on the 8 host devices of conftest.py: 72 tokens, 9 per device.
MESH = jax.make_mesh((8,), ("seq",), axis_types=(AxisType.Auto,))
SHARDED = NamedSharding(MESH, P(None, "seq"))
XS = jax.device_put(np.ones((1, 72, HEADS, 8), F32), SHARDED)  # [B, L, N, H]
RING = {"bias": fp.AlibiBias(HEADS), "causal": True, "block_q": 8, "block_k": 8}


def _in_shard_map(local, *specs):
    """The caller's program: jit of shard_map over the sequence axis."""
    mapped = jax.shard_map(
        local, mesh=MESH, in_specs=specs, out_specs=specs[0], check_vma=False
    )
    return jax.jit(mapped)


_RING = _in_shard_map(
    lambda q, k, v, p: fp.ring_attention(
        q, k, v, axis_name="seq", q_positions=p, **RING
    ),
    *(P(None, "seq"),) * 3,
    P("seq"),
)
_KV_CACHE = jax.jit(
    jax.shard_map(
        lambda q, k, v, p, slots: fp.sharded_kv_cache_attention(
            q, k, v, axis_name="seq", q_positions=p, k_positions=slots,
            bias=fp.AlibiBias(HEADS), causal=True, block_k=8,
        ),
        mesh=MESH,
        in_specs=(P(), P(None, "seq"), P(None, "seq"), P(), P("seq")),
        out_specs=P(),
        check_vma=False,
    )
)  # fmt: skip
STEP = jax.device_put(np.ones((1, 1, HEADS, 8), F32))  # one decode step's query
# sharded_ring_attention and ring_attention_fn run shard_map themselves: eagerly
# (they compiled some 90 programs op by op on every call before their core was
# jit-wrapped).
_SHARDED_RING = functools.partial(
    fp.sharded_ring_attention,
    mesh=MESH,
    axis_name="seq",
    q_positions=np.arange(72),
    **RING,
)
_RING_FN = fp.ring_attention_fn(
    mesh=MESH, axis_name="seq", q_positions=np.arange(72), **RING
)
_ATTEND = jax.jit(jax.nn.dot_product_attention)  # the caller's attention program

# name (the public function, then a variant) -> (programs, eager call). Above one:
# RoPE's tables and the rotation are two programs (the tables those of the
# function's *_cos_sin, the rotation rope_rotate's), so that apply_* equals
# rope_rotate of its tables bit for bit.
CALLS = {
    "alibi_bias": (1, lambda: fp.alibi_bias(Q, K, HEADS)),
    "apply_axial_rope": (2, lambda: fp.apply_axial_rope(X, GRID, ROPE)),
    "apply_axial_rope exact": (2, lambda: fp.apply_axial_rope(X, GRID, EXACT)),
    "apply_mrope": (
        2,
        lambda: fp.apply_mrope(X, ROWS, ROPE, mrope_section=(2, 1, 1)),
    ),
    "apply_mrope xd": (
        2,
        lambda: fp.apply_mrope(
            X, ROWS, ROPE, mrope_section=(2, 1, 1), mrope_layout="xd"
        ),
    ),
    "apply_query_scaling": (
        1,
        lambda: fp.apply_query_scaling(X, Q, fp.QueryScaling(0.1, 8.0)),
    ),
    "apply_rope": (2, lambda: fp.apply_rope(X, Q, ROPE)),
    "apply_rope_qk": (2, lambda: fp.apply_rope_qk(X, X, Q, ROPE)),
    # + max(positions, k_positions) + 1, the seq_len q and k share: one program
    "apply_rope_qk dynamic": (
        3,
        lambda: fp.apply_rope_qk(X, X, Q, DYNAMIC, k_positions=Q + 1),
    ),
    "apply_xpos": (2, lambda: fp.apply_xpos(X, Q, ROPE, is_key=True)),
    "apply_xpos exact": (
        2,
        lambda: fp.apply_xpos(X, Q, EXACT, is_key=False, center=18),
    ),
    "axial_rope_cos_sin": (1, lambda: fp.axial_rope_cos_sin(GRID, ROPE)),
    "blockwise_attention": (
        1,
        lambda: fp.blockwise_attention(
            X,
            X,
            X,
            q_positions=Q,
            bias=fp.AlibiBias(HEADS),
            causal=True,
            block_q=16,
            block_k=16,
        ),
    ),
    # the returned attention_fn, called as Flax's modules call it
    "blockwise_attention_fn": (
        1,
        lambda: fp.blockwise_attention_fn(
            q_positions=Q, bias=fp.AlibiBias(HEADS), block_q=16, block_k=16
        )(XB, XB, XB),
    ),
    "cope_bias": (1, lambda: fp.cope_bias(X, X, POS_EMB, q_positions=Q, k_positions=Q)),
    "cope_bias mask": (
        1,
        lambda: fp.cope_bias(
            X, X, POS_EMB, q_positions=Q, k_positions=Q, mask=(Q[:, None] >= Q)[None]
        ),
    ),
    "dual_chunk_attention": (
        1,
        lambda: fp.dual_chunk_attention(
            X, X, X, q_positions=Q, rope=ROPE, config=DUAL_CHUNK
        ),
    ),
    "dual_chunk_positions": (1, lambda: fp.dual_chunk_positions(Q, DUAL_CHUNK)),
    "fire_bias": (1, lambda: fp.fire_bias(Q, K, FIRE)),
    "hf_decode_seq_lens": (
        1,
        lambda: fp.hf_decode_seq_lens(DYNAMIC, Q[-1:], Q, prompt_length=5),
    ),
    "kerple_bias": (1, lambda: fp.kerple_bias(Q, K, ONES, ONES)),
    "kerple_bias power": (1, lambda: fp.kerple_bias(Q, K, ONES, ONES, kernel="power")),
    "kerple_parameters": (1, lambda: fp.kerple_parameters(ONES, ONES)),
    "learned_embedding_lookup": (1, lambda: fp.learned_embedding_lookup(TABLE, Q)),
    "learned_embedding_lookup checkify": (
        1,
        lambda: fp.learned_embedding_lookup(TABLE, Q, out_of_range="checkify"),
    ),
    "mrope_cos_sin": (1, lambda: fp.mrope_cos_sin(ROWS, ROPE, mrope_section=(2, 1, 1))),
    "pose_positions": (1, lambda: fp.pose_positions(KEY, 37, 99)),
    # the returned attention_fn: RoPE's two programs, then the caller's attention
    "positional_attention_fn": (
        3,
        lambda: fp.positional_attention_fn(
            rope=ROPE, q_positions=Q, attention_fn=_ATTEND
        )(XB, XB, XB),
    ),
    "positions_from_offsets": (
        1,
        lambda: fp.positions_from_offsets(np.array([3, 4]), 37),
    ),
    "positions_from_padding_mask": (
        1,
        lambda: fp.positions_from_padding_mask(Q[None] % 3 > 0),
    ),
    "positions_from_segment_ids": (
        1,
        lambda: fp.positions_from_segment_ids(1 + Q[None] // 10),
    ),
    "query_scale": (1, lambda: fp.query_scale(Q, fp.QueryScaling(0.1, 8.0))),
    "randomized_positions": (
        1,
        lambda: fp.randomized_positions(KEY, 37, 99),
    ),
    "relative_position_bias": (1, lambda: fp.relative_position_bias(TABLE, Q, K)),
    "relative_position_bucket": (1, lambda: fp.relative_position_bucket(K - 20)),
    "relative_positions": (1, lambda: fp.relative_positions(Q, K)),
    "ring_attention": (1, lambda: _RING(XS, XS, XS, np.arange(72))),
    # the ring, and the placement of the host positions onto the mesh
    "ring_attention_fn": (2, lambda: _RING_FN(XS, XS, XS)),
    "rope_cos_sin": (1, lambda: fp.rope_cos_sin(Q, ROPE)),
    "rope_cos_sin exact": (1, lambda: fp.rope_cos_sin(Q, EXACT)),
    # host frequencies of a config (attention_scaling stays a Python float, so a
    # seq_len-dependent family given a seq_len still runs op by op)
    "rope_frequencies": (1, lambda: fp.rope_frequencies(ROPE)),
    "rope_permute_layout": (
        1,
        lambda: fp.rope_permute_layout(
            X, rotary_dim=8, source="half", target="interleaved"
        ),
    ),
    "rope_rotate": (1, lambda: fp.rope_rotate(X, COS, SIN)),
    "rope_shift": (1, lambda: fp.rope_shift(X, 3, ROPE)),
    "rope_shift dynamic": (1, lambda: fp.rope_shift(X, Q, DYNAMIC, seq_len=40)),
    "rope_wavelengths": (1, lambda: fp.rope_wavelengths(ROPE, seq_len=37)),
    "self_extend_attention": (
        1,
        lambda: fp.self_extend_attention(
            X, X, X, q_positions=Q, rope=ROPE, group_size=4, window=8
        ),
    ),
    "sharded_kv_cache_attention": (
        1,
        lambda: _KV_CACHE(STEP, XS, XS, np.array([[71]]), np.arange(72)),
    ),
    "sharded_ring_attention": (2, lambda: _SHARDED_RING(XS, XS, XS)),  # as above
    "sinusoidal_encoding": (1, lambda: fp.sinusoidal_encoding(Q, 8)),
    "sinusoidal_encoding exact": (
        1,
        lambda: fp.sinusoidal_encoding(Q, 7, angle_precision="exact"),
    ),
    "sinusoidal_table": (1, lambda: fp.sinusoidal_table(37, 8)),
    "xpos_cos_sin": (1, lambda: fp.xpos_cos_sin(Q, ROPE, is_key=False)),
    # the tile forms of the biases, as blockwise attention calls them
    "AlibiBias": (1, lambda: fp.AlibiBias(HEADS)(Q, K)),
    "FireBias": (1, lambda: fp.FireBias(FIRE)(Q, K)),
    "KerpleBias": (1, lambda: fp.KerpleBias(ONES, ONES)(Q, K)),
    "RelativeBias": (1, lambda: fp.RelativeBias(TABLE)(Q, K)),
}

# Public functions that compute on the host (numpy out, a configuration, a context
# manager) and compile nothing.
HOST = {
    "alibi_slopes": lambda: fp.alibi_slopes(HEADS),
    "attention_fn_override": lambda: _override(),
    "extend_context": lambda: fp.extend_context(
        ROPE, 64, method="linear", original_max_position_embeddings=16
    ),
    "grid_positions": lambda: fp.grid_positions((3, 4)),
    "inverse_load_balanced_permutation": lambda: fp.inverse_load_balanced_permutation(
        80, 8
    ),
    "load_balanced_permutation": lambda: fp.load_balanced_permutation(80, 8),
    "read_hf_rope": lambda: fp.read_hf_rope(HF_CONFIG),
    "rope_config_from_hf": lambda: fp.rope_config_from_hf(HF_CONFIG),
    "sinusoidal_inv_freq": lambda: fp.sinusoidal_inv_freq(8),
}


def _override():
    module = types.SimpleNamespace(attention_fn=None)
    with fp.attention_fn_override(module, _ATTEND):
        assert module.attention_fn is _ATTEND
    return module.attention_fn


def _public_functions() -> set[str]:
    return {name for name in fp.__all__ if inspect.isfunction(getattr(fp, name))}


def test_every_public_function_is_classified():
    """A new public function needs a row of CALLS or a place in HOST."""
    counted = {name.split()[0] for name in CALLS}
    assert not counted & set(HOST), counted & set(HOST)
    missing = _public_functions() - counted - set(HOST)
    assert not missing, f"classify in CALLS or HOST: {sorted(missing)}"
    unknown = (counted | set(HOST)) - set(fp.__all__)
    assert not unknown, f"not in flax_posenc.__all__: {sorted(unknown)}"


def _leaves(value):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(value)]


@pytest.mark.parametrize("name", list(CALLS))
def test_an_eager_call_compiles_its_programs_once(name):
    programs, call = CALLS[name]
    jax.clear_caches()
    _COMPILES.clear()
    first = _leaves(call())
    assert len(_COMPILES) == programs, f"{name}: {len(_COMPILES)} programs"
    _COMPILES.clear()
    again = _leaves(call())
    assert not _COMPILES  # a second call with the same shapes compiles nothing
    assert len(again) == len(first)
    for a, b in zip(again, first, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", sorted(HOST))
def test_a_host_function_compiles_nothing(name):
    jax.clear_caches()
    _COMPILES.clear()
    HOST[name]()
    assert not _COMPILES, f"{name}: {len(_COMPILES)} programs"
