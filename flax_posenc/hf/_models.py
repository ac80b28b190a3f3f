"""How each transformers model type applies RoPE, beyond its config-class defaults.

Read from transformers' modeling code (5.25) and pinned by ``tests/test_hf_models.py``
against the model types' own rotary modules (``tests/fixtures/hf_models.json``).
A model type with the common behaviour (``rotate_half`` pairs on the first
``int(head_dim * partial_rotary_factor)`` features, ``head_dim`` or ``hidden_size //
num_attention_heads``) needs only its entry in ``_defaults.DEFAULTS`` and the name in
:data:`COMMON`; every other one has a :class:`Model` here.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from flax_posenc.rope.config import RopeLayout

HeadDimRule = Literal["head_dim", "ratio", "twice_ratio", "qk_rope_head_dim"]
"""Where a model's rotated head size comes from (rules in ``hf/_rules.py``)."""
NopeRule = Literal[
    "no_rope_layers",
    "sliding_attention",
    "sliding_only",
    "sliding_or_no_window",
    "position_embedding_type",
    "use_mem_rope",
    "layer_rope_theta",
    "layer_rope_switch",
    "all",
]
"""Which layers of a model skip RoPE (rules in ``hf/_rules.py``)."""
QueryScalingRule = Literal["llama4", "llama_4_scaling_beta"]
"""Where a model's position-dependent query factor comes from (rules in
``hf/_rules.py``)."""
ConfigRule = Literal["per_layer_rope_lists"]
"""How a model's config class rewrites raw RoPE keys before anything reads them (rules
in ``hf/_rules.py``)."""
MropeRule = Literal["contiguous", "interleaved", "hw_alternating", "xd", "alternating"]
"""A model's M-RoPE layout: one of :data:`flax_posenc.MropeLayout`, or NeoMME's
``"alternating"`` rows (rules in ``hf/_rules.py``)."""


