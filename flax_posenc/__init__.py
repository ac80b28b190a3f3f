"""flax_posenc: positional encodings for JAX / Flax transformers.

Pure functions of static sizes and (possibly traced) integer positions, with thin
``flax.linen`` and ``flax.nnx`` modules in :mod:`flax_posenc.linen` and
:mod:`flax_posenc.nnx`, and property assertions in :mod:`flax_posenc.testing`.

Shape legend, used in every docstring:

* ``B`` batch, ``L`` query length, ``S`` key length, ``N`` heads, ``H`` head dim,
  ``D`` model dim.
* q/k are ``[..., L, N, H]``; positions are integer ``[..., L]``.

Angles are formed in float32 (``angle_precision="exact"`` reduces them mod 2 pi exactly
instead, for long contexts); outputs keep the input dtype.

Glossary (``docs/glossary.md`` has the table, with transformers' names):

* "interleaved": RoPE's ``layout="interleaved"`` rotates pairs ``(2j, 2j + 1)``
  (``"half"``: ``(j, j + R/2)``); the sinusoidal ``layout="interleaved"`` alternates
  sin and cos features; M-RoPE's ``mrope_layout="interleaved"`` takes pair ``j``
  from position row ``j % 3`` (Qwen3-VL).
* "scaling": a RoPE scaling family (``RopeConfig.scaling``) changes the
  frequencies; its attention factor scales cos and sin; :class:`QueryScaling`
  scales queries by position; ``LayerRope.softmax_scale_factor`` scales the
  softmax.
"""

from typing import TYPE_CHECKING

