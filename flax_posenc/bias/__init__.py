"""Attention biases computed from positions: ALiBi, T5's buckets, Kerple, FIRE, CoPE,
and the :class:`PositionBias` protocol the attention kernels call per tile.
"""

from __future__ import annotations

from flax_posenc.bias.alibi import AlibiBias, alibi_bias, alibi_slopes
from flax_posenc.bias.cope import cope_bias
from flax_posenc.bias.fire import FireBias, FireParams, fire_bias
from flax_posenc.bias.kerple import (
    KerpleBias,
    KerpleKernel,
    kerple_bias,
    kerple_parameters,
)
from flax_posenc.bias.position_bias import (
    KernelBias,
    PositionBias,
    PositionBiasCases,
    PositionBiasKernel,
)
from flax_posenc.bias.relative import (
    RelativeBias,
    relative_position_bias,
    relative_position_bucket,
)

__all__ = [
    "AlibiBias",
    "FireBias",
    "FireParams",
    "KernelBias",
    "KerpleBias",
    "KerpleKernel",
    "PositionBias",
    "PositionBiasCases",
    "PositionBiasKernel",
    "RelativeBias",
    "alibi_bias",
    "alibi_slopes",
    "cope_bias",
    "fire_bias",
    "kerple_bias",
    "kerple_parameters",
    "relative_position_bias",
    "relative_position_bucket",
]
