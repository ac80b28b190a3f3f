"""What the Pallas kernels share: their operands and their ``custom_vjp``.

Both kernels (TPU: :mod:`flax_posenc.attention._pallas_tpu`; GPU:
:mod:`flax_posenc.attention._pallas_gpu`) take the same operands, built here from
the prepared blocks:

    run, fetch        int32 [Bt, Q, Kb]  which tiles may attend; the k/v block a
                                         skipped step reads (the last that ran)
    head, shared      float32            the bias's scalars (KernelBias), flat
    q                 [B, N, Lp, H]      head-major, padded to the query blocks
    k, v              [B, K, Sp, H(v)]   padded to the key blocks
    then each backend's layout of the positions / segment-id rows (and RoPE's).

``Bt`` is ``B`` when any row is per sequence, else 1. Padded keys are masked in the
kernels; padded queries are dropped.

The gradient is flash attention's backward from the forward's row log-sum-exp: a
``dq`` kernel and a ``dk dv`` kernel (per query head, summed over each k/v head's
group here), which also returns the bias's scalars' gradient per key block, summed
here. Each backend supplies its three kernels and the layout of a row statistic
(:class:`Kernels`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc.attention._blockwise import Blocks
from flax_posenc.attention._pallas_platform import on_platform
from flax_posenc.attention._pallas_rope import RopeStatic, kernel_rope
from flax_posenc.attention._pallas_tiles import Static
from flax_posenc.bias.position_bias import KernelBias


class Kernels(NamedTuple):
    """A backend's kernels, each ``(static, operands, ...)``."""

    forward: Callable[..., Any]  # -> out [B, N, Lp, Hv] (, lse when residuals)
    dq: Callable[..., jax.Array]  # (d_out, lse, delta) -> float32 [B, N, Lp, H]
    dkv: Callable[..., tuple]  # -> dk, dv per q head; the bias's scalars' grads
    statistic: Callable[[jax.Array], jax.Array]  # [B, N, Lp] as the kernels read it
    rows: Callable[[jax.Array], jax.Array]  # a statistic back to [B, N, Lp]


class Request(NamedTuple):
    """What a caller asks of a backend's ``prepare``."""

    block_q: int
    block_k: int
    precision: Any
    interpret: bool
    float32_out: bool = False


def form_of(bias: Any) -> KernelBias | None:
    """A checked bias's kernel form (the spec checked that it has one)."""
    return None if bias is None else bias.kernel_form()


def static_of(
    blocks: Blocks,
    form: KernelBias | None,
    request: Request,
    rope: RopeStatic | None = None,
) -> Static:
    """What a kernel is compiled for, at the backend's block sizes (``request``'s,
    settled by the backend)."""
    rows = [blocks.q_positions, blocks.q_segment_ids]
    rows += [blocks.k_positions, blocks.k_segment_ids]
    return Static(
        scale=blocks.scale,
        causal=blocks.causal,
        positions=blocks.q_positions is not None,
        segments=blocks.q_segment_ids is not None,
        tile=None if form is None else form.tile,
        params_per_head=1 if form is None else form.head_params.shape[1],
        shared_params=1 if form is None else form.shared_params.shape[0],
        keys=blocks.k.shape[1],
        block_q=request.block_q,
        block_k=request.block_k,
        groups=blocks.q.shape[3],
        batch_rows=any(x is not None and x.shape[0] > 1 for x in rows),
        precision=request.precision,
        interpret=request.interpret,
        rope=rope,
        float32_out=request.float32_out,
    )


