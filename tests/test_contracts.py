"""Contracts that must not be misusable silently: positions, integer widths, values and
types (including values read from JSON), configs as host data, helpers.

Each row of the tables is a plausible mistake that used to give a wrong answer with
no error; each test names the bug it kills.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from branches import BRANCHES, run_branch
from flax import nnx
from helpers import normals
from jax.experimental import checkify
from jax_compat import enable_x64, primitive_names

import flax_posenc as fp
from flax_posenc import linen as plinen
from flax_posenc import nnx as pnnx

X = jnp.ones((1, 5, 2, 8))  # [B, L, N, H]
CONFIG = fp.RopeConfig(head_dim=8)
DYNAMIC = fp.RopeConfig(
    head_dim=8,
    scaling=fp.DynamicNTKScaling(factor=2.0, original_max_position_embeddings=16),
)
YARN = {"factor": 4.0, "original_max_position_embeddings": 4096}


# --------------------------------------------------------------------------------------
# One positions rule: the length axis equals the input's, only batch axes broadcast.
# --------------------------------------------------------------------------------------

POSITION_MISTAKES = [
    # [1] standing for five tokens would rotate all of them at position 3.
    (lambda: fp.apply_rope(X, jnp.array([3]), CONFIG), r"L = 5.*got shape \(1,\)"),
    # positions [3, 5] on x [5, 2, 8] would return a [3, 5, 2, 8] output.
    (
        lambda: fp.apply_rope(jnp.ones((5, 2, 8)), jnp.zeros((3, 5), int), CONFIG),
        r"got shape \(3, 5\)",
    ),
    (lambda: fp.apply_rope(X, jnp.array(3), CONFIG), r"got shape \(\)"),
    (
        lambda: fp.apply_xpos(X, jnp.array([3]), CONFIG, is_key=False),
        r"got shape \(1,\)",
    ),
    (
        lambda: fp.apply_mrope(
            X, jnp.zeros((3, 1), int), CONFIG, mrope_section=(2, 1, 1)
        ),
        r"L = x.shape\[-3\] = 5",
    ),
    (
        lambda: fp.apply_axial_rope(X, jnp.zeros((1, 2), int), CONFIG),
        r"L = x.shape\[-3\] = 5",
    ),
    (
        lambda: fp.apply_query_scaling(
            X, jnp.array([3]), fp.QueryScaling(scale=0.1, floor_scale=4.0)
        ),
        r"got shape \(1,\)",
    ),
    (
        lambda: fp.rope_rotate(X, jnp.ones((1, 4)), jnp.ones((1, 4))),
        r"L = x.shape\[-3\] \(5\)",
    ),
    (
        lambda: pnnx.SinusoidalPositionalEncoding()(
            jnp.ones((2, 5, 8)), jnp.array([3])
        ),
        r"L = 5.*got shape \(1,\)",
    ),
    # A decode step's [B, 1] positions used for a whole key cache of 5.
    (
        lambda: fp.apply_rope_qk(jnp.ones((1, 1, 2, 8)), X, jnp.array([[4]]), CONFIG),
        r"as k_positions is None.*L = 5",
    ),
]


@pytest.mark.parametrize("call,match", POSITION_MISTAKES)
def test_positions_rule(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_positions_rule_under_jit_too():
    with pytest.raises(ValueError, match=r"got shape \(1,\)"):
        jax.jit(fp.apply_rope, static_argnums=2)(X, jnp.array([3]), CONFIG)


def test_flax_decode_attention_without_k_positions_raises():
    """Flax's decode=True attention hands the whole cache as keys: forgetting
    ``k_positions`` used to rotate every cached key at the query's position."""
    attention = nnx.MultiHeadAttention(
        num_heads=2, in_features=16, decode=True, rngs=nnx.Rngs(0)
    )
    attention.init_cache((1, 6, 16))
    fn = fp.positional_attention_fn(
        rope=fp.RopeConfig(head_dim=8), q_positions=jnp.array([[0]])
    )
    with (
        fp.attention_fn_override(attention, fn),
        pytest.raises(ValueError, match="k_positions"),
    ):
        attention(jnp.ones((1, 1, 16)), decode=True)


# --------------------------------------------------------------------------------------
# Integer widths: widened before arithmetic, refused when they do not fit.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.int8, jnp.uint8, jnp.int16, jnp.uint16])
def test_narrow_positions_give_the_int32_answer(dtype):
    """int8 127 + 1 wrapped to -128 in dynamic NTK's max(positions) + 1."""
    x = jnp.ones((1, 128, 1, 8))
    positions = jnp.arange(128)
    want = fp.apply_rope(x, positions, DYNAMIC)
    got = jax.jit(fp.apply_rope, static_argnums=2)(x, positions.astype(dtype), DYNAMIC)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_int64_positions_past_int32_raise_instead_of_wrapping():
    """With x64 off, numpy int64 2**32 + 3 became 3 and the learned lookup returned
    row 3 (its range check ran after the wrap)."""
    big = np.array([2, 2**32 + 3], np.int64)
    with pytest.raises(ValueError, match=r"`positions` must fit in int32"):
        fp.learned_embedding_lookup(jnp.ones((8, 4)), big)
    with pytest.raises(ValueError, match=r"`positions` must fit in int32"):
        fp.apply_rope(jnp.ones((2, 1, 8)), big, CONFIG)


def test_uint32_past_int32_raises():
    with pytest.raises(ValueError, match="must fit in int32"):
        fp.rope_cos_sin(jnp.array([2**31], jnp.uint32), CONFIG)


def test_int64_positions_that_fit_are_accepted():
    got = fp.apply_rope(X, np.arange(5, dtype=np.int64), CONFIG)
    np.testing.assert_array_equal(
        np.asarray(got), np.asarray(fp.apply_rope(X, jnp.arange(5), CONFIG))
    )


# Concrete int64 positions past int32 with x64 off: wrapped, 2**33 + 5 was position 5.
# Every public entry point that takes positions goes through one check.
X1 = jnp.ones((1, 1, 2, 8))  # [B, L=1, N, H]
E1 = jnp.ones((1, 1, 8))  # [B, L=1, D]
ONE = np.array([0])
QUERY_SCALING = fp.QueryScaling(scale=0.1, floor_scale=4.0)
T5 = jnp.ones((32, 2))
LONGROPE = fp.RopeConfig(
    head_dim=8, scaling=fp.LongRopeScaling((1.0,) * 4, (2.0,) * 4, 8, factor=4.0)
)


