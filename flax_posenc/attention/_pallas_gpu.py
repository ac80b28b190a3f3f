"""The Pallas GPU (Triton) kernel of blockwise attention: flash attention whose
position bias is computed per tile inside the kernel (``implementation="pallas_gpu"``).

Grid ``(B, N, Q)``: program ``(b, h, i)`` keeps head ``h``'s query block ``i``
(``[block_q, H]``) in registers and walks the key blocks of its k/v head ``h // G``
(grouped-query attention by the index map, no repeated heads) in a loop. Each step
forms its ``[block_q, block_k]`` tile on chip, as the TPU kernel does and with the
same tile math (:mod:`flax_posenc.attention._pallas_tiles`): the logits by one
matmul, the bias by the bias's :class:`flax_posenc.KernelBias` from the tile's
positions and the head's scalars, the masks, and the online softmax with float32
statistics. A step whose tile is wholly masked (the ``run`` table of
:mod:`flax_posenc.attention._pallas_flash`) is a branch not taken: no loads, no
math.

Triton's rules: block sizes are powers of two of at least 16 (the matmul's tile),
64 unless given (registers and shared memory at ``H = 128``); the head size is
padded to a power of two (zeros add nothing to a dot product). The backward is the
shared ``custom_vjp``: a ``dq`` kernel over ``(B, N, Q)`` and a ``dk dv`` kernel
over ``(B, N, Kb)`` walking the query blocks, which also sums the bias's scalars'
gradient through the bias's own VJP per tile.

RoPE (:func:`rotates_in_kernel`): q and k blocks are loaded as feature segments,
each rotated pair's first features, their second (the two halves of ``R``, or the
even and odd features by strided loads) and the unrotated rest (Triton has no lane
shuffle), each split into power-of-two pieces of at least 16 (``R = 96``: pairs
of 32 and 16); the pairs are rotated in registers (``(a c - b s, b c + a s)`` in
float32, rounded once to the input's dtype), and the logits are the sum of the
pieces' dot products (a permutation of the features changes no dot product);
``dq`` and ``dk`` are carried back by the inverse rotation and stored in place.
RoPE with ``R`` not a multiple of 32 is applied to q and k before the kernel.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from flax_posenc.attention import _pallas_flash as flash
from flax_posenc.attention import _pallas_rope
from flax_posenc.attention import _pallas_tiles as tiles
from flax_posenc.attention._blockwise import Blocks
from flax_posenc.attention._pallas_rope import KernelRope
from flax_posenc.attention._pallas_tiles import Static
from flax_posenc.bias.position_bias import KernelBias

MIN_BLOCK = 16  # Triton's smallest matmul tile


def prepare(
    blocks: Blocks,
    form: KernelBias | None,
    request: flash.Request,
    rope: KernelRope | None = None,
) -> tuple[Static, tuple]:
    """The kernels' static configuration and operands for prepared blocks.

    ``request``'s block sizes are powers of two of at least 16 (checked with the
    spec; 64 unless given). ``rope``: RoPE applied in the kernel
    (:func:`rotates_in_kernel` holds; unrotated q and k in ``blocks``)."""
    block_q = min(request.block_q, _power_of_two(blocks.q.shape[1]))
    block_k = min(request.block_k, _power_of_two(blocks.k.shape[1]))
    request = request._replace(block_q=block_q, block_k=block_k)
    static = flash.static_of(
        blocks, form, request, None if rope is None else rope.static
    )
    shared, q_rows, k_rows = flash.operands(blocks, form, static, "pallas_gpu")
    run, fetch, head, scalars, q, k, v = shared
    q, k, v = (flash.pad(x, _power_of_two(x.shape[-1]), axis=3) for x in (q, k, v))
    rows = [x for pair in zip(q_rows, k_rows, strict=True) for x in pair]
    operands = (run, fetch, head, scalars, q, k, v, *(x for x in rows if x is not None))
    if rope is not None:
        operands += (rope.rows,)
    return static, operands


def rotates_in_kernel(config: Any) -> bool:
    """Whether the kernel rotates q and k by ``config`` itself: when its feature
    segments (each pair's first features, their second, the rest of the padded
    head) split into pieces that Triton loads, powers of two of at least 16: ``R``
    a multiple of 32. Otherwise q and k are rotated before the kernel."""
    return config.rotated_features % (2 * MIN_BLOCK) == 0


def _segments(static: Static, width: int) -> tuple[list, list, list]:
    """The feature slices of the pairs' first features, of their second (piece
    ``i`` of one pairs with piece ``i`` of the other) and of the rest of a padded
    head of ``width``: ``(i, i + R/2)`` for ``"half"``, ``(2i, 2i + 1)`` (strided)
    for ``"interleaved"``."""
    assert static.rope is not None
    half, rotated = static.rope.rotated // 2, static.rope.rotated
    if static.rope.layout == "half":
        pairs = (_pieces(0, half, 1), _pieces(half, half, 1))
    else:
        pairs = (_pieces(0, half, 2), _pieces(1, half, 2))
    return (*pairs, _pieces(rotated, width - rotated, 1))


def _pieces(start: int, count: int, stride: int) -> list:
    """``count`` features from ``start``, every ``stride``-th, as slices of powers
    of two (the binary digits of ``count``, a multiple of 16), largest first."""
    pieces = []
    for bit in reversed(range(count.bit_length())):
        if count >> bit & 1:
            pieces.append(pl.ds(start, 1 << bit, stride=stride))
            start += (1 << bit) * stride
    return pieces


def _power_of_two(n: int) -> int:
    """The least power of two ``>= max(n, 16)``."""
    return max(MIN_BLOCK, 1 << (n - 1).bit_length())


def _loaded(
    static: Static, ref: Any, rows: Any, positions: Any, rope_ref: Any, side: str
) -> tiles.Features:
    """Block ``rows`` of q or k (``side``): the array, or with RoPE its feature
    segments (:func:`_segments`), the pairs rotated (each rounded once to the
    input's dtype, as the ``"xla"`` path rounds the rotated q and k)."""
    if static.rope is None:
        return ref[rows, :]
    firsts, seconds, rest = _segments(static, ref.shape[-1])
    first = [ref[rows, part].astype(jnp.float32) for part in firsts]
    second = [ref[rows, part].astype(jnp.float32) for part in seconds]
    pairs = zip(first, second, _cos_sin(static, positions, rope_ref, side), strict=True)
    rotated = [(a * cos - b * sin, b * cos + a * sin) for a, b, (cos, sin) in pairs]
    dtype = ref.dtype
    return (
        *(a.astype(dtype) for a, _ in rotated),
        *(b.astype(dtype) for _, b in rotated),
        *(ref[rows, part] for part in rest),
    )


def _cos_sin(static: Static, positions: Any, rope_ref: Any, side: str) -> list:
    """Per piece of the pairs, float32 ``a cos(p f)`` and ``a sin(p f)`` ``[rows,
    piece]`` from the positions ``[rows]`` and the per-lane rows of
    :mod:`flax_posenc.attention._pallas_rope` (read at the pairs' first
    features)."""
    freq_row = _pallas_rope.Q_FREQ if side == "q" else _pallas_rope.K_FREQ
    tables = []
    for firsts in _segments(static, rope_ref.shape[-1])[0]:
        freq = rope_ref[pl.ds(freq_row, 1), firsts]  # [1, piece]
        scaling = rope_ref[pl.ds(freq_row + 1, 1), firsts]
        angles = positions[:, None].astype(jnp.float32) * freq
        tables.append((jnp.cos(angles) * scaling, jnp.sin(angles) * scaling))
    return tables


def _rotated_back(static: Static, grads: Any, positions: Any, rope_ref: Any, side: str):
    """A float32 gradient of rotated segments carried back to the unrotated ones."""
    if static.rope is None:
        return grads
    tables = _cos_sin(static, positions, rope_ref, side)
    n = len(tables)
    pairs = zip(grads[:n], grads[n : 2 * n], tables, strict=True)
    back = [(a * cos + b * sin, b * cos - a * sin) for a, b, (cos, sin) in pairs]
    return (*(a for a, _ in back), *(b for _, b in back), *grads[2 * n :])


def _store(static: Static, ref: Any, value: Any) -> None:
    """An array, or feature segments (:func:`_segments`) in their places, into
    ``ref``."""
    if not isinstance(value, tuple):
        ref[...] = value
        return
    parts = [part for parts in _segments(static, ref.shape[-1]) for part in parts]
    for part, segment in zip(parts, value, strict=True):
        ref[:, part] = segment


def _pallas(static: Static, kernel, grid, in_specs, out_specs, out_shape):
    return pl.pallas_call(
        functools.partial(kernel, static),
        out_shape=out_shape,
        grid=grid,
        in_specs=in_specs,
        out_specs=out_specs,
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=2),
        interpret=static.interpret,
        name="flax_posenc_flash_attention",
    )


