"""Contracts that must not be misusable silently: positions, integer widths, values and
types (including values read from JSON), configs as host data, helpers.

Each row of the tables is a plausible mistake that used to give a wrong answer with
no error; each test names the bug it kills.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import pathlib
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax_compat import enable_x64

import flax_posenc as fp
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
    (
        lambda: fp.rope_cos_sin(jnp.arange(3), DYNAMIC, seq_len=jnp.ones(4, int)),
        ValueError,
        "per-token `seq_len`",
    ),
]


@pytest.mark.parametrize("call,error,match", BAD_VALUES)
def test_bad_values_raise_naming_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_lengths_written_as_whole_floats_in_json_are_accepted():
    scaling = fp.YarnScaling(factor=4.0, original_max_position_embeddings=4096.0)
    assert scaling.original_max_position_embeddings == 4096
    assert isinstance(scaling.original_max_position_embeddings, int)


def test_ntk_alpha_is_a_deprecated_spelling_of_factor():
    with pytest.warns(DeprecationWarning, match="NTKScaling"):
        old = fp.NTKScaling(alpha=2.0)
    assert old == fp.NTKScaling(factor=2.0)


def test_sinusoidal_concat_is_a_deprecated_spelling_of_half():
    with pytest.warns(DeprecationWarning, match='layout="half"'):
        old = fp.sinusoidal_table(6, 8, layout="concat")
    np.testing.assert_array_equal(
        np.asarray(old), np.asarray(fp.sinusoidal_table(6, 8, layout="half"))
    )


def test_yarn_effective_attention_factor_and_its_old_name():
    scaling = fp.YarnScaling(**YARN)
    with pytest.warns(DeprecationWarning):
        old = scaling.default_attention_factor()
    assert old == scaling.effective_attention_factor() == 0.1 * math.log(4.0) + 1


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
    import flax_posenc.rope as rope_module
    import flax_posenc.rope_scaling as scaling_module

    class NoDevice:
        def __getattr__(self, name):
            raise AssertionError(f"jnp.{name} called while constructing a config")

    monkeypatch.setattr(scaling_module, "jnp", NoDevice())
    monkeypatch.setattr(rope_module, "jnp", NoDevice())
    with jax.transfer_guard("disallow"):
        config = fp.RopeConfig(head_dim=8, scaling=dataclasses.replace(scaling))
    assert hash(config) == hash(dataclasses.replace(config))


def test_replace_head_dim_keeps_full_rotary_full():
    config = fp.RopeConfig(head_dim=64)
    smaller = dataclasses.replace(config, head_dim=32)
    assert smaller.rotary_dim == 32
    assert smaller == fp.RopeConfig(head_dim=32)
    partial = dataclasses.replace(
        fp.RopeConfig(head_dim=64, rotary_dim=16), head_dim=32
    )
    assert partial.rotary_dim == 16


def test_rotary_dim_is_typed_int():
    hints = typing.get_type_hints(fp.RopeConfig)
    assert hints["rotary_dim"] is int
    assert isinstance(fp.RopeConfig(head_dim=8).rotary_dim // 2, int)


def _top_level_imports(module) -> set[str]:
    tree = ast.parse(pathlib.Path(inspect.getfile(module)).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_rope_does_not_import_the_hf_reader():
    import flax_posenc.rope as rope_module

    assert not any("hf" in name for name in _top_level_imports(rope_module))


@pytest.mark.parametrize("family", ["dynamic", "longrope"])
def test_apply_rope_qk_shares_seq_len_between_q_and_k(family):
    """Separate apply_rope calls give q (one decode step) and k (the cache) their
    own max(positions) + 1, hence different frequencies and non-relative scores."""
    scaling = {
        "dynamic": fp.DynamicNTKScaling(factor=2.0, original_max_position_embeddings=8),
        "longrope": fp.LongRopeScaling((1.0,) * 4, (3.0,) * 4, 8, factor=4.0),
    }[family]
    config = fp.RopeConfig(head_dim=8, scaling=scaling)
    key = jax.random.key(0)
    q, k = jax.random.normal(key, (2, 1, 32, 2, 8))
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
    primitives = {eqn.primitive.name for eqn in jaxpr.jaxpr.eqns}
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

PUBLIC_MODULES = [
    "alibi",
    "attention",
    "hf",
    "learned",
    "positions",
    "query_scaling",
    "relative",
    "rope",
    "rope_nd",
    "rope_scaling",
    "sinusoidal",
    "xpos",
]


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
        (1, True, "both ends clipped to 0: zero width, widened by 0.001"),
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
    np.testing.assert_allclose(np.asarray(inv_freq), want, rtol=2**-23, err_msg=branch)
    assert got_attention == attention


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
