"""transformers ``config.json`` -> flax_posenc: every model type with RoPE.

:func:`read_hf_rope` reads a config into one :class:`LayerRope` per decoder layer
(the RoPE configuration, M-RoPE sections, query scaling and softmax factor that
layer needs); :func:`rope_config_from_hf` is the short form for models whose rotary
layers share one :class:`~flax_posenc.RopeConfig`. :func:`hf_decode_seq_lens` gives
the per-token lengths with which transformers' ``generate`` rotates queries and
keys under dynamic NTK and LongRoPE.

The model table (``hf/_models.py``, ``hf/_defaults.py``) is read from transformers 5.25
and checked against each model type's own rotary module
(``tests/fixtures/hf_models.json``). A model type outside it, or out of scope by
nature, raises.
"""

from flax_posenc.hf._decode import hf_decode_seq_lens
from flax_posenc.hf._reader import HFRope, LayerRope, read_hf_rope, rope_config_from_hf

__all__ = [
    "HFRope",
    "LayerRope",
    "hf_decode_seq_lens",
    "read_hf_rope",
    "rope_config_from_hf",
]
