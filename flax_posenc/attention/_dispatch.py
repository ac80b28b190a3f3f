"""Attention of a checked spec by the implementation it names.

``"xla"`` is the reference: :func:`flax_posenc.attention._blockwise.online_softmax`,
plain ``jnp`` that every backend runs (and the tests' oracle). ``"pallas_tpu"`` is
the TPU flash kernel (:mod:`flax_posenc.attention._pallas_tpu`);
``"pallas_tpu_interpret"`` the same kernel run by Pallas's interpreter on any
backend, for tests on CPU. Both take the same prepared blocks, so masking, grouping
and positions mean the same in each. The ``"xla"`` kernel attends q and k rotated by
the spec's RoPE beforehand; the Pallas kernel rotates each tile itself.
"""

from __future__ import annotations

import functools
from typing import Any

import jax

from flax_posenc._core.eager import eager_compiled
from flax_posenc.attention import _blockwise, _pallas_tpu
from flax_posenc.attention._spec import Arrays, Bias, Options, Rotation, Spec, rotate


def attention(
    q: jax.Array, k: jax.Array, v: jax.Array, spec: Spec, precision: Any
) -> jax.Array:
    """Blockwise attention of a checked spec, ``[..., L, N, Hv]`` in q's dtype: q and
    k rotated by the spec's RoPE (by the Pallas kernels inside, tile by tile), then
    the implementation's kernel.

    An eager call runs one compiled program per static configuration; under a
    transformation the kernel is traced inline (:mod:`flax_posenc._core.eager`).
    """
    rotation = spec.rotation
    if spec.options.implementation == "xla" or rotation is None:
        q, k = rotate(q, k, spec)
        rotation = None
    bias_arrays, bias_static = _blockwise.split_bias(spec.bias)
    lengths = None if rotation is None else rotation[1:]
    config = None if rotation is None else rotation.config
    operands = (q, k, v, spec.arrays, bias_arrays, lengths)
    if eager_compiled(operands, bias_static):
        return _compiled(*operands, bias_static, spec.options, precision, config)
    return _run(q, k, v, spec.arrays, spec.bias, spec.options, precision, rotation)


@functools.partial(
    jax.jit, static_argnames=("bias_static", "options", "precision", "config")
)
def _compiled(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    arrays: Arrays,
    bias_arrays: list[Any],
    lengths: tuple[Any, Any] | None,
    bias_static: _blockwise.BiasStatic,
    options: Options,
    precision: Any,
    config: Any,
) -> jax.Array:
    bias = _blockwise.join_bias(bias_arrays, bias_static)
    rotation = None if lengths is None else Rotation(config, *lengths)
    return _run(q, k, v, arrays, bias, options, precision, rotation)


def _run(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    arrays: Arrays,
    bias: Bias | None,
    options: Options,
    precision: Any,
    rotation: Rotation | None,
) -> jax.Array:
    """The kernel; ``rotation`` only for a Pallas one (the ``"xla"`` path's q and
    k come rotated)."""
    blocks = _blockwise.prepare(q, k, v, arrays, options)
    if options.implementation == "xla":
        return _blockwise.online_softmax(blocks, bias, precision)
    interpret = options.implementation.endswith("_interpret")
    return _pallas_tpu.attention(
        blocks, bias, options.block_q, options.block_k, precision, interpret, rotation
    )
