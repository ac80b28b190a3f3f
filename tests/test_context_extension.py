"""extend_context against published rope blocks (read by rope_config_from_hf from the
transformers fixtures) and hand-written recipes; rope_wavelengths against the float64
transcriptions of ``rope_reference``."""

import dataclasses
import json
import math
import pathlib

import numpy as np
import pytest
import rope_reference as ref

import flax_posenc as fp

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
ROPE_CASES = {
    c["name"]: c for c in json.loads((FIXTURES / "hf_rope.json").read_text())["cases"]
}
MODEL_CASES = {
    c["name"]: c for c in json.loads((FIXTURES / "hf_models.json").read_text())["cases"]
}

# (fixture, case, method, target_len, original, other arguments): every published
# block whose factor is the length ratio, plus Llama 3.1 whose factor 8 (for 16x) is
# a choice, and DeepSeek-V3's mscale fields (its attention factor moved into the
# softmax scale).
PUBLISHED = [
    (ROPE_CASES, "yarn_qwen2_5_7b_instruct", "yarn", 131072, 32768, {}),
    (MODEL_CASES, "qwen2/qwen2.5_yarn_x4", "yarn", 131072, 32768, {}),
    (
        ROPE_CASES,
        "yarn_deepseek_v3",
        "yarn",
        163840,
        4096,
        dict(mscale=1.0, mscale_all_dim=1.0),
    ),
    (
        MODEL_CASES,
        "deepseek_v3/deepseek_v3_yarn_x40",
        "yarn",
        163840,
        4096,
        dict(mscale=1.0, mscale_all_dim=1.0),
    ),
    (ROPE_CASES, "llama3_llama3_1_8b", "llama3", 131072, 8192, dict(factor=8)),
    (MODEL_CASES, "llama/llama3.1", "llama3", 131072, 8192, dict(factor=8)),
    (ROPE_CASES, "linear_factor4_v4_type_key", "linear", 16384, 4096, {}),
    # transformers' dynamic NTK takes max_position_embeddings as the original length.
    (ROPE_CASES, "dynamic_ntk_below_max_pos", "dynamic", 8192, 4096, {}),
]


@pytest.mark.parametrize(
    "cases,name,method,target_len,original,kwargs",
    [pytest.param(*p, id=p[1]) for p in PUBLISHED],
)
def test_published_blocks(cases, name, method, target_len, original, kwargs):
    published = fp.read_hf_rope(cases[name]["config"]).layers[0].rope
    base = dataclasses.replace(published, scaling=None)
    got = fp.extend_context(
        base,
        target_len,
        method=method,
        original_max_position_embeddings=original,
        **kwargs,
    )
    assert got == published


def test_deepseek_mscale_split_equals_the_default_attention_factor():
    """DeepSeek-V3's mscale = mscale_all_dim = 1 leaves cos/sin unscaled and scales
    the softmax by (0.1 ln 40 + 1)^2: the scores of the default YaRN block, whose
    cos/sin factor 0.1 ln 40 + 1 multiplies q and k once each."""
    layer = fp.read_hf_rope(ROPE_CASES["yarn_deepseek_v3"]["config"]).layers[0]
    base = dataclasses.replace(layer.rope, scaling=None)
    default = fp.extend_context(
        base, 163840, method="yarn", original_max_position_embeddings=4096
    )
    a = default.scaling.effective_attention_factor()
    assert layer.rope.scaling.effective_attention_factor() == 1.0
    np.testing.assert_allclose(a, 0.1 * math.log(40) + 1, rtol=1e-15)
    np.testing.assert_allclose(a**2, layer.softmax_scale_factor, rtol=1e-15)


BASE = fp.RopeConfig(head_dim=64, theta=10000.0, rotary_dim=32, layout="interleaved")


