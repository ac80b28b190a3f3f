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


COMMON = Model()
INTERLEAVED = Model(layout="interleaved")
MLA = Model(head_dim="qk_rope_head_dim", interleave_key=True, softmax_mscale=True)

MODELS: dict[str, Model] = {
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
    "qwen2_5_vl_text": Model(mrope="contiguous", block_keys=frozenset({"mrope_section"})),
    "qwen2_vl_text": Model(mrope="contiguous", block_keys=frozenset({"mrope_section"})),
    "qwen3_vl_text": Model(mrope="interleaved", block_keys=frozenset({"mrope_section", "mrope_interleaved"})),
    "qwen3_vl_moe_text": Model(mrope="interleaved", block_keys=frozenset({"mrope_section", "mrope_interleaved"})),
    "smollm3": Model(nope="no_rope_layers"),
}
"""Model types whose RoPE differs from the common behaviour."""

COMMON_TYPES: frozenset[str] = frozenset(
    {
        "apertus",
        "arcee",
        "bitnet",
        "cwm",
        "diffllama",
        "doge",
        "dots1",
        "emu3",
        "falcon_h1",
        "flex_olmo",
        "gemma",
        "gemma2",
        "glm4_moe",
        "gpt_oss",
        "granite",
        "granitemoe",
        "granitemoeshared",
        "helium",
        "jetmoe",
        "lfm2",
        "llama",
        "minimax",
        "ministral",
        "mistral",
        "mixtral",
        "olmo",
        "olmo2",
        "olmo3",
        "olmoe",
        "persimmon",
        "phi",
        "phi3",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "qwen3_next",
        "seed_oss",
        "stablelm",
        "starcoder2",
        "zamba2",
    }
)
"""Model types with the common behaviour (``rotate_half``, first features)."""

EXCLUDED: dict[str, str] = {}
"""Model types whose RoPE is out of scope by nature, with the reason."""