def operands(
    blocks: Blocks, form: KernelBias | None, static: Static, implementation: str
) -> tuple[tuple, list, list]:
    """The shared operands ``(run, fetch, head, shared, q, k, v)``, and q's and k's
    padded int32 rows ``[positions, segment ids]`` (None where absent), for the
    compiled kernels of ``implementation`` (``"pallas_tpu"`` or ``"pallas_gpu"``):
    lowered elsewhere, ``run`` raises (:mod:`flax_posenc.attention._pallas_platform`)."""
    batch, length, kv_heads, groups, head_dim = blocks.q.shape
    padded_q = round_up(length, static.block_q)
    padded_k = round_up(static.keys, static.block_k)
    q = blocks.q.reshape(batch, length, kv_heads * groups, head_dim)
    q = pad(jnp.moveaxis(q, 1, 2), padded_q, axis=2)
    k = pad(jnp.moveaxis(blocks.k, 1, 2), padded_k, axis=2)
    v = pad(jnp.moveaxis(blocks.v, 1, 2), padded_k, axis=2)
    q_rows = [blocks.q_positions, blocks.q_segment_ids]
    k_rows = [blocks.k_positions, blocks.k_segment_ids]
    q_rows = [
        None if x is None else rows_of(x, batch, static, padded_q) for x in q_rows
    ]
    k_rows = [
        None if x is None else rows_of(x, batch, static, padded_k) for x in k_rows
    ]
    run, fetch = _block_tables(q_rows, k_rows, static, padded_q, padded_k)
    if not static.interpret:
        run = on_platform(run, implementation)
    if form is None:
        head = shared = jnp.zeros((1,), jnp.float32)
    else:
        head = form.head_params.astype(jnp.float32).reshape(-1)
        shared = form.shared_params.astype(jnp.float32).reshape(-1)
    return (run, fetch, head, shared, q, k, v), q_rows, k_rows


def attention(
    backend: Any,
    blocks: Blocks,
    bias: Any,
    request: Request,
    rotation: Any = None,
) -> jax.Array:
    """A backend's (:mod:`flax_posenc.attention._pallas_tpu` or ``_gpu``)
    attention of prepared blocks, ``[..., L, N, Hv]`` in q's dtype
    (differentiable); ``rotation``: RoPE the kernels apply."""
    rope = None if rotation is None else kernel_rope(rotation, blocks)
    static, operands = backend.prepare(blocks, form_of(bias), request, rope)
    out = cast(jax.Array, _differentiable(static, backend.KERNELS, *operands))
    return from_head_major(blocks, out)


def from_head_major(blocks: Blocks, out: jax.Array) -> jax.Array:
    """The kernels' ``[B, N, Lp, Hv']`` (padded) as the caller's ``[..., L, N,
    Hv]``."""
    _, length, kv_heads, groups, _ = blocks.q.shape
    out = out[:, :, :length, : blocks.v.shape[-1]]  # [B, N, L, Hv]
    out = jnp.moveaxis(out, 1, 2)
    return out.reshape(*blocks.batch_shape, length, kv_heads * groups, -1)