from flax_posenc._exact_angles import AnglePrecision as AnglePrecision
from flax_posenc.alibi import AlibiBias as AlibiBias
from flax_posenc.alibi import alibi_bias as alibi_bias
from flax_posenc.alibi import alibi_slopes as alibi_slopes
from flax_posenc.attention import attention_fn_override as attention_fn_override
from flax_posenc.attention import blockwise_attention_fn as blockwise_attention_fn
from flax_posenc.attention import positional_attention_fn as positional_attention_fn
from flax_posenc.blockwise import blockwise_attention as blockwise_attention
from flax_posenc.cache_shift import rope_shift as rope_shift
from flax_posenc.context_extension import ExtensionMethod as ExtensionMethod
from flax_posenc.context_extension import RopeWavelengths as RopeWavelengths
from flax_posenc.context_extension import extend_context as extend_context
from flax_posenc.context_extension import rope_wavelengths as rope_wavelengths
from flax_posenc.context_parallel import (
    inverse_load_balanced_permutation as inverse_load_balanced_permutation,
)
from flax_posenc.context_parallel import (
    load_balanced_permutation as load_balanced_permutation,
)
from flax_posenc.context_parallel import ring_attention as ring_attention
from flax_posenc.context_parallel import ring_attention_fn as ring_attention_fn
from flax_posenc.context_parallel import (
    sharded_kv_cache_attention as sharded_kv_cache_attention,
)
from flax_posenc.context_parallel import (
    sharded_ring_attention as sharded_ring_attention,
)
from flax_posenc.cope import cope_bias as cope_bias
from flax_posenc.dual_chunk import DualChunkAttentionConfig as DualChunkAttentionConfig
from flax_posenc.dual_chunk import DualChunkPositions as DualChunkPositions
from flax_posenc.dual_chunk import dual_chunk_attention as dual_chunk_attention
from flax_posenc.dual_chunk import dual_chunk_positions as dual_chunk_positions
from flax_posenc.fire import FireBias as FireBias
from flax_posenc.fire import FireParams as FireParams
from flax_posenc.fire import fire_bias as fire_bias
from flax_posenc.kerple import KerpleBias as KerpleBias
from flax_posenc.kerple import KerpleKernel as KerpleKernel
from flax_posenc.kerple import kerple_bias as kerple_bias
from flax_posenc.kerple import kerple_parameters as kerple_parameters
from flax_posenc.learned import OutOfRange as OutOfRange
from flax_posenc.learned import learned_embedding_lookup as learned_embedding_lookup
from flax_posenc.position_bias import PositionBias as PositionBias
from flax_posenc.position_bias import PositionBiasCases as PositionBiasCases
from flax_posenc.positions import grid_positions as grid_positions
from flax_posenc.positions import pose_positions as pose_positions
from flax_posenc.positions import positions_from_offsets as positions_from_offsets
from flax_posenc.positions import (
    positions_from_padding_mask as positions_from_padding_mask,
)
from flax_posenc.positions import (
    positions_from_segment_ids as positions_from_segment_ids,
)
from flax_posenc.positions import randomized_positions as randomized_positions
from flax_posenc.positions import relative_positions as relative_positions
from flax_posenc.query_scaling import QueryScaling as QueryScaling
from flax_posenc.query_scaling import apply_query_scaling as apply_query_scaling
from flax_posenc.query_scaling import query_scale as query_scale
from flax_posenc.relative import RelativeBias as RelativeBias
from flax_posenc.relative import relative_position_bias as relative_position_bias
from flax_posenc.relative import relative_position_bucket as relative_position_bucket
from flax_posenc.rope import RopeConfig as RopeConfig
from flax_posenc.rope import RopeLayout as RopeLayout
from flax_posenc.rope import RopeTables as RopeTables
from flax_posenc.rope import apply_rope as apply_rope
from flax_posenc.rope import apply_rope_qk as apply_rope_qk
from flax_posenc.rope import rope_cos_sin as rope_cos_sin
from flax_posenc.rope import rope_frequencies as rope_frequencies
from flax_posenc.rope import rope_permute_layout as rope_permute_layout
from flax_posenc.rope import rope_rotate as rope_rotate
from flax_posenc.rope_nd import MropeLayout as MropeLayout
from flax_posenc.rope_nd import apply_axial_rope as apply_axial_rope
from flax_posenc.rope_nd import apply_mrope as apply_mrope
from flax_posenc.rope_nd import axial_rope_cos_sin as axial_rope_cos_sin
from flax_posenc.rope_nd import mrope_cos_sin as mrope_cos_sin
from flax_posenc.rope_scaling import DynamicNTKScaling as DynamicNTKScaling
from flax_posenc.rope_scaling import LinearScaling as LinearScaling
from flax_posenc.rope_scaling import Llama3Scaling as Llama3Scaling
from flax_posenc.rope_scaling import LongRopeScaling as LongRopeScaling
from flax_posenc.rope_scaling import NTKScaling as NTKScaling
from flax_posenc.rope_scaling import ProportionalScaling as ProportionalScaling
from flax_posenc.rope_scaling import ResonanceScaling as ResonanceScaling
from flax_posenc.rope_scaling import RopeFrequencies as RopeFrequencies
from flax_posenc.rope_scaling import RopeScaling as RopeScaling
from flax_posenc.rope_scaling import RopeScalingFamily as RopeScalingFamily
from flax_posenc.rope_scaling import SeqLen as SeqLen
from flax_posenc.rope_scaling import YarnScaling as YarnScaling
from flax_posenc.self_extend import self_extend_attention as self_extend_attention
from flax_posenc.sinusoidal import SinusoidalLayout as SinusoidalLayout
from flax_posenc.sinusoidal import SinusoidalSpacing as SinusoidalSpacing
from flax_posenc.sinusoidal import sinusoidal_encoding as sinusoidal_encoding
from flax_posenc.sinusoidal import sinusoidal_inv_freq as sinusoidal_inv_freq
from flax_posenc.sinusoidal import sinusoidal_table as sinusoidal_table
from flax_posenc.xpos import apply_xpos as apply_xpos
from flax_posenc.xpos import xpos_cos_sin as xpos_cos_sin

