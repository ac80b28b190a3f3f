"""RoPE: the configuration, the rotation, its scaling families, multi-axis RoPE, xPos,
key-cache shifts, context extension, query scaling and dual chunk attention's
position map.

``config`` is the bottom (what every other module reads), ``_core`` the unchecked
core, ``apply`` the checked functions; each other module is one concept.
"""

from __future__ import annotations

from flax_posenc.rope.apply import apply_rope as apply_rope
from flax_posenc.rope.apply import apply_rope_qk as apply_rope_qk
from flax_posenc.rope.apply import rope_cos_sin as rope_cos_sin
from flax_posenc.rope.apply import rope_frequencies as rope_frequencies
from flax_posenc.rope.apply import rope_permute_layout as rope_permute_layout
from flax_posenc.rope.apply import rope_rotate as rope_rotate
from flax_posenc.rope.cache_shift import rope_shift as rope_shift
from flax_posenc.rope.config import RopeConfig as RopeConfig
from flax_posenc.rope.config import RopeLayout as RopeLayout
from flax_posenc.rope.config import RopeTables as RopeTables
from flax_posenc.rope.context_extension import ExtensionMethod as ExtensionMethod
from flax_posenc.rope.context_extension import RopeWavelengths as RopeWavelengths
from flax_posenc.rope.context_extension import extend_context as extend_context
from flax_posenc.rope.context_extension import rope_wavelengths as rope_wavelengths
from flax_posenc.rope.dual_chunk import (
    DualChunkAttentionConfig as DualChunkAttentionConfig,
)
from flax_posenc.rope.dual_chunk import DualChunkPositions as DualChunkPositions
from flax_posenc.rope.dual_chunk import dual_chunk_positions as dual_chunk_positions
from flax_posenc.rope.nd import MropeLayout as MropeLayout
from flax_posenc.rope.nd import apply_axial_rope as apply_axial_rope
from flax_posenc.rope.nd import apply_mrope as apply_mrope
from flax_posenc.rope.nd import axial_rope_cos_sin as axial_rope_cos_sin
from flax_posenc.rope.nd import mrope_cos_sin as mrope_cos_sin
from flax_posenc.rope.query_scaling import QueryScaling as QueryScaling
from flax_posenc.rope.query_scaling import apply_query_scaling as apply_query_scaling
from flax_posenc.rope.query_scaling import query_scale as query_scale
from flax_posenc.rope.scaling import DynamicNTKScaling as DynamicNTKScaling
from flax_posenc.rope.scaling import LinearScaling as LinearScaling
from flax_posenc.rope.scaling import Llama3Scaling as Llama3Scaling
from flax_posenc.rope.scaling import LongRopeScaling as LongRopeScaling
from flax_posenc.rope.scaling import NTKScaling as NTKScaling
from flax_posenc.rope.scaling import ProportionalScaling as ProportionalScaling
from flax_posenc.rope.scaling import ResonanceScaling as ResonanceScaling
from flax_posenc.rope.scaling import RopeFrequencies as RopeFrequencies
from flax_posenc.rope.scaling import RopeScaling as RopeScaling
from flax_posenc.rope.scaling import RopeScalingFamily as RopeScalingFamily
from flax_posenc.rope.scaling import SeqLen as SeqLen
from flax_posenc.rope.scaling import YarnScaling as YarnScaling
from flax_posenc.rope.xpos import apply_xpos as apply_xpos
from flax_posenc.rope.xpos import xpos_cos_sin as xpos_cos_sin

__all__ = [
    "DualChunkAttentionConfig",
    "DualChunkPositions",
    "DynamicNTKScaling",
    "ExtensionMethod",
    "LinearScaling",
    "Llama3Scaling",
    "LongRopeScaling",
    "MropeLayout",
    "NTKScaling",
    "ProportionalScaling",
    "QueryScaling",
    "ResonanceScaling",
    "RopeConfig",
    "RopeFrequencies",
    "RopeLayout",
    "RopeScaling",
    "RopeScalingFamily",
    "RopeTables",
    "RopeWavelengths",
    "SeqLen",
    "YarnScaling",
    "apply_axial_rope",
    "apply_mrope",
    "apply_query_scaling",
    "apply_rope",
    "apply_rope_qk",
    "apply_xpos",
    "axial_rope_cos_sin",
    "dual_chunk_positions",
    "extend_context",
    "mrope_cos_sin",
    "query_scale",
    "rope_cos_sin",
    "rope_frequencies",
    "rope_permute_layout",
    "rope_rotate",
    "rope_shift",
    "rope_wavelengths",
    "xpos_cos_sin",
]