def _rows(p):
    return np.concatenate([p, p, p])[:, None]  # [3, L=1]


POSITION_ENTRY_POINTS = {
    "apply_rope": (lambda p: fp.apply_rope(X1, p, CONFIG), "positions"),
    "apply_rope exact": (
        lambda p: fp.apply_rope(
            X1, p, fp.RopeConfig(head_dim=8, angle_precision="exact")
        ),
        "positions",
    ),
    "apply_rope_qk": (lambda p: fp.apply_rope_qk(X1, X1, p, CONFIG), "positions"),
    "apply_rope_qk k_positions": (
        lambda p: fp.apply_rope_qk(X1, X1, ONE, CONFIG, k_positions=p),
        "k_positions",
    ),
    "apply_rope_qk seq_len": (
        lambda p: fp.apply_rope_qk(X1, X1, ONE, DYNAMIC, seq_len=p),
        "seq_len",
    ),
    "rope_cos_sin": (lambda p: fp.rope_cos_sin(p, CONFIG), "positions"),
    "rope_frequencies seq_len": (
        lambda p: fp.rope_frequencies(DYNAMIC, seq_len=p),
        "seq_len",
    ),
    "rope_shift": (lambda p: fp.rope_shift(X1, p, CONFIG), "delta"),
    "apply_mrope": (
        lambda p: fp.apply_mrope(X1, _rows(p), CONFIG, mrope_section=(2, 1, 1)),
        "positions",
    ),
    "mrope_cos_sin": (
        lambda p: fp.mrope_cos_sin(_rows(p), CONFIG, mrope_section=(2, 1, 1)),
        "positions",
    ),
    "apply_axial_rope": (
        lambda p: fp.apply_axial_rope(X1, np.stack([p, p], -1), CONFIG),
        "positions",
    ),
    "axial_rope_cos_sin": (
        lambda p: fp.axial_rope_cos_sin(np.stack([p, p], -1), CONFIG),
        "positions",
    ),
    "apply_xpos": (lambda p: fp.apply_xpos(X1, p, CONFIG, is_key=True), "positions"),
    "xpos_cos_sin": (lambda p: fp.xpos_cos_sin(p, CONFIG, is_key=True), "positions"),
    "sinusoidal_encoding": (lambda p: fp.sinusoidal_encoding(p, 8), "positions"),
    "sinusoidal_encoding exact": (
        lambda p: fp.sinusoidal_encoding(p, 8, angle_precision="exact"),
        "positions",
    ),
    "learned_embedding_lookup": (
        lambda p: fp.learned_embedding_lookup(jnp.ones((8, 4)), p),
        "positions",
    ),
    "query_scale": (lambda p: fp.query_scale(p, QUERY_SCALING), "positions"),
    "apply_query_scaling": (
        lambda p: fp.apply_query_scaling(X1, p, QUERY_SCALING),
        "positions",
    ),
    "alibi_bias": (lambda p: fp.alibi_bias(p, ONE, 2), "q_positions"),
    "alibi_bias k": (lambda p: fp.alibi_bias(ONE, p, 2), "k_positions"),
    "relative_position_bias": (
        lambda p: fp.relative_position_bias(T5, ONE, p),
        "k_positions",
    ),
    "relative_position_bucket": (
        lambda p: fp.relative_position_bucket(p),
        "relative_position",
    ),
    "relative_positions": (lambda p: fp.relative_positions(p, ONE), "q_positions"),
    "positions_from_offsets": (
        lambda p: fp.positions_from_offsets(p, 1),
        "offsets",
    ),
    "positions_from_segment_ids": (
        lambda p: fp.positions_from_segment_ids(p),
        "segment_ids",
    ),
    "blockwise_attention": (
        lambda p: fp.blockwise_attention(X1, X1, X1, q_positions=p, causal=True),
        "q_positions",
    ),
    "blockwise_attention k": (
        lambda p: fp.blockwise_attention(
            X1, X1, X1, q_positions=ONE, k_positions=p, causal=True
        ),
        "k_positions",
    ),
    "blockwise_attention segment ids": (
        lambda p: fp.blockwise_attention(X1, X1, X1, q_segment_ids=p),
        "q_segment_ids",
    ),
    "AlibiBias": (lambda p: fp.AlibiBias(2)(p, ONE), "q_positions"),
    "RelativeBias": (lambda p: fp.RelativeBias(T5)(ONE, p), "k_positions"),
    "positional_attention_fn": (
        lambda p: fp.positional_attention_fn(rope=CONFIG, q_positions=p),
        "q_positions",
    ),
    "positional_attention_fn k": (
        lambda p: fp.positional_attention_fn(
            rope=CONFIG, q_positions=ONE, k_positions=p
        ),
        "k_positions",
    ),
    "hf_decode_seq_lens": (
        lambda p: fp.hf_decode_seq_lens(LONGROPE, p, ONE, prompt_length=1),
        "q_positions",
    ),
    "hf_decode_seq_lens k": (
        lambda p: fp.hf_decode_seq_lens(DYNAMIC, ONE, p, prompt_length=1),
        "k_positions",
    ),
    "nnx.SinusoidalPositionalEncoding": (
        lambda p: pnnx.SinusoidalPositionalEncoding()(E1, p),
        "positions",
    ),
    "nnx.LearnedPositionalEmbedding": (
        lambda p: pnnx.LearnedPositionalEmbedding(8, 8, rngs=nnx.Rngs(0))(E1, p),
        "positions",
    ),
    "nnx.RotaryEmbedding": (
        lambda p: pnnx.RotaryEmbedding(CONFIG)(X1, X1, p),
        "positions",
    ),
    "nnx.ALiBi": (lambda p: pnnx.ALiBi(2)(p), "q_positions"),
    "nnx.RelativePositionBias": (
        lambda p: pnnx.RelativePositionBias(2, rngs=nnx.Rngs(0))(p),
        "q_positions",
    ),
    "linen.SinusoidalPositionalEncoding": (
        lambda p: plinen.SinusoidalPositionalEncoding().init(jax.random.key(0), E1, p),
        "positions",
    ),
    "linen.RotaryEmbedding": (
        lambda p: plinen.RotaryEmbedding(CONFIG).init(jax.random.key(0), X1, X1, p),
        "positions",
    ),
}