if TYPE_CHECKING:  # loaded on first use (below): they need chex and the HF table
    from flax_posenc import testing as testing
    from flax_posenc.hf import HFRope as HFRope
    from flax_posenc.hf import LayerRope as LayerRope
    from flax_posenc.hf import hf_decode_seq_lens as hf_decode_seq_lens
    from flax_posenc.hf import read_hf_rope as read_hf_rope
    from flax_posenc.hf import rope_config_from_hf as rope_config_from_hf

__version__ = "0.1.0"

_LAZY = {
    "testing": ("flax_posenc", "testing"),
    "HFRope": ("flax_posenc.hf", "HFRope"),
    "LayerRope": ("flax_posenc.hf", "LayerRope"),
    "hf_decode_seq_lens": ("flax_posenc.hf", "hf_decode_seq_lens"),
    "read_hf_rope": ("flax_posenc.hf", "read_hf_rope"),
    "rope_config_from_hf": ("flax_posenc.hf", "rope_config_from_hf"),
}


def __getattr__(name: str):
    """Loads the assertions (chex) and the Hugging Face reader on first use, so that
    ``import flax_posenc`` costs JAX alone."""
    if name not in _LAZY:
        raise AttributeError(f"module 'flax_posenc' has no attribute {name!r}")
    import importlib

    module, attribute = _LAZY[name]
    value = (
        importlib.import_module(f"{module}.{attribute}")
        if module == "flax_posenc"
        else getattr(importlib.import_module(module), attribute)
    )
    globals()[name] = value
    return value


__all__ = [
    "AlibiBias",
    "AnglePrecision",
    "DualChunkAttentionConfig",
    "DualChunkPositions",
    "DynamicNTKScaling",
    "ExtensionMethod",
    "FireBias",
    "FireParams",
    "HFRope",
    "KerpleBias",
    "KerpleKernel",
    "LayerRope",
    "LinearScaling",
    "Llama3Scaling",
    "LongRopeScaling",
    "MropeLayout",
    "NTKScaling",
    "OutOfRange",
    "PositionBias",
    "PositionBiasCases",
    "ProportionalScaling",
    "QueryScaling",
    "RelativeBias",
    "ResonanceScaling",
    "RopeConfig",
    "RopeFrequencies",
    "RopeLayout",
    "RopeScaling",
    "RopeScalingFamily",
    "RopeTables",
    "RopeWavelengths",
    "SeqLen",
    "SinusoidalLayout",
    "SinusoidalSpacing",
    "YarnScaling",
    "alibi_bias",
    "alibi_slopes",
    "apply_axial_rope",
    "apply_mrope",
    "apply_query_scaling",
    "apply_rope",
    "apply_rope_qk",
    "apply_xpos",
    "attention_fn_override",
    "axial_rope_cos_sin",
    "blockwise_attention",
    "blockwise_attention_fn",
    "cope_bias",
    "dual_chunk_attention",
    "dual_chunk_positions",
    "extend_context",
    "fire_bias",
    "grid_positions",
    "hf_decode_seq_lens",
    "inverse_load_balanced_permutation",
    "kerple_bias",
    "kerple_parameters",
    "learned_embedding_lookup",
    "load_balanced_permutation",
    "mrope_cos_sin",
    "pose_positions",
    "positional_attention_fn",
    "positions_from_offsets",
    "positions_from_padding_mask",
    "positions_from_segment_ids",
    "query_scale",
    "randomized_positions",
    "read_hf_rope",
    "relative_position_bias",
    "relative_position_bucket",
    "relative_positions",
    "ring_attention",
    "ring_attention_fn",
    "rope_config_from_hf",
    "rope_cos_sin",
    "rope_frequencies",
    "rope_permute_layout",
    "rope_rotate",
    "rope_shift",
    "rope_wavelengths",
    "self_extend_attention",
    "sharded_kv_cache_attention",
    "sharded_ring_attention",
    "sinusoidal_encoding",
    "sinusoidal_inv_freq",
    "sinusoidal_table",
    "testing",
    "xpos_cos_sin",
]
