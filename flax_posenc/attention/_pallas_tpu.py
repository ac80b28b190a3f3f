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
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from flax_posenc.attention import _pallas_flash as flash
from flax_posenc.attention import _pallas_rope
from flax_posenc.attention import _pallas_tiles as tiles
from flax_posenc.attention._blockwise import Blocks
from flax_posenc.attention._pallas_rope import ROWS as ROPE_ROWS
from flax_posenc.attention._pallas_rope import KernelRope
from flax_posenc.attention._pallas_tiles import LANES, SUBLANES, Static
from flax_posenc.bias.position_bias import KernelBias


def prepare(
    blocks: Blocks,
    form: KernelBias | None,
    request: flash.Request,
    rope: KernelRope | None = None,
) -> tuple[Static, tuple]:
    """The kernels' static configuration and operands for prepared blocks.

    ``request``'s ``block_q`` is a multiple of 8 and ``block_k`` of 128 (checked
    with the spec). ``rope``: RoPE applied to the q and k tiles in the kernel
    (unrotated q and k in ``blocks``)."""
    block_q = min(request.block_q, flash.round_up(blocks.q.shape[1], SUBLANES))
    block_k = min(request.block_k, flash.round_up(blocks.k.shape[1], LANES))
    request = request._replace(block_q=block_q, block_k=block_k)
    static = flash.static_of(
        blocks, form, request, None if rope is None else rope.static
    )
    shared, q_rows, k_rows = flash.operands(blocks, form, static, "pallas_tpu")
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
    if rope is not None:
        k_lanes = jnp.broadcast_to(k_rows[0][:, :, None], (*k_rows[0].shape, LANES))
        tiles += [rope.rows, k_lanes]
    return static, (*shared, *tiles)


def _specs(static: Static, q: jax.Array, v: jax.Array, order: str) -> dict:
    """The block specs of the q side (q-like arrays, their lanes and the q
    tiles) and the k side (k, v, the k tiles), for a grid ``(B, N, q block, k
    block)`` (``order="qk"``: a skipped step's k block is ``fetch``'s) or ``(B, N,
    k block, q block)`` (``"kq"``: a skipped step's q block is ``fetch``'s)."""
    row, groups = flash.row(static), static.groups
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
        # the interpreter detects races (printed), raises on out-of-bounds reads
        # and fills uninitialised memory with NaN
        interpret=pltpu.InterpretParams(detect_races=True)
        if static.interpret
        else False,
        name="flax_posenc_flash_attention",
    )


def _call_forward(static: Static, operands: tuple, residuals: bool) -> Any:
    """The forward kernel: ``out [B, N, Lp, Hv]``, with the rows' log-sum-exp
    ``[B, N, Lp, 128]`` (lane-broadcast) when ``residuals``."""
    q, k, v = operands[4:7]
    batch, heads, padded_q, _ = q.shape
    specs = _specs(static, q, v, "qk")
    grid = (batch, heads, padded_q // static.block_q, k.shape[2] // static.block_k)
    out_dtype = jnp.float32 if static.float32_out else q.dtype
    out_shape = [jax.ShapeDtypeStruct((batch, heads, padded_q, v.shape[-1]), out_dtype)]
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


def _logits(
    static: Static,
    scalar_refs: tuple,
    tile_refs: tuple,
    head_and_key_block: tuple,
    q: jax.Array,
    k: jax.Array,
) -> tuple:
    """A step's position pairs, the head's bias scalars and the tile's logits
    (:func:`flax_posenc.attention._pallas_tiles.logits`)."""
    (h, j), (head_ref, shared_ref) = head_and_key_block, scalar_refs
    params = tiles.scalar_params(static, head_ref, shared_ref, h)
    pairs = tiles.position_pairs(tile_refs, (static.block_q, static.block_k))
    return pairs, params, tiles.logits(static, pairs, params, j, q, k)


def _q_major_logits(
    static: Static,
    scalar_refs: tuple,
    tile_refs: tuple,
    rope_refs: tuple,
    q_and_k_refs: tuple,
    head_and_key_block: tuple,
) -> tuple:
    """A step of the forward or ``dq`` kernel (the query block kept, a key block
    per step): the key block (rotated) and the tile's logits."""
    q_ref, kept_q, k_ref = q_and_k_refs
    q = (q_ref if kept_q is None else kept_q)[...]
    k = _rotated(static, k_ref[...], _k_lanes(rope_refs), rope_refs, "k")
    return k, _logits(static, scalar_refs, tile_refs, head_and_key_block, q, k)[2]


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

    @pl.when(run_ref[flash.row(static)(b), i, j] != 0)
    def _step():
        _, scores = _q_major_logits(
            static,
            (head_ref, shared_ref),
            tile_refs,
            rope_refs,
            (q_ref, kept_q, k_ref),
            (h, j),
        )
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

    @pl.when(run_ref[flash.row(static)(b), i, j] != 0)
    def _step():
        k, scores = _q_major_logits(
            static,
            (head_ref, shared_ref),
            tile_refs,
            rope_refs,
            (q_ref, kept_q, k_ref),
            (h, j),
        )
        lse, delta = lse_ref[...][:, :1], delta_ref[...][:, :1]
        _, d_scores = tiles.probabilities_and_grad(
            scores, lse, delta, d_out_ref[...], v_ref[...], static.precision
        )
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
    fetch_t = flash.last_run(run_t)
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

    @pl.when(run_ref[flash.row(static)(b), j, i] != 0)
    def _step():
        d_out = d_out_ref[...]
        q_lanes = _q_lanes(static, tile_refs)
        q = _rotated(static, q_ref[...], q_lanes, rope_refs, "q")
        k = (k_ref if kept_k is None else kept_k)[...]
        scalar_refs = (head_ref, shared_ref)
        pairs, params, scores = _logits(static, scalar_refs, tile_refs, (h, j), q, k)
        lse, delta = lse_ref[...][:, :1], delta_ref[...][:, :1]
        probs, d_scores = tiles.probabilities_and_grad(
            scores, lse, delta, d_out, v_ref[...], static.precision
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


KERNELS = flash.Kernels(
    _call_forward,
    _call_dq,
    _call_dkv,
    lambda rows: jnp.broadcast_to(rows[..., None], (*rows.shape, LANES)),
    lambda lanes: lanes[..., 0],
)