@pytest.mark.parametrize(
    "method,target_len,want",
    [
        ("linear", 16384, fp.LinearScaling(factor=4.0)),
        ("ntk", 16384, fp.NTKScaling(factor=4.0)),
        ("dynamic", 16384, fp.DynamicNTKScaling(4.0, 4096)),
        ("yarn", 16384, fp.YarnScaling(4.0, 4096, beta_fast=32.0, beta_slow=1.0)),
        ("llama3", 16384, fp.Llama3Scaling(4.0, 1.0, 4.0, 4096)),
        ("yarn", 100000, fp.YarnScaling(100000 / 4096, 4096)),  # a fractional ratio
    ],
)
def test_recipe_defaults(method, target_len, want):
    """The factor is the length ratio, the recipe's fields its published defaults,
    and the rest of the config (theta, partial rotary, layout) is kept."""
    got = fp.extend_context(
        BASE, target_len, method=method, original_max_position_embeddings=4096
    )
    assert got == dataclasses.replace(BASE, scaling=want)


def test_linear_maps_the_target_length_onto_the_trained_angles():
    got = fp.extend_context(
        BASE, 12288, method="linear", original_max_position_embeddings=4096
    )
    inv_freq, _ = ref.frequencies(got)
    np.testing.assert_allclose(
        12288 * inv_freq, 4096 * ref.default_inv_freq(10000.0, 32), rtol=1e-15
    )


def test_dynamic_factor_1_reaches_the_length_ratio_at_the_target():
    """Dynamic NTK with factor 1 is the static NTK of the length ratio at the target
    length (the factor is the caller's, as HF's dynamic formula intends)."""
    dynamic = fp.extend_context(
        BASE, 16384, method="dynamic", original_max_position_embeddings=4096, factor=1
    )
    assert dynamic.scaling == fp.DynamicNTKScaling(1.0, 4096)
    ntk = fp.extend_context(
        BASE, 16384, method="ntk", original_max_position_embeddings=4096
    )
    np.testing.assert_allclose(
        ref.frequencies(dynamic, seq_len=16384)[0], ref.frequencies(ntk)[0], rtol=1e-12
    )


def test_fields_override_the_defaults():
    got = fp.extend_context(
        BASE,
        32768,
        method="yarn",
        original_max_position_embeddings=4096,
        beta_fast=16.0,
        attention_factor=1.5,
        truncate=False,
    )
    assert got.scaling == fp.YarnScaling(
        8.0, 4096, beta_fast=16.0, attention_factor=1.5, truncate=False
    )


YARN = fp.extend_context(
    BASE, 8192, method="yarn", original_max_position_embeddings=4096
)
ERRORS = [
    (
        "not a config",
        dict(config={"rope_theta": 1e4}),
        TypeError,
        r"`config` must be a flax_posenc.RopeConfig, got dict.*rope_config_from_hf",
    ),
    ("already scaled", dict(config=YARN), ValueError, "`config` must be unscaled"),
    (
        "unknown method",
        dict(method="longrope"),
        ValueError,
        "`method` must be one of 'linear', 'ntk', 'dynamic', 'yarn', 'llama3', got 'longrope'",
    ),
    (
        "no original length",
        dict(original_max_position_embeddings=None),
        ValueError,
        "`original_max_position_embeddings` is required",
    ),
    (
        "float original length",
        dict(original_max_position_embeddings=4096.5),
        TypeError,
        "`original_max_position_embeddings` must be a positive Python int",
    ),
    (
        "target equals original",
        dict(target_len=4096),
        ValueError,
        r"`target_len` \(4096\) must exceed original_max_position_embeddings \(4096\)",
    ),
    (
        "target below original",
        dict(target_len=1000),
        ValueError,
        r"`target_len` \(1000\) must exceed",
    ),
    (
        "float target",
        dict(target_len=8192.0),
        TypeError,
        "`target_len` must be a positive Python int",
    ),
    (
        "factor below 1",
        dict(factor=0.5),
        ValueError,
        "`factor` must be >= 1 to extend a context, got 0.5",
    ),
    (
        "negative factor",
        dict(factor=-2.0),
        ValueError,
        "`factor` must be a finite number > 0",
    ),
    ("string factor", dict(factor="8"), TypeError, "`factor` must be a number"),
    (
        "unknown field",
        dict(beta_fastt=8.0),
        TypeError,
        "YarnScaling has no field 'beta_fastt'; its other fields are attention_factor, beta_fast, beta_slow",
    ),
    (
        "field of another family",
        dict(method="linear", low_freq_factor=2.0),
        TypeError,
        "LinearScaling has no field 'low_freq_factor'; its other fields are none",
    ),
    (
        "rejected by the family",
        dict(beta_fast=0.5),
        ValueError,
        "`YarnScaling.beta_fast` must exceed beta_slow",
    ),
    (
        "NTK on rotary_dim 2",
        dict(config=fp.RopeConfig(head_dim=2), method="ntk"),
        ValueError,
        "NTKScaling needs rotary_dim > 2",
    ),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c[0]) for c in ERRORS])
