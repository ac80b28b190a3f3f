"""Both forms of every backend switch (``flax_posenc._core.cpu.on_cpu``), computed on CPU.

``jax.lax.platform_dependent`` picks a branch when a program is lowered. A program
lowered for CUDA holds only the reference forms, the ones every GPU and TPU runs, in
plain StableHLO that XLA:CPU compiles as well: ``run_branch(fn, *args,
branch="default")`` computes on CPU what an accelerator computes, and
``branch="cpu"`` what CPU users run. On an accelerator (``benchmarks/device_check.sh``)
``"default"`` runs there as it does for users, and ``"cpu"`` is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import pytest

BRANCHES = ["cpu", "default"]


def run_branch(
    fn: Callable, *args: Any, branch: str, vector_width: int | None = None
) -> Any:
    """``jax.jit(fn)(*args)`` with ``branch``'s forms, compiled for the default device.

    ``vector_width``: XLA:CPU's ``xla_cpu_prefer_vector_width`` (None: its own).
    """
    backend = jax.default_backend()
    if branch == "cpu":
        if backend != "cpu":
            pytest.skip("the CPU forms are compiled for CPU only")
        platform = "cpu"
    else:
        platform = "tpu" if backend == "tpu" else "cuda"
    options = {}
    if vector_width and backend == "cpu":
        options = {"xla_cpu_prefer_vector_width": vector_width}
    traced = jax.jit(fn).trace(*args)
    try:
        lowered = traced.lower(lowering_platforms=(platform,))
    except TypeError as error:  # pragma: no cover - an older jax
        pytest.skip(f"this jax cannot lower for another platform: {error}")
    return lowered.compile(options)(*args)