@pytest.mark.parametrize("value", [2**33 + 5, -(2**31) - 1])
@pytest.mark.parametrize("name", sorted(POSITION_ENTRY_POINTS))
def test_int64_positions_past_int32_raise_at_every_entry_point(name, value):
    """With x64 off, numpy int64 values that int32 cannot hold wrapped (2**33 + 5
    rotated, biased or looked up at 5); each entry point refuses them by name."""
    call, argument = POSITION_ENTRY_POINTS[name]
    with pytest.raises(ValueError, match=rf"`{argument}` must fit in int32"):
        call(np.array([value], np.int64))


# --------------------------------------------------------------------------------------
# Values and types: checked at construction, named in the message.
# --------------------------------------------------------------------------------------

BAD_VALUES = [
    (lambda: fp.RopeConfig(head_dim=8, theta=math.nan), ValueError, "`theta`"),
    (lambda: fp.RopeConfig(head_dim=8, theta=math.inf), ValueError, "`theta`"),
    (lambda: fp.RopeConfig(head_dim=8, theta="10000"), TypeError, "`theta`"),
    (lambda: fp.RopeConfig(head_dim=True), TypeError, "`head_dim`"),
    (lambda: fp.RopeConfig(head_dim=8, rotary_dim=True), TypeError, "`rotary_dim`"),
    (lambda: fp.LinearScaling(factor=math.inf), ValueError, "LinearScaling.factor"),
    (lambda: fp.NTKScaling(factor=math.nan), ValueError, "NTKScaling.factor"),
    (lambda: fp.YarnScaling(**YARN, mscale=math.nan), ValueError, "YarnScaling.mscale"),
    (
        lambda: fp.YarnScaling(**YARN, beta_fast=1.0, beta_slow=32.0),
        ValueError,
        "beta_fast` must exceed beta_slow",
    ),
    (lambda: fp.YarnScaling(**YARN, truncate="false"), TypeError, "truncate"),
    (
        lambda: fp.YarnScaling(factor=4.0, original_max_position_embeddings=4096.7),
        TypeError,
        "original_max_position_embeddings",
    ),
    (
        lambda: fp.LongRopeScaling("1.0,2.0", (1.0, 2.0), 4096),
        TypeError,
        "LongRopeScaling.short_factor",
    ),
    (
        lambda: fp.LongRopeScaling((1.0, "2"), (1.0, 2.0), 4096),
        TypeError,
        r"short_factor\[1\]",
    ),
    (
        # ln(1) in the default attention factor's denominator: a ZeroDivisionError.
        lambda: fp.RopeConfig(
            head_dim=4, scaling=fp.LongRopeScaling((1.0, 1.0), (1.0, 1.0), 1, 2.0)
        ),
        ValueError,
        r"ln\(original_max_position_embeddings\)",
    ),
    (
        lambda: fp.LongRopeScaling((1.0,), (1.0,), 16, short_mscale=1.1),
        ValueError,
        "go together",
    ),
    (lambda: fp.sinusoidal_table(8, 4, base=math.inf), ValueError, "`base`"),
    (lambda: fp.sinusoidal_table(True, 4), TypeError, "`max_len`"),
    (lambda: fp.sinusoidal_encoding(jnp.arange(3), True), TypeError, "`dim`"),
    (
        lambda: fp.sinusoidal_encoding(jnp.arange(3), 4, dtype=jnp.int32),
        TypeError,
        "`dtype` must be a floating dtype",
    ),
    (lambda: fp.alibi_slopes(True), TypeError, "`num_heads`"),
    (
        lambda: fp.apply_xpos(X, jnp.arange(5), CONFIG, is_key=False, gamma=math.nan),
        ValueError,
        "`gamma`",
    ),
    (lambda: fp.apply_xpos(X, jnp.arange(5), CONFIG, is_key="no"), TypeError, "is_key"),
    (
        lambda: fp.mrope_cos_sin(
            jnp.zeros((3, 5), int), CONFIG, mrope_section=(2, 1, 1), mrope_layout=True
        ),
        ValueError,
        "mrope_layout",
    ),
    (
        lambda: fp.QueryScaling(scale=0.1, floor_scale=0.0),
        ValueError,
        "QueryScaling.floor_scale",
    ),
    # Integer q/k: the rotation was truncated back to integers.
    (
        lambda: fp.apply_rope(X.astype(jnp.int32), jnp.arange(5), CONFIG),
        TypeError,
        "`x` must be a floating-point array",
    ),
    (
        lambda: fp.rope_rotate(X.astype(jnp.int32), jnp.ones((5, 4)), jnp.ones((5, 4))),
        TypeError,
        "`x` must be a floating-point array",
    ),
    (
        lambda: fp.apply_rope_qk(X, X.astype(jnp.int8), jnp.arange(5), CONFIG),
        TypeError,
        "`k` must be a floating-point array",
    ),
    (
        lambda: fp.apply_mrope(
            X.astype(jnp.int32), jnp.zeros((3, 5), int), CONFIG, mrope_section=(2, 1, 1)
        ),
        TypeError,
        "`x` must be a floating-point array",
    ),
    (
        lambda: fp.apply_rope(X, jnp.arange(5) > 2, CONFIG),
        TypeError,
        "`positions` must be an integer array, got dtype bool",
    ),
    (
        lambda: fp.learned_embedding_lookup([[1.0, 2.0]], jnp.array([0])),
        TypeError,
        "`table` must be a floating-point array",
    ),
    (
        lambda: fp.rope_cos_sin(jnp.arange(3), DYNAMIC, seq_len=True),
        TypeError,
        "`seq_len`",
    ),
    (
        lambda: fp.rope_cos_sin(jnp.arange(3), DYNAMIC, seq_len=0),
        ValueError,
        "`seq_len`",
    ),
    (  # a Python int past int32 (x64 off) was an OverflowError from jit
        lambda: fp.apply_rope(X1, ONE, DYNAMIC, seq_len=2**33 + 5),
        ValueError,
        r"`seq_len` must fit in int32 \(at most 2147483647\), got 8589934597",
    ),
    (
        lambda: fp.rope_cos_sin(jnp.arange(3), LONGROPE, seq_len=np.int64(2**31)),
        ValueError,
        r"`seq_len` must fit in int32 .* need jax_enable_x64",
    ),
    (
        lambda: fp.rope_cos_sin(jnp.arange(3), DYNAMIC, seq_len=jnp.ones(4, int)),
        ValueError,
        "per-token `seq_len`",
    ),
    # A concrete seq_len below a concrete position: transformers never forms the
    # frequencies there (dynamic NTK at seq_len 4 for position 6: 6.5 off).
    (
        lambda: fp.apply_rope(X, jnp.arange(5) + 2, DYNAMIC, seq_len=4),
        ValueError,
        r"`seq_len` must exceed every position it serves for DynamicNTKScaling .* "
        r"got seq_len 4 for a token of positions at 4\. Hint: seq_len=None",
    ),
    (
        lambda: fp.rope_cos_sin(jnp.arange(3), DYNAMIC, seq_len=jnp.array([3, 3, 2])),
        ValueError,
        r"got seq_len 2 for a token of positions at 2",
    ),
    (
        lambda: fp.apply_rope_qk(
            X, X, jnp.arange(5), DYNAMIC, k_positions=jnp.arange(5) + 9, seq_len=6
        ),
        ValueError,
        r"got seq_len 6 for a token of k_positions at 9",
    ),
    # theta = 1 gives every pair the frequency 1 (theta < 1 reverses the order).
    (lambda: fp.RopeConfig(head_dim=8, theta=1.0), ValueError, r"`theta` must be > 1"),
    (lambda: fp.RopeConfig(head_dim=8, theta=0.5), ValueError, r"`theta` must be > 1"),
    (lambda: fp.RopeConfig(head_dim=8, theta=0), ValueError, r"`theta` must be > 1"),
    (lambda: fp.RopeConfig(head_dim=8, theta=-2.0), ValueError, r"`theta` must be >"),
    (  # a float padding mask passed as segment ids: no word about positions
        lambda: fp.blockwise_attention(
            X, X, X, q_segment_ids=jnp.ones((1, 5), jnp.float32)
        ),
        TypeError,
        r"`q_segment_ids` must be an integer array, got dtype float32 .* Hint: "
        r"segment ids are one integer id per token, .* padding mask goes to `mask`",
    ),
    (
        lambda: fp.rope_shift(X, jnp.float32(2.0), CONFIG),
        TypeError,
        r"`delta` must be an integer array.*Hint: pass whole numbers as an integer",
    ),
    (  # PyTorch's [B, N, L, H]: L is read as N = 2; the hint says so
        lambda: fp.apply_rope(jnp.ones((1, 2, 5, 8)), jnp.arange(5), CONFIG),
        ValueError,
        r"L = 2, .* Hint: flax_posenc reads L from axis -3 .* PyTorch's \[B, N, L, "
        r"H\] layout needs jnp\.swapaxes\(x, -3, -2\) first",
    ),
    (  # a decode step's k in PyTorch's layout: one query, keys read as S = 2
        lambda: fp.apply_rope_qk(
            jnp.ones((1, 1, 2, 8)),
            jnp.ones((1, 2, 5, 8)),
            jnp.array([[4]]),
            CONFIG,
            k_positions=jnp.arange(5),
        ),
        ValueError,
        r"`k_positions` .* jnp\.swapaxes\(k, -3, -2\)",
    ),
    (
        lambda: fp.Llama3Scaling(8.0, 4.0, 1.0, 64),
        ValueError,
        "`Llama3Scaling.high_freq_factor` must be >= low_freq_factor",
    ),
    # The deprecated spelling is named, not the field it maps to.
    (lambda: fp.NTKScaling(alpha=0), ValueError, r"`NTKScaling.alpha` must be"),
    (
        lambda: fp.rope_cos_sin(jnp.arange(3), DYNAMIC, seq_len="4"),
        TypeError,
        r"`seq_len` must be a positive int, .*got '4' \(str\)",
    ),
    (
        lambda: fp.rope_cos_sin(jnp.arange(3), DYNAMIC, seq_len=jnp.ones(3)),
        TypeError,
        r"`seq_len` must be a positive int, .*got dtype float32",
    ),
    # A config.json dict where a RopeConfig goes: an AttributeError on .head_dim.
    (
        lambda: fp.positional_attention_fn(
            rope={"rope_theta": 1e4}, q_positions=jnp.arange(5)
        ),
        TypeError,
        r"`rope` must be a flax_posenc.RopeConfig, got dict.*rope_config_from_hf",
    ),
    (
        lambda: fp.apply_rope(X, jnp.arange(5), {"head_dim": 8}),
        TypeError,
        r"`config` must be a flax_posenc.RopeConfig, got dict.*rope_config_from_hf",
    ),
    (
        lambda: fp.apply_mrope(
            X, jnp.zeros((3, 5), int), {"head_dim": 8}, mrope_section=(2, 1, 1)
        ),
        TypeError,
        r"`config` must be a flax_posenc.RopeConfig, got dict",
    ),
    (
        lambda: fp.rope_shift(X, 3, 8),
        TypeError,
        r"`config` must be a flax_posenc.RopeConfig, got int",
    ),
    (
        lambda: pnnx.RotaryEmbedding({"head_dim": 8}),
        TypeError,
        r"`config` must be a flax_posenc.RopeConfig, got dict.*rope_config_from_hf",
    ),
    (
        lambda: plinen.RotaryEmbedding({"head_dim": 8}).init(
            jax.random.key(0), X, X, jnp.arange(5)
        ),
        TypeError,  # linen holds a dict attribute as a FrozenDict
        r"`config` must be a flax_posenc.RopeConfig, got FrozenDict.*"
        r"rope_config_from_hf",
    ),
    # An MLIRError from the initializer, or a 0-row table failing later under jit.
    (
        lambda: pnnx.LearnedPositionalEmbedding(-1, 8, rngs=nnx.Rngs(0)),
        ValueError,
        r"`max_len` must be a positive int, got -1",
    ),
    (
        lambda: pnnx.LearnedPositionalEmbedding(0, 8, rngs=nnx.Rngs(0)),
        ValueError,
        r"`max_len` must be a positive int, got 0",
    ),
    (
        lambda: pnnx.LearnedPositionalEmbedding(8, -1, rngs=nnx.Rngs(0)),
        ValueError,
        r"`features` must be a positive int, got -1",
    ),
    (
        lambda: plinen.LearnedPositionalEmbedding(max_len=-1, features=8).init(
            jax.random.key(0), jnp.ones((1, 5, 8))
        ),
        ValueError,
        r"`max_len` must be a positive int, got -1",
    ),
    (
        lambda: jax.jit(fp.learned_embedding_lookup)(jnp.ones((0, 4)), jnp.arange(3)),
        ValueError,
        r"`table` must have at least one row .*got shape \(0, 4\)",
    ),
]


