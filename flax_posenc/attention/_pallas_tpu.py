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
TPU's tiling); padded keys are masked, padded queries dropped.

The gradient (a ``custom_vjp``) is flash attention's backward in two more kernels,
from the forward's row log-sum-exp: one over ``(B, N, Q, Kb)`` accumulates ``dq``,
one over ``(B, N, Kb, Q)`` accumulates ``dk``, ``dv`` (per query head, summed over
the group after) and the bias's scalars' gradient, the bias's own VJP on each tile
(for T5 buckets, the sum of ``ds`` over each bucket's pairs). The tile math of all
three is :mod:`flax_posenc.attention._pallas_tiles`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from flax_posenc.attention import _pallas_rope
from flax_posenc.attention import _pallas_tiles as tiles
from flax_posenc.attention._blockwise import Blocks
from flax_posenc.attention._pallas_rope import ROWS as ROPE_ROWS
from flax_posenc.attention._pallas_rope import RopeStatic
from flax_posenc.attention._pallas_tiles import LANES, SUBLANES, Static
from flax_posenc.attention._spec import Rotation
from flax_posenc.bias.position_bias import KernelBias


def attention(
    blocks: Blocks,
    bias: Any,
    block_q: int,
    block_k: int,
    precision: Any,
    interpret: bool,
    rotation: Rotation | None = None,
) -> jax.Array:
    """The kernel's attention of prepared blocks, ``[..., L, N, Hv]`` in q's dtype.

    ``bias`` has a ``kernel_form()`` (or is None); ``block_q`` is a multiple of 8
    and ``block_k`` of 128 (checked with the spec). ``rotation``: RoPE applied to
    the q and k tiles in the kernel (unrotated q and k in ``blocks``)."""
    form = None if bias is None else bias.kernel_form()
    _, length, kv_heads, groups, _ = blocks.q.shape
    keys = blocks.k.shape[1]
    block_q = min(block_q, _round_up(length, SUBLANES))
    block_k = min(block_k, _round_up(keys, LANES))
    rows = [blocks.q_positions, blocks.q_segment_ids]
    rows += [blocks.k_positions, blocks.k_segment_ids]
    batch_rows = any(x is not None and x.shape[0] > 1 for x in rows)
    static = Static(
        scale=blocks.scale,
        causal=blocks.causal,
        positions=blocks.q_positions is not None,
        segments=blocks.q_segment_ids is not None,
        tile=None if form is None else form.tile,
        params_per_head=1 if form is None else form.head_params.shape[1],
        shared_params=1 if form is None else form.shared_params.shape[0],
        keys=keys,
        block_q=block_q,
        block_k=block_k,
        groups=groups,
        batch_rows=batch_rows,
        precision=precision,
        interpret=interpret,
        rope=None if rotation is None else _rope_static(rotation.config),
    )
    operands = _operands(blocks, form, static)
    if rotation is not None:
        operands += _rope_operands(blocks, rotation, static)
    out = _forward(static, *operands)
    out = out[:, :, :length]  # [B, N, L, Hv]
    out = jnp.moveaxis(out, 1, 2)
    return out.reshape(*blocks.batch_shape, length, kv_heads * groups, -1)


def _operands(blocks: Blocks, form: KernelBias | None, static: Static) -> tuple:
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


def _rope_static(config: Any) -> RopeStatic:
    return RopeStatic(config.layout, config.rotated_features, config.head_dim)


def _rope_operands(blocks: Blocks, rotation: Rotation, static: Static) -> tuple:
    """RoPE's per-lane rows ``[8, H]`` and k's positions lane-broadcast ``[Bt, Sp,
    128]`` (q's are the first tile operand)."""
    q_pos, k_pos = blocks.q_positions, blocks.k_positions
    assert q_pos is not None and k_pos is not None  # checked: RoPE needs positions
    config, seq_len, k_seq_len = rotation
    rows = _pallas_rope.rows(config, seq_len, k_seq_len, q_pos, k_pos)
    padded_k = _round_up(static.keys, static.block_k)
    k_rows = _rows_of(k_pos, blocks.q.shape[0], static, padded_k)
    return rows, jnp.broadcast_to(k_rows[:, :, None], (*k_rows.shape, LANES))


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def _pad(x: jax.Array, size: int, axis: int) -> jax.Array:
    """``x`` zero-padded to ``size`` along ``axis``."""
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, pad)