@dataclasses.dataclass(frozen=True)
class Model:
    """One model type's RoPE behaviour.

    Attributes:
      layout: the pairing its attention rotates: ``"half"`` (``rotate_half``) or
        ``"interleaved"`` (``rotate_every_two``, complex multiplication).
      interleave_key: its code reads ``rope_interleave`` (default from the class).
      head_dim: where the rotated head size comes from: ``"head_dim"`` (the key,
        else ``hidden_size // num_attention_heads``), ``"ratio"`` (always the
        ratio), ``"twice_ratio"`` (Zamba 2's shared attention on the concatenated
        ``2 * hidden_size``), ``"qk_rope_head_dim"`` (MLA's rotated slice).
      rotary_dim_key: a key giving the rotated features directly (GPT-J's
        ``rotary_dim``; None there means the whole head).
      partial_keys: legacy top-level names of the partial rotary factor.
      theta_keys: legacy top-level names of ``rope_theta``.
      nope: which layers skip RoPE: ``"no_rope_layers"`` (a 0/1 list, 0 = NoPE),
        ``"sliding_attention"`` (AFMoE: RoPE on sliding-window layers only),
        ``"sliding_only"`` (Cohere 2: RoPE only on sliding-window layers, none
        without a ``sliding_window``), ``"sliding_or_no_window"`` (EXAONE 4: NoPE
        on full-attention layers when a ``sliding_window`` is set),
        ``"position_embedding_type"`` (RoPE only when it is ``"rope"``),
        ``"use_mem_rope"`` (Zamba 2: RoPE only when that flag is true),
        ``"layer_rope_theta"`` (Granite SWA: a per-layer base, 0 = NoPE),
        ``"layer_rope_switch"`` (Muse: the same list, read only as on/off; its
        rotary module uses ``rope_theta``, so other nonzero entries raise), ``"all"``
        (Jamba, Nemotron-H: the modeling code defines a rotary function and never
        calls it).
      query_scaling: ``"llama4"`` (``attn_temperature_tuning`` on NoPE layers) or
        ``"llama_4_scaling_beta"`` (every layer, from the rope block).
      softmax_mscale: YaRN's ``mscale_all_dim`` also scales the softmax (DeepSeek).
      mrope: the M-RoPE layout (``"contiguous"``, ``"interleaved"``,
        ``"hw_alternating"``, see :data:`flax_posenc.MropeLayout`), or
        ``"alternating"`` (NeoMME: pair ``j`` from row ``j % 2``, whatever the
        sections; read as interleaved sections ``(R/4, R/4)``).
      local_theta_key: v4 key of the sliding layers' theta (Gemma 3).
      block_keys: extra keys of the rope block this model reads itself.
      alpha: Hunyuan's ``alpha`` in a ``dynamic`` block means static NTK.
      mscale_regimes: Phi-3.5-MoE's ``short_mscale`` / ``long_mscale``, with the
        short factors in both regimes (its rotary module calls the init function
        without a sequence length).
      mrope_section: the M-RoPE sections the rotary module defaults to.
      global_head_dim: Gemma 4: full-attention layers use the ``head_dim`` of
        their ``per_layer_config`` entries (v5), else ``global_head_dim`` (v4),
        defaulting to this value.
      fixed_theta: the rotary base, when the model has no RoPE keys at all
        (RoFormer's sinusoidal table); a RoPE key in the config then raises.
      unsupported_flags: boolean keys that, when true, make the model do something
        a :class:`~flax_posenc.LayerRope` does not describe (RoFormer's
        ``rotary_value`` also rotates the values).
      unsupported_keys: keys that, when not null, make the model do something a
        :class:`~flax_posenc.LayerRope` does not describe (Ergo's
        ``global_attention_scale`` scales q and k of its full-attention layers).
      position_sign: -1 where the model rotates by ``-theta`` (NanoChat's
        ``rotate_half`` has flipped signs).
      ignored_keys: top-level keys of published configs that the model's code
        never reads (Phi-3.5-MoE's ``original_max_position_embeddings``).
      dangling_keys: flat keys transformers drops from a per-layer-type
        ``rope_parameters`` (Cohere Compass's published config).
      layer_blocks: which ``rope_parameters`` block each layer type uses, where the
        blocks are not named after layer types (DeepSeek-V4's ``main`` for
        sliding-window layers, ``compress`` for the compressed ones); the flat v4
        form is split into those blocks as the class does.
      rope_slice_last: RoPE on the last ``int(head_dim * partial_rotary_factor)``
        features of the head (DeepSeek-V4's ``[nope | rope]`` heads).
      legacy_types: ``rope_type`` spellings of the model's own (old, new) pairs
        (HunYuan-VL's ``xdrope`` is ``dynamic``).
      legacy_keys: rope-block key spellings (old, new) the class renames
        (HunYuan-VL's ``xdrope_section`` is ``mrope_section``).
      paired_mlp: ``config.to_dict()`` writes ``layer_types`` as (attention,
        ``"mlp"``) pairs with ``num_hidden_layers`` doubled, which the class halves
        back on load (Dory).
      config_rule: how the config class rewrites the raw RoPE keys before anything
        reads them: ``"per_layer_rope_lists"`` (Step 3.5: per-layer ``rope_theta`` /
        ``partial_rotary_factors``, padded with MTP layers, into one block per
        layer type).
      own_keys: top-level keys the config class pops and reads itself, which the
        typo check must not take for misspellings (Step 3.5's
        ``partial_rotary_factors``).
      indexer: (layer type, class default of ``index_head_dim``): layers of that
        type also rotate a lightning indexer's heads of ``index_head_dim`` features
        with their block, and transformers fails where the block rotates more
        (DeepSeek-V4's compressed sparse attention).
    """

    layout: RopeLayout = "half"
    interleave_key: bool = False
    head_dim: HeadDimRule = "head_dim"
    rotary_dim_key: str | None = None
    partial_keys: tuple[str, ...] = ()
    theta_keys: tuple[str, ...] = ()
    nope: NopeRule | None = None
    query_scaling: QueryScalingRule | None = None
    softmax_mscale: bool = False
    mrope: MropeRule | None = None
    local_theta_key: str | None = None
    block_keys: frozenset[str] = frozenset()
    alpha: bool = False
    mscale_regimes: bool = False
    global_head_dim: int | None = None
    mrope_section: tuple[int, ...] | None = None
    fixed_theta: float | None = None
    unsupported_flags: tuple[str, ...] = ()
    unsupported_keys: tuple[str, ...] = ()
    position_sign: int = 1
    ignored_keys: frozenset[str] = frozenset()
    dangling_keys: frozenset[str] = frozenset()
    paired_mlp: bool = False
    legacy_types: tuple[tuple[str, str], ...] = ()
    legacy_keys: tuple[tuple[str, str], ...] = ()
    layer_blocks: tuple[tuple[str, str], ...] = ()
    rope_slice_last: bool = False
    config_rule: ConfigRule | None = None
    own_keys: frozenset[str] = frozenset()
    indexer: tuple[str, int] | None = None