def round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def pad(x: jax.Array, size: int, axis: int) -> jax.Array:
    """``x`` zero-padded to ``size`` along ``axis``."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, widths)


def rows_of(x: jax.Array, batch: int, static: Static, size: int) -> jax.Array:
    """int32 ``[B or 1, size]`` rows, padded with 0 (``[B]`` when any input has
    a row per sequence, so that one index map serves all)."""
    if static.batch_rows:
        x = jnp.broadcast_to(x, (batch, x.shape[1]))
    return pad(x.astype(jnp.int32), size, axis=1)


def row(static: Static) -> Callable[[Any], Any]:
    """The row of positions / segment ids / tables for sequence ``b``."""
    return (lambda b: b) if static.batch_rows else (lambda b: 0)


def _block_tables(
    q_rows: list, k_rows: list, static: Static, padded_q: int, padded_k: int
) -> tuple[jax.Array, jax.Array]:
    """int32 ``run [Bt, Q, Kb]`` (1 where some pair of the tile may attend) and
    ``fetch [Bt, Q, Kb]`` (the k/v block a step reads: its own where it runs,
    else the last that ran, so a skipped step fetches nothing new)."""
    num_q, num_k = padded_q // static.block_q, padded_k // static.block_k
    bt = max([x.shape[0] for x in q_rows + k_rows if x is not None], default=1)
    run = jnp.ones((bt, num_q, num_k), bool)
    real = jnp.arange(padded_k) < static.keys  # padded keys never count
    block = lambda x, n, b: x.reshape(x.shape[0], n, b)
    if static.causal:
        q_max = block(q_rows[0], num_q, static.block_q).max(-1)
        k_pos = jnp.where(real, k_rows[0], jnp.iinfo(jnp.int32).max)
        k_min = block(k_pos, num_k, static.block_k).min(-1)
        run = run & (k_min[:, None, :] <= q_max[:, :, None])
    if static.segments:
        qs, ks = block(q_rows[1], num_q, static.block_q), k_rows[1]
        k_low = block(
            jnp.where(real, ks, jnp.iinfo(jnp.int32).max), num_k, static.block_k
        )
        k_high = block(
            jnp.where(real, ks, jnp.iinfo(jnp.int32).min), num_k, static.block_k
        )
        low, high = k_low.min(-1)[:, None, :], k_high.max(-1)[:, None, :]
        run = run & (low <= qs.max(-1)[:, :, None]) & (qs.min(-1)[:, :, None] <= high)
    return run.astype(jnp.int32), last_run(run)


def last_run(run: jax.Array) -> jax.Array:
    """int32: along the last axis, the index of the last step that runs so far (0
    before the first): the block a skipped step reads, so it fetches nothing new."""
    index = jnp.arange(run.shape[-1], dtype=jnp.int32)
    last = jax.lax.cummax(jnp.where(run != 0, index, -1), axis=run.ndim - 1)
    return jnp.maximum(last, 0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _differentiable(
    static: Static, kernels: Kernels, *operands: jax.Array
) -> jax.Array:
    return kernels.forward(static, operands, residuals=False)


def _forward_fwd(static: Static, kernels: Kernels, *operands: jax.Array):
    out, lse = kernels.forward(static, operands, residuals=True)
    return out, (operands, out, lse)


def _forward_bwd(
    static: Static, kernels: Kernels, residuals: tuple, d_out: jax.Array
) -> tuple:
    """Cotangents of every operand: float0 for the integer tables and rows, zero
    for RoPE's frequency rows (functions of the config, not of a parameter)."""
    operands, out, lse = residuals
    q, k, v = operands[4:7]
    delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)
    grads = gradients(static, kernels, operands, d_out, lse, kernels.statistic(delta))
    d_q, d_k, d_v, d_head_params, d_shared_params = grads
    float0 = lambda x: np.zeros(x.shape, jax.dtypes.float0)
    return (
        float0(operands[0]),
        float0(operands[1]),
        d_head_params,
        d_shared_params,
        d_q.astype(q.dtype),
        d_k.astype(k.dtype),
        d_v.astype(v.dtype),
        *(
            float0(x) if x.dtype == jnp.int32 else jnp.zeros_like(x)
            for x in operands[7:]
        ),
    )


_differentiable.defvjp(_forward_fwd, _forward_bwd)


def gradients(
    static: Static,
    kernels: Kernels,
    operands: tuple,
    d_out: jax.Array,
    lse: jax.Array,
    delta: jax.Array,
) -> tuple[jax.Array, ...]:
    """The backward kernels' float32 ``dq [B, N, Lp, H]``, ``dk``, ``dv [B, K,
    Sp, H]`` (summed over each k/v head's group) and the flat gradients of the
    bias's head and shared scalars, from the rows' ``lse`` and ``delta = d_out .
    out`` in the kernels' layout."""
    q, k = operands[4], operands[5]
    d_out = d_out.astype(q.dtype)
    d_q = kernels.dq(static, operands, d_out, lse, delta)
    d_k, d_v, d_head, d_shared = kernels.dkv(static, operands, d_out, lse, delta)
    batch, kv_heads = q.shape[0], k.shape[1]
    group_sum = lambda x: x.reshape(batch, kv_heads, static.groups, *x.shape[2:]).sum(2)
    d_head_params = d_shared_params = jnp.zeros_like(operands[2])
    if static.tile is not None:
        per_head = d_head.sum((0, 2))[:, 0, : static.params_per_head]
        d_head_params = per_head.reshape(-1)
        d_shared_params = d_shared.sum((0, 1, 2))[0, : static.shared_params]
    return d_q, group_sum(d_k), group_sum(d_v), d_head_params, d_shared_params