@pytest.mark.parametrize("call,error,match", BAD_VALUES)
def test_bad_values_raise_naming_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def _eval_shape(f):
    return lambda *args: jax.eval_shape(f, *args)


@pytest.mark.parametrize(
    "stage",
    [jax.jit, _eval_shape, lambda f: jax.jit(jax.vmap(f, in_axes=(None, 0)))],
    ids=["jit", "eval_shape", "jit_vmap"],
)
def test_checkify_lookup_staged_without_checkify_names_the_argument(stage):
    """A staged check cannot run outside ``checkify.checkify``: the call says so,
    naming ``out_of_range`` and the wrapping, instead of JAX's staging error."""

    def lookup(table, positions):
        return fp.learned_embedding_lookup(table, positions, out_of_range="checkify")

    table, positions = jnp.ones((4, 2)), jnp.arange(3)[None]
    with pytest.raises(
        ValueError,
        match=r'`out_of_range="checkify"` traced under jit .* must run inside '
        r"checkify\.checkify.*Hint: `err, out = checkify\.checkify\(jax\.jit\(f\)\)",
    ):
        stage(lookup)(table, positions)
    _, out = stage(checkify.checkify(lookup))(table, positions)
    assert out.shape == (1, 3, 2)
    error, out = (
        checkify.checkify(stage(lookup))(table, positions)
        if (stage is not _eval_shape)
        else checkify.checkify(lookup)(table, positions)
    )  # eager: nothing staged
    error.throw()
    assert out.shape == (1, 3, 2)


