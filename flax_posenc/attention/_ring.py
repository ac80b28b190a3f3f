"""Ring attention's unchecked core (see :mod:`flax_posenc.attention.context_parallel`).

Runs inside ``shard_map`` on one device's shards. :func:`attention` passes the key /
value block (with its positions and segment ids) ``n - 1`` times around the ring and
feeds each block that arrives to the blockwise kernel, carrying the online softmax's
statistics. Its ``custom_vjp`` keeps the local inputs, the output and the row
log-sum-exp; the backward sends the blocks round again, each with its ``dk``/``dv``
accumulator, and recomputes tiles from the log-sum-exp (flash attention's backward).
With ``kv_chunks`` a block goes round as that many chunks in turn. :func:`decode`
merges the devices' statistics over a sequence-sharded cache with one all-gather.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core.pytree import Constants, join_arrays, split_arrays
from flax_posenc.attention import _blockwise
from flax_posenc.attention._blockwise import Bias, Blocks, Stats


def axis_size(axis_name: Any) -> int:
    """The size of a bound mesh axis (NameError when unbound)."""
    size = getattr(jax.lax, "axis_size", None)
    if size is not None:
        return int(size(axis_name))
    return int(jax.lax.psum(1, axis_name))  # jax < 0.6: folded to a constant


def ring_permutation(size: int) -> list[tuple[int, int]]:
    """``ppermute``'s pairs: device ``i`` sends to ``i + 1``."""
    return [(i, (i + 1) % size) for i in range(size)]


