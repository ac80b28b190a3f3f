"""linen and nnx RotaryEmbedding: values, one cos/sin for q and k, KV-cache use,
k's own seq_len, linen == nnx."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rope_reference as ref
from helpers import assert_close, normal

import flax_posenc as fp
from flax_posenc import linen as pl
from flax_posenc import nnx as pn
from flax_posenc.rope import _core as _rope

Q, K = normal((2, 5, 3, 8)), normal((2, 5, 3, 8), seed=1)
POSITIONS = jnp.array([[0, 1, 2, 3, 4], [9, 10, 11, 0, 1]])


def both_modules(config):
    """The linen and nnx modules, each under jit, as functions."""
    linen_apply = jax.jit(pl.RotaryEmbedding(config).apply)
    nnx_module = pn.RotaryEmbedding(config)
    return (
        lambda *args: linen_apply({}, *args),
        jax.jit(lambda *args: nnx_module(*args)),
    )


@pytest.mark.parametrize("family", ["plain", "yarn", "longrope", "dynamic_ntk"])
@pytest.mark.parametrize(
    "layout", ["half", pytest.param("interleaved", marks=pytest.mark.slow)]
)
@pytest.mark.parametrize(
    "dtype", [jnp.float32, pytest.param(jnp.bfloat16, marks=pytest.mark.slow)]
)
def test_modules_equal_apply_rope_and_each_other(family, layout, dtype):
    config = ref.make_config(family, head_dim=8, rotary_dim=6, layout=layout)
    q, k = Q.astype(dtype), K.astype(dtype)
    want_q = fp.apply_rope(q, POSITIONS, config)
    want_k = fp.apply_rope(k, POSITIONS, config)
    linen_module, nnx_module = both_modules(config)
    got_linen, got_nnx = linen_module(q, k, POSITIONS), nnx_module(q, k, POSITIONS)
    np.testing.assert_array_equal(got_linen[0], got_nnx[0])
    np.testing.assert_array_equal(got_linen[1], got_nnx[1])
    for got, want in zip(got_nnx, (want_q, want_k), strict=True):
        assert got.dtype == dtype
        assert_close(got, want)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_an_odd_head_rotates_its_even_part_in_both_modules(layout):
    """H = 7 with R = 6: three pairs rotate, the seventh feature passes through (an
    odd head with ``rotary_dim=None`` is refused by ``RopeConfig``)."""
    config = fp.RopeConfig(head_dim=7, rotary_dim=6, layout=layout)
    q, k = normal((2, 5, 3, 7)), normal((2, 5, 3, 7), seed=1)
    inv_freq, attention = ref.frequencies(config)
    for module in both_modules(config):
        for got, x in zip(module(q, k, POSITIONS), (q, k), strict=True):
            truth, angles = ref.rope(x, POSITIONS, inv_freq, attention, layout)
            ref.assert_close_to_rope(got, x, truth, angles, attention, layout)
    with pytest.raises(ValueError, match=r"H = config.head_dim \(8\), got shape"):
        pl.RotaryEmbedding(fp.RopeConfig(head_dim=8)).apply({}, q, k, POSITIONS)


def test_one_cos_sin_table_serves_q_and_k(monkeypatch):
    calls = []

    tables = _rope.tables

    def counting(*args):
        calls.append(args)
        return tables(*args)

    monkeypatch.setattr(_rope, "tables", counting)
    pn.RotaryEmbedding(fp.RopeConfig(head_dim=8))(Q, K, POSITIONS)
    assert len(calls) == 1
    pn.RotaryEmbedding(fp.RopeConfig(head_dim=8))(Q, K, POSITIONS, POSITIONS)
    assert len(calls) == 3  # separate key positions: a table each


@pytest.mark.parametrize(
    "family",
    ["plain", "dynamic_ntk"]
    + [pytest.param(f, marks=pytest.mark.slow) for f in ("llama3", "longrope")],
)
def test_kv_cache_decode_scores_equal_full_sequence(family):
    """One new query at position t against a cache of S keys at 0..S-1 gives row t
    of the full self-attention scores (same seq_len = S for dynamic families)."""
    config = ref.make_config(family, head_dim=8)
    length = ref.ORIGINAL + 8  # past the original length: LongRoPE's long factors
    q, k = normal((1, length, 2, 8)), normal((1, length, 2, 8), seed=1)
    positions = jnp.arange(length)[None]
    linen_module, nnx_module = both_modules(config)
    full_q, full_k = nnx_module(q, k, positions)
    t = length - 3
    row = jnp.einsum(
        "blnh,bsnh->bnls", full_q[:, t : t + 1], full_k, precision="highest"
    )
    for module in (linen_module, nnx_module):
        step_q, cache_k = module(q[:, t : t + 1], k, positions[:, t : t + 1], positions)
        assert_close(cache_k, full_k)
        scores = jnp.einsum("blnh,bsnh->bnls", step_q, cache_k, precision="highest")
        assert_close(scores, row)


@pytest.mark.parametrize("long_side", ["k", "q"])
def test_dynamic_families_share_frequencies_between_q_and_k(long_side):
    """Positions 100..103 alone would use LongRoPE's short factors; with the other
    side up to 4095, both q and k use the long ones, so the scores stay relative."""
    config = ref.make_config("longrope", head_dim=8)
    q, k = Q[:1, :4], K[:1, :4]
    near, far = jnp.arange(100, 104)[None], jnp.arange(4092, 4096)[None]
    q_positions, k_positions = (near, far) if long_side == "k" else (far, near)
    q_rot, k_rot = pn.RotaryEmbedding(config)(q, k, q_positions, k_positions)
    assert_close(q_rot, fp.apply_rope(q, q_positions, config, seq_len=4096))
    assert_close(k_rot, fp.apply_rope(k, k_positions, config, seq_len=4096))
    x, short_side = (q, q_rot) if long_side == "k" else (k, k_rot)
    alone = fp.apply_rope(x, near, config)  # seq_len = 104: short factors
    assert np.max(np.abs(np.asarray(alone - short_side))) > 0.1


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (
            (Q[..., :6], K, POSITIONS),
            ValueError,
            r"`q` must be \[\.\.\., L, N, H\] with H = config.head_dim \(8\)",
        ),
        ((Q, K[..., :6], POSITIONS), ValueError, r"`k` must be"),
        (
            (Q, K, POSITIONS.astype(jnp.float32)),
            TypeError,
            "`positions` must be an integer",
        ),
        (
            (Q, K, POSITIONS[:, :4]),
            ValueError,
            r"`positions` must be \[\.\.\., L\] with L = 5.*q.shape\[:-2\].*got shape \(2, 4\)",
        ),
        (
            (Q, K[:, :4], POSITIONS),
            ValueError,
            r"`positions \(also k's, as k_positions is None\)` must be \[\.\.\., L\] with L = 4",
        ),
        (
            (Q, K[:, :4], POSITIONS, jnp.arange(5)),
            ValueError,
            r"`k_positions` must be \[\.\.\., L\] with L = 4.*got shape \(5,\)",
        ),
        (
            (Q, K, POSITIONS, jnp.arange(5.0)),
            TypeError,
            "`k_positions` must be an integer",
        ),
    ],
)
def test_modules_reject_bad_inputs_naming_them(args, error, match):
    linen_module, nnx_module = both_modules(fp.RopeConfig(head_dim=8))
    for module in (linen_module, nnx_module):
        with pytest.raises(error, match=match):
            module(*args)


DYNAMIC_NTK = fp.RopeConfig(
    head_dim=8,
    scaling=fp.DynamicNTKScaling(factor=2.0, original_max_position_embeddings=4),
)


def test_rotary_embedding_forwards_a_fixed_seq_len():
    q = normal((1, 1, 2, 8), seed=0)
    k = normal((1, 6, 2, 8), seed=1)
    q_positions, k_positions = jnp.array([[2]]), jnp.arange(6)[None]
    got_q, got_k = pn.RotaryEmbedding(DYNAMIC_NTK)(
        q, k, q_positions, k_positions, seq_len=16
    )
    np.testing.assert_array_equal(
        got_q, fp.apply_rope(q, q_positions, DYNAMIC_NTK, seq_len=16)
    )
    np.testing.assert_array_equal(
        got_k, fp.apply_rope(k, k_positions, DYNAMIC_NTK, seq_len=16)
    )


@pytest.mark.parametrize(
    "k_seq_len",
    [16, jnp.array([[3, 3, 3, 4, 5, 6, 7, 8]])],  # transformers' per-key lengths
    ids=["scalar", "per_key"],
)
def test_k_seq_len_rotates_k_alone_as_apply_rope_qk(k_seq_len):
    """A decode step at position 7 against keys 0..7 with seq_len 8: ``k_seq_len``
    gives k other dynamic NTK frequencies, as in apply_rope_qk, and q the same ones
    as without it; linen == nnx."""
    q, k = normal((1, 1, 2, 8)), normal((1, 8, 2, 8), seed=1)
    q_positions, k_positions = jnp.array([[7]]), jnp.arange(8)[None]
    want_q, want_k = fp.apply_rope_qk(
        q,
        k,
        q_positions,
        DYNAMIC_NTK,
        k_positions=k_positions,
        seq_len=8,
        k_seq_len=k_seq_len,
    )
    linen_module, nnx_module = both_modules(DYNAMIC_NTK)
    got_linen = linen_module(q, k, q_positions, k_positions, 8, k_seq_len)
    got_nnx = nnx_module(q, k, q_positions, k_positions, 8, k_seq_len)
    np.testing.assert_array_equal(got_linen[0], got_nnx[0])
    np.testing.assert_array_equal(got_linen[1], got_nnx[1])
    assert_close(got_nnx[0], want_q)
    assert_close(got_nnx[1], want_k)
    shared_q, shared_k = nnx_module(q, k, q_positions, k_positions, 8)
    np.testing.assert_array_equal(got_nnx[0], shared_q)
    assert np.max(np.abs(np.asarray(got_nnx[1] - shared_k))) > 1e-2
