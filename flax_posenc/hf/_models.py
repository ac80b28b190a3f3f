"""How each transformers model type applies RoPE, beyond its config-class defaults.

Read from transformers' modeling code (5.24) and pinned by ``tests/test_hf_models.py``
against the model types' own rotary modules (``tests/fixtures/hf_models.json``).
A model type with the common behaviour (``rotate_half`` pairs on the first
``int(head_dim * partial_rotary_factor)`` features, ``head_dim`` or ``hidden_size //
num_attention_heads``) needs only its entry in ``_defaults.DEFAULTS`` and the name in
:data:`COMMON`; every other one has a :class:`Model` here.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Model:
    """One model type's RoPE behaviour.

    Attributes:
      layout: the pairing its attention rotates: ``"half"`` (``rotate_half``) or
        ``"interleaved"`` (``rotate_every_two``, complex multiplication).
      interleave_key: its code reads ``rope_interleave`` (default from the class).
      head_dim: where the rotated head size comes from: ``"head_dim"`` (the key,
        else ``hidden_size // num_attention_heads``), ``"ratio"`` (always the
        ratio), ``"qk_rope_head_dim"`` (MLA's rotated slice).
      rotary_dim_key: a key giving the rotated features directly (GPT-J's
        ``rotary_dim``; None there means the whole head).
      partial_keys: legacy top-level names of the partial rotary factor.
      theta_keys: legacy top-level names of ``rope_theta``.
      nope: which layers skip RoPE: ``"no_rope_layers"`` (a 0/1 list, 0 = NoPE),
        ``"full_attention"`` (full-attention layers have no RoPE).
      query_scaling: ``"llama4"`` (``attn_temperature_tuning`` on NoPE layers) or
        ``"llama_4_scaling_beta"`` (every layer, from the rope block).
      softmax_mscale: YaRN's ``mscale_all_dim`` also scales the softmax (DeepSeek).
      mrope: ``"contiguous"`` or ``"interleaved"`` M-RoPE sections.
      local_theta_key: v4 key of the sliding layers' theta (Gemma 3).
      block_keys: extra keys of the rope block this model reads itself.
      alpha: Hunyuan's ``alpha`` in a ``dynamic`` block means static NTK.
      mscale_regimes: Phi-3.5-MoE's ``short_mscale`` / ``long_mscale``, with the
        short factors in both regimes (its rotary module calls the init function
        without a sequence length).
      mrope_section: the M-RoPE sections the rotary module defaults to.
      global_head_dim: Gemma 4: full-attention layers use ``global_head_dim`` (v4)
        or ``per_layer_config["full_attention"]["head_dim"]`` (v5), defaulting to
        this value.
    """

    layout: str = "half"
    interleave_key: bool = False
    head_dim: str = "head_dim"
    rotary_dim_key: str | None = None
    partial_keys: tuple[str, ...] = ()
    theta_keys: tuple[str, ...] = ()
    nope: str | None = None
    query_scaling: str | None = None
    softmax_mscale: bool = False
    mrope: str | None = None
    local_theta_key: str | None = None
    block_keys: frozenset[str] = frozenset()
    alpha: bool = False
    mscale_regimes: bool = False
    global_head_dim: int | None = None
    mrope_section: tuple[int, ...] | None = None


COMMON = Model()
INTERLEAVED = Model(layout="interleaved")
MLA = Model(head_dim="qk_rope_head_dim", interleave_key=True, softmax_mscale=True)

_MROPE_KEYS = frozenset({"mrope_section", "mrope_interleaved"})


def _mrope(kind: str, section: tuple[int, ...], layout: str = "half") -> Model:
    return Model(layout=layout, mrope=kind, mrope_section=section, block_keys=_MROPE_KEYS)


MODELS: dict[str, Model] = {
    "qwen2_vl_text": _mrope("contiguous", (16, 24, 24)),
    "qwen2_5_vl_text": _mrope("contiguous", (16, 24, 24)),
    "qwen2_5_omni_text": _mrope("contiguous", (16, 24, 24)),
    "qwen2_5_omni_talker": _mrope("contiguous", (16, 24, 24)),
    "paddleocr_vl_text": _mrope("contiguous", (16, 24, 24)),
    "qwen3_vl_text": _mrope("interleaved", (24, 20, 20)),
    "qwen3_vl_moe_text": _mrope("interleaved", (24, 20, 20)),
    "qwen3_omni_moe_text": _mrope("interleaved", (24, 20, 20)),
    "cosmos3_edge_text": _mrope("interleaved", (24, 20, 20)),
    "qwen3_5_text": _mrope("interleaved", (11, 11, 10)),
    "qwen3_5_moe_text": _mrope("interleaved", (11, 11, 10)),
    "glm4v_text": _mrope("contiguous", (8, 12, 12), "interleaved"),
    "glm4v_moe_text": _mrope("contiguous", (8, 12, 12)),
    "glm_image_text": _mrope("contiguous", (8, 12, 12)),
    "glm_ocr_text": _mrope("contiguous", (8, 12, 12), "interleaved"),
    "codegen": Model(layout="interleaved", rotary_dim_key="rotary_dim"),
    "cohere": INTERLEAVED,
    "cohere2": Model(layout="interleaved", nope="full_attention"),
    "cohere2_moe": Model(layout="interleaved", nope="full_attention"),
    "deepseek_v2": Model(layout="interleaved", head_dim="qk_rope_head_dim", softmax_mscale=True),
    "deepseek_v3": MLA,
    "ernie4_5": INTERLEAVED,
    "ernie4_5_moe": INTERLEAVED,
    "exaone4": Model(nope="full_attention"),
    "gemma3_text": Model(local_theta_key="rope_local_base_freq"),
    "gemma4_text": Model(global_head_dim=512),
    "glm": INTERLEAVED,
    "glm4": INTERLEAVED,
    "gpt_neox": Model(partial_keys=("rotary_pct",), theta_keys=("rotary_emb_base",)),
    "gpt_neox_japanese": Model(partial_keys=("rotary_pct",), theta_keys=("rotary_emb_base",)),
    "gptj": Model(layout="interleaved", rotary_dim_key="rotary_dim"),
    "helium": INTERLEAVED,
    "hunyuan_v1_dense": Model(alpha=True, block_keys=frozenset({"alpha", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"})),
    "hunyuan_v1_moe": Model(alpha=True, block_keys=frozenset({"alpha", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"})),
    "llama4_text": Model(layout="interleaved", nope="no_rope_layers", query_scaling="llama4"),
    "ministral3": Model(query_scaling="llama_4_scaling_beta", block_keys=frozenset({"llama_4_scaling_beta", "max_position_embeddings"})),
    "mistral4": Model(head_dim="qk_rope_head_dim", interleave_key=True, softmax_mscale=True, query_scaling="llama_4_scaling_beta", block_keys=frozenset({"llama_4_scaling_beta", "max_position_embeddings"})),
    "moonshine": INTERLEAVED,
    "phimoe": Model(mscale_regimes=True, block_keys=frozenset({"short_mscale", "long_mscale"})),
    "smollm3": Model(nope="no_rope_layers"),
    "axk1": MLA,
    "youtu": MLA,
    "glm4_moe_lite": MLA,
    "minicpm3": Model(head_dim="qk_rope_head_dim", softmax_mscale=True),
    "bailing_hybrid": INTERLEAVED,
    "blt_global_transformer": INTERLEAVED,
    "ernie4_5_vl_moe_text": INTERLEAVED,
    "longcat_flash": INTERLEAVED,
}
"""Model types whose RoPE differs from the common behaviour."""

COMMON_TYPES: frozenset[str] = frozenset(
    {
        "afmoe",
        "apertus",
        "apertus1p5_text",
        "arcee",
        "aria_text",
        "bamba",
        "beam",
        "bitnet",
        "cosmos3_edge_text",
        "csm",
        "cwm",
        "diffllama",
        "doge",
        "dory",
        "dots1",
        "embedding_gemma2_text",
        "emu3",
        "emu3_text_model",
        "eurobert",
        "evolla",
        "exaone_moe",
        "falcon",
        "falcon_h1",
        "flex_olmo",
        "flint",
        "gemma",
        "gemma2",
        "gpt_oss",
        "openai_privacy_filter",
        "gemma4_unified_text",
        "glm4_moe",
        "glm4v_moe_text",
        "glm_image_text",
        "gpt_oss",
        "granite",
        "granite4_vision_text",
        "granite_docling_text",
        "granite_swa",
        "granitemoe",
        "granitemoe_swa",
        "granitemoehybrid",
        "granitemoeshared",
        "gte",
        "higgs_audio_v2",
        "hrm_text",
        "hy_v3",
        "hyperclovax",
        "jais2",
        "jamba",
        "jetmoe",
        "jina_embeddings_v3",
        "kolibri1",
        "kyutai_speech_to_text",
        "laguna",
        "lara_mini",
        "lfm2",
        "lfm3",
        "llama",
        "mellum",
        "mimo_v2_flash",
        "minicpm3",
        "minimax",
        "minimax_m2",
        "minimax_m3_vl_text",
        "ministral",
        "mistral",
        "mixtral",
        "mllama_text_model",
        "modernbert",
        "modernbert-decoder",
        "molmo2_text",
        "moshi",
        "muse_glimmer_text",
        "muse_spark_text",
        "nanochat",
        "nemotron",
        "nemotron_h",
        "nomic_bert",
        "olmo",
        "olmo2",
        "olmo3",
        "olmo_hybrid",
        "olmoe",
        "paddleocr_vl_text",
        "persimmon",
        "phi",
        "phi3",
        "phi4_multimodal",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_5_moe_text",
        "qwen3_5_text",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_omni_moe_text",
        "recurrent_gemma",
        "seed_oss",
        "solar_open",
        "stablelm",
        "starcoder2",
        "step3p5",
        "ultrabert",
        "unlimited_ocr_text",
        "vaultgemma",
        "zamba2",
    }
)
"""Model types with the common behaviour (``rotate_half``, first features)."""

EXCLUDED: dict[str, str] = {}
"""Model types whose RoPE is out of scope by nature, with the reason."""