def _rows_of(x: jax.Array, batch: int, static: Static, size: int) -> jax.Array:
    """int32 ``[B or 1, size]`` rows, padded with 0 (``[B]`` when any input has
    a row per sequence, so that one index map serves all)."""
    if static.batch_rows:
        x = jnp.broadcast_to(x, (batch, x.shape[1]))
    return _pad(x.astype(jnp.int32), size, axis=1)


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
    return run.astype(jnp.int32), _last_run(run)


def _last_run(run: jax.Array) -> jax.Array:
    """int32: along the last axis, the index of the last step that runs so far (0
    before the first): the block a skipped step reads, so it fetches nothing new."""
    index = jnp.arange(run.shape[-1], dtype=jnp.int32)
    last = jax.lax.cummax(jnp.where(run != 0, index, -1), axis=run.ndim - 1)
    return jnp.maximum(last, 0)


def _forward(static: Static, *operands: jax.Array) -> jax.Array:
    """The kernel's output ``[B, N, Lp, Hv]``, differentiable."""
    return _differentiable(static, *operands)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _differentiable(static: Static, *operands: jax.Array) -> jax.Array:
    return _call_forward(static, operands, residuals=False)


def _forward_fwd(static: Static, *operands: jax.Array):
    out, lse = _call_forward(static, operands, residuals=True)
    return out, (operands, out, lse)


def _forward_bwd(static: Static, residuals: tuple, d_out: jax.Array) -> tuple:
    """Cotangents of every operand: float0 for the integer tables and tiles."""
    operands, out, lse = residuals
    q, k = operands[4], operands[5]
    batch = q.shape[0]
    d_out = d_out.astype(q.dtype)
    delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)
    delta = jnp.broadcast_to(delta[..., None], (*delta.shape, LANES))
    d_q = _call_dq(static, operands, d_out, lse, delta)
    d_k, d_v, d_head, d_shared = _call_dkv(static, operands, d_out, lse, delta)
    kv_heads = k.shape[1]
    group_sum = lambda x: x.reshape(batch, kv_heads, static.groups, *x.shape[2:]).sum(2)
    d_head_params = d_shared_params = jnp.zeros_like(operands[2])
    if static.tile is not None:
        per_head = d_head.sum((0, 2))[:, 0, : static.params_per_head]
        d_head_params = per_head.reshape(-1)
        d_shared_params = d_shared.sum((0, 1, 2))[0, : static.shared_params]
    float0 = lambda x: np.zeros(x.shape, jax.dtypes.float0)
    return (
        float0(operands[0]),
        float0(operands[1]),
        d_head_params,
        d_shared_params,
        d_q.astype(q.dtype),
        group_sum(d_k).astype(k.dtype),
        group_sum(d_v).astype(operands[6].dtype),
        *(
            float0(x) if x.dtype == jnp.int32 else jnp.zeros_like(x)
            for x in operands[7:]
        ),
    )


_differentiable.defvjp(_forward_fwd, _forward_bwd)


def _row(static: Static) -> Callable[[Any], Any]:
    """The row of positions / segment ids / tables for sequence ``b``."""
    return (lambda b: b) if static.batch_rows else (lambda b: 0)


