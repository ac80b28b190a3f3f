"""The 0.1.0 path of :mod:`flax_posenc.rope.query_scaling`, deprecated (removed in 0.3.0).

A name read here comes from there with a deprecation warning; the flat
``flax_posenc`` namespace has every name.
"""

from flax_posenc._core.deprecation import moved_module

__getattr__, __all__ = moved_module(__name__, "flax_posenc.rope.query_scaling")
