"""Attention of a checked spec by the implementation it names.

``"xla"`` is the reference: :func:`flax_posenc.attention._blockwise.online_softmax`,
plain ``jnp`` that every backend runs (and the tests' oracle). ``"pallas_tpu"`` is
the TPU flash kernel (:mod:`flax_posenc.attention._pallas_tpu`);
``"pallas_tpu_interpret"`` the same kernel run by Pallas's interpreter on any
backend, for tests on CPU. Both take the same prepared blocks, so masking, grouping
and positions mean the same in each.
"""

from __future__ import annotations

import functools
from typing import Any

import jax

from flax_posenc._core.eager import eager_compiled
from flax_posenc.attention import _blockwise, _pallas_tpu
from flax_posenc.attention._spec import Arrays, Bias, Options, Spec, rotate


def attention(
    q: jax.Array, k: jax.Array, v: jax.Array, spec: Spec, precision: Any
) -> jax.Array:
    """Blockwise attention of a checked spec, ``[..., L, N, Hv]`` in q's dtype: q and
    k rotated by the spec's RoPE, then the implementation's kernel.

    An eager call runs one compiled program per static configuration; under a
    transformation the kernel is traced inline (:mod:`flax_posenc._core.eager`).
    """
    q, k = rotate(q, k, spec)
    bias_arrays, bias_static = _blockwise.split_bias(spec.bias)
    operands = (q, k, v, spec.arrays, bias_arrays)
    if eager_compiled(operands, bias_static):
        return _compiled(*operands, bias_static, spec.options, precision)
    return _run(q, k, v, spec.arrays, spec.bias, spec.options, precision)


@functools.partial(jax.jit, static_argnames=("bias_static", "options", "precision"))
def _compiled(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    arrays: Arrays,
    bias_arrays: list[Any],
    bias_static: _blockwise.BiasStatic,
    options: Options,
    precision: Any,
) -> jax.Array:
    bias = _blockwise.join_bias(bias_arrays, bias_static)
    return _run(q, k, v, arrays, bias, options, precision)


def _run(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    arrays: Arrays,
    bias: Bias | None,
    options: Options,
    precision: Any,
) -> jax.Array:
    blocks = _blockwise.prepare(q, k, v, arrays, options)
    if options.implementation == "xla":
        return _blockwise.online_softmax(blocks, bias, precision)
    interpret = options.implementation.endswith("_interpret")
    return _pallas_tpu.attention(
        blocks, bias, options.block_q, options.block_k, precision, interpret
    )
