"""The Pallas TPU kernel of blockwise attention: flash attention whose position bias
is computed per tile inside the kernel (``implementation="pallas_tpu"``).

Grid ``(B, N, Q, Kb)``: step ``(b, h, i, j)`` attends head ``h``'s query block ``i``
(``[block_q, H]``) to key/value block ``j`` of its k/v head ``h // G`` (grouped-query
attention through the index map, no repeated heads). In the step, every value of
the ``[block_q, block_k]`` tile is formed in fast memory: the logits by one matmul,
the bias by the bias's :class:`flax_posenc.KernelBias` from the tile's positions and
the head's scalars (held in scalar memory), the masks (causal from the positions,
segment ids, keys past ``S``), and the online softmax's float32 statistics in VMEM
scratch (lane-broadcast ``[block_q, 128]``, as TPU layouts want). No ``[N, L, S]``
array exists anywhere.

A step whose tile is wholly masked (causal: every key later than every query;
segment-id ranges that do not meet) does no work, and its k/v index map repeats the
block of the last step that ran, so its keys are not fetched: a table ``run[b, i,
j]`` and ``fetch[b, i, j]`` computed from per-block position and segment bounds is
prefetched into scalar memory (splash attention's block-sparse idea, from
positions).

Lengths are padded to the blocks (``block_q`` a multiple of 8, ``block_k`` of 128,
TPU's tiling); padded keys are masked, padded queries dropped. The kernel has no
backward pass yet: its gradient raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from flax_posenc.attention._blockwise import Blocks
from flax_posenc.bias.position_bias import KernelBias

LANES = 128  # a TPU vector register's lanes: block_k's unit
SUBLANES = 8  # its sublanes: block_q's unit


class _Static(NamedTuple):
    """What the kernel is compiled for."""

    scale: float
    causal: bool
    positions: bool  # q/k positions are inputs
    segments: bool  # q/k segment ids are inputs
    tile: Callable[..., jax.Array] | None  # KernelBias.tile, or no bias
    params_per_head: int  # P of KernelBias.head_params
    keys: int  # S before padding (keys from S on are masked)
    block_q: int
    block_k: int
    groups: int  # G = N // K
    batch_rows: bool  # positions / segment ids per sequence (else shared)
    precision: Any  # of the two matmuls
    interpret: bool


def attention(
    blocks: Blocks,
    bias: Any,
    block_q: int,
    block_k: int,
    precision: Any,
    interpret: bool,
) -> jax.Array:
    """The kernel's attention of prepared blocks, ``[..., L, N, Hv]`` in q's dtype.

    ``bias`` has a ``kernel_form()`` (or is None); ``block_q`` is a multiple of 8
    and ``block_k`` of 128 (checked with the spec)."""
    form = None if bias is None else bias.kernel_form()
    _, length, kv_heads, groups, _ = blocks.q.shape
    keys = blocks.k.shape[1]
    block_q = min(block_q, _round_up(length, SUBLANES))
    block_k = min(block_k, _round_up(keys, LANES))
    rows = [blocks.q_positions, blocks.q_segment_ids, blocks.k_positions]
    batch_rows = any(x is not None and x.shape[0] > 1 for x in rows)
    static = _Static(
        scale=blocks.scale,
        causal=blocks.causal,
        positions=blocks.q_positions is not None,
        segments=blocks.q_segment_ids is not None,
        tile=None if form is None else form.tile,
        params_per_head=1 if form is None else form.head_params.shape[1],
        keys=keys,
        block_q=block_q,
        block_k=block_k,
        groups=groups,
        batch_rows=batch_rows,
        precision=precision,
        interpret=interpret,
    )
    out = _forward(static, *_operands(blocks, form, static))
    out = out[:, :, :length]  # [B, N, L, Hv]
    out = jnp.moveaxis(out, 1, 2)
    return out.reshape(*blocks.batch_shape, length, kv_heads * groups, -1)


def _operands(blocks: Blocks, form: KernelBias | None, static: _Static) -> tuple:
    """The kernel's inputs: the run / fetch tables and the bias's scalars (scalar
    prefetch), q ``[B, N, Lp, H]``, k and v ``[B, K, Sp, H]``, then lane-broadcast
    positions and segment ids where the kernel reads them."""
    batch, length, kv_heads, groups, head_dim = blocks.q.shape
    padded_q = _round_up(length, static.block_q)
    padded_k = _round_up(static.keys, static.block_k)
    q = blocks.q.reshape(batch, length, kv_heads * groups, head_dim)
    q = _pad(jnp.moveaxis(q, 1, 2), padded_q, axis=2)
    k = _pad(jnp.moveaxis(blocks.k, 1, 2), padded_k, axis=2)
    v = _pad(jnp.moveaxis(blocks.v, 1, 2), padded_k, axis=2)
    q_rows = [blocks.q_positions, blocks.q_segment_ids]
    k_rows = [blocks.k_positions, blocks.k_segment_ids]
    q_rows = [
        None if x is None else _rows_of(x, batch, static, padded_q) for x in q_rows
    ]
    k_rows = [
        None if x is None else _rows_of(x, batch, static, padded_k) for x in k_rows
    ]
    run, fetch = _block_tables(q_rows, k_rows, static, padded_q, padded_k)
    if form is None:
        head_params = shared = jnp.zeros((1,), jnp.float32)
    else:
        head_params = form.head_params.astype(jnp.float32).reshape(-1)
        shared = form.shared_params.astype(jnp.float32).reshape(-1)
    lanes = [
        jnp.broadcast_to(x[:, :, None], (*x.shape, LANES))
        for x in q_rows
        if x is not None
    ]
    sublanes = [
        jnp.broadcast_to(x[:, None, :], (x.shape[0], SUBLANES, x.shape[1]))
        for x in k_rows
        if x is not None
    ]
    # The kernel reads q's then k's rows: positions, then segment ids.
    tiles = [lanes[0], sublanes[0]] if static.positions else []
    if static.segments:
        tiles += [lanes[-1], sublanes[-1]]
    return run, fetch, head_params, shared, q, k, v, *tiles


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def _pad(x: jax.Array, size: int, axis: int) -> jax.Array:
    """``x`` zero-padded to ``size`` along ``axis``."""
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, pad)


def _rows_of(x: jax.Array, batch: int, static: _Static, size: int) -> jax.Array:
    """int32 ``[B or 1, size]`` rows, padded with 0 (``[B]`` when any input has
    a row per sequence, so that one index map serves all)."""
    if static.batch_rows:
        x = jnp.broadcast_to(x, (batch, x.shape[1]))
    return _pad(x.astype(jnp.int32), size, axis=1)


def _block_tables(
    q_rows: list, k_rows: list, static: _Static, padded_q: int, padded_k: int
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
    index = jnp.arange(num_k, dtype=jnp.int32)
    last = jax.lax.cummax(jnp.where(run, index, -1), axis=2)
    return run.astype(jnp.int32), jnp.maximum(last, 0)


def _forward(static: _Static, *operands: jax.Array) -> jax.Array:
    """The kernel's output ``[B, N, Lp, Hv]``; its gradient raises."""
    return _differentiable(static, *operands)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _differentiable(static: _Static, *operands: jax.Array) -> jax.Array:
    return _call(static, *operands)


