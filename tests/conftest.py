"""Test set-up: 8 host CPU devices and strict rank promotion, before JAX starts."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
from hypothesis import settings

jax.config.update("jax_numpy_rank_promotion", "raise")

# Compilation makes the first example slow; keep runs reproducible and bounded.
settings.register_profile("default", deadline=None, max_examples=25, derandomize=True)
settings.load_profile("default")
