"""The private core: validation, angles (float32 and exact), sin/cos, the CPU forms,
compiled-when-eager kernels, pytree, gather, offsets and deprecation helpers. Nothing
here is public; every other part of the package builds on it.
"""
