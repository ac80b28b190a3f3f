"""Moved to :mod:`flax_posenc.attention.context_parallel`; importing from this path is deprecated and stops working
in flax_posenc 0.3.0 (the names stay in the flat ``flax_posenc`` namespace)."""

from flax_posenc._core.deprecation import moved_module

__getattr__, __all__ = moved_module(__name__, "flax_posenc.attention.context_parallel")
