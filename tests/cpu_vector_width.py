"""XLA:CPU's preferred vector width, for tests that compile at more than one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import pytest

# XLA's default (256 bits), and the 512 bits the CPU guide recommends on AVX-512.
VECTOR_WIDTHS = [None, 512]
# For a test parametrised over the widths: 512 bits only with the `slow` tests.
VECTOR_WIDTH_PARAMS = [None, pytest.param(512, marks=pytest.mark.slow)]


def run_at_width(fn: Callable, *args: Any, vector_width: int | None = None) -> Any:
    """``fn(*args)``, compiled with ``xla_cpu_prefer_vector_width`` (None: XLA's)."""
    options = {"xla_cpu_prefer_vector_width": vector_width} if vector_width else {}
    return jax.jit(fn).lower(*args).compile(options)(*args)
