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
from flax_posenc.learned import learned_embedding_lookup as learned_embedding_lookup
from flax_posenc.sinusoidal import sinusoidal_encoding as sinusoidal_encoding
from flax_posenc.sinusoidal import sinusoidal_inv_freq as sinusoidal_inv_freq
from flax_posenc.sinusoidal import sinusoidal_table as sinusoidal_table

__version__ = "0.1.0"

__all__ = [
    "learned_embedding_lookup",
    "sinusoidal_encoding",
    "sinusoidal_inv_freq",
    "sinusoidal_table",
    "testing",
]