def default_kv_chunks(blocks: Blocks) -> int:
    """The chunks a key/value block goes round the ring in when ``kv_chunks`` is
    None: the fewest (a divisor of the local key length ``S``) with one chunk of k
    and v at most an eighth of the float32 accumulator ``[..., L, N, Hv]``, or a
    chunk of at most one tile (``block_k`` keys).

    Two chunks are in flight, so they hold at most a quarter of the accumulator,
    which one device at ``L / n`` holds too (with its tiles). An eighth, not a
    quarter: at one chunk with multi-query k/v XLA also keeps a copy of q, and the
    forward takes 1.59x of one device at ``L / n`` instead of 1.13x at two chunks
    (``L = 65536``, 8 devices, ``N = 8``, ``H = 64``; benchmarks/README.md).
    """
    keys = blocks.k.shape[1]
    kv_bytes = sum(x.size * x.dtype.itemsize for x in (blocks.k, blocks.v))
    acc_bytes = 4 * math.prod(blocks.q.shape[:-1]) * blocks.v.shape[-1]
    return next(
        c
        for c in range(1, keys + 1)
        if keys % c == 0
        and (8 * kv_bytes <= c * acc_bytes or keys // c <= blocks.block_k)
    )


def may_attend(blocks: Blocks) -> jax.Array | None:
    """Whether any query of ``blocks`` may attend any key of its key block: False
    when causal and every key is later than every query, or when the segment-id
    ranges do not overlap; None when nothing can rule a block out."""
    terms = []
    qp, kp = blocks.q_positions, blocks.k_positions
    qs, ks = blocks.q_segment_ids, blocks.k_segment_ids
    if blocks.causal and qp is not None and kp is not None:
        terms.append(kp.min(-1) <= qp.max(-1))
    if qs is not None and ks is not None:
        terms.append((ks.min(-1) <= qs.max(-1)) & (qs.min(-1) <= ks.max(-1)))
    if not terms:
        return None
    keep = terms[0]
    for term in terms[1:]:
        keep = keep & term
    return jnp.any(keep)


class RingStatic(NamedTuple):
    """What of a ring call is not an array (``custom_vjp``'s static argument)."""

    blocks: Blocks  # the static fields; its arrays are None (they are Operands)
    bias: Constants
    axis_name: Any
    size: int  # of the ring axis
    precision: Any
    kv_chunks: int


class Operands(NamedTuple):
    """The arrays of a ring call; the integer ones get float0 cotangents."""

    q: jax.Array
    k: jax.Array
    v: jax.Array
    q_positions: jax.Array | None
    k_positions: jax.Array | None
    q_segment_ids: jax.Array | None
    k_segment_ids: jax.Array | None
    bias: list  # the bias's array leaves (a T5 table, FIRE's MLP)


INTEGER_FIELDS = ("q_positions", "k_positions", "q_segment_ids", "k_segment_ids")


def attention(
    blocks: Blocks,
    bias: Bias | None,
    axis_name: Any,
    precision: Any,
    kv_chunks: int = 1,
) -> jax.Array:
    """Ring attention of prepared local blocks, ``[..., L, N, Hv]`` in q's dtype;
    the key/value block goes round as ``kv_chunks`` chunks (dividing its length)."""
    size = axis_size(axis_name)
    if size == 1:
        return _blockwise.online_softmax(blocks, bias, precision)
    bias_arrays, bias_static = split_arrays(bias)
    operands, template = split_blocks(blocks, bias_arrays)
    static = RingStatic(template, bias_static, axis_name, size, precision, kv_chunks)
    return _ring(static, operands)


def split_blocks(blocks: Blocks, bias: list) -> tuple[Operands, Blocks]:
    """A ring call's arrays (the blocks' and ``bias``) and the blocks' static
    fields (its arrays None); :func:`join_blocks` puts them back together."""
    fields = Operands._fields[:-1]
    operands = Operands._make([*(getattr(blocks, name) for name in fields), bias])
    return operands, blocks._replace(**dict.fromkeys(fields))


def join_blocks(template: Blocks, operands: Operands) -> Blocks:
    """The local blocks of :func:`split_blocks`' parts."""
    fields = Operands._fields[:-1]
    return template._replace(**{name: getattr(operands, name) for name in fields})


def _unpack(static: RingStatic, operands: Operands) -> tuple[Blocks, Any]:
    """The local blocks and the bias of a ring call."""
    bias = join_arrays(operands.bias, static.bias)
    return join_blocks(static.blocks, operands), bias


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _ring(static: RingStatic, operands: Operands) -> jax.Array:
    return _ring_forward(static, operands)[0]


def _ring_forward(
    static: RingStatic, operands: Operands
) -> tuple[jax.Array, tuple[Operands, jax.Array, jax.Array]]:
    """The output and the residuals: the operands, the output and the row
    log-sum-exp ``[Q, B, K, G, block_q]`` (-inf for a row with no key)."""
    blocks, bias = _unpack(static, operands)
    stats = _forward_stats(blocks, bias, static)
    out = _blockwise.normalise(stats, blocks.q.dtype)
    out = _blockwise.from_stats_layout(blocks, out)
    safe = jnp.where(stats.denominator == 0.0, 1.0, stats.denominator)
    lse = jnp.where(stats.denominator == 0.0, -jnp.inf, stats.row_max + jnp.log(safe))
    return out, (operands, out, lse)


def _ring_backward(
    static: RingStatic,
    residuals: tuple[Operands, jax.Array, jax.Array],
    d_out: jax.Array,
) -> tuple[Operands]:
    operands, out, lse = residuals
    d_q, d_k, d_v, d_bias = _backward(static, operands, out, lse, d_out)
    return (cotangents(operands, d_q, d_k, d_v, d_bias),)


_ring.defvjp(_ring_forward, _ring_backward)


def cotangents(
    operands: Operands, d_q: jax.Array, d_k: jax.Array, d_v: jax.Array, d_bias: list
) -> Operands:
    """The cotangent of a ring call's operands: the gradients of q, k, v and the
    bias's arrays, float0 zeros for the integer ones."""
    integers = {name: int_zeros(getattr(operands, name)) for name in INTEGER_FIELDS}
    return Operands(d_q, d_k, d_v, bias=d_bias, **integers)


def int_zeros(x: jax.Array | None) -> Any:
    """The (float0) cotangent of an integer operand."""
    return None if x is None else np.zeros(x.shape, jax.dtypes.float0)


def with_keys(blocks: Blocks, kv: tuple) -> Blocks:
    k, v, kp, ks = kv
    block_k = min(blocks.block_k, k.shape[1])  # a chunk may be shorter than a tile
    return blocks._replace(k=k, v=v, k_positions=kp, k_segment_ids=ks, block_k=block_k)


def chunk(blocks: Blocks, index: jax.Array, kv_chunks: int) -> tuple:
    """Chunk ``index`` of ``kv_chunks`` of the local ``(k, v, k_positions,
    k_segment_ids)`` along the keys (the whole block when ``kv_chunks`` is 1)."""
    length = blocks.k.shape[1] // kv_chunks
    kv = (blocks.k, blocks.v, blocks.k_positions, blocks.k_segment_ids)
    return jax.tree_util.tree_map(
        lambda x: jax.lax.dynamic_slice_in_dim(x, index * length, length, axis=1), kv
    )


class Ring(NamedTuple):
    """Where the key/value chunks go round."""

    axis_name: Any
    size: int  # of the ring axis
    kv_chunks: int


def _forward_stats(blocks: Blocks, bias: Bias | None, static: RingStatic) -> Stats:
    """The statistics after every device's key/value block: per chunk, ``size - 1``
    permutes of each of k, v (and their positions and segment ids)."""

    def step(stats: Stats, kv: tuple) -> Stats:
        current = with_keys(blocks, kv)
        return when_attended(
            current,
            lambda s: _blockwise.accumulate_in_place(
                current, bias, static.precision, s
            ),
            stats,
        )

    ring = Ring(static.axis_name, static.size, static.kv_chunks)
    return around_ring(ring, blocks, step, _blockwise.init_stats(blocks))


def when_attended(blocks: Blocks, update: Callable, carry: Any) -> Any:
    """``update(carry)``, skipped (a ``cond``) when no query of ``blocks`` may
    attend any of its keys (:func:`may_attend`)."""
    allowed = may_attend(blocks)
    if allowed is None:
        return update(carry)
    return jax.lax.cond(allowed, update, lambda c: c, carry)


def around_ring(ring: Ring, blocks: Blocks, step: Callable, init: Any) -> Any:
    """``step(carry, kv)`` with every device's key/value chunk ``kv = (k, v,
    k_positions, k_segment_ids)``, this device's first: per chunk, ``size - 1``
    permutes of each, overlapping the steps."""
    perm = ring_permutation(ring.size)

    def body(_, carry):
        state, kv = carry
        incoming = jax.lax.ppermute(kv, ring.axis_name, perm)  # overlaps the step
        return step(state, kv), incoming

    def around(index: jax.Array, state: Any) -> Any:
        # The first step reads the local chunk; the loop then carries only received
        # ones (a loop carry initialised from an input would be one more copy).
        kv = chunk(blocks, index, ring.kv_chunks)
        incoming = jax.lax.ppermute(kv, ring.axis_name, perm)
        state = step(state, kv)
        state, kv = jax.lax.fori_loop(0, ring.size - 2, body, (state, incoming))
        return step(state, kv)

    return over_chunks(ring.kv_chunks, around, init)


def over_chunks(kv_chunks: int, around: Callable, init: Any) -> Any:
    """``around(index, carry)`` for each chunk index in turn: a loop, or one call
    for one chunk (as a one-trip loop the gradient's temp memory at L = 65536 with
    multi-query k/v grew by 6 MiB, one more copy of its carry)."""
    if kv_chunks == 1:
        return around(jnp.int32(0), init)
    return jax.lax.fori_loop(0, kv_chunks, around, init)


class _Cotangents(NamedTuple):
    """What the transposed ring needs at every step, float32 where it adds up."""

    blocks: Blocks  # the local blocks
    bias: list  # the bias's array leaves
    static: RingStatic
    starts: jax.Array  # int32 [Q], the query blocks' first rows
    d_rows: jax.Array  # d_out as [B, L, K, G, Hv]
    delta: jax.Array  # d_out . out, [B, L, K, G]
    lse: jax.Array  # [Q, B, K, G, block_q]


def _backward(
    static: RingStatic,
    operands: Operands,
    out: jax.Array,
    lse: jax.Array,
    d_out: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array, list]:
    """``(dq, dk, dv, d_bias_arrays)`` by the transposed ring.

    With the final log-sum-exp ``lse`` fixed, ``out = sum_j exp(s_j - lse) v_j``
    per key block ``j``; the gradient of the logits is ``p (d_out . v - D)`` with
    ``D = d_out . out``, i.e. the VJP of ``(sum_j p_j v_j, sum_j p_j)`` (by the
    blockwise kernel started at ``row_max = lse``) at ``(d_out, -D)``. Per ring step
    a loop over the query blocks takes that VJP block by block, adding into ``dq``
    in place and into the travelling ``dk``/``dv``.
    """
    f32 = jnp.float32
    blocks, _ = _unpack(static, operands)
    batch, length, kv_heads, groups, _ = blocks.q.shape
    rows = (batch, length, kv_heads, groups, blocks.v.shape[-1])
    d_rows = d_out.reshape(rows).astype(f32)
    context = _Cotangents(
        blocks,
        operands.bias,
        static,
        jnp.asarray(_blockwise.q_starts(length, blocks.block_q)),
        d_rows,
        jnp.sum(d_rows * out.reshape(rows).astype(f32), axis=-1),
        lse,
    )
    init = (
        jnp.zeros(blocks.q.shape, f32),
        jnp.zeros(blocks.k.shape, f32),
        jnp.zeros(blocks.v.shape, f32),
        jax.tree_util.tree_map(jnp.zeros_like, operands.bias),
    )
    ring = Ring(static.axis_name, static.size, static.kv_chunks)
    grad_step = functools.partial(_grad_step, context)
    d_q, d_k, d_v, d_bias = transposed_ring(ring, blocks, grad_step, init)
    return (
        d_q.astype(blocks.q.dtype),
        d_k.astype(blocks.k.dtype),
        d_v.astype(blocks.v.dtype),
        d_bias,
    )


def transposed_ring(
    ring: Ring, blocks: Blocks, grad_step: Callable, init: tuple
) -> tuple:
    """``(d_q, d_k, d_v, d_bias)`` from ``init`` by the transposed ring: per chunk,
    ``grad_step((d_q, (d_k, d_v), d_bias), kv)`` with every device's chunk, its
    float32 ``dk``/``dv`` (the chunk's shapes) travelling with it and coming home
    into place. ``d_q`` and ``d_bias`` are the step's to shape."""
    f32 = jnp.float32
    perm = ring_permutation(ring.size)

    def around(index: jax.Array, carry: tuple) -> tuple:
        d_q, d_k, d_v, d_bias = carry
        kv = chunk(blocks, index, ring.kv_chunks)

        def body(_, carry):
            grads, kv = carry
            grads = grad_step(grads, kv)
            moved = jax.lax.ppermute((kv, grads[1]), ring.axis_name, perm)
            return (grads[0], moved[1], grads[2]), moved[0]

        travelling = (jnp.zeros(kv[0].shape, f32), jnp.zeros(kv[1].shape, f32))
        # As the forward: the first step reads the local chunk, the loop carries
        # received chunks only.
        grads = body(0, ((d_q, travelling, d_bias), kv))
        grads, kv = jax.lax.fori_loop(1, ring.size - 1, body, grads)
        d_q, travelling, d_bias = grad_step(grads, kv)
        g_k, g_v = jax.lax.ppermute(travelling, ring.axis_name, perm)  # the last step
        start = index * kv[0].shape[1]
        d_k = jax.lax.dynamic_update_slice_in_dim(d_k, g_k, start, axis=1)
        d_v = jax.lax.dynamic_update_slice_in_dim(d_v, g_v, start, axis=1)
        return d_q, d_k, d_v, d_bias

    return over_chunks(ring.kv_chunks, around, init)


def _grad_step(context: _Cotangents, carry: tuple, kv: tuple) -> tuple:
    """The gradients of one ring step (one key/value chunk), skipped when no query
    may attend to it: ``(d_q, (d_k, d_v) travelling, d_bias)``."""
    d_q, (d_k, d_v), d_bias = carry
    num_blocks = context.starts.shape[0]
    run = lambda c: jax.lax.fori_loop(
        0, num_blocks, functools.partial(_q_block_grads, context, kv), c
    )
    state = when_attended(with_keys(context.blocks, kv), run, (d_q, d_k, d_v, d_bias))
    return state[0], (state[1], state[2]), state[3]


def _q_block_grads(
    context: _Cotangents, kv: tuple, index: jax.Array, carry: tuple
) -> tuple:
    """Query block ``index``'s VJP against the chunk ``kv``, added into
    ``(d_q, d_k, d_v, d_bias)``."""
    f32, blocks, static = jnp.float32, context.blocks, context.static
    d_q, d_k, d_v, d_bias = carry
    block_q, start = blocks.block_q, context.starts[index]
    d_acc, d_den = _block_cotangents(context, index)
    zeros = jnp.zeros_like(context.lse[index])  # zero sums at row_max = lse
    value_dim = blocks.v.shape[-1]
    start_stats = Stats(
        context.lse[index], zeros, jnp.zeros((*zeros.shape, value_dim), f32)
    )
    k_positions, k_segment_ids = kv[2], kv[3]

    def sums(q_block, k, v, bias_arrays):
        current = with_keys(blocks, (k, v, k_positions, k_segment_ids))
        bias = join_arrays(bias_arrays, static.bias)
        stats = _blockwise.accumulate_block(
            current, bias, static.precision, start, q_block, start_stats
        )
        return stats.acc, stats.denominator

    q_block = jax.lax.dynamic_slice_in_dim(blocks.q, start, block_q, axis=1)
    _, vjp = jax.vjp(sums, q_block, kv[0], kv[1], context.bias)
    g_q, g_k, g_v, g_bias = vjp((jnp.moveaxis(d_acc, 1, 3), jnp.moveaxis(d_den, 1, 3)))
    old = jax.lax.dynamic_slice_in_dim(d_q, start, block_q, axis=1)
    d_q = jax.lax.dynamic_update_slice_in_dim(d_q, old + g_q.astype(f32), start, axis=1)
    d_bias = jax.tree_util.tree_map(jnp.add, d_bias, g_bias)
    return d_q, d_k + g_k.astype(f32), d_v + g_v.astype(f32), d_bias


def _block_cotangents(
    context: _Cotangents, index: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """The cotangents of query block ``index``'s ``(acc, denominator)``: ``d_out``
    and ``-D`` of its rows, zero on the rows the last block shares with the one
    before (they belong to that one)."""
    block_q, start = context.blocks.block_q, context.starts[index]
    num_blocks = context.starts.shape[0]
    d_acc = jax.lax.dynamic_slice_in_dim(context.d_rows, start, block_q, axis=1)
    d_den = -jax.lax.dynamic_slice_in_dim(context.delta, start, block_q, axis=1)
    overlap = num_blocks * block_q - context.d_rows.shape[1]
    if overlap:
        keep = (index < num_blocks - 1) | (jnp.arange(block_q) >= overlap)
        d_acc = jnp.where(keep[None, :, None, None, None], d_acc, 0.0)
        d_den = jnp.where(keep[None, :, None, None], d_den, 0.0)
    return d_acc, d_den


def decode(
    blocks: Blocks, bias: Bias | None, axis_name: Any, precision: Any
) -> jax.Array:
    """Queries (the same on every device) against this device's slice of a cache;
    the partial ``(max, sum, acc)`` of all devices merged with one all-gather."""
    stats = _blockwise.accumulate_in_place(
        blocks, bias, precision, _blockwise.init_stats(blocks)
    )
    packed = jnp.concatenate(
        [stats.acc, stats.row_max[..., None], stats.denominator[..., None]], axis=-1
    )
    every = jax.lax.all_gather(packed, axis_name)  # [n, ..., Hv + 2]: one collective
    acc, row_max, denominator = every[..., :-2], every[..., -2], every[..., -1]
    top = jnp.max(row_max, axis=0)
    shift = jnp.where(top == -jnp.inf, 0.0, top)
    weight = jnp.exp(row_max - shift[None])  # 0 for a device with no key for a row
    merged = Stats(
        top,
        jnp.sum(denominator * weight, axis=0),
        jnp.sum(acc * weight[..., None], axis=0),
    )
    out = _blockwise.normalise(merged, blocks.q.dtype)
    return _blockwise.from_stats_layout(blocks, out)
