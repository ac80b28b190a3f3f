"""The reader's rules where a config.json says less, or other, than it seems to.

JSON null is a value; a key near a RoPE key is a typo; a value transformers only
warns about is computed with, and warned about; each rule name has one owner, its
registry entry in ``hf/_rules.py``. Each rule here was read from
transformers 5.25's code (config classes, ``modeling_rope_utils``, the models'
attention) and, where transformers computes, pinned by ``hf_edge_cases.json``, which
transformers itself wrote (``tools/make_hf_edge_cases.py``).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import flax_posenc as fp
from flax_posenc.hf import _config, _models, _rules, _typos
from flax_posenc.hf._record import normalise

LLAMA = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "max_position_embeddings": 4096,
}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
STEP35_LAYERS = [
    "full_attention",
    "sliding_attention",
    "sliding_attention",
    "full_attention",
]
STEP35 = {
    "model_type": "step3p5",
    "hidden_size": 64,
    "num_attention_heads": 2,
    "num_hidden_layers": 4,
    "layer_types": STEP35_LAYERS,
}
DEEPSEEK_V4 = {
    "model_type": "deepseek_v4",
    "hidden_size": 64,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "layer_types": ["sliding_attention", "compressed_sparse_attention"],
}
COHERE2 = {
    "model_type": "cohere2",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_hidden_layers": 4,
}


def read(config):
    """``read_hf_rope(config)``, failing on any warning (tests that expect one say
    so with pytest.warns)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fp.read_hf_rope(config)


