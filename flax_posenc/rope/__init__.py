"""RoPE: the configuration, the rotation, its scaling families, multi-axis RoPE, xPos,
key-cache shifts, context extension, query scaling and dual chunk attention's
position map.

``config`` is the bottom (what every other module reads), ``_core`` the unchecked
core, ``apply`` the checked functions; each other module is one concept.
"""

from __future__ import annotations

from flax_posenc.rope.apply import (
    apply_rope,
    apply_rope_qk,
    rope_cos_sin,
    rope_frequencies,
    rope_permute_layout,
    rope_rotate,
)
from flax_posenc.rope.cache_shift import rope_shift
from flax_posenc.rope.config import RopeConfig, RopeLayout, RopeTables
from flax_posenc.rope.context_extension import (
    ExtensionMethod,
    RopeWavelengths,
    extend_context,
    rope_wavelengths,
)
from flax_posenc.rope.dual_chunk import (
    DualChunkAttentionConfig,
    DualChunkPositions,
    dual_chunk_positions,
)
from flax_posenc.rope.nd import (
    MropeLayout,
    apply_axial_rope,
    apply_mrope,
    axial_rope_cos_sin,
    mrope_cos_sin,
)
from flax_posenc.rope.query_scaling import (
    QueryScaling,
    apply_query_scaling,
    query_scale,
)
from flax_posenc.rope.scaling import (
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    NTKScaling,
    ProportionalScaling,
    ResonanceScaling,
    RopeFrequencies,
    RopeScaling,
    RopeScalingFamily,
    SeqLen,
    YarnScaling,
)
from flax_posenc.rope.xpos import apply_xpos, xpos_cos_sin

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