# Model types whose rotary module reads ``partial_rotary_factor`` from the rope block
# (where the config class puts a top-level one too) and whose attention rotates that
# fraction. Every other type's default RoPE ignores it (it rotates the whole head) and
# fails on it with a scaling family (fewer frequencies than features), except that a
# class with a factor in its own rope blocks (DeepSeek-V4, Mistral 4) keeps it
# (DeepSeek-V4's class moves a top-level one into the blocks it builds from the flat
# form; its indexer bounds the factor: ``Model.indexer``).
# Read from the rotary modules' code and checked by transformers itself:
# ``tests/fixtures/hf_edge_cases.json`` (``partial_rotary_factor_source`` and
# ``partial_rotary_factor_read``), in ``tests/test_hf_partial_rotary.py``.
PARTIAL_ROTARY = frozenset(
    {
        "bamba",
        "gemma4_text",
        "gemma4_unified_text",
        "glm",
        "glm4",
        "glm4_moe",
        "glm4v_moe_text",
        "glm4v_text",
        "glm_image_text",
        "glm_ocr_text",
        "gpt_neox",
        "gpt_neox_japanese",
        "laguna",
        "mimo_v2_flash",
        "minimax_m2",
        "minimax_m3_vl_text",
        "nemotron",
        "neomme",
        "param2moe",
        "persimmon",
        "phi",
        "phi3",
        "phi4_multimodal",
        "qwen3_5_moe_text",
        "qwen3_5_text",
        "qwen3_next",
        "qwen4_exp_text",
        "recurrent_gemma",
        "sarvam_moe",
        "stablelm",
        "step3p5",
        "zaya",
    }
)

# Readers whose config class does not carry a top-level ``partial_rotary_factor`` into
# the rope blocks: it keeps the factors of its own blocks (GPT-NeoX's rotary_pct,
# Gemma 4's proportional blocks, Laguna, ZAYA, ...), rebuilds the blocks (Step 3.5) or
# never moves the key (Mellum).
PARTIAL_BLOCK_ONLY = frozenset(
    {
        "bamba",
        "gemma4_text",
        "gemma4_unified_text",
        "gpt_neox",
        "gpt_neox_japanese",
        "laguna",
        "mellum",
        "mimo_v2_flash",
        "neomme",
        "step3p5",
        "zaya",
    }
)

# Model types whose rotary module reads the block's factor while their attention
# rotates the whole head: with a factor below 1 the first forward fails on the shapes.
PARTIAL_FAILS = frozenset({"glm4_moe_lite", "mellum", "solar_open"})

COMMON = Model()
INTERLEAVED = Model(layout="interleaved")
MLA = Model(head_dim="qk_rope_head_dim", interleave_key=True, softmax_mscale=True)
_MLA_INTERLEAVED = Model(
    layout="interleaved", head_dim="qk_rope_head_dim", softmax_mscale=True
)