def _specs(static: Static, q: jax.Array, v: jax.Array, order: str) -> dict:
    """The block specs of the q side (q-like arrays, their lanes and the q
    tiles) and the k side (k, v, the k tiles), for a grid ``(B, N, q block, k
    block)`` (``order="qk"``: a skipped step's k block is ``fetch``'s) or ``(B, N,
    k block, q block)`` (``"kq"``: a skipped step's q block is ``fetch``'s)."""
    row, groups = _row(static), static.groups
    bq, bk = static.block_q, static.block_k

    def blocks(b, x, y, fetch):
        if order == "qk":
            return x, fetch[row(b), x, y]
        return fetch[row(b), x, y], x

    def q_side(width):
        return pl.BlockSpec(
            (None, None, bq, width),
            lambda b, h, x, y, run, fetch, *_: (b, h, blocks(b, x, y, fetch)[0], 0),
        )

    def kv_side(width):
        return pl.BlockSpec(
            (None, None, bk, width),
            lambda b, h, x, y, run, fetch, *_: (
                b, jax.lax.div(h, groups), blocks(b, x, y, fetch)[1], 0
            ),
        )  # fmt: skip

    q_tile = pl.BlockSpec(
        (None, bq, LANES),
        lambda b, h, x, y, run, fetch, *_: (row(b), blocks(b, x, y, fetch)[0], 0),
    )
    k_tile = pl.BlockSpec(
        (None, SUBLANES, bk),
        lambda b, h, x, y, run, fetch, *_: (row(b), 0, blocks(b, x, y, fetch)[1]),
    )
    k_lanes = pl.BlockSpec(
        (None, bk, LANES),
        lambda b, h, x, y, run, fetch, *_: (row(b), blocks(b, x, y, fetch)[1], 0),
    )
    head_dim, value_dim = q.shape[-1], v.shape[-1]
    rope_rows = pl.BlockSpec((ROPE_ROWS, head_dim), lambda *_: (0, 0))
    return {
        "q": q_side(head_dim),
        "d_out": q_side(value_dim),
        "lanes": q_side(LANES),
        "k": kv_side(head_dim),
        "v": kv_side(value_dim),
        "tiles": [q_tile, k_tile] * (static.positions + static.segments)
        + ([rope_rows, k_lanes] if static.rope else []),
    }


def _split(static: Static, refs: tuple, inputs: int) -> tuple:
    """A kernel's refs after the scalar prefetch: its ``inputs`` arrays, the
    position / segment tiles, RoPE's rows and k lanes, and the rest (outputs,
    scratch)."""
    count = 2 * (static.positions + static.segments)
    rope = 2 * (static.rope is not None)
    ends = (inputs, inputs + count, inputs + count + rope)
    return (
        refs[: ends[0]],
        refs[ends[0] : ends[1]],
        refs[ends[1] : ends[2]],
        refs[ends[2] :],
    )


def _rotated(static: Static, x: Any, positions: Any, rope_refs: tuple, side: str):
    """``x`` (a block's value) rotated by the kernel's RoPE, in its dtype (as the
    ``"xla"`` path rounds the rotated q and k once)."""
    if static.rope is None:
        return x
    rows_ref = rope_refs[0]
    out = _pallas_rope.rotate(static.rope, x, positions, rows_ref, side)
    return out.astype(x.dtype)


def _rotated_back(
    static: Static, d_x: Any, positions: Any, rope_refs: tuple, side: str
):
    """A float32 gradient of a rotated block carried back to the unrotated one."""
    if static.rope is None:
        return d_x
    rows_ref = rope_refs[0]
    return _pallas_rope.rotate(
        static.rope, d_x, positions, rows_ref, side, inverse=True
    )


def _pallas(static: Static, kernel, grid, in_specs, out_specs, out_shape, scratch):
    """``pl.pallas_call`` with the four scalar-prefetch operands and the last grid
    axis the one that accumulates."""
    return pl.pallas_call(
        functools.partial(kernel, static),
        out_shape=out_shape,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=grid,
            in_specs=in_specs,
            out_specs=out_specs,
            scratch_shapes=scratch,
        ),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")
        ),
        interpret=pltpu.InterpretParams() if static.interpret else False,
        name="flax_posenc_flash_attention",
    )


