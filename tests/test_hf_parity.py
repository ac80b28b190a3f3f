"""Parity with Hugging Face transformers' RoPE, against golden fixtures it generated.

``tests/fixtures/hf_rope.json`` holds, per case, a real or synthetic ``config.json``
(v4 and v5 forms), the inverse frequencies and attention scaling transformers used,
its cos/sin, and q rotated by the model's own apply function (see
``tests/fixtures/README.md`` for the versions and the generating script).

Tolerances. ``inv_freq`` must agree within 1e-6 relative: transformers forms it with a
float32 ``pow`` whose last bit differs between libraries, while flax_posenc rounds the
float64 value once. At position ``p`` a relative difference ``r`` of ``inv_freq``
moves the float32 angle by ``p * inv_freq * r``, so cos/sin are compared with exactly
that allowance plus float32 rounding, element by element; the rotation itself is
checked separately on transformers' own cos/sin to 1e-6.
"""

import functools
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flax_posenc as fp

FIXTURES = json.loads(
    (pathlib.Path(__file__).parent / "fixtures" / "hf_rope.json").read_text()
)
CASES = {case["name"]: case for case in FIXTURES["cases"]}
# The jitted checks run one case per rope_type by default, every case with `slow`.
_FIRST_OF_TYPE = {}
for _name in sorted(CASES):
    _FIRST_OF_TYPE.setdefault(CASES[_name]["rope_type"], _name)
SAMPLED_CASES = [
    name
    if name in _FIRST_OF_TYPE.values()
    else pytest.param(name, marks=pytest.mark.slow)
    for name in sorted(CASES)
]
SCALING_OF_ROPE_TYPE = {
    "default": type(None),
    "linear": fp.LinearScaling,
    "dynamic": fp.DynamicNTKScaling,
    "yarn": fp.YarnScaling,
    "longrope": fp.LongRopeScaling,
    "llama3": fp.Llama3Scaling,
    "proportional": fp.ProportionalScaling,
}


def f32(values):
    return np.asarray(values, np.float32)


def config_of(case):
    """The RopeConfig of the case's layer type (DeepSeek's softmax factor aside)."""
    spec = fp.read_hf_rope(case["config"])
    kinds = spec.layer_types or (None,) * len(spec.layers)
    return next(
        layer.rope
        for kind, layer in zip(kinds, spec.layers, strict=True)
        if case["layer_type"] in (None, kind)
    )


def deinterleave(x, rotary_dim):
    """DeepSeek's interleaved apply returns evens then odds; do the same to ours."""
    order = np.r_[0:rotary_dim:2, 1:rotary_dim:2, rotary_dim : x.shape[-1]]
    return x[..., order]


def test_fixtures_cover_every_family_and_both_forms():
    assert {c["rope_type"] for c in CASES.values()} == set(SCALING_OF_ROPE_TYPE)
    assert {c["config_form"] for c in CASES.values()} == {"v4", "v5"}
    assert FIXTURES["versions"]["transformers"].startswith("5.")


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_maps_like_transformers(name):
    case = CASES[name]
    config = config_of(case)
    assert config.head_dim == case["head_dim"]
    assert config.rotated_features == case["rotary_dim"]
    assert config.layout == case["layout"]
    assert isinstance(config.scaling, SCALING_OF_ROPE_TYPE[case["rope_type"]])
    assert hash(config) == hash(config_of(case))  # usable as a static argument


@pytest.mark.parametrize("name", sorted(CASES))
def test_inv_freq_and_attention_scaling(name):
    case = CASES[name]
    seq_len = case["seq_len"] or int(np.max(case["positions"])) + 1
    inv_freq, scaling = jax.jit(
        functools.partial(fp.rope_frequencies, config_of(case))
    )(seq_len=seq_len)
    expected = f32(case["inv_freq"])
    nonzero = expected != 0
    np.testing.assert_array_equal(np.asarray(inv_freq)[~nonzero], 0.0)
    np.testing.assert_allclose(
        np.asarray(inv_freq)[nonzero], expected[nonzero], rtol=1e-6, atol=0
    )
    np.testing.assert_allclose(float(scaling), case["attention_scaling"], rtol=2**-23)
    _, eager_scaling = fp.rope_frequencies(config_of(case), seq_len=seq_len)
    np.testing.assert_allclose(eager_scaling, case["attention_scaling"], rtol=1e-12)


@pytest.mark.parametrize("name", SAMPLED_CASES)
def test_cos_sin_match_within_angle_rounding(name):
    case = CASES[name]
    config = config_of(case)
    positions = jnp.asarray(case["positions"])
    cos, sin = jax.jit(fp.rope_cos_sin, static_argnums=1)(positions, config)
    half = config.rotated_features // 2
    hf_cos, hf_sin = f32(case["cos"]), f32(case["sin"])
    # transformers' tables are full width: [freqs, freqs].
    np.testing.assert_array_equal(hf_cos[..., :half], hf_cos[..., half:])
    angle = np.abs(np.asarray(case["positions"], np.float64)[..., None]) * f32(
        case["inv_freq"]
    )
    allowance = case["attention_scaling"] * (angle * (1e-6 + 2**-23) + 2**-22)
    for ours, theirs in ((cos, hf_cos[..., :half]), (sin, hf_sin[..., :half])):
        assert np.all(np.abs(np.asarray(ours) - theirs) <= allowance)