_MROPE_KEYS = frozenset({"mrope_section", "mrope_interleaved"})


def _mrope(
    kind: MropeRule, section: tuple[int, ...], layout: RopeLayout = "half"
) -> Model:
    return Model(
        layout=layout, mrope=kind, mrope_section=section, block_keys=_MROPE_KEYS
    )


# Hunyuan: ``alpha`` in a dynamic block is static NTK; q/k are normalised after RoPE.
_HUNYUAN = Model(
    alpha=True,
    block_keys=frozenset(
        {"alpha", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"}
    ),
)

MODELS: dict[str, Model] = {
    "qwen2_vl_text": _mrope("contiguous", (16, 24, 24)),
    "qwen2_5_vl_text": _mrope("contiguous", (16, 24, 24)),
    "qwen2_5_omni_text": _mrope("contiguous", (16, 24, 24)),
    "qwen2_5_omni_talker": _mrope("contiguous", (16, 24, 24)),
    "paddleocr_vl_text": _mrope("contiguous", (16, 24, 24)),
    "qwen3_vl_text": _mrope("interleaved", (24, 20, 20)),
    "qwen3_vl_moe_text": _mrope("interleaved", (24, 20, 20)),
    "qwen3_omni_moe_text": _mrope("interleaved", (24, 20, 20)),
    "qwen3_omni_moe_talker_text": _mrope("interleaved", (24, 20, 20)),
    "cosmos3_edge_text": _mrope("interleaved", (24, 20, 20)),
    "qwen3_5_text": _mrope("interleaved", (11, 11, 10)),
    "qwen3_5_moe_text": _mrope("interleaved", (11, 11, 10)),
    "glm4v_text": _mrope("contiguous", (8, 12, 12), "interleaved"),
    "glm4v_moe_text": _mrope("contiguous", (8, 12, 12)),
    "glm_image_text": _mrope("contiguous", (8, 12, 12)),
    "glm_ocr_text": _mrope("contiguous", (8, 12, 12), "interleaved"),
    "codegen": Model(layout="interleaved", rotary_dim_key="rotary_dim"),
    "cohere": INTERLEAVED,
    "cohere2": Model(layout="interleaved", nope="sliding_only"),
    "cohere2_moe": Model(layout="interleaved", nope="sliding_only"),
    "deepseek_v2": Model(
        layout="interleaved", head_dim="qk_rope_head_dim", softmax_mscale=True
    ),
    "deepseek_v3": MLA,
    "sarvam_mla": MLA,
    "ernie4_5": INTERLEAVED,
    "ernie4_5_moe": INTERLEAVED,
    "exaone4": Model(nope="sliding_or_no_window"),
    "exaone_moe": Model(nope="sliding_or_no_window"),
    "gemma3_text": Model(local_theta_key="rope_local_base_freq"),
    "gemma4_text": Model(global_head_dim=512),
    "glm": INTERLEAVED,
    "glm4": INTERLEAVED,
    "gpt_neox": Model(partial_keys=("rotary_pct",), theta_keys=("rotary_emb_base",)),
    "gpt_neox_japanese": Model(
        partial_keys=("rotary_pct",), theta_keys=("rotary_emb_base",)
    ),
    "gptj": Model(layout="interleaved", rotary_dim_key="rotary_dim"),
    "helium": INTERLEAVED,
    "llama4_text": Model(
        layout="interleaved", nope="no_rope_layers", query_scaling="llama4"
    ),
    "smollm3": Model(nope="no_rope_layers"),
    "mistral4": Model(
        head_dim="qk_rope_head_dim",
        interleave_key=True,
        softmax_mscale=True,
        query_scaling="llama_4_scaling_beta",
        block_keys=frozenset({"llama_4_scaling_beta", "max_position_embeddings"}),
    ),
    "longcat_flash": _MLA_INTERLEAVED,
    "bailing_hybrid": _MLA_INTERLEAVED,
    "embedding_gemma2_text": Model(global_head_dim=512),
    "gemma4_unified_text": Model(global_head_dim=512),
    "granitemoehybrid": Model(nope="position_embedding_type"),
    "afmoe": Model(nope="sliding_attention"),
    # Kolibri 1.1: RoPE on its sliding-window layers; the indexed-attention layers are NoPE.
    "kolibri1_1": Model(nope="sliding_attention"),
    # Ergo: head size always the ratio; NoPE full-attention layers (a null block).
    "ergo": Model(
        layout="interleaved",
        head_dim="ratio",
        unsupported_keys=("global_attention_scale",),
    ),
    "blt_local_decoder": INTERLEAVED,
    "axk2": _MLA_INTERLEAVED,
    "deepseek_v32": _MLA_INTERLEAVED,
    "glm_moe_dsa": _MLA_INTERLEAVED,
    "hy_v4": _MLA_INTERLEAVED,
    "hunyuan_v1_dense": _HUNYUAN,
    "hunyuan_v1_moe": _HUNYUAN,
    "ministral3": Model(
        query_scaling="llama_4_scaling_beta",
        block_keys=frozenset({"llama_4_scaling_beta", "max_position_embeddings"}),
    ),
    "axk1": MLA,
    "youtu": MLA,
    "glm4_moe_lite": MLA,
    "minicpm3": Model(head_dim="qk_rope_head_dim", softmax_mscale=True),
    "blt_global_transformer": INTERLEAVED,
    "dory": Model(paired_mlp=True),
    "neomme": Model(mrope="alternating"),
    "hunyuan_vl_text": dataclasses.replace(
        _HUNYUAN,
        mrope="xd",
        block_keys=_HUNYUAN.block_keys | {"mrope_section"},
        legacy_types=(("xdrope", "dynamic"),),
        legacy_keys=(("xdrope_section", "mrope_section"),),
    ),
    "ernie4_5_vl_moe_text": _mrope("hw_alternating", (22, 22, 20), "interleaved"),
    "deepseek_v4": Model(
        layout="interleaved",
        rope_slice_last=True,
        layer_blocks=(
            ("sliding_attention", "main"),
            ("compressed_sparse_attention", "compress"),
            ("heavily_compressed_attention", "compress"),
        ),
        indexer=("compressed_sparse_attention", 128),
    ),
    # Step 3.5 / 3.7: Step3p7TextConfig builds its blocks from per-layer lists.
    "step3p5": Model(
        config_rule="per_layer_rope_lists",
        own_keys=frozenset({"partial_rotary_factors"}),
    ),
    "flint": Model(nope="sliding_only"),
    "openai_privacy_filter": INTERLEAVED,
    "muse_glimmer_text": Model(nope="layer_rope_switch"),
    "muse_spark_text": Model(nope="layer_rope_switch"),
    "granite_swa": Model(nope="layer_rope_theta"),
    "granitemoe_swa": Model(nope="layer_rope_theta"),
    "zamba2": Model(head_dim="twice_ratio", nope="use_mem_rope"),
    "jamba": Model(nope="all"),
    "nemotron_h": Model(nope="all"),
    "roformer": Model(
        layout="interleaved",
        head_dim="ratio",
        fixed_theta=10000.0,
        unsupported_flags=("rotary_value",),
    ),
    "nanochat": Model(position_sign=-1),
    "phimoe": Model(
        mscale_regimes=True,
        block_keys=frozenset({"short_mscale", "long_mscale"}),
        ignored_keys=frozenset({"original_max_position_embeddings"}),
    ),
    "diffusion_gemma_text": Model(global_head_dim=512),
    "dots3_note_text": _MLA_INTERLEAVED,
    "qwen4_exp_text": _mrope("interleaved", (11, 11, 10)),
    "hy_v4_vl_text": Model(
        layout="interleaved",
        head_dim="qk_rope_head_dim",
        softmax_mscale=True,
        mrope="interleaved",
        mrope_section=(24, 20, 20),
        block_keys=_MROPE_KEYS,
    ),
    "cohere_compass_text": Model(
        mrope="interleaved",
        mrope_section=(24, 20, 20),
        block_keys=_MROPE_KEYS,
        dangling_keys=frozenset({"rope_theta", "rope_type"}),
    ),
}
"""Model types whose RoPE differs from the common behaviour."""

# Only model types verified against transformers' own modules are listed; any other
# raises in the reader rather than being guessed.
COMMON_TYPES: frozenset[str] = frozenset(
    {
        "arcee",
        "aria_text",
        "bamba",
        "bitnet",
        "csm",
        "doge",
        "emu3_text_model",
        "eurobert",
        "evolla",
        "falcon",
        "falcon_h1",
        "flex_olmo",
        "gemma",
        "apertus",
        "apertus1p5_text",
        "beam",
        "cwm",
        "gemma2",
        "gemma3n_text",
        "zaya",
        "voxtral_realtime_text",
        "t5_gemma_module",
        "muse_glimmer_assistant",
        "idefics",
        "esmc",
        "esm",
        "dia_encoder",
        "dia_decoder",
        "deepseek_ocr2_text",
        "csm_depth_decoder_model",
        "t5gemma2_decoder",
        "t5gemma2_text",
        "qwen3_omni_moe_talker_code_predictor",
        "lfm2_moe",
        "dots1",
        "sarvam_moe",
        "param2moe",
        "iquestcoder",
        "internlm3",
        "exaone",
        "dbrx",
        "diffllama",
        "gradium_phonon_tts",
        "jetmoe",
        "pocket_tts",
        "chameleon",
        "gpt_oss",
        "higgs_audio_v2",
        "glm4_moe",
        "granite",
        "granite4_vision_text",
        "granite_docling_text",
        "granitemoe",
        "granitemoeshared",
        "gte",
        "hrm_text",
        "hy_v3",
        "hyperclovax",
        "jais2",
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
        "minicpm5_moe",
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
        "nemotron",
        "nomic_bert",
        "olmo",
        "olmo2",
        "olmo3",
        "olmo_hybrid",
        "olmoe",
        "persimmon",
        "phi",
        "phi3",
        "phi4_multimodal",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "qwen3_next",
        "recurrent_gemma",
        "seed_oss",
        "solar_open",
        "stablelm",
        "starcoder2",
        "ultrabert",
        "unlimited_ocr_text",
        "vaultgemma",
    }
)
"""Model types with the common behaviour (``rotate_half``, first features)."""

EXCLUDED: dict[str, str] = {
    "blt": "composite BLT model (byte patcher + local encoder/decoder + global transformer); its RoPE attention is covered by blt_global_transformer / blt_local_d",
    "blt_local_encoder": "non-text sub-model (BltLocalEncoderConfig): vision/audio RoPE, out of scope",
    "blt_patcher": "non-text sub-model (BltPatcherConfig): vision/audio RoPE, out of scope",
    "clvp": "CLVP (TTS candidate ranker): speech-text contrastive encoders with their own non-interface attention; out of scope",
    "cohere_compass_vision": "non-text sub-model (CohereCompassVisionConfig): 2-D axial RoPE, out of scope",
    "deepseek_ocr2_encoder": "non-text sub-model (DeepseekOcr2VisionEncoderConfig): vision/audio RoPE, out of scope",
    "dinov3_vit": "vision-only ViT, 2-D (axial) patch RoPE",
    "dots3_note_audio_encoder": "non-text sub-model (Dots3NoteAudioConfig): vision/audio RoPE, out of scope",
    "dots3_note_vision_encoder": "non-text sub-model (Dots3NoteVisionConfig): 2-D axial RoPE, out of scope",
    "edgetam_video": "vision-only (video segmentation), 2-D axial RoPE",
    "efficientloftr": "vision-only (feature matching), 2-D RoPE over image grids",
    "eomt_dinov3": "vision-only (DINOv3 segmentation), 2-D patch RoPE",
    "ernie4_5_vl_moe_vision": "non-text sub-model (Ernie4_5_VLMoeVisionConfig): 2-D axial RoPE, out of scope",
    "llava_onevision1_5_vision": "non-text sub-model (LlavaOnevision15VisionConfig): 2-D axial RoPE, out of scope",
    "ovis2_5_vision": "non-text sub-model (Ovis2_5VisionConfig): 2-D axial RoPE, out of scope",
    "esmfold2": "protein structure predictor: RoPE only inside its folding trunk / pair stack; out of scope",
    "exaone4_5": "multimodal wrapper: vision tower has 2-D RoPE; its text decoder is model_type exaone4 (covered there)",
    "gemma4_vision": "non-text sub-model (Gemma4VisionConfig): 2-D axial RoPE, out of scope",
    "glm4v_moe_vision": "non-text sub-model (Glm4vMoeVisionConfig): 2-D axial RoPE, out of scope",
    "glm4v_vision": "non-text sub-model (Glm4vVisionConfig): 2-D axial RoPE, out of scope",
    "glm5_next": "multimodal: vision tower 2-D RoPE; the text decoder is DSA/MLA with qk_rope_head_dim 0 by class default (NoPE by design)",
    "glm_ocr_vision": "non-text sub-model (GlmOcrVisionConfig): 2-D axial RoPE, out of scope",
    "glmasr": "speech-only (ASR) encoder",
    "hyperclovax_vision_v2": "multimodal wrapper: vision tower 2-D RoPE; text decoder is model_type hyperclovax (covered there)",
    "inkling2": "multimodal: only the vision tower applies (2-D axial) RoPE; the text decoder has no rotary embedding",
    "kimi_k25": "multimodal wrapper: vision tower 2-D RoPE; text decoder is model_type deepseek_v3 (covered there)",
    "lasr_ctc": "speech-only (ASR) encoder",
    "lfm3_vl": "multimodal wrapper: vision tower 2-D RoPE; text decoder is model_type lfm3 (covered there)",
    "lightglue": "vision-only (keypoint matching), 2-D RoPE over keypoint coordinates",
    "llama4_vision_model": "non-text sub-model (Llama4VisionConfig): vision/audio RoPE, out of scope",
    "mimi": "audio codec (neural speech codec transformer)",
    "minimax_m3_vl_vision": "non-text sub-model (MiniMaxM3VLVisionConfig): 2-D axial RoPE, out of scope",
    "mlcd_vision_model": "vision-only (CLIP-like tower), 2-D RoPE",
    "moonshine": "speech recognition (ASR) encoder-decoder; RoPE in the audio encoder and the ASR decoder, no standalone text model",
    "moonshine_streaming": "speech recognition (streaming ASR) encoder-decoder",
    "muse_glimmer_vision": "non-text sub-model (MuseGlimmerVisionConfig): 2-D axial RoPE, out of scope",
    "muse_spark_vision": "non-text sub-model (MuseSparkVisionConfig): 2-D axial RoPE, out of scope",
    "musicflamingo": "audio-language model: the rotary is a time embedding over audio frames (apply_rotary_time_emb), not text RoPE",
    "nemo_speechlm": "speech-only (ASR) encoders",
    "nemotron3_diarization": "speech-only (diarization) encoder",
    "nemotron_asr_streaming": "speech-only (streaming ASR) encoder",
    "neucodec": "audio codec",
    "paddleocr_vl_vision": "non-text sub-model (PaddleOCRVisionConfig): 2-D axial RoPE, out of scope",
    "parakeet_tdt": "speech-only (ASR) encoder",
    "pe_audio": "audio encoder (Perception Encoder audio), no text attention",
    "pe_audio_video": "audio/video encoder, no text attention",
    "pe_video": "video encoder, no text attention",
    "pixtral": "vision-only tower (Pixtral), 2-D RoPE; its text decoder is model_type mistral",
    "pocket_tts_audio_tokenizer": "audio codec / tokenizer",
    "qwen2_5_omni_dit": "non-text sub-model (Qwen2_5OmniDiTConfig): vision/audio RoPE, out of scope",
    "qwen2_5_omni_vision_encoder": "non-text sub-model (Qwen2_5OmniVisionEncoderConfig): 2-D axial RoPE, out of scope",
    "qwen2_5_vl_vision": "non-text sub-model (Qwen2_5_VLVisionConfig): 2-D axial RoPE, out of scope",
    "qwen2_vl_vision": "non-text sub-model (Qwen2VLVisionConfig): 2-D axial RoPE, out of scope",
    "qwen3_5_moe_vision": "non-text sub-model (Qwen3_5MoeVisionConfig): 2-D axial RoPE, out of scope",
    "qwen3_5_vision": "non-text sub-model (Qwen3_5VisionConfig): 2-D axial RoPE, out of scope",
    "qwen3_omni_moe_vision_encoder": "non-text sub-model (Qwen3OmniMoeVisionEncoderConfig): 2-D axial RoPE, out of scope",
    "qwen3_vl_moe_vision": "non-text sub-model (Qwen3VLMoeVisionConfig): 2-D axial RoPE, out of scope",
    "qwen3_vl_vision": "non-text sub-model (Qwen3VLVisionConfig): 2-D axial RoPE, out of scope",
    "qwen4_exp_vision": "non-text sub-model (Qwen4ExpVisionConfig): 2-D axial RoPE, out of scope",
    "sam2_video": "vision-only (video segmentation), 2-D axial RoPE",
    "sam3": "vision-only (segmentation), 2-D axial RoPE",
    "sam3_tracker_video": "vision-only (video tracking), 2-D axial RoPE",
    "sapiens2": "vision-only (human-centric ViT), 2-D RoPE",
    "seamless_m4t": "speech conformer encoder's rotary (speech-only); text parts use sinusoidal absolute positions",
    "step3p5_vision": "non-text sub-model (Step3p7VisionConfig): 2-D axial RoPE, out of scope",
    "timesfm2_5": "time-series forecaster (TimesFM 2.5): RoPE over input patch positions of a numeric series, no text tokens; out of scope",
    "video_llama_3": "multimodal wrapper: vision tower 2-D RoPE; text decoder is model_type qwen2 (covered there)",
    "zamba": "hybrid Mamba model: its modeling code defines apply_rotary_pos_emb (a copied helper) and never calls it, so it has no RoPE",
    "llava_onevision1_5": "multimodal wrapper: vision tower 2-D RoPE; text decoder is model_type qwen3 (covered there)",
    "ovis2_5": "multimodal wrapper: vision tower 2-D RoPE; text decoder is model_type qwen3 (covered there)",
    "pi05": "vision-language-action policy: its PaliGemma text decoder and action expert are model_type gemma (covered there), joined by attention of its own",
    "vjepa2": "vision-only (video JEPA), 3-D RoPE over (t, h, w) patches",
    "voxtral_realtime_encoder": "non-text sub-model (VoxtralRealtimeEncoderConfig): vision/audio RoPE, out of scope",
    "wav2vec2-bert": "speech-only conformer encoder",
    "wav2vec2-conformer": "speech-only conformer encoder",
    "xcodec2": "audio codec",
}
"""Model types whose RoPE is out of scope by nature, with the reason."""

LEARNED: dict[str, str] = {
    "mistral_large4_text": "LeRoPE: its rotary module multiplies the frequencies by "
    "exp(alpha), alpha a learned [R/2] weight, and every layer scales q after RoPE by a "
    "learned per-head scale * log(position + 1) + bias; those are checkpoint weights "
    "(model.rotary_emb.alpha, self_attn.q_scale.*), not config. Build fp.RopeConfig "
    "with the YaRN block and apply them from the weights yourself",
}
"""Model types whose positions depend on learned weights, not only on the config."""
