"""Ring attention on a Pallas kernel (``implementation="pallas_*"``).

The ring of :mod:`flax_posenc.attention._ring` (the same chunks, permutes and
skipped steps), with each step's tiles attended by the backend's flash kernels
(:mod:`flax_posenc.attention._pallas_tpu`, :mod:`flax_posenc.attention._pallas_gpu`)
instead of the ``jnp`` online softmax.

Forward: for each key/value chunk that arrives, the forward kernel gives the local
queries' normalised float32 output ``o_j`` and row log-sum-exp ``lse_j`` against it;
the running pair is merged with it::

    lse' = logaddexp(lse, lse_j)     o' = o exp(lse - lse') + o_j exp(lse_j - lse')

(a row with no key so far has ``lse = -inf`` and ``o = 0``). Backward (a
``custom_vjp``): flash attention's backward of a chunk needs only the final ``lse``
and ``D = d_out . out`` of the rows, so the transposed ring runs the ``dq`` and ``dk
dv`` kernels on each chunk, ``dq`` adding up in place and ``dk``/``dv`` travelling
with their chunk; the bias's scalars' gradient adds up on each device and reaches
the bias's arrays through ``kernel_form()`` outside. With RoPE the kernels rotate
each step's tiles (the frequency rows computed once, from the ring's global
``seq_len``), and ``dq``, ``dk`` come back unrotated.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from flax_posenc.attention import _pallas_flash as flash
from flax_posenc.attention import _ring
from flax_posenc.attention._blockwise import Bias, Blocks
from flax_posenc.attention._pallas_rope import KernelRope, RopeStatic, kernel_rope
from flax_posenc.attention._spec import Rotation
from flax_posenc.bias.position_bias import KernelBias


class RingStatic(NamedTuple):
    """What of a ring call is not an array (``custom_vjp``'s static argument)."""

    blocks: Blocks  # the static fields; its arrays are None (they are Operands)
    tile: Callable[..., jax.Array] | None  # KernelBias.tile, or no bias
    ring: _ring.Ring
    backend: Any  # the kernels' module
    request: flash.Request
    rope: RopeStatic | None  # with RoPE in the kernels (its rows are an operand)


# The arrays of a ring call are the "xla" ring's, with the kernels' float32 operands
# as its bias: KernelBias' head and shared scalars, then RoPE's rows if any.
Operands = _ring.Operands


def attention(
    blocks: Blocks,
    bias: Bias | None,
    ring: _ring.Ring,
    backend: Any,
    request: flash.Request,
    rotation: Rotation | None = None,
) -> jax.Array:
    """Ring attention of prepared local blocks on the backend's kernels, ``[...,
    L, N, Hv]`` in q's dtype; ``rotation``: RoPE the kernels apply (a length it
    depends on given: the ring's)."""
    if ring.size == 1:
        return flash.attention(backend, blocks, bias, request, rotation)
    form = flash.form_of(bias)
    none = jnp.zeros((1,), jnp.float32)
    scalars = [none, none] if form is None else [form.head_params, form.shared_params]
    rope = None if rotation is None else kernel_rope(rotation, blocks)
    if rope is not None:
        scalars.append(rope.rows)
    operands, template = _ring.split_blocks(blocks, scalars)
    tile = None if form is None else form.tile
    request = request._replace(float32_out=True)
    static = RingStatic(
        template, tile, ring, backend, request, None if rope is None else rope.static
    )
    return _differentiable(static, operands)


def _local(static: RingStatic, operands: Operands) -> Blocks:
    return _ring.join_blocks(static.blocks, operands)


def _kernel_step(static: RingStatic, operands: Operands, kv: tuple) -> tuple:
    """The kernels' static configuration and operands against the chunk ``kv``."""
    blocks = _ring.with_keys(_local(static, operands), kv)
    form = rope = None
    if static.tile is not None:
        form = KernelBias(operands.bias[0], operands.bias[1], static.tile)
    if static.rope is not None:
        rope = KernelRope(static.rope, operands.bias[2])
    return static.backend.prepare(blocks, form, static.request, rope)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _differentiable(static: RingStatic, operands: Operands) -> jax.Array:
    return _forward(static, operands)[0]


def _forward(static: RingStatic, operands: Operands) -> tuple[jax.Array, tuple]:
    """The output and the residuals: the operands, the kernels' float32 output
    ``[B, N, Lp, Hv']`` and the rows' log-sum-exp ``[B, N, Lp]`` (-inf: no key)."""
    blocks, kernels = _local(static, operands), static.backend.KERNELS

    def step(carry: tuple, kv: tuple) -> tuple:
        def update(carry: tuple) -> tuple:
            out, lse = carry
            kernel_static, kernel_operands = _kernel_step(static, operands, kv)
            out_j, lse_j = kernels.forward(kernel_static, kernel_operands, True)
            lse_j = kernels.rows(lse_j)
            lse_j = jnp.where(lse_j == jnp.inf, -jnp.inf, lse_j)  # +inf: no key
            merged = jnp.logaddexp(lse, lse_j)
            shift = jnp.where(merged == -jnp.inf, 0.0, merged)
            weight = lambda x: jnp.exp(x - shift)[..., None]
            return out * weight(lse) + out_j * weight(lse_j), merged

        return _ring.when_attended(_ring.with_keys(blocks, kv), update, carry)

    # the shapes of one step's output and log-sum-exp start the carry
    kv = _ring.chunk(blocks, jnp.int32(0), static.ring.kv_chunks)
    shapes = jax.eval_shape(
        lambda: kernels.forward(*_kernel_step(static, operands, kv), True)
    )
    out_shape, lse_shape = shapes[0].shape, shapes[0].shape[:-1]
    init = (jnp.zeros(out_shape, jnp.float32), jnp.full(lse_shape, -jnp.inf))
    out, lse = _ring.around_ring(static.ring, blocks, step, init)
    residuals = (operands, out, lse)
    return flash.from_head_major(blocks, out.astype(blocks.q.dtype)), residuals


def _backward(static: RingStatic, residuals: tuple, d_out: jax.Array) -> tuple:
    operands, out, lse = residuals
    blocks, kernels = _local(static, operands), static.backend.KERNELS
    d_rows = _to_head_major(blocks, d_out, out.shape)
    delta = jnp.sum(d_rows.astype(jnp.float32) * out, axis=-1)
    lse = jnp.where(lse == -jnp.inf, jnp.inf, lse)  # the kernels' "no key"
    rows = (d_rows, kernels.statistic(lse), kernels.statistic(delta))

    def grad_step(carry: tuple, kv: tuple) -> tuple:
        def run(carry: tuple) -> tuple:
            d_q, (d_k, d_v), (d_head, d_shared) = carry
            kernel_static, kernel_operands = _kernel_step(static, operands, kv)
            grads = flash.gradients(kernel_static, kernels, kernel_operands, *rows)
            g_q, g_k, g_v, g_head, g_shared = grads
            return (
                d_q + g_q,
                (
                    d_k + _keys_layout(g_k, d_k.shape),
                    d_v + _keys_layout(g_v, d_v.shape),
                ),
                (d_head + g_head.reshape(d_head.shape), d_shared + g_shared),
            )

        return _ring.when_attended(_ring.with_keys(blocks, kv), run, carry)

    kv = _ring.chunk(blocks, jnp.int32(0), static.ring.kv_chunks)
    q_shape = jax.eval_shape(lambda: _kernel_step(static, operands, kv)[1][4]).shape
    d_q = jnp.zeros(q_shape, jnp.float32)
    params = tuple(jnp.zeros_like(x) for x in operands.bias[:2])
    init = (
        d_q,
        jnp.zeros(blocks.k.shape, jnp.float32),
        jnp.zeros(blocks.v.shape, jnp.float32),
        params,
    )
    d_q, d_k, d_v, (d_head, d_shared) = _ring.transposed_ring(
        static.ring, blocks, grad_step, init
    )
    d_q = _q_layout(blocks, d_q)
    d_bias = [d_head, d_shared, *map(jnp.zeros_like, operands.bias[2:])]
    d_q, d_k, d_v = (
        d.astype(x.dtype) for d, x in zip((d_q, d_k, d_v), operands[:3], strict=True)
    )
    return (_ring.cotangents(operands, d_q, d_k, d_v, d_bias),)


_differentiable.defvjp(_forward, _backward)


def _to_head_major(blocks: Blocks, d_out: jax.Array, shape: tuple) -> jax.Array:
    """``d_out [..., L, N, Hv]`` as the kernels' ``[B, N, Lp, Hv']``, zero-padded
    (the kernels round it to q's dtype)."""
    batch, length, kv_heads, groups, _ = blocks.q.shape
    rows = d_out.reshape(batch, length, kv_heads * groups, -1)
    rows = jnp.moveaxis(rows, 1, 2)
    rows = flash.pad(rows, shape[2], axis=2)
    return flash.pad(rows, shape[3], axis=3)


def _q_layout(blocks: Blocks, d_q: jax.Array) -> jax.Array:
    """The kernels' float32 ``dq [B, N, Lp, H']`` as ``blocks.q``'s ``[B, L, K, G,
    H]``."""
    batch, length, kv_heads, groups, head_dim = blocks.q.shape
    d_q = jnp.moveaxis(d_q[:, :, :length, :head_dim], 1, 2)
    return d_q.reshape(batch, length, kv_heads, groups, head_dim)


def _keys_layout(d_kv: jax.Array, shape: tuple) -> jax.Array:
    """The kernels' float32 ``[B, K, Sp, H']`` as a chunk's ``[B, S, K, H]``."""
    return jnp.moveaxis(d_kv[:, :, : shape[1], : shape[3]], 1, 2)