@pytest.mark.parametrize("name", SAMPLED_CASES)
def test_rotation_matches_on_transformers_tables(name):
    case = CASES[name]
    config = config_of(case)
    half = config.rotated_features // 2
    cos, sin = f32(case["cos"])[..., :half], f32(case["sin"])[..., :half]
    rotated = fp.rope_rotate(
        jnp.asarray(f32(case["q"])), cos, sin, layout=config.layout
    )
    if config.layout == "interleaved":
        rotated = deinterleave(np.asarray(rotated), config.rotated_features)
    np.testing.assert_allclose(rotated, f32(case["q_rotated"]), atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("name", SAMPLED_CASES)
def test_apply_rope_end_to_end(name):
    case = CASES[name]
    config = config_of(case)
    q = jnp.asarray(f32(case["q"]))
    rotated = jax.jit(fp.apply_rope, static_argnums=2)(
        q, jnp.asarray(case["positions"]), config
    )
    if config.layout == "interleaved":
        rotated = deinterleave(np.asarray(rotated), config.rotated_features)
    angle = np.max(np.abs(case["positions"])) * np.max(f32(case["inv_freq"]))
    allowance = (
        2
        * np.max(np.abs(q))
        * case["attention_scaling"]
        * (angle * (1e-6 + 2**-23) + 2**-22)
    )
    np.testing.assert_allclose(rotated, f32(case["q_rotated"]), atol=allowance, rtol=0)


LLAMA = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "max_position_embeddings": 4096,
}


@pytest.mark.parametrize(
    ("config", "layer_type", "error", "match"),
    [
        (
            {**LLAMA, "rope_scaling": {"rope_type": "su"}},
            None,
            ValueError,
            "Unknown rope_type 'su'",
        ),
        (
            {**LLAMA, "rope_theta": 1e4, "rope_scaling": {"rope_type": "linear"}},
            None,
            ValueError,
            r"needs keys \['factor'\]",
        ),
        (
            {
                **LLAMA,
                "rope_theta": 1e4,
                "rope_scaling": {"type": "linear", "factor": 2, "beta": 1},
            },
            None,
            ValueError,
            r"Unknown keys \['beta'\]",
        ),
        (
            {**LLAMA, "rope_parameters": {"full_attention": {"rope_theta": 1e4}}},
            None,
            ValueError,
            r"nested by layer type \['full_attention'\], but it names no layer_types",
        ),
        (
            {**LLAMA, "rope_parameters": {"rope_theta": 1e4}},
            "full_attention",
            ValueError,
            "has no layer types; pass layer_type=None",
        ),
        (
            {"hidden_size": 256, "rope_theta": 1e4},
            None,
            ValueError,
            "names no `model_type`",
        ),
        (
            {"model_type": "llama", "num_attention_heads": 4},
            None,
            ValueError,
            "names no head_dim, and not both hidden_size",
        ),
        ([("rope_theta", 1e4)], None, TypeError, "must be a dict"),
    ],
)
def test_bad_configs_are_rejected(config, layer_type, error, match):
    with pytest.raises(error, match=match):
        fp.rope_config_from_hf(config, layer_type=layer_type)


def test_defaults_are_filled_like_transformers():
    neox = fp.rope_config_from_hf(
        {
            "model_type": "gpt_neox",
            "hidden_size": 512,
            "num_attention_heads": 4,
            "rotary_emb_base": 10000,
        }
    )
    assert neox.rotated_features == 32  # GPTNeoXConfig's default rotary_pct = 0.25
    deepseek = fp.rope_config_from_hf(
        {"model_type": "deepseek_v3", "qk_rope_head_dim": 64, "rope_theta": 1e4}
    )
    assert (deepseek.head_dim, deepseek.layout) == (64, "interleaved")


def test_phi3_top_level_original_length_is_only_for_longrope():
    phi3_4k = {
        "model_type": "phi3",
        "hidden_size": 3072,
        "num_attention_heads": 32,
        "max_position_embeddings": 4096,
        "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "rope_scaling": None,
    }
    config = fp.rope_config_from_hf(phi3_4k)
    assert (config.head_dim, config.scaling) == (96, None)


def test_gemma3_config_without_layer_types():
    gemma3 = {
        "model_type": "gemma3_text",
        "head_dim": 64,
        "rope_theta": 1e6,
        "rope_local_base_freq": 1e4,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    }
    full = fp.rope_config_from_hf(gemma3, layer_type="full_attention")
    local = fp.rope_config_from_hf(gemma3, layer_type="sliding_attention")
    assert (full.theta, full.scaling) == (1e6, fp.LinearScaling(factor=8.0))
    assert (local.theta, local.scaling) == (1e4, None)


def test_dynamic_ntk_rejects_the_key_transformers_ignores():
    config = {
        **LLAMA,
        "rope_theta": 1e4,
        "rope_scaling": {
            "rope_type": "dynamic",
            "factor": 2.0,
            "original_max_position_embeddings": 2048,
        },
    }
    with pytest.raises(
        ValueError, match=r"Unknown keys \['original_max_position_embeddings'\]"
    ):
        fp.rope_config_from_hf(config)