def _call_forward(static: Static, operands: tuple, residuals: bool) -> Any:
    """The forward kernel: ``out [B, N, Lp, Hv]``, with the rows' log-sum-exp
    ``[B, N, Lp, 128]`` (lane-broadcast) when ``residuals``."""
    q, k, v = operands[4:7]
    batch, heads, padded_q, _ = q.shape
    specs = _specs(static, q, v, "qk")
    grid = (batch, heads, padded_q // static.block_q, k.shape[2] // static.block_k)
    out_shape = [jax.ShapeDtypeStruct((batch, heads, padded_q, v.shape[-1]), q.dtype)]
    out_specs = [specs["d_out"]]
    if residuals:
        out_shape.append(
            jax.ShapeDtypeStruct((batch, heads, padded_q, LANES), jnp.float32)
        )
        out_specs.append(specs["lanes"])
    scratch = [
        pltpu.VMEM((static.block_q, LANES), jnp.float32),
        pltpu.VMEM((static.block_q, LANES), jnp.float32),
        pltpu.VMEM((static.block_q, v.shape[-1]), jnp.float32),
        *_kept_scratch(static, static.block_q, q),
    ]
    in_specs = [specs["q"], specs["k"], specs["v"], *specs["tiles"]]
    call = _pallas(
        static, _forward_kernel, grid, in_specs, out_specs, out_shape, scratch
    )
    outs = call(*operands)
    return (outs[0], outs[1]) if residuals else outs[0]


def _kept_scratch(static: Static, rows: int, x: jax.Array) -> list:
    """With RoPE, VMEM for the rotated block a kernel keeps across its steps (the
    block its grid's last axis does not change): the last scratch buffer."""
    return [] if static.rope is None else [pltpu.VMEM((rows, x.shape[-1]), x.dtype)]


def _scratch(static: Static, rest: tuple, count: int) -> tuple[tuple, tuple, Any]:
    """A kernel's outputs, its ``count`` scratch buffers, and the kept rotated
    block's buffer (None without RoPE)."""
    kept = static.rope is not None
    scratch = rest[len(rest) - count - kept :]
    return (
        rest[: len(rest) - count - kept],
        scratch[:count],
        scratch[-1] if kept else None,
    )


def _keep_rotated(static, kept_ref, x_ref, positions, rope_refs, side) -> None:
    """Rotates the kept block into its buffer (at a kernel's first step)."""
    if kept_ref is not None:
        kept_ref[...] = _rotated(static, x_ref[...], positions, rope_refs, side)


def _q_lanes(static: Static, tile_refs: tuple) -> Any:
    """q's lane-broadcast positions (the first tile operand) where RoPE reads
    them, else None."""
    return tile_refs[0][...] if static.rope is not None else None


def _k_lanes(rope_refs: tuple) -> Any:
    """k's lane-broadcast positions (RoPE's second operand), or None."""
    return rope_refs[1][...] if rope_refs else None


def _forward_kernel(static: Static, run_ref, fetch_ref, head_ref, shared_ref, *refs):
    """Grid step ``(b, h, i, j)``: the online softmax's update by tile ``(i, j)``
    of head ``h``; the output (and the log-sum-exp) after the last key block."""
    (q_ref, k_ref, v_ref), tile_refs, rope_refs, rest = _split(static, refs, 3)
    outs, (m_ref, l_ref, acc_ref), kept_q = _scratch(static, rest, 3)
    b, h, i, j = (pl.program_id(axis) for axis in range(4))

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, -jnp.inf, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)
        _keep_rotated(
            static, kept_q, q_ref, _q_lanes(static, tile_refs), rope_refs, "q"
        )

    @pl.when(run_ref[_row(static)(b), i, j] != 0)
    def _step():
        params = tiles.scalar_params(static, head_ref, shared_ref, h)
        q = (q_ref if kept_q is None else kept_q)[...]
        k = _rotated(static, k_ref[...], _k_lanes(rope_refs), rope_refs, "k")
        pairs = tiles.position_pairs(tile_refs, (static.block_q, static.block_k))
        scores = tiles.logits(static, pairs, params, j, q, k)
        tiles.softmax_step(scores, v_ref[...], m_ref, l_ref, acc_ref, static.precision)

    @pl.when(j == pl.num_programs(3) - 1)
    def _write():
        total = l_ref[...][:, :1]
        empty = total == 0.0
        outs[0][...] = (acc_ref[...] / jnp.where(empty, 1.0, total)).astype(
            outs[0].dtype
        )
        if len(outs) > 1:  # +inf for a row with no key: its p = exp(s - lse) is 0
            lse = jnp.where(empty, jnp.inf, m_ref[...] + jnp.log(l_ref[...]))
            outs[1][...] = lse