def test_lengths_written_as_whole_floats_in_json_are_accepted():
    scaling = fp.YarnScaling(factor=4.0, original_max_position_embeddings=4096.0)
    assert scaling.original_max_position_embeddings == 4096
    assert isinstance(scaling.original_max_position_embeddings, int)


DEPRECATED = {
    "NTKScaling(alpha=...)": lambda: fp.NTKScaling(alpha=2.0),
    "NTKScaling.alpha": lambda: fp.NTKScaling(factor=2.0).alpha,
    'layout="concat"': lambda: fp.sinusoidal_table(6, 8, layout="concat"),
    "default_attention_factor()": lambda: fp.YarnScaling(
        **YARN
    ).default_attention_factor(),
}


@pytest.mark.parametrize("old", sorted(DEPRECATED))
def test_deprecations_name_the_replacement_and_the_removal(old):
    """Every deprecation goes through one helper: it names what is deprecated, the
    release that removes it (CHANGELOG's ### Deprecated) and the replacement, and
    points at the caller's line."""
    with pytest.warns(DeprecationWarning) as caught:
        DEPRECATED[old]()
    (warning,) = caught
    assert str(warning.message).startswith(
        f"{old} is deprecated and will be removed in flax_posenc 0.3.0; use "
    )
    assert warning.filename == __file__


def test_every_deprecation_uses_the_helper():
    package = pathlib.Path(fp.__file__).parent
    for path in package.rglob("*.py"):
        if path.relative_to(package).as_posix() != "_core/deprecation.py":
            assert "DeprecationWarning" not in path.read_text(), path


# Module paths of 0.1.0 that moved into the subpackages (0.2.0), and one name of each.
MOVED_MODULES = {
    "alibi": ("bias.alibi", "alibi_bias"),
    "blockwise": ("attention.blockwise", "blockwise_attention"),
    "cache_shift": ("rope.cache_shift", "rope_shift"),
    "context_extension": ("rope.context_extension", "extend_context"),
    "context_parallel": ("attention.context_parallel", "ring_attention"),
    "cope": ("bias.cope", "cope_bias"),
    "dual_chunk": ("attention.dual_chunk", "dual_chunk_attention"),
    "fire": ("bias.fire", "fire_bias"),
    "kerple": ("bias.kerple", "kerple_bias"),
    "position_bias": ("bias.position_bias", "PositionBias"),
    "query_scaling": ("rope.query_scaling", "query_scale"),
    "relative": ("bias.relative", "relative_position_bias"),
    "rope_nd": ("rope.nd", "apply_mrope"),
    "rope_scaling": ("rope.scaling", "YarnScaling"),
    "self_extend": ("attention.self_extend", "self_extend_attention"),
    "xpos": ("rope.xpos", "apply_xpos"),
}


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_a_moved_module_path_still_works_and_warns(old):
    """``from flax_posenc.alibi import alibi_bias`` (0.1.0's paths) gives the same
    object with a DeprecationWarning naming the new path, until 0.3.0."""
    new, name = MOVED_MODULES[old]
    module = importlib.import_module(f"flax_posenc.{old}")
    with pytest.warns(DeprecationWarning) as caught:
        value = getattr(module, name)
    assert value is getattr(fp, name)
    assert str(caught[0].message) == (
        f"flax_posenc.{old}.{name} is deprecated and will be removed in flax_posenc "
        f"0.3.0; use flax_posenc.{new}.{name} (or flax_posenc.{name})."
    )
    assert caught[0].filename == __file__
    assert set(module.__all__) == set(
        importlib.import_module(f"flax_posenc.{new}").__all__
    )
    changelog = (pathlib.Path(__file__).parents[1] / "CHANGELOG.md").read_text()
    assert f"`flax_posenc.{old}`" in changelog.split("### Deprecated", 1)[1]


def test_changelog_lists_every_deprecation_with_its_removal():
    changelog = (pathlib.Path(__file__).parents[1] / "CHANGELOG.md").read_text()
    section = changelog.split("### Deprecated", 1)[1].split("\n## ", 1)[0]
    assert "0.3.0" in section
    for old in DEPRECATED:
        assert f"`{old}`" in section, old