def test_extend_context_errors(case):
    _, overrides, error, match = case
    args = (
        dict(
            config=BASE,
            target_len=8192,
            method="yarn",
            original_max_position_embeddings=4096,
        )
        | overrides
    )
    config, target_len = args.pop("config"), args.pop("target_len")
    with pytest.raises(error, match=match):
        fp.extend_context(config, target_len, **args)


# Resonance records none of its own, even around YaRN: seq_len=None raises.
NO_ORIGINAL_LENGTH = (
    "plain",
    "linear",
    "ntk",
    "proportional",
    "resonance",
    "resonance_yarn",
)


@pytest.mark.parametrize("family", ref.FAMILIES)
@pytest.mark.parametrize("seq_len", [None, 7000])
def test_wavelengths_match_float64_formula(family, seq_len):
    """2 pi / inv_freq of the family (at seq_len for dynamic NTK and LongRoPE) and
    length / wavelength turns; length = the original length by default."""
    config = ref.make_config(family, rotary_dim=16)
    if seq_len is None and family in NO_ORIGINAL_LENGTH:
        seq_len = 300  # no original length to default to
    got = fp.rope_wavelengths(config, seq_len=seq_len)
    inv_freq, _ = ref.frequencies(config, seq_len=seq_len)
    with np.errstate(divide="ignore"):
        want = 2 * np.pi / inv_freq
    length = ref.ORIGINAL if seq_len is None else seq_len
    assert got.length == length
    assert got.wavelength.dtype == got.rotations.dtype == np.float64
    ulps = 16 if family == "dynamic_ntk" else 1  # inv_freq rounded once to float32
    np.testing.assert_allclose(got.wavelength, want, rtol=ulps * 2.0**-24, atol=0)
    np.testing.assert_allclose(got.rotations, length / want, rtol=ulps * 2.0**-24)
    if family == "proportional":  # the pairs past the rotated fraction never turn
        assert np.isinf(got.wavelength[4:]).all() and (got.rotations[4:] == 0).all()


def test_recipe_bands_follow_the_rotations():
    """The quantity the recipes are defined on: YaRN keeps pairs that turn at least
    beta_fast times within the original length and divides those turning at most
    beta_slow times by the factor; Llama 3 keeps wavelengths below orig / 4 and
    divides those above orig / 1."""
    base = fp.RopeConfig(head_dim=128, theta=500000.0)
    trained = fp.rope_wavelengths(base, seq_len=8192)
    for method in ("yarn", "llama3"):
        extended = fp.extend_context(
            base, 65536, method=method, original_max_position_embeddings=8192
        )
        ratio = fp.rope_wavelengths(extended).wavelength / trained.wavelength
        if method == "yarn":
            kept, divided = trained.rotations >= 32, trained.rotations <= 1
        else:
            kept = trained.wavelength < 8192 / 4
            divided = trained.wavelength > 8192
        assert kept.any() and divided.any()
        np.testing.assert_allclose(ratio[kept], 1.0, rtol=1e-6)
        np.testing.assert_allclose(ratio[divided], 8.0, rtol=1e-6)
        assert ((ratio >= 1 - 1e-6) & (ratio <= 8 + 1e-5)).all()


@pytest.mark.parametrize(
    "config,seq_len,error,match",
    [
        (BASE, None, ValueError, "`seq_len` is required: this config records no"),
        (YARN, 4096.0, TypeError, "`seq_len` must be a positive Python int"),
        (YARN, 0, ValueError, "`seq_len` must be a positive int, got 0"),
    ],
)
def test_wavelengths_errors(config, seq_len, error, match):
    with pytest.raises(error, match=match):
        fp.rope_wavelengths(config, seq_len=seq_len)
