"""Attention biases computed from positions: ALiBi, T5's buckets, Kerple, FIRE, CoPE,
and the :class:`PositionBias` protocol the attention kernels call per tile.
"""

from __future__ import annotations

from flax_posenc.bias.alibi import AlibiBias as AlibiBias
from flax_posenc.bias.alibi import alibi_bias as alibi_bias
from flax_posenc.bias.alibi import alibi_slopes as alibi_slopes
from flax_posenc.bias.cope import cope_bias as cope_bias
from flax_posenc.bias.fire import FireBias as FireBias
from flax_posenc.bias.fire import FireParams as FireParams
from flax_posenc.bias.fire import fire_bias as fire_bias
from flax_posenc.bias.kerple import KerpleBias as KerpleBias
from flax_posenc.bias.kerple import KerpleKernel as KerpleKernel
from flax_posenc.bias.kerple import kerple_bias as kerple_bias
from flax_posenc.bias.kerple import kerple_parameters as kerple_parameters
from flax_posenc.bias.position_bias import KernelBias as KernelBias
from flax_posenc.bias.position_bias import PositionBias as PositionBias
from flax_posenc.bias.position_bias import PositionBiasCases as PositionBiasCases
from flax_posenc.bias.position_bias import (
    PositionBiasKernel as PositionBiasKernel,
)
from flax_posenc.bias.relative import RelativeBias as RelativeBias
from flax_posenc.bias.relative import relative_position_bias as relative_position_bias
from flax_posenc.bias.relative import (
    relative_position_bucket as relative_position_bucket,
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