def _specs(static: Static, operands: tuple) -> dict:
    """Block specs for a grid ``(B, N, block)``: ``*_block`` follow the grid's
    block index, ``*_whole`` hold a head's whole padded length (sliced per step)."""
    row, groups = flash.row(static), static.groups
    run, _, head, shared, q, k = operands[:6]
    lengths = {"q": q.shape[2], "k": k.shape[2]}
    sizes = {"q": static.block_q, "k": static.block_k}

    def array(side: str, width: int, whole: bool) -> pl.BlockSpec:
        size = lengths[side] if whole else sizes[side]
        kv = side == "k"
        return pl.BlockSpec(
            (None, None, size, width),
            lambda b, h, x: (
                b,
                jax.lax.div(h, groups) if kv else h,
                0 if whole else x,
                0,
            ),
        )

    def rows(side: str, whole: bool) -> pl.BlockSpec:
        size = lengths[side] if whole else sizes[side]
        return pl.BlockSpec((None, size), lambda b, h, x: (row(b), 0 if whole else x))

    full = lambda x: pl.BlockSpec(x.shape, lambda *_: (0,) * x.ndim)
    return {
        "table": pl.BlockSpec((None, *run.shape[1:]), lambda b, h, x: (row(b), 0, 0)),
        "params": [full(head), full(shared)],
        "rope": [full(operands[-1])] if static.rope is not None else [],
        "array": array,
        "rows": rows,
        "stat": lambda whole: pl.BlockSpec(
            (None, None, lengths["q"] if whole else sizes["q"]),
            lambda b, h, x: (b, h, 0 if whole else x),
        ),
    }


