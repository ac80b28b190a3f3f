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

from flax_posenc import attention, bias, rope
from flax_posenc._core.exact_angles import AnglePrecision
from flax_posenc.attention import *  # noqa: F403  (its __all__, added below)
from flax_posenc.bias import *  # noqa: F403
from flax_posenc.learned import OutOfRange, learned_embedding_lookup
from flax_posenc.positions import (
    grid_positions,
    inverse_load_balanced_permutation,
    load_balanced_permutation,
    pose_positions,
    positions_from_offsets,
    positions_from_padding_mask,
    positions_from_segment_ids,
    randomized_positions,
    relative_positions,
)
from flax_posenc.rope import *  # noqa: F403
from flax_posenc.sinusoidal import (
    SinusoidalLayout,
    SinusoidalSpacing,
    sinusoidal_encoding,
    sinusoidal_inv_freq,
    sinusoidal_table,
)

if TYPE_CHECKING:  # loaded on first use (below): they need chex and the HF table
    from flax_posenc import testing
    from flax_posenc.hf import (
        HFRope,
        LayerRope,
        hf_decode_seq_lens,
        read_hf_rope,
        rope_config_from_hf,
    )

__version__ = "0.2.0"

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
    "AnglePrecision",
    "HFRope",
    "LayerRope",
    "OutOfRange",
    "SinusoidalLayout",
    "SinusoidalSpacing",
    "grid_positions",
    "hf_decode_seq_lens",
    "inverse_load_balanced_permutation",
    "learned_embedding_lookup",
    "load_balanced_permutation",
    "pose_positions",
    "positions_from_offsets",
    "positions_from_padding_mask",
    "positions_from_segment_ids",
    "randomized_positions",
    "read_hf_rope",
    "relative_positions",
    "rope_config_from_hf",
    "sinusoidal_encoding",
    "sinusoidal_inv_freq",
    "sinusoidal_table",
    "testing",
]
# Each subpackage's names, listed once, in its own __init__:
__all__ += rope.__all__
__all__ += bias.__all__
__all__ += attention.__all__
