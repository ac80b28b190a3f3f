"""Attention of a checked spec by the implementation it names.

``"xla"`` is the reference: :func:`flax_posenc.attention._blockwise.online_softmax`,
plain ``jnp`` that every backend runs (and the tests' oracle). ``"pallas_tpu"`` is
the TPU flash kernel (:mod:`flax_posenc.attention._pallas_tpu`), ``"pallas_gpu"`` the
GPU one (:mod:`flax_posenc.attention._pallas_gpu`); ``*_interpret`` runs a kernel in
Pallas's interpreter on any backend, for tests on CPU. All take the same prepared
blocks, so masking, grouping and positions mean the same in each. The Pallas
kernels rotate each q and k tile by the spec's RoPE themselves where one row of
float32 frequencies serves the call (and, on GPU, Triton loads the layout);
otherwise q and k are rotated beforehand, as for ``"xla"``.
"""

from __future__ import annotations

from typing import Any, cast

import jax

from flax_posenc._core.eager import jit_when_eager
from flax_posenc._core.pytree import Constants, join_arrays, split_arrays
from flax_posenc.attention import _blockwise, _pallas_flash, _pallas_gpu, _pallas_tpu
from flax_posenc.attention._spec import Arrays, Options, Rotation, Spec, rotate
from flax_posenc.rope.config import RopeConfig


def attention(
    q: jax.Array, k: jax.Array, v: jax.Array, spec: Spec, precision: Any
) -> jax.Array:
    """Blockwise attention of a checked spec, ``[..., L, N, Hv]`` in q's dtype: q and
    k rotated by the spec's RoPE (by the Pallas kernels inside, tile by tile), then
    the implementation's kernel.

    An eager call runs one compiled program per static configuration; under a
    transformation the kernel is traced inline (:mod:`flax_posenc._core.eager`).
    """
    q, k, rotation = rotated_unless_in_kernel(q, k, spec)
    bias_arrays, bias_static = split_arrays(spec.bias)
    lengths = None if rotation is None else rotation[1:]
    return _attend(
        q,
        k,
        v,
        spec.arrays,
        bias_arrays,
        lengths,
        bias_static=bias_static,
        options=spec.options,
        precision=precision,
        config=None if rotation is None else rotation.config,
    )


def rotated_unless_in_kernel(
    q: jax.Array, k: jax.Array, spec: Spec
) -> tuple[jax.Array, jax.Array, Rotation | None]:
    """q and k rotated by the spec's RoPE, and None; or, where the implementation's
    kernel rotates them itself, q and k as given and the rotation it applies."""
    rotation = spec.rotation
    if rotation is None or _in_kernel(spec.options.implementation, rotation):
        return q, k, rotation
    return (*rotate(q, k, spec), None)


def _in_kernel(implementation: str, rotation: Rotation) -> bool:
    """Whether the kernel rotates q and k itself: a Pallas kernel, for float32
    angles at one length per call (one row of frequencies), the GPU one in the
    layouts it loads (:func:`flax_posenc.attention._pallas_gpu.rotates_in_kernel`).
    Otherwise (exact angles, per-token lengths) they are rotated before it."""
    config = rotation.config
    per_token = any(getattr(n, "ndim", 0) for n in rotation[1:])
    if config.angle_precision != "float32" or (config.depends_on_seq_len and per_token):
        return False
    if implementation.startswith("pallas_gpu"):
        return _pallas_gpu.rotates_in_kernel(config)
    return implementation.startswith("pallas_tpu")


@jit_when_eager("bias_static", "options", "precision", "config")
def _attend(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    arrays: Arrays,
    bias_arrays: list[Any],
    lengths: tuple[Any, Any] | None,
    *,
    bias_static: Constants,
    options: Options,
    precision: Any,
    config: RopeConfig | None,
) -> jax.Array:
    """The kernel; RoPE's ``config`` and ``lengths`` where it rotates q and k itself
    (else they come rotated)."""
    bias = join_arrays(bias_arrays, bias_static)
    blocks = _blockwise.prepare(q, k, v, arrays, options)
    if options.implementation == "xla":
        return _blockwise.online_softmax(blocks, bias, precision)
    rotation = None if lengths is None else Rotation(cast(RopeConfig, config), *lengths)
    backend = backend_of(options.implementation)
    request = request_of(options, precision)
    return _pallas_flash.attention(backend, blocks, bias, request, rotation)


def backend_of(implementation: str) -> Any:
    """The module of a Pallas implementation's kernels."""
    return _pallas_gpu if implementation.startswith("pallas_gpu") else _pallas_tpu


def request_of(options: Options, precision: Any) -> _pallas_flash.Request:
    """What the options ask of a Pallas kernel."""
    interpret = options.implementation.endswith("_interpret")
    return _pallas_flash.Request(options.block_q, options.block_k, precision, interpret)