def _row_specs(static: Static, specs: dict, q_whole: bool) -> list:
    """The specs of the operands after q, k and v: the rows in operand order (q's
    then k's, positions then segment ids; one side by block, the other whole), then
    RoPE's per-lane rows."""
    count = static.positions + static.segments
    rows = [specs["rows"]("q", q_whole), specs["rows"]("k", not q_whole)] * count
    return rows + specs["rope"]


def _each_block(run_ref: Any, outer: Any, count: int, step, init: Any) -> Any:
    """``step(inner, carry)`` over the inner blocks whose tile may attend."""

    def body(inner: Any, carry: Any) -> Any:
        return jax.lax.cond(
            run_ref[outer, inner] != 0, lambda c: step(inner, c), lambda c: c, carry
        )

    return jax.lax.fori_loop(0, count, body, init)


def _pairs(static: Static, row_refs: tuple, q_slice: Any, k_slice: Any) -> list:
    """The ``[block_q, block_k]`` tiles of the pairs' positions, then segment ids."""
    shape = (static.block_q, static.block_k)
    return [
        (
            jnp.broadcast_to(row_refs[2 * n][q_slice][:, None], shape),
            jnp.broadcast_to(row_refs[2 * n + 1][k_slice][None, :], shape),
        )
        for n in range(len(row_refs) // 2)
    ]


def _call_forward(static: Static, operands: tuple, residuals: bool) -> Any:
    """``out [B, N, Lp, Hv]``, with the rows' log-sum-exp ``[B, N, Lp]`` when
    ``residuals``."""
    run, _, _, _, q, k, v = operands[:7]
    batch, heads, padded_q, _ = q.shape
    specs = _specs(static, operands)
    array = specs["array"]
    in_specs = [specs["table"], *specs["params"], array("q", q.shape[-1], False)]
    in_specs += [array("k", k.shape[-1], True), array("k", v.shape[-1], True)]
    in_specs += _row_specs(static, specs, q_whole=False)
    out_dtype = jnp.float32 if static.float32_out else q.dtype
    out_shape = [jax.ShapeDtypeStruct((batch, heads, padded_q, v.shape[-1]), out_dtype)]
    out_specs = [array("q", v.shape[-1], False)]
    if residuals:
        out_shape.append(jax.ShapeDtypeStruct((batch, heads, padded_q), jnp.float32))
        out_specs.append(specs["stat"](False))
    grid = (batch, heads, padded_q // static.block_q)
    call = _pallas(static, _forward_kernel, grid, in_specs, out_specs, out_shape)
    outs = call(run, *operands[2:])
    return (outs[0], outs[1]) if residuals else outs[0]


def _split(static: Static, refs: tuple, inputs: int) -> tuple:
    """A kernel's refs after the table and the bias's scalars: its ``inputs``
    arrays, the rows, RoPE's per-lane rows (or None), and its outputs."""
    count = 2 * (static.positions + static.segments)
    rope = static.rope is not None
    rope_ref = refs[inputs + count] if rope else None
    return (
        refs[:inputs],
        refs[inputs : inputs + count],
        rope_ref,
        refs[inputs + count + rope :],
    )


def _forward_kernel(static: Static, run_ref, head_ref, shared_ref, *refs):
    (q_ref, k_ref, v_ref), row_refs, rope_ref, outs = _split(static, refs, 3)
    h, i = pl.program_id(1), pl.program_id(2)
    params = tiles.scalar_params(static, head_ref, shared_ref, h)
    block_k = static.block_k
    q_positions = row_refs[0][...] if row_refs else None
    q = _loaded(static, q_ref, slice(None), q_positions, rope_ref, "q")

    def step(j: Any, carry: tuple) -> tuple:
        keys = pl.ds(j * block_k, block_k)
        pairs = _pairs(static, row_refs, slice(None), keys)
        k_positions = row_refs[1][keys] if row_refs else None
        k = _loaded(static, k_ref, keys, k_positions, rope_ref, "k")
        scores = tiles.logits(static, pairs, params, j, q, k)
        row_max, total, acc = carry
        v = v_ref[keys, :]
        return tiles.online_update(scores, v, row_max, total, acc, static.precision)

    init = (
        jnp.full((static.block_q, 1), -jnp.inf, jnp.float32),
        jnp.zeros((static.block_q, 1), jnp.float32),
        jnp.zeros((static.block_q, v_ref.shape[-1]), jnp.float32),
    )
    num_k = k_ref.shape[0] // block_k
    row_max, total, acc = _each_block(run_ref, i, num_k, step, init)
    empty = total == 0.0
    outs[0][...] = (acc / jnp.where(empty, 1.0, total)).astype(outs[0].dtype)
    if len(outs) > 1:  # +inf for a row with no key: its p = exp(s - lse) is 0
        lse = jnp.where(empty, jnp.inf, row_max + jnp.log(total))
        outs[1][...] = lse.reshape(lse.shape[0])


def _call_dq(static: Static, operands: tuple, d_out, lse, delta) -> jax.Array:
    """``dq [B, N, Lp, H]`` float32: per query block, the sum over key blocks."""
    run, q, v = operands[0], operands[4], operands[6]
    batch, heads, padded_q, head_dim = q.shape
    specs = _specs(static, operands)
    array, stat = specs["array"], specs["stat"]
    in_specs = [specs["table"], *specs["params"], array("q", head_dim, False)]
    in_specs += [array("k", head_dim, True), array("k", v.shape[-1], True)]
    in_specs += [array("q", v.shape[-1], False), stat(False), stat(False)]
    in_specs += _row_specs(static, specs, q_whole=False)
    out_shape = jax.ShapeDtypeStruct(q.shape, jnp.float32)
    grid = (batch, heads, padded_q // static.block_q)
    call = _pallas(static, _dq_kernel, grid, in_specs, in_specs[3], out_shape)
    return call(run, *operands[2:7], d_out, lse, delta, *operands[7:])


def _dq_kernel(static: Static, run_ref, head_ref, shared_ref, *refs):
    inputs, row_refs, rope_ref, (dq_ref,) = _split(static, refs, 6)
    q_ref, k_ref, v_ref, d_out_ref, lse_ref, delta_ref = inputs
    h, i = pl.program_id(1), pl.program_id(2)
    params = tiles.scalar_params(static, head_ref, shared_ref, h)
    d_out, block_k = d_out_ref[...], static.block_k
    lse, delta = lse_ref[...][:, None], delta_ref[...][:, None]
    q_positions = row_refs[0][...] if row_refs else None
    q = _loaded(static, q_ref, slice(None), q_positions, rope_ref, "q")
    scale = jnp.float32(static.scale)

    def step(j: Any, d_q: Any) -> Any:
        keys = pl.ds(j * block_k, block_k)
        k_positions = row_refs[1][keys] if row_refs else None
        k = _loaded(static, k_ref, keys, k_positions, rope_ref, "k")
        pairs = _pairs(static, row_refs, slice(None), keys)
        scores = tiles.logits(static, pairs, params, j, q, k)
        _, d_scores = tiles.probabilities_and_grad(
            scores, lse, delta, d_out, v_ref[keys, :], static.precision
        )
        grad = jax.tree.map(
            lambda x: tiles.matmul(
                d_scores.astype(x.dtype), x, (1, 0), static.precision
            ),
            k,
        )
        return jax.tree.map(lambda acc, g: acc + g * scale, d_q, grad)

    num_k = k_ref.shape[0] // block_k
    init = jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), q)
    d_q = _each_block(run_ref, i, num_k, step, init)
    _store(static, dq_ref, _rotated_back(static, d_q, q_positions, rope_ref, "q"))


def _call_dkv(static: Static, operands: tuple, d_out, lse, delta) -> tuple:
    """``dk, dv [B, N, Sp, H]`` float32 per query head, and the bias's scalars'
    gradient ``[B, N, Kb, 1, 128]`` (head, shared): per key block, the sum over
    query blocks."""
    run, _, _, _, q, k, v = operands[:7]
    batch, heads, _, head_dim = q.shape
    padded_k, num_k = k.shape[2], k.shape[2] // static.block_k
    specs = _specs(static, operands)
    array, stat = specs["array"], specs["stat"]
    table = pl.BlockSpec(
        (None, num_k, run.shape[1]), lambda b, h, x: (flash.row(static)(b), 0, 0)
    )
    in_specs = [table, *specs["params"], array("q", head_dim, True)]
    in_specs += [array("k", head_dim, False), array("k", v.shape[-1], False)]
    in_specs += [array("q", v.shape[-1], True), stat(True), stat(True)]
    in_specs += _row_specs(static, specs, q_whole=True)
    per_key = lambda width: pl.BlockSpec(
        (None, None, static.block_k, width), lambda b, h, j: (b, h, j, 0)
    )
    lanes = pl.BlockSpec(
        (None, None, None, 1, tiles.LANES), lambda b, h, j: (b, h, j, 0, 0)
    )
    out_specs = [per_key(head_dim), per_key(v.shape[-1]), lanes, lanes]
    out_shape = [
        jax.ShapeDtypeStruct((batch, heads, padded_k, head_dim), jnp.float32),
        jax.ShapeDtypeStruct((batch, heads, padded_k, v.shape[-1]), jnp.float32),
        jax.ShapeDtypeStruct((batch, heads, num_k, 1, tiles.LANES), jnp.float32),
        jax.ShapeDtypeStruct((batch, heads, num_k, 1, tiles.LANES), jnp.float32),
    ]
    grid = (batch, heads, num_k)
    call = _pallas(static, _dkv_kernel, grid, in_specs, out_specs, out_shape)
    run_t = jnp.swapaxes(run, 1, 2)  # [Bt, Kb, Q]
    return call(run_t, *operands[2:7], d_out, lse, delta, *operands[7:])


def _dkv_kernel(static: Static, run_ref, head_ref, shared_ref, *refs):
    inputs, row_refs, rope_ref, outs = _split(static, refs, 6)
    q_ref, k_ref, v_ref, d_out_ref, lse_ref, delta_ref = inputs
    h, j = pl.program_id(1), pl.program_id(2)
    params = tiles.scalar_params(static, head_ref, shared_ref, h)
    v, block_q = v_ref[...], static.block_q
    k_positions = row_refs[1][...] if row_refs else None
    k = _loaded(static, k_ref, slice(None), k_positions, rope_ref, "k")
    scale = jnp.float32(static.scale)

    def step(i: Any, carry: tuple) -> tuple:
        d_k, d_v, d_head, d_shared = carry
        queries = pl.ds(i * block_q, block_q)
        q_positions = row_refs[0][queries] if row_refs else None
        q = _loaded(static, q_ref, queries, q_positions, rope_ref, "q")
        d_out = d_out_ref[queries, :]
        pairs = _pairs(static, row_refs, queries, slice(None))
        scores = tiles.logits(static, pairs, params, j, q, k)
        lse, delta = lse_ref[queries][:, None], delta_ref[queries][:, None]
        probs, d_scores = tiles.probabilities_and_grad(
            scores, lse, delta, d_out, v, static.precision
        )
        d_v += tiles.matmul(probs.astype(d_out.dtype), d_out, (0, 0), static.precision)
        grad = jax.tree.map(
            lambda x: tiles.matmul(
                d_scores.astype(x.dtype), x, (0, 0), static.precision
            ),
            q,
        )
        d_k = jax.tree.map(lambda acc, g: acc + g * scale, d_k, grad)
        if static.tile is not None:
            head, shared = tiles.bias_grads(static, pairs[0], params, d_scores)
            d_head, d_shared = d_head + head, d_shared + shared
        return d_k, d_v, d_head, d_shared

    lanes = jnp.zeros((1, tiles.LANES), jnp.float32)
    zeros = lambda x: jnp.zeros(x.shape, jnp.float32)
    init = (jax.tree.map(zeros, k), zeros(v), lanes, lanes)
    num_q = q_ref.shape[0] // block_q
    d_k, *rest = _each_block(run_ref, j, num_q, step, init)
    _store(static, outs[0], _rotated_back(static, d_k, k_positions, rope_ref, "k"))
    for out, value in zip(outs[1:], rest, strict=True):
        out[...] = value


KERNELS = flash.Kernels(
    _call_forward, _call_dq, _call_dkv, lambda rows: rows, lambda rows: rows
)