REFUSED = [
    # JSON null is a value: transformers then computes with None and fails.
    ({**LLAMA, "rope_theta": None}, r"config\['rope_theta'\] \(llama\) is null"),
    ({**LLAMA, "rope_parameters": {"rope_type": "default", "rope_theta": None}},
     r"sets \['rope_theta'\] to null"),
    ({**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": None}},
     r"sets \['factor'\] to null \(rope_type 'linear'\)"),
    ({**LLAMA, "rope_scaling": {**YARN, "original_max_position_embeddings": None}},
     r"sets \['original_max_position_embeddings'\] to null"),
    # The config class refuses the null itself.
    ({**LLAMA, "max_position_embeddings": None},
     r"config\['max_position_embeddings'\] \(llama\) is null, which transformers' "
     r"LlamaConfig cannot use"),
    # Typos one or two edits from a RoPE key: transformers would ignore them.
    ({**LLAMA, "rope_scalling": {"rope_type": "linear", "factor": 2.0}},
     r"config\['rope_scalling'\] .* close to 'rope_scaling'"),
    ({**LLAMA, "rope_thetta": 5e5}, r"config\['rope_thetta'\] .* close to 'rope_theta'"),
    ({**LLAMA, "rope_parametres": {"rope_theta": 5e5}}, r"close to 'rope_parameters'"),
    ({**LLAMA, "partial_rotary_factr": 0.5}, r"close to 'partial_rotary_factor'"),
    ({**LLAMA, "max_position_embedding": 8192}, r"close to 'max_position_embeddings'"),
    ({**LLAMA, "rope_thetaaa": 5e5}, r"close to 'rope_theta'"),  # two letters longer
    # LlamaConfig refuses a hidden size its head count does not divide.
    ({**LLAMA, "hidden_size": 66},
     r"config\['hidden_size'\] \(llama\) is 66, which num_attention_heads \(4\) does "
     r"not divide: transformers' LlamaConfig refuses the config .* Give the "
     r"checkpoint's own hidden_size and num_attention_heads."),
    ({**LLAMA, "hidden_size": 66, "head_dim": 16}, r"is 66, which num_attention_heads"),
    # A nested block with no layer types to choose it by.
    ({**LLAMA, "rope_parameters": {"full_attention": {"rope_theta": 1e4}}},
     r"nested by layer type \['full_attention'\], but it names no layer_types"),
    # Step 3.5's own per-layer key is a typo everywhere else.
    ({**LLAMA, "partial_rotary_factors": [0.5]}, r"close to 'partial_rotary_factor'"),
    # Step 3.5: a per-layer list too short for the first layer of a type (IndexError
    # in Step3p7TextConfig); keys the class ignores.
    ({**STEP35, "rope_theta": [5e6]},
     r"config\['rope_theta'\] \(step3p5\) has 1 entries, but transformers' "
     r"Step3p7TextConfig reads entry 1 \(the first 'sliding_attention' layer\) and "
     r"fails \(IndexError\). Give one entry per layer"),
    ({**STEP35, "partial_rotary_factors": [1.0, 1.0, 1.0],
      "layer_types": [*["sliding_attention"] * 3, "full_attention"]},
     r"config\['partial_rotary_factors'\] \(step3p5\) has 3 entries, but .* reads "
     r"entry 3 \(the first 'full_attention' layer\)"),
    ({**STEP35, "num_nextn_predict_layers": 1, "rope_theta": [5e6, 1e4, 1e4, 5e6, 1e4],
      "layer_types": [*STEP35_LAYERS, "full_attention", "sliding_attention"]},
     r"config\['layer_types'\] \(step3p5\) has 6 entries for num_hidden_layers = 4"),
    ({**STEP35, "rope_scaling": {"type": "linear", "factor": 2.0}},
     r"config\['rope_scaling'\] \(step3p5\) names its family with the legacy key "
     r"'type' \('linear'\): .* computes plain RoPE .* Rename 'type' to 'rope_type'."),
    ({**STEP35, "layer_types": ["sliding_attention"] * 4,
      "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
     r"config\['rope_scaling'\] \(step3p5\) is set, but .* applies it to the "
     r"full_attention block only, and this config's layers are "
     r"\['sliding_attention'\]: it is ignored. Remove it."),
    ({**STEP35, "rope_parameters": {"rope_type": "linear", "factor": 2.0}},
     r"config\['rope_parameters'\] \(step3p5\) has no block for every layer type "
     r"\['full_attention', 'sliding_attention'\]: transformers' Step3p7TextConfig "
     r"then ignores it"),
    ({**STEP35, "rope_parameters": {"full_attention": {"rope_theta": 1e4}}},
     r"has no block for every layer type"),
    ({**STEP35, "rope_theta": 5e5, "rope_parameters": {
        "full_attention": {"rope_theta": 1e4}, "sliding_attention": {"rope_theta": 1e4}}},
     r"has rope_parameters nested by every layer type .* keeps the nested blocks and "
     r"ignores \['rope_theta'\]. Remove \['rope_theta'\], or the nested blocks."),
    # DeepSeek-V4: the rope slice outgrows the indexer's heads (index_head_dim).
    ({**DEEPSEEK_V4, "partial_rotary_factor": 0.5},
     r"rope_parameters\['compress'\] rotates 256 features \(partial_rotary_factor "
     r"0.5 of head_dim 512\), but transformers' 'deepseek_v4' also rotates its "
     r"lightning indexer's heads of index_head_dim = 128 features with it in its "
     r"compressed_sparse_attention layers \[1\], and fails on the shapes. Give a "
     r"factor that rotates at most 128 features, or index_head_dim >= 256."),
    ({**DEEPSEEK_V4, "partial_rotary_factor": 0.25, "index_head_dim": 64},
     r"rotates 128 features .* index_head_dim = 64"),
]  # fmt: skip

TYPE_REFUSED = [
    ({**STEP35, "partial_rotary_factors": 0.5},
     r"config\['partial_rotary_factors'\] \(step3p5\) must be a list \(one factor "
     r"per layer\), got 0.5: transformers' Step3p7TextConfig indexes it and fails."),
    ({**STEP35, "num_nextn_predict_layers": None},
     r"config\['num_nextn_predict_layers'\] \(step3p5\) must be an integer >= 0 "
     r"\(the MTP layers that pad the per-layer lists\), got None: transformers' "
     r"Step3p7TextConfig adds it to num_hidden_layers and fails."),
    ({**STEP35, "num_nextn_predict_layers": 1.0}, r"must be an integer >= 0"),
    ({**STEP35, "rope_theta": [5e6, "1e4", 1e4, 5e6]},
     r"config\['rope_theta'\] \(step3p5\)\[1\]"),
    ({**STEP35, "rope_parameters": [1e4]},
     r"config\['rope_parameters'\] \(step3p5\) must be a dict or null"),
    ({**STEP35, "rope_scaling": [2.0]},
     r"config\['rope_scaling'\] \(step3p5\) must be a dict or null"),
]  # fmt: skip


@pytest.mark.parametrize("config, match", REFUSED, ids=range(len(REFUSED)))
def test_refused(config, match):
    with pytest.raises(ValueError, match=match):
        fp.read_hf_rope(config)


@pytest.mark.parametrize("config, match", TYPE_REFUSED, ids=range(len(TYPE_REFUSED)))
def test_refused_as_the_wrong_json_type(config, match):
    with pytest.raises(TypeError, match=match):
        fp.read_hf_rope(config)


def test_attributes_near_a_rope_key_are_not_typos():
    """``qk_nope_head_dim`` (DeepSeek) is two edits from ``qk_rope_head_dim`` and
    ``layer_type`` one from ``layer_types``: real attributes, accepted."""
    deepseek = {
        "model_type": "deepseek_v3",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 32,
    }
    assert read(deepseek).layer(0).rope.head_dim == 16
    assert read({**LLAMA, "layer_type": "decoder"}).layer(0).rope.theta == 1e4


def test_null_sliding_window_is_no_window():
    """Cohere 2 rotates only where a window applies (``if self.sliding_window is not
    None``): a null window leaves every layer unrotated, where the class default
    (4096) would rotate the sliding layers."""
    assert [layer.rope is None for layer in read(COHERE2).layers] == [
        False,
        False,
        False,
        True,
    ]
    unwindowed = read({**COHERE2, "sliding_window": None})
    assert all(layer.rope is None for layer in unwindowed.layers)


def test_null_rope_interleave_is_half_where_the_class_keeps_it():
    """DeepSeek-V3's attention tests ``if config.rope_interleave``: a null (kept as
    None by its class) rotates half pairs, the class default True interleaved."""
    deepseek = {
        "model_type": "deepseek_v3",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "qk_rope_head_dim": 16,
    }
    assert read(deepseek).layer(0).rope.layout == "interleaved"
    assert read({**deepseek, "rope_interleave": None}).layer(0).rope.layout == "half"


def test_null_yarn_beta_and_truncate_read_as_transformers():
    """transformers reads ``beta_fast or 32``, ``beta_slow or 1`` (so 0 and null are
    the defaults) and ``if truncate`` (null: no truncation)."""
    plain = read({**LLAMA, "rope_scaling": YARN}).layer(0).rope.scaling
    for fast, slow in ((None, None), (0, 0), (None, 0)):
        block = {**YARN, "beta_fast": fast, "beta_slow": slow}
        assert read({**LLAMA, "rope_scaling": block}).layer(0).rope.scaling == plain
    block = {**YARN, "truncate": None}
    scaling = read({**LLAMA, "rope_scaling": block}).layer(0).rope.scaling
    assert scaling.truncate is False


def test_null_yarn_factor_is_the_length_ratio_with_a_warning():
    block = {**YARN, "factor": None}
    with pytest.warns(UserWarning, match=r"factor field must be a float or int >= 1"):
        scaling = fp.read_hf_rope({**LLAMA, "rope_scaling": block}).layer(0)
    assert scaling.rope.scaling.factor == 4096 / 1024


WARNED = [
    # YaRN factor below 1: transformers warns and computes with 0.5.
    ({**LLAMA, "rope_scaling": {**YARN, "factor": 0.5}},
     r"factor field must be a float or int >= 1, got 0.5",
     lambda rope: rope.scaling.factor == 0.5),
    ({**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 0.5}},
     r"factor field must be a float or int >= 1, got 0.5",
     lambda rope: rope.scaling.factor == 0.5),
    # Llama 3 without its original length: max_position_embeddings stands in.
    ({**LLAMA, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                "low_freq_factor": 1.0, "high_freq_factor": 4.0}},
     r"original_max_position_embeddings field must be less than "
     r"max_position_embeddings, got 4096 and max_position_embeddings=4096",
     lambda rope: rope.scaling.original_max_position_embeddings == 4096),
    # Llama 4 Scout's equal factors: legal, but transformers warns.
    ({**LLAMA, "rope_scaling": {"rope_type": "llama3", "factor": 16.0,
                                "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                                "original_max_position_embeddings": 1024}},
     r"high_freq_factor field must be greater than low_freq_factor",
     lambda rope: rope.scaling.high_freq_factor == 1.0),
    # A YaRN factor that is not the ratio of the lengths: the explicit one is used.
    ({**LLAMA, "rope_scaling": {**YARN, "factor": 2.0}},
     r"does not match the ratio .* = 4.0\). Using the explicit factor \(2.0\)",
     lambda rope: rope.scaling.factor == 2.0),
]  # fmt: skip


@pytest.mark.parametrize("config, match, computed", WARNED, ids=range(len(WARNED)))
def test_warned_like_transformers_and_computed(config, match, computed):
    with pytest.warns(UserWarning, match=match):
        spec = fp.read_hf_rope(config)
    assert computed(spec.layer(0).rope)


def test_a_layer_type_of_a_uniform_config_is_answered():
    """Every layer is full attention: asking for that type is a correct question."""
    config = {**LLAMA, "num_hidden_layers": 2, "layer_types": ["full_attention"] * 2}
    assert fp.rope_config_from_hf(
        config, layer_type="full_attention"
    ) == fp.rope_config_from_hf(config)
    with pytest.raises(ValueError, match=r"`layer_type` must be one of"):
        fp.rope_config_from_hf(config, layer_type="sliding_attention")


FIXTURES = pathlib.Path(__file__).parent / "fixtures"
EDGE = json.loads((FIXTURES / "hf_edge_cases.json").read_text())


def _readable(config: dict) -> bool:
    try:
        fp.read_hf_rope(config)
    except ValueError:
        return False
    return True


MODEL_CASES = json.loads((FIXTURES / "hf_models.json").read_text())["cases"]
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    READABLE = {  # types whose published (v4) config.json the reader reads as it is
        case["model_type"] for case in MODEL_CASES if _readable(case["config"])
    }
PARTIAL_QUESTIONS = [
    pytest.param(model_type, question, answer, id=f"{model_type}-{question}")
    for model_type, answers in EDGE["partial_rotary_factor_read"].items()
    for question, answer in answers.items()
    if isinstance(answer, (bool, str)) and model_type in READABLE
]


@pytest.mark.slow
@pytest.mark.parametrize("model_type, question, answer", PARTIAL_QUESTIONS)
def test_partial_rotary_factor_is_read_where_transformers_reads_it(
    model_type, question, answer
):
    """transformers (hf_edge_cases.json) ran each type with a partial_rotary_factor
    added, at the top level or inside a rope block: where it rotated other features,
    the reader rotates the same number per layer; where it ignored the key or failed,
    the reader refuses it (a model that never calls its rotary function reads
    nothing)."""
    details = EDGE["partial_rotary_factor_details"][model_type][question]
    if answer is True and "with" in details:
        spec = fp.read_hf_rope(details["config_with"])
        for index, uses_rope, rotated, frequencies in details["with"]:
            layer = spec.layer(index)
            assert (layer.rope is not None) == uses_rope
            if uses_rope:
                assert layer.rope.rotated_features == 2 * frequencies, index
                assert rotated in (None, layer.rope.rotated_features), index
        return
    try:
        spec = fp.read_hf_rope(details["config_with"])
    except ValueError as error:
        assert "partial_rotary_factor" in str(error) or "mrope_section" in str(error)
    else:
        assert all(layer.rope is None for layer in spec.layers)


# transformers reads these silently (a typo is ignored); the reader refuses them.
REFUSED_WHERE_TRANSFORMERS_IGNORES = (
    "llama/rope_scalling_llama3",
    "llama/rope_thetta_5e5",
    # Step3p7TextConfig drops these (plain RoPE where a scaling block was meant).
    "step3p5/rope_scaling_legacy_type",
    "step3p5/rope_scaling_without_full_attention",
    "step3p5/flat_rope_parameters",
)
# transformers' warnings on values it computes with, and the reader's counterpart.
WARNING_TEXTS = (
    "factor field must be a float or int >= 1",
    "must be less than max_position_embeddings",
    "Please set the `factor` field",
)
EDGE_CASES = [c for c in EDGE["cases"] if c["section"] != "partial_rotary_factor"]


@pytest.mark.parametrize("case", EDGE_CASES, ids=[c["name"] for c in EDGE_CASES])
def test_reader_matches_transformers_edge_cases(case):
    """Each hf_edge_cases.json case: where transformers failed, the reader raises;
    where it computed, the reader gives its layers' RoPE use, frequencies,
    attention scaling and softmax scale, and warns where it warned."""
    if "error" in case or case["name"] in REFUSED_WHERE_TRANSFORMERS_IGNORES:
        with pytest.raises((ValueError, TypeError)):
            fp.read_hf_rope(case["config"])
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = fp.read_hf_rope(case["config"])
    warned = any(
        text in w["message"] for w in case["warnings"] for text in WARNING_TEXTS
    )
    assert bool(caught) == warned, ([str(w.message) for w in caught], case["warnings"])
    seq_len = max(max(row) for row in case["position_ids"]) + 1
    for expected in case["layers"]:
        layer = spec.layer(expected["layer_index"])
        assert (layer.rope is not None) == expected["uses_rope"]
        softmax = layer.softmax_scale_factor * expected["head_dim"] ** -0.5
        np.testing.assert_allclose(softmax, expected["scaling"], rtol=1e-6)
        if layer.rope is None:
            continue
        freqs = fp.rope_frequencies(layer.rope, seq_len=seq_len)
        np.testing.assert_allclose(
            freqs.inv_freq, np.asarray(expected["inv_freq"], np.float32), rtol=1e-6
        )
        np.testing.assert_allclose(
            freqs.attention_scaling, expected["attention_scaling"], rtol=1e-6
        )


# Qwen2.5-7B-Instruct-1M's published block (vLLM reads it; transformers ignores it).
QWEN_1M = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_hidden_layers": 2,
    "max_position_embeddings": 1010000,
    "rope_theta": 10000000.0,
    "dual_chunk_attention_config": {
        "chunk_size": 262144,
        "local_size": 8192,
        "original_max_position_embeddings": 262144,
    },
}


def test_dual_chunk_attention_config_is_read():
    spec = read(QWEN_1M)
    assert spec.dual_chunk_attention == fp.DualChunkAttentionConfig(
        chunk_size=262144, local_size=8192, original_max_position_embeddings=262144
    )
    assert spec.layer(0).rope == fp.RopeConfig(head_dim=128, theta=1e7)
    assert (
        read({**QWEN_1M, "dual_chunk_attention_config": None}).dual_chunk_attention
        is None
    )


@pytest.mark.parametrize(
    "block, error, match",
    [
        ({"sparse_attention_enabled": True}, ValueError, "sparse attention"),
        ({"sparse_attention_enabled": "no"}, TypeError, "sparse_attention_enabled"),
        ({"sparse_attention_threshold": 0}, ValueError, "Unknown keys"),
        ({"chunk_size": None}, TypeError, "chunk_size"),
        ({"local_size": 262144}, ValueError, "local_size"),
    ],
)
def test_dual_chunk_attention_config_refuses_what_it_does_not_compute(
    block, error, match
):
    config = {
        **QWEN_1M,
        "dual_chunk_attention_config": {
            **QWEN_1M["dual_chunk_attention_config"],
            **block,
        },
    }
    with pytest.raises(error, match=match):
        read(config)


def test_dual_chunk_attention_config_needs_its_sizes_and_a_dict():
    with pytest.raises(ValueError, match=r"needs \['local_size'\]"):
        read({**QWEN_1M, "dual_chunk_attention_config": {"chunk_size": 4}})
    with pytest.raises(TypeError, match="must be a dict"):
        read({**QWEN_1M, "dual_chunk_attention_config": [4, 2]})


def test_rope_config_from_hf_does_not_drop_dual_chunk_attention():
    with pytest.raises(ValueError, match="dual_chunk_attention_config"):
        fp.rope_config_from_hf(QWEN_1M)


def test_rope_scaling_wins_over_rope_parameters_as_in_transformers():
    """PreTrainedConfig keeps ``rope_scaling or rope_parameters``: given both, the
    rope_scaling block counts (hf_edge_cases.json, section malformed, pins the
    numbers); an empty or null rope_scaling leaves rope_parameters."""
    linear4 = {"rope_type": "linear", "factor": 4.0}
    both = {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    assert read({**both, "rope_parameters": linear4}).layer(0).rope.scaling == (
        fp.LinearScaling(factor=2.0)
    )
    for empty in ({}, None):
        config = {**LLAMA, "rope_scaling": empty, "rope_parameters": linear4}
        assert read(config).layer(0).rope.scaling == fp.LinearScaling(factor=4.0)


def test_a_class_without_the_check_floors_the_head_size():
    """Qwen2Config accepts hidden_size 66 with 4 heads: its attention uses 66 // 4."""
    config = {**LLAMA, "model_type": "qwen2", "hidden_size": 66}
    assert read(config).layer(0).rope.head_dim == 16


@pytest.mark.parametrize(
    "a, b, distance",
    [
        ("xyrope_theta", "rope_theta", 2),  # a deleted prefix costs one per character
        ("rope_theta", "xyrope_theta", 2),  # an inserted one too
        ("abrope_the", "rope_theta", 4),  # prefix deleted, suffix inserted
        ("rope_theta", "abrope_the", 4),
        ("abc", "", 3),
        ("", "abc", 3),
    ],
)
def test_edit_distance_counts_edits_at_the_start(a, b, distance):
    assert _typos.edit_distance(a, b) == distance


def test_a_key_four_edits_away_is_not_a_typo():
    """``abrope_the`` is four edits from ``rope_theta`` (two leading characters
    deleted, two trailing ones inserted): no typo, so read as transformers ignores it."""
    assert read({**LLAMA, "abrope_the": 1.0}).layer(0).rope == fp.RopeConfig(
        head_dim=64
    )


def test_llama4_temperature_past_floor_scale_matches_transformers():
    """Llama 4's NoPE-layer query factor at positions 16382..16385 (floor 1 and 2 of
    (p + 1) / 8192): q as Llama4TextAttention hands it to the attention interface
    after 16382 cached tokens (hf_edge_cases.json, llama4_temperature)."""
    case = EDGE["llama4_temperature"]
    layer = read(case["config"]).layer(case["layer_index"])
    positions = jnp.asarray(case["positions"])
    assert int(positions.max()) > 8192
    got = fp.apply_query_scaling(
        jnp.asarray(case["q_in"], jnp.float32), positions, layer.query_scaling
    )
    want = np.asarray(case["q_out"], np.float32)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-7, atol=0)


# Each rule name has one owner, its registry entry (``hf/_rules.py``): the Model field
# whose values key each registry.
RULE_REGISTRIES = {
    "config_rule": _rules.CONFIG_RULES,
    "head_dim": _rules.HEAD_DIM_RULES,
    "nope": _rules.NOPE_RULES,
    "query_scaling": _rules.QUERY_SCALING_RULES,
    "mrope": _rules.MROPE_RULES,
}
TABLE = sorted(set(_models.MODELS) | set(_models.COMMON_TYPES))


def _model(model_type: str) -> _models.Model:
    return _models.MODELS.get(model_type, _models.COMMON)


def test_every_rule_a_model_names_is_registered_and_every_rule_is_named():
    """A Model entry naming a rule its registry lacks fails only when that model is
    read; a rule no Model entry names is code no config reaches."""
    for field, registry in RULE_REGISTRIES.items():
        named = {getattr(_model(t), field) for t in TABLE}
        assert named <= set(registry), (field, sorted(map(str, named - set(registry))))
        assert set(registry) <= named, (field, sorted(map(str, set(registry) - named)))


MUSE = {**COHERE2, "model_type": "muse_glimmer_text", "num_hidden_layers": 2}
# Configs where a rule's behaviour shows beyond what the fixtures hold: Muse's
# layer_rope_switch refuses a base other than rope_theta, and a missing list.
RULE_CASES = [
    {**MUSE, "layer_types": ["sliding_attention"] * 2, "layer_rope_theta": [5e4, 0]},
    {**MUSE, "layer_types": ["sliding_attention"] * 2},
]


def _by_model_type(configs: list[dict]) -> dict[str, list[dict]]:
    """``configs`` by the model type each is read as (a multimodal one's text)."""
    by_type: dict[str, list[dict]] = {}
    for config in configs:
        model_type = str(_config.text_config(config).get("model_type"))
        by_type.setdefault(model_type, []).append(config)
    return by_type


# Every config at hand: the fixtures' published (v4) and to_dict() (v5) forms,
# transformers' edge cases, this file's refusals and the rule cases.
CONFIGS_BY_TYPE = _by_model_type(
    [
        *(case[form] for case in MODEL_CASES for form in ("config", "config_dict")),
        *(case["config"] for case in EDGE["cases"]),
        *(config for config, _ in REFUSED + TYPE_REFUSED),
        *RULE_CASES,
    ]
)


def _outcome(config: dict) -> tuple:
    """Phase 1's reading of ``config``: its record or its error, and its warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = normalise(config)
        except Exception as error:  # an error is an outcome here
            result = (type(error), str(error))
    return result, [str(w.message) for w in caught]


@pytest.mark.parametrize(
    "field, name",
    [(field, name) for field, registry in RULE_REGISTRIES.items() for name in registry],
    ids=str,
)
def test_a_rule_under_another_name_reads_every_config_alike(monkeypatch, field, name):
    """Each rule name has one owner, its registry entry: the same entry under a new
    name reads every config of the model types that name it alike (record, error,
    warnings). Catches a rule name compared outside its registry (``if
    cfg.model.nope == "all"``, ``if cfg.model.mrope is None``, a layout taken from
    the name), whose effect the renamed rule loses."""
    registry = RULE_REGISTRIES[field]
    types = [t for t in TABLE if getattr(_model(t), field) == name]
    configs = [config for t in types for config in CONFIGS_BY_TYPE.get(t, [])]
    assert configs, f"no config of a model type whose {field} is {name!r}"
    before = [_outcome(config) for config in configs]
    renamed = f"{name} (renamed)"
    monkeypatch.setitem(registry, renamed, registry[name])
    for t in types:
        monkeypatch.setitem(
            _models.MODELS, t, dataclasses.replace(_model(t), **{field: renamed})
        )
    after = [_outcome(config) for config in configs]
    for config, old, new in zip(configs, before, after, strict=True):
        assert new == old, config


def test_a_config_rule_returns_a_new_config_and_leaves_the_given_one():
    """Step 3.5's rule rewrites the raw keys as its class does (MTP entries dropped,
    one block per layer type) into a new Config; the one it was given keeps the
    user's keys. A rule that rewrote its wrapper in place would change, by call
    order, what every later reader of that wrapper sees."""
    layer_types = [*STEP35_LAYERS, "sliding_attention"]
    raw = {
        **STEP35,
        "num_nextn_predict_layers": 1,
        "rope_theta": [5e6, 1e4, 1e4, 5e6, 1e4],
        "layer_types": layer_types,
    }
    given = _config.Config(raw)
    rewritten = _rules.CONFIG_RULES["per_layer_rope_lists"](given, 4)
    assert given.config is raw and raw["layer_types"] is layer_types
    assert rewritten.config["layer_types"] == STEP35_LAYERS
    assert "rope_theta" not in rewritten.config
    assert rewritten.config["rope_parameters"] == {
        "full_attention": {"rope_type": "default", "rope_theta": 5e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
    }
