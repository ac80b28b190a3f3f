"""The check that a Pallas kernel is lowered for the platform it is written for.

Pallas refuses a kernel lowered for another platform from deep inside it (a Triton
kernel lowered for ``tpu`` fails a bare ``assert``), and where it is lowered is known
only then: ``jit`` lowers for the device, ``jax.export`` for the platforms it is
given. :func:`on_platform` is an identity on the kernels' int32 block table whose
lowering, which comes before the kernels', compares the platforms being lowered for
with the kernel's and raises naming the implementation and what runs there. It
lowers to nothing.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

_ON_PLATFORM = Primitive("flax_posenc_pallas_platform")
# Where each compiled kernel runs (Pallas lowers Triton for CUDA and ROCm).
PLATFORMS = {"pallas_tpu": ("tpu",), "pallas_gpu": ("cuda", "rocm")}


def on_platform(table: jax.Array, implementation: str) -> jax.Array:
    """``table`` unchanged; lowering it for a platform where ``implementation``
    (``"pallas_tpu"`` or ``"pallas_gpu"``) does not run raises a ValueError."""
    return _bind(table, implementation, PLATFORMS[implementation])


def _bind(table: jax.Array, implementation: str, platforms: tuple[str, ...]) -> Any:
    return _ON_PLATFORM.bind(table, implementation=implementation, platforms=platforms)


def _lowering(
    ctx: Any, table: Any, *, implementation: str, platforms: tuple[str, ...]
) -> list:
    lowered = tuple(ctx.module_context.platforms)
    if any(platform not in platforms for platform in lowered):
        raise ValueError(
            f"`implementation` {implementation!r} runs on {' or '.join(platforms)}, "
            f"and this program is lowered for {', '.join(lowered)}. Hint: "
            "implementation='pallas_tpu' on TPU, 'pallas_gpu' on an NVIDIA GPU, "
            f"'{implementation}_interpret' on any backend (Pallas's interpreter, "
            "slow), or 'xla' everywhere."
        )
    return [table]


def _batched(args: tuple, dims: tuple, **params: Any) -> tuple:
    return _bind(*args, **params), dims[0]


# Run op by op (an eager ``grad``), it is lowered too, for the device it runs on.
_ON_PLATFORM.def_impl(jax.jit(_bind, static_argnames=("implementation", "platforms")))
_ON_PLATFORM.def_abstract_eval(lambda table, **_: table)
batching.primitive_batchers[_ON_PLATFORM] = _batched
mlir.register_lowering(_ON_PLATFORM, _lowering)