def _forward_fwd(static: _Static, *operands: jax.Array):
    return _call(static, *operands), None


def _forward_bwd(static: _Static, residuals: None, d_out: jax.Array):
    raise NotImplementedError(
        "implementation='pallas_tpu' has no backward pass yet: its gradient is not "
        "computed. Hint: differentiate with implementation='xla' (the same values)."
    )


_differentiable.defvjp(_forward_fwd, _forward_bwd)


def _call(static: _Static, *operands: jax.Array) -> jax.Array:
    """The ``pallas_call`` over the grid ``(B, N, Q, Kb)``."""
    q, k = operands[4], operands[5]
    batch, heads, padded_q, head_dim = q.shape
    padded_k, value_dim = k.shape[2], operands[6].shape[3]
    bq, bk, groups = static.block_q, static.block_k, static.groups
    row = (lambda b: b) if static.batch_rows else (lambda b: 0)

    def kv_map(b, h, i, j, run, fetch, *_):
        return b, jax.lax.div(h, groups), fetch[row(b), i, j], 0

    in_specs = [
        pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i, j, *_: (b, h, i, 0)),
        pl.BlockSpec((None, None, bk, head_dim), kv_map),
        pl.BlockSpec((None, None, bk, value_dim), kv_map),
    ]
    q_tile = pl.BlockSpec((None, bq, LANES), lambda b, h, i, j, *_: (row(b), i, 0))
    k_tile = pl.BlockSpec(
        (None, SUBLANES, bk),
        lambda b, h, i, j, run, fetch, *_: (row(b), 0, fetch[row(b), i, j]),
    )
    in_specs += [q_tile, k_tile] * (static.positions + static.segments)
    grid = (batch, heads, padded_q // bq, padded_k // bk)
    return pl.pallas_call(
        functools.partial(_kernel, static),
        out_shape=jax.ShapeDtypeStruct((batch, heads, padded_q, value_dim), q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=grid,
            in_specs=in_specs,
            out_specs=pl.BlockSpec(
                (None, None, bq, value_dim), lambda b, h, i, j, *_: (b, h, i, 0)
            ),
            scratch_shapes=[
                pltpu.VMEM((bq, LANES), jnp.float32),
                pltpu.VMEM((bq, LANES), jnp.float32),
                pltpu.VMEM((bq, value_dim), jnp.float32),
            ],
        ),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")
        ),
        interpret=pltpu.InterpretParams() if static.interpret else False,
        name="flax_posenc_flash_attention",
    )(*operands)


