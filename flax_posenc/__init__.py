"""flax_posenc: positional encodings for JAX / Flax transformers.

Pure functions of static sizes and (possibly traced) integer positions, with thin
``flax.linen`` and ``flax.nnx`` modules in :mod:`flax_posenc.linen` and
:mod:`flax_posenc.nnx`, and property assertions in :mod:`flax_posenc.testing`.

Shape legend, used in every docstring:

* ``B`` batch, ``L`` query length, ``S`` key length, ``N`` heads, ``H`` head dim,
  ``D`` model dim.
* q/k are ``[..., L, N, H]``; positions are integer ``[..., L]``.

Angles are always formed in float32; outputs keep the input dtype.
"""

from flax_posenc import testing as testing
from flax_posenc.alibi import alibi_bias as alibi_bias
from flax_posenc.alibi import alibi_slopes as alibi_slopes
from flax_posenc.learned import learned_embedding_lookup as learned_embedding_lookup
from flax_posenc.positions import positions_from_offsets as positions_from_offsets
from flax_posenc.positions import (
    positions_from_padding_mask as positions_from_padding_mask,
)
from flax_posenc.positions import (
    positions_from_segment_ids as positions_from_segment_ids,
)
from flax_posenc.positions import relative_positions as relative_positions
from flax_posenc.relative import relative_position_bias as relative_position_bias
from flax_posenc.relative import relative_position_bucket as relative_position_bucket
from flax_posenc.sinusoidal import sinusoidal_encoding as sinusoidal_encoding
from flax_posenc.sinusoidal import sinusoidal_inv_freq as sinusoidal_inv_freq
from flax_posenc.sinusoidal import sinusoidal_table as sinusoidal_table

__version__ = "0.1.0"

__all__ = [
    "alibi_bias",
    "alibi_slopes",
    "learned_embedding_lookup",
    "positions_from_offsets",
    "positions_from_padding_mask",
    "positions_from_segment_ids",
    "relative_position_bias",
    "relative_position_bucket",
    "relative_positions",
    "sinusoidal_encoding",
    "sinusoidal_inv_freq",
    "sinusoidal_table",
    "testing",
]