def test_deprecated_spellings_give_the_same_values():
    with pytest.warns(DeprecationWarning):
        assert fp.NTKScaling(alpha=2.0) == fp.NTKScaling(factor=2.0)
    with pytest.warns(DeprecationWarning):
        old = fp.sinusoidal_table(6, 8, layout="concat")
    np.testing.assert_array_equal(
        np.asarray(old), np.asarray(fp.sinusoidal_table(6, 8, layout="half"))
    )
    scaling = fp.YarnScaling(**YARN)
    with pytest.warns(DeprecationWarning):
        assert (
            scaling.default_attention_factor() == scaling.effective_attention_factor()
        )
    assert scaling.effective_attention_factor() == 0.1 * math.log(4.0) + 1


# --------------------------------------------------------------------------------------
# Configs are plain host data.
# --------------------------------------------------------------------------------------

ALL_FAMILIES = [
    fp.LinearScaling(factor=2.0),
    fp.NTKScaling(factor=2.0),
    fp.DynamicNTKScaling(factor=2.0, original_max_position_embeddings=16),
    fp.YarnScaling(factor=4.0, original_max_position_embeddings=64),
    fp.LongRopeScaling((1.0,) * 4, (2.0,) * 4, 16, factor=4.0),
    fp.Llama3Scaling(8.0, 1.0, 4.0, 64),
    fp.ProportionalScaling(partial_rotary_factor=0.5),
]


@pytest.mark.parametrize("scaling", ALL_FAMILIES, ids=lambda s: type(s).__name__)
def test_constructing_a_config_does_no_device_work(scaling, monkeypatch):
    """Construction used to compute frequencies eagerly: device transfers (failing
    under transfer_guard) and, for dynamic NTK, 11 eager XLA compilations."""
    import flax_posenc.rope._core as rope_module
    import flax_posenc.rope.scaling as scaling_module

    class NoDevice:
        def __getattr__(self, name):
            raise AssertionError(f"jnp.{name} called while constructing a config")

    monkeypatch.setattr(scaling_module, "jnp", NoDevice())
    monkeypatch.setattr(rope_module, "jnp", NoDevice())
    with jax.transfer_guard("disallow"):
        config = fp.RopeConfig(head_dim=8, scaling=dataclasses.replace(scaling))
    assert hash(config) == hash(dataclasses.replace(config))


def test_rotary_dim_is_stored_as_given_and_resolved_apart():
    """A config keeps the ``rotary_dim`` it was given; configs that compare equal
    behave alike under ``dataclasses.replace`` (a resolved size stored in the field
    made ``RopeConfig(64)`` and ``RopeConfig(64, rotary_dim=64)`` equal, then differ
    after a replace of ``head_dim``)."""
    full, explicit = fp.RopeConfig(head_dim=64), fp.RopeConfig(64, rotary_dim=64)
    assert full.rotary_dim is None and full.rotated_features == 64
    assert explicit.rotated_features == 64
    assert full != explicit
    assert dataclasses.replace(full, head_dim=32).rotated_features == 32
    assert dataclasses.replace(full, head_dim=32) == fp.RopeConfig(head_dim=32)
    partial = dataclasses.replace(fp.RopeConfig(64, rotary_dim=16), head_dim=32)
    assert partial.rotary_dim == partial.rotated_features == 16
    with pytest.raises(ValueError, match=r"rotary_dim.*<= head_dim \(32\)"):
        dataclasses.replace(explicit, head_dim=32)


@pytest.mark.parametrize("family", ["dynamic", "longrope"])
def test_apply_rope_qk_shares_seq_len_between_q_and_k(family):
    """Separate apply_rope calls give q (one decode step) and k (the cache) their
    own max(positions) + 1, hence different frequencies and non-relative scores."""
    scaling = {
        "dynamic": fp.DynamicNTKScaling(factor=2.0, original_max_position_embeddings=8),
        "longrope": fp.LongRopeScaling((1.0,) * 4, (3.0,) * 4, 8, factor=4.0),
    }[family]
    config = fp.RopeConfig(head_dim=8, scaling=scaling)
    q, k = normals(2, (1, 32, 2, 8))
    positions = jnp.arange(32)
    q_full, k_full = fp.apply_rope_qk(q, k, positions, config)
    step_q, cache_k = fp.apply_rope_qk(
        q[:, 31:], k, positions[31:], config, k_positions=positions
    )
    np.testing.assert_allclose(step_q, q_full[:, 31:], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(cache_k, k_full, rtol=1e-6, atol=1e-6)
    alone = fp.apply_rope(q[:, 31:], positions[31:], config)  # seq_len 32 as well
    np.testing.assert_allclose(alone, step_q, rtol=1e-6, atol=1e-6)
    alone_k = fp.apply_rope(k[:, :4], positions[:4], config)  # seq_len 4: short
    assert np.max(np.abs(np.asarray(alone_k - k_full[:, :4]))) > 1e-3


# --------------------------------------------------------------------------------------
# Angles: float32 by elementwise multiply, never a matmul, also under x64.
# --------------------------------------------------------------------------------------

ENCODINGS = {
    "rope": lambda x, p: fp.apply_rope(x, p, CONFIG),
    "xpos": lambda x, p: fp.apply_xpos(x, p, CONFIG, is_key=True),
    "mrope": lambda x, p: fp.apply_mrope(
        x, jnp.stack([p, p, p]), CONFIG, mrope_section=(2, 1, 1)
    ),
    "mrope_interleaved": lambda x, p: fp.apply_mrope(
        x,
        jnp.stack([p, p, p]),
        CONFIG,
        mrope_section=(2, 1, 1),
        mrope_layout="interleaved",
    ),
    "axial": lambda x, p: fp.apply_axial_rope(x, jnp.stack([p, p], -1), CONFIG),
    "dynamic": lambda x, p: fp.apply_rope(x, p, DYNAMIC),
    "sinusoidal": lambda x, p: fp.sinusoidal_encoding(p, 8),
    "query_scaling": lambda x, p: fp.apply_query_scaling(
        x, p, fp.QueryScaling(scale=0.1, floor_scale=2.0)
    ),
}


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_no_matmul_forms_an_angle(name):
    """A default-precision matmul runs in bf16 on TPU."""
    jaxpr = jax.make_jaxpr(ENCODINGS[name])(X, jnp.arange(5))
    primitives = primitive_names(jaxpr.jaxpr)
    assert "mul" in primitives, primitives  # the nested programs were searched
    assert not primitives & {"dot_general", "conv_general_dilated"}, primitives


def test_float64_q_under_x64_keeps_float32_angles():
    """The documented float32 angle rounding holds for a float64 q too."""
    positions = np.array([0, 1, 1000, 70000, 131071])
    inv_freq = np.float32(10000.0 ** -(np.arange(0, 8, 2) / 8))
    angle = np.float32(positions.astype(np.float32)[:, None] * inv_freq[None, :])
    with enable_x64():
        x = jnp.asarray(np.random.default_rng(0).normal(size=(5, 1, 8)))
        got = np.asarray(fp.apply_rope(x, jnp.asarray(positions), CONFIG))
        assert got.dtype == np.float64
    x = np.asarray(x)
    cos, sin = np.cos(angle.astype(np.float64)), np.sin(angle.astype(np.float64))
    a, b = x[:, 0, :4], x[:, 0, 4:]
    want = np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)
    # The rotation itself runs in float32 (one rounding per product), the angle is
    # the float32 one: agreement to float32 rounding of the products.
    np.testing.assert_allclose(got[:, 0], want, rtol=0, atol=1e-6)
    # Angles formed in float64 (the input dtype) would be off by up to half a
    # float32 ulp of 131071 * 1 rad (2^-8): far outside that agreement.
    angle64 = positions[:, None] * 10000.0 ** -(np.arange(0, 8, 2) / 8)[None, :]
    cos64, sin64 = np.cos(angle64), np.sin(angle64)
    want64 = np.concatenate([a * cos64 - b * sin64, b * cos64 + a * sin64], -1)
    assert np.abs(want64 - want).max() > 1e-4


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_float64_q_under_x64_is_rotated_in_float32(layout, branch):
    """The rotation widens a float64 q to float32 too (one float32 rounding per
    product, as for every dtype): each rotated feature is a float32 value held in
    float64. Products formed in float64 would not be (and pass the test above)."""
    config = fp.RopeConfig(head_dim=8, layout=layout)
    with enable_x64():
        x = jnp.asarray(np.random.default_rng(1).normal(size=(5, 2, 8)))
        positions = jnp.asarray([0, 3, 1000, 70000, 131071])
        got = np.asarray(
            run_branch(
                lambda x, p: fp.apply_rope(x, p, config), x, positions, branch=branch
            )
        )
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got.astype(np.float32).astype(np.float64), got)
    assert not np.array_equal(np.asarray(x).astype(np.float32), np.asarray(x))