def _call_dq(static: Static, operands: tuple, d_out, lse, delta) -> jax.Array:
    """``dq [B, N, Lp, H]`` float32: per query block, the sum over key blocks."""
    run, fetch, head_params, shared, q, k, v, *tile_ops = operands
    batch, heads, padded_q, head_dim = q.shape
    specs = _specs(static, q, v, "qk")
    grid = (batch, heads, padded_q // static.block_q, k.shape[2] // static.block_k)
    in_specs = [specs["q"], specs["k"], specs["v"], specs["d_out"], specs["lanes"]]
    in_specs += [specs["lanes"], *specs["tiles"]]
    out_shape = jax.ShapeDtypeStruct(q.shape, jnp.float32)
    scratch = [pltpu.VMEM((static.block_q, head_dim), jnp.float32)]
    scratch += _kept_scratch(static, static.block_q, q)
    call = _pallas(static, _dq_kernel, grid, in_specs, specs["q"], out_shape, scratch)
    return call(run, fetch, head_params, shared, q, k, v, d_out, lse, delta, *tile_ops)


def _dq_kernel(static: Static, run_ref, fetch_ref, head_ref, shared_ref, *refs):
    inputs, tile_refs, rope_refs, rest = _split(static, refs, 6)
    q_ref, k_ref, v_ref, d_out_ref, lse_ref, delta_ref = inputs
    (dq_ref,), (acc_ref,), kept_q = _scratch(static, rest, 1)
    b, h, i, j = (pl.program_id(axis) for axis in range(4))

    @pl.when(j == 0)
    def _init():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)
        _keep_rotated(
            static, kept_q, q_ref, _q_lanes(static, tile_refs), rope_refs, "q"
        )

    @pl.when(run_ref[_row(static)(b), i, j] != 0)
    def _step():
        params = tiles.scalar_params(static, head_ref, shared_ref, h)
        q = (q_ref if kept_q is None else kept_q)[...]
        k = _rotated(static, k_ref[...], _k_lanes(rope_refs), rope_refs, "k")
        pairs = tiles.position_pairs(tile_refs, (static.block_q, static.block_k))
        scores = tiles.logits(static, pairs, params, j, q, k)
        _, d_scores = tiles.probabilities_and_grad(
            scores, lse_ref[...], delta_ref[...], d_out_ref[...], v_ref[...],
            static.precision,
        )  # fmt: skip
        d_q = tiles.matmul(d_scores.astype(k.dtype), k, (1, 0), static.precision)
        acc_ref[...] += d_q * jnp.float32(static.scale)

    @pl.when(j == pl.num_programs(3) - 1)
    def _write():
        positions = _q_lanes(static, tile_refs)
        dq_ref[...] = _rotated_back(static, acc_ref[...], positions, rope_refs, "q")