def _kernel(static: _Static, run_ref, fetch_ref, head_ref, shared_ref, *refs) -> None:
    """One grid step ``(b, h, i, j)``: the online softmax's update by tile
    ``(i, j)`` of head ``h``, the output written after the last key block."""
    q_ref, k_ref, v_ref = refs[:3]
    o_ref, m_ref, l_ref, acc_ref = refs[-4:]
    b, h, i, j = (pl.program_id(axis) for axis in range(4))
    bt = b if static.batch_rows else 0

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, -jnp.inf, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    @pl.when(run_ref[bt, i, j] != 0)
    def _step():
        logits = _tile_logits(
            static, refs[3:-4], head_ref, shared_ref, h, j, q_ref, k_ref
        )
        _softmax_step(logits, v_ref[...], m_ref, l_ref, acc_ref, static.precision)

    @pl.when(j == pl.num_programs(3) - 1)
    def _write():
        total = l_ref[...][:, :1]
        out = acc_ref[...] / jnp.where(total == 0.0, 1.0, total)
        o_ref[...] = out.astype(o_ref.dtype)


def _tile_logits(static, tile_refs, head_ref, shared_ref, h, j, q_ref, k_ref):
    """The tile's final logits, float32 ``[block_q, block_k]``: scaled ``q . k``
    plus the bias, -inf where masked."""
    logits = jax.lax.dot_general(
        q_ref[...], k_ref[...], (((1,), (1,)), ((), ())),
        precision=static.precision, preferred_element_type=jnp.float32,
    )  # fmt: skip
    logits = logits * jnp.float32(static.scale)
    shape = logits.shape
    keep = None
    if static.keys % static.block_k:  # keys past S are padding
        column = j * static.block_k + jax.lax.broadcasted_iota(jnp.int32, shape, 1)
        keep = column < static.keys
    pairs = [
        _pair_tiles(tile_refs[2 * n], tile_refs[2 * n + 1], shape)
        for n in range(len(tile_refs) // 2)
    ]
    if static.causal:
        q_pos, k_pos = pairs[0]
        keep = _and(keep, k_pos <= q_pos)
    if static.segments:
        q_seg, k_seg = pairs[-1]
        keep = _and(keep, q_seg == k_seg)
    if static.tile is not None:
        per_head = static.params_per_head
        head = lambda index: head_ref[h * per_head + index]
        shared = lambda index: shared_ref[index]
        logits = logits + static.tile(head, shared, *pairs[0])
    if keep is not None:
        logits = jnp.where(keep, logits, -jnp.inf)
    return logits


def _pair_tiles(q_ref, k_ref, shape: tuple[int, int]) -> tuple[jax.Array, jax.Array]:
    """int32 ``[block_q, block_k]`` tiles of every pair's query and key value, from
    the lane-broadcast ``[block_q, 128]`` and sublane-broadcast ``[8, block_k]``
    blocks."""
    q_values = jnp.tile(q_ref[...], (1, shape[1] // LANES))
    k_values = jnp.broadcast_to(k_ref[...][:1, :], shape)
    return q_values, k_values


def _and(keep: jax.Array | None, term: jax.Array) -> jax.Array:
    return term if keep is None else keep & term


def _softmax_step(logits, v, m_ref, l_ref, acc_ref, precision) -> None:
    """The statistics in scratch updated with one tile's final logits."""
    row_max = m_ref[...][:, :1]
    new_max = jnp.maximum(row_max, logits.max(axis=-1, keepdims=True))
    # A row masked so far has max -inf: subtract 0 instead (exp(-inf) = 0).
    shift = jnp.where(new_max == -jnp.inf, 0.0, new_max)
    probs = jnp.exp(logits - shift)
    correction = jnp.exp(row_max - shift)
    total = l_ref[...][:, :1] * correction + probs.sum(axis=-1, keepdims=True)
    weighted = jax.lax.dot_general(
        probs.astype(v.dtype), v, (((1,), (0,)), ((), ())),
        precision=precision, preferred_element_type=jnp.float32,
    )  # fmt: skip
    acc_ref[...] = acc_ref[...] * correction + weighted
    m_ref[...] = jnp.broadcast_to(new_max, m_ref.shape)
    l_ref[...] = jnp.broadcast_to(total, l_ref.shape)