# --------------------------------------------------------------------------------------
# rope_permute_layout on fused kernels, against transformers' Llama converter.
# --------------------------------------------------------------------------------------


def converter_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """``permute`` of transformers' ``convert_llama_weights_to_hf.py``, in numpy:
    ``w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1,
    dim2)`` on a torch ``[N * H, D]`` q/k weight (Meta interleaved -> HF half)."""
    dim1, dim2 = w.shape
    return (
        w.reshape(n_heads, dim1 // n_heads // 2, 2, dim2)
        .transpose(0, 2, 1, 3)
        .reshape(dim1, dim2)
    )


@pytest.mark.parametrize("heads,head_dim", [(4, 8), (2, 16), (1, 6)])
def test_permute_fused_kernel_matches_the_llama_converter(heads, head_dim):
    w = np.random.default_rng(0).normal(size=(heads * head_dim, 12)).astype(np.float32)
    got = fp.rope_permute_layout(
        jnp.asarray(w),
        rotary_dim=head_dim,
        head_dim=head_dim,
        source="interleaved",
        target="half",
        axis=0,
    )
    np.testing.assert_array_equal(np.asarray(got), converter_permute(w, heads))
    flax_kernel = fp.rope_permute_layout(
        jnp.asarray(w.T),
        rotary_dim=head_dim,
        head_dim=head_dim,
        source="interleaved",
        target="half",
    )
    np.testing.assert_array_equal(
        np.asarray(flax_kernel), converter_permute(w, heads).T
    )
    back = fp.rope_permute_layout(
        got,
        rotary_dim=head_dim,
        head_dim=head_dim,
        source="half",
        target="interleaved",
        axis=0,
    )
    np.testing.assert_array_equal(np.asarray(back), w)


def test_permute_rejects_a_head_dim_that_does_not_divide():
    with pytest.raises(ValueError, match=r"`head_dim` \(5\) must divide"):
        fp.rope_permute_layout(
            jnp.zeros((12, 3)),
            rotary_dim=4,
            head_dim=5,
            source="interleaved",
            target="half",
            axis=0,
        )


# --------------------------------------------------------------------------------------
# The public surface.
# --------------------------------------------------------------------------------------


def public_modules() -> list[str]:
    """Every public module re-exported flat (not linen, nnx, testing: namespaces of
    their own), without the deprecated paths of moved modules."""
    package = pathlib.Path(fp.__file__).parent
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not parts or any(part.startswith("_") for part in parts):
            continue
        if (
            parts[0] in ("linen", "nnx", "testing")
            or "moved_module(" in path.read_text()
        ):
            continue
        names.append(".".join(parts))
    return names


PUBLIC_MODULES = public_modules()


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_module_defines_all(name):
    module = __import__(f"flax_posenc.{name}", fromlist=["__all__"])
    assert module.__all__ == sorted(module.__all__)
    for public in module.__all__:
        assert hasattr(module, public), public
        assert public in fp.__all__, f"{name}.{public} is not re-exported"


@pytest.mark.parametrize(
    "alias",
    [
        "OutOfRange",
        "RopeLayout",
        "RopeScaling",
        "SeqLen",
        "SinusoidalLayout",
        "SinusoidalSpacing",
    ],
)
def test_type_aliases_of_public_signatures_are_exported(alias):
    assert alias in fp.__all__


# --------------------------------------------------------------------------------------
# Mutation survivors: YaRN's ramp at its ends, config precedence, unset betas.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "original,truncate,branch",
    [
        (1, True, "the ends cross (low 0, high -6): the ramp is clipped"),
        # d(1) = 64 ln(6 / 2 pi) / (2 ln 1e4) = -0.16: low = high = 0, a zero-width
        # ramp that transformers widens by 0.001 (0 / 0 otherwise).
        (6, True, "both ends 0: zero width, widened by 0.001"),
        (10**9, True, "the ramp reaches past the last pair: clipped to R - 1"),
        (10**9, False, "untruncated, past the last pair"),
        (4096, True, "inside the dimensions"),
        (64, False, "fractional ends"),
    ],
)
def test_yarn_ramp_ends_match_the_float64_formula(original, truncate, branch):
    import rope_reference as ref

    scaling = fp.YarnScaling(
        factor=8.0, original_max_position_embeddings=original, truncate=truncate
    )
    config = fp.RopeConfig(head_dim=64, theta=10000.0, scaling=scaling)
    want, attention = ref.yarn(10000.0, 64, scaling)
    inv_freq, got_attention = fp.rope_frequencies(config)
    assert np.all(np.isfinite(np.asarray(inv_freq))), branch
    np.testing.assert_allclose(np.asarray(inv_freq), want, rtol=2**-23, err_msg=branch)
    assert got_attention == attention