def _call_dkv(static: Static, operands: tuple, d_out, lse, delta) -> tuple:
    """``dk, dv [B, N, Sp, H]`` float32 per query head, and the bias's scalars'
    gradient ``[B, N, Kb, 1, 128]`` (head, shared): per key block, the sum over
    query blocks."""
    run, _, head_params, shared, q, k, v, *tile_ops = operands
    batch, heads, padded_q, head_dim = q.shape
    padded_k, num_k = k.shape[2], k.shape[2] // static.block_k
    run_t = jnp.swapaxes(run, 1, 2)  # [Bt, Kb, Q]
    fetch_t = _last_run(run_t)
    specs = _specs(static, q, v, "kq")
    grid = (batch, heads, num_k, padded_q // static.block_q)
    in_specs = [specs["q"], specs["k"], specs["v"], specs["d_out"], specs["lanes"]]
    in_specs += [specs["lanes"], *specs["tiles"]]
    per_key = lambda width: pl.BlockSpec(
        (None, None, static.block_k, width), lambda b, h, j, i, *_: (b, h, j, 0)
    )
    lanes = pl.BlockSpec(
        (None, None, None, 1, LANES), lambda b, h, j, i, *_: (b, h, j, 0, 0)
    )
    out_specs = [per_key(head_dim), per_key(v.shape[-1]), lanes, lanes]
    out_shape = [
        jax.ShapeDtypeStruct((batch, heads, padded_k, head_dim), jnp.float32),
        jax.ShapeDtypeStruct((batch, heads, padded_k, v.shape[-1]), jnp.float32),
        jax.ShapeDtypeStruct((batch, heads, num_k, 1, LANES), jnp.float32),
        jax.ShapeDtypeStruct((batch, heads, num_k, 1, LANES), jnp.float32),
    ]
    scratch = [
        pltpu.VMEM((static.block_k, head_dim), jnp.float32),
        pltpu.VMEM((static.block_k, v.shape[-1]), jnp.float32),
        pltpu.VMEM((1, LANES), jnp.float32),
        pltpu.VMEM((1, LANES), jnp.float32),
        *_kept_scratch(static, static.block_k, k),
    ]
    call = _pallas(static, _dkv_kernel, grid, in_specs, out_specs, out_shape, scratch)
    return call(
        run_t, fetch_t, head_params, shared, q, k, v, d_out, lse, delta, *tile_ops
    )


def _dkv_kernel(static: Static, run_ref, fetch_ref, head_ref, shared_ref, *refs):
    inputs, tile_refs, rope_refs, rest = _split(static, refs, 6)
    q_ref, k_ref, v_ref, d_out_ref, lse_ref, delta_ref = inputs
    outs, accs, kept_k = _scratch(static, rest, 4)
    b, h, j, i = (pl.program_id(axis) for axis in range(4))

    @pl.when(i == 0)
    def _init():
        for acc in accs:
            acc[...] = jnp.zeros(acc.shape, jnp.float32)
        _keep_rotated(static, kept_k, k_ref, _k_lanes(rope_refs), rope_refs, "k")

    @pl.when(run_ref[_row(static)(b), j, i] != 0)
    def _step():
        params = tiles.scalar_params(static, head_ref, shared_ref, h)
        d_out = d_out_ref[...]
        q_lanes = _q_lanes(static, tile_refs)
        q = _rotated(static, q_ref[...], q_lanes, rope_refs, "q")
        pairs = tiles.position_pairs(tile_refs, (static.block_q, static.block_k))
        k = (k_ref if kept_k is None else kept_k)[...]
        scores = tiles.logits(static, pairs, params, j, q, k)
        probs, d_scores = tiles.probabilities_and_grad(
            scores, lse_ref[...], delta_ref[...], d_out, v_ref[...], static.precision
        )
        accs[1][...] += tiles.matmul(
            probs.astype(d_out.dtype), d_out, (0, 0), static.precision
        )
        d_k = tiles.matmul(d_scores.astype(q.dtype), q, (0, 0), static.precision)
        accs[0][...] += d_k * jnp.float32(static.scale)
        if static.tile is not None:
            d_head, d_shared = tiles.bias_grads(static, pairs[0], params, d_scores)
            accs[2][...] += d_head
            accs[3][...] += d_shared

    @pl.when(i == pl.num_programs(3) - 1)
    def _write():
        d_k = _rotated_back(static, accs[0][...], _k_lanes(rope_refs), rope_refs, "k")
        for out, value in zip(
            outs, (d_k, *(acc[...] for acc in accs[1:])), strict=True
        ):
            out[...] = value