@pytest.mark.parametrize("factor,original", [(1.0, 1), (0.5, 1), (0.5, 4096)])
def test_longrope_attention_factor_is_one_up_to_factor_one(factor, original):
    """transformers' ``_compute_longrope_parameters``: ``attention_factor = 1.0 if
    factor <= 1 else sqrt(1 + ln(factor) / ln(orig))``. The guard keeps ``orig = 1``
    (``ln 1 = 0``) from dividing by zero, and ``factor < 1`` from shrinking cos/sin
    (``sqrt(1 + ln 0.5 / ln 4096) = 0.957``)."""
    scaling = fp.LongRopeScaling((1.0,) * 4, (2.0,) * 4, original, factor=factor)
    config = fp.RopeConfig(head_dim=8, scaling=scaling)
    assert scaling.effective_attention_factor() == 1.0
    for seq_len in (original, original + 1):  # the short and the long regime
        inv_freq, scale = fp.rope_frequencies(config, seq_len=seq_len)
        assert np.all(np.isfinite(np.asarray(inv_freq)))
        assert float(scale) == 1.0
        cos, _ = fp.rope_cos_sin(jnp.zeros(1, int), config, seq_len=seq_len)
        np.testing.assert_array_equal(np.asarray(cos), 1.0)


def test_llama3_equal_frequency_factors_are_legal():
    """Llama 4 Scout: ``low_freq_factor == high_freq_factor == 1``: no blend band,
    wavelengths past 8192 divided by 16, the rest kept."""
    import rope_reference as ref

    scaling = fp.Llama3Scaling(16.0, 1.0, 1.0, 8192)
    config = fp.RopeConfig(head_dim=128, theta=500000.0, scaling=scaling)
    want, _ = ref.llama3(500000.0, 128, scaling)
    base = 500000.0 ** -(np.arange(0, 128, 2) / 128)
    long = 2 * np.pi / base > 8192
    assert long.any() and not long.all()
    np.testing.assert_allclose(want, np.where(long, base / 16, base), rtol=1e-15)
    inv_freq, attention = fp.rope_frequencies(config)
    np.testing.assert_allclose(np.asarray(inv_freq), want, rtol=2**-23)
    assert attention == 1.0


def test_phi3_top_level_original_length_wins_and_llama_refuses_it():
    """transformers' standardize_rope_params: a class with its own
    ``original_max_position_embeddings`` attribute (Phi3Config) overrides the
    block's; other classes ignore a top-level value (LlamaConfig keeps the block's,
    checked in transformers 5.24), which the reader refuses rather than drop."""
    longrope = {
        "type": "longrope",
        "short_factor": [1.0] * 4,
        "long_factor": [2.0] * 4,
        "original_max_position_embeddings": 4096,
    }
    phi3 = {
        "model_type": "phi3",
        "hidden_size": 16,
        "num_attention_heads": 2,
        "num_hidden_layers": 1,
        "max_position_embeddings": 8192,
        "original_max_position_embeddings": 2048,
        "rope_scaling": longrope,
    }
    scaling = fp.rope_config_from_hf(phi3).scaling
    assert scaling.original_max_position_embeddings == 2048
    llama = {
        **phi3,
        "model_type": "llama",
        "rope_scaling": {**YARN, "type": "yarn"},
    }
    with pytest.raises(ValueError, match="transformers ignores a top-level"):
        fp.rope_config_from_hf(llama)


LLAMA_JSON = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "max_position_embeddings": 16384,
}


@pytest.mark.parametrize("unset", [None, 0])
def test_yarn_betas_null_or_zero_read_as_unset(unset):
    """transformers reads ``beta_fast or 32`` and ``beta_slow or 1``."""
    config = {
        **LLAMA_JSON,
        "rope_scaling": {
            **YARN,
            "type": "yarn",
            "beta_fast": unset,
            "beta_slow": unset,
        },
    }
    scaling = fp.rope_config_from_hf(config).scaling
    assert (scaling.beta_fast, scaling.beta_slow) == (32.0, 1.0)


JSON_MISTAKES = [
    (
        {"rope_scaling": {**YARN, "type": "yarn", "truncate": "false"}},
        TypeError,
        "truncate",
    ),
    ({"rope_theta": "10000"}, TypeError, "rope_theta"),
    (
        {"rope_scaling": {"type": "yarn", "original_max_position_embeddings": 4096}},
        ValueError,
        r"needs keys \['factor'\]",
    ),
    (
        {
            "rope_scaling": {
                **YARN,
                "type": "yarn",
                "original_max_position_embeddings": 4096.7,
            }
        },
        TypeError,
        "original_max_position_embeddings",
    ),
    ({"rope_scaling": {"type": "linear", "factor": True}}, TypeError, "factor"),
    ({"rope_interleave": "false"}, ValueError, "ignores rope_interleave"),
    (
        {"rope_scaling": {"type": "linear", "factor": 2.0, "mrope_section": [2, 3, 3]}},
        ValueError,
        r"Unknown keys \['mrope_section'\]",
    ),
    ({"num_hidden_layers": 2.5}, TypeError, "num_hidden_layers"),
]


@pytest.mark.parametrize("change,error,match", JSON_MISTAKES)
def test_json_values_of_the_wrong_type_raise(change, error, match):
    config = {
        **LLAMA_JSON,
        **change,
    }
    with pytest.raises(error, match=match):
        fp.read_hf_rope(config)


def test_deepseek_rope_interleave_must_be_a_json_bool():
    config = {
        "model_type": "deepseek_v3",
        "hidden_size": 64,
        "num_attention_heads": 2,
        "num_hidden_layers": 1,
        "rope_interleave": "false",
    }
    with pytest.raises(TypeError, match=r"rope_interleave.*must be true or false"):
        fp.read_hf_rope(config)
