"""Blockwise attention's unchecked kernel: the one online softmax of the package.

Every entry point checks its arguments into a :class:`flax_posenc.attention._spec.Spec`;
:func:`prepare` turns the checked inputs into :class:`Blocks` (flattened batch,
grouped heads, int32 rows, normalised mask, block sizes, scale), and
:func:`online_softmax` walks query blocks and, inside each, key blocks. Ring
attention carries the statistics between calls instead: :func:`init_stats`, then
:func:`accumulate_in_place` per key/value block that arrives, then
:func:`normalise`. A tile's logits come from the blocks' strategy (:class:`Logits`):
:func:`dot_logits`, or :class:`RemappedLogits` for Self-Extend and dual chunk
attention; masking, bias, tile skipping and the online softmax are the same.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc.attention._spec import Arrays, Bias, Options
from flax_posenc.rope import _core as _rope


class Logits(Protocol):
    """A logits strategy: one tile's unscaled logits, float32 ``[B, K, G, l, s]``,
    from ``q_block [B, l, K, G, Hq]``, ``k_block [B, s, K, Hk]`` and the tile's int32
    positions ``[B or 1, l]`` / ``[B or 1, s]`` (None without positions).

    A strategy may also define ``tile_cases(q_positions, k_positions) -> (index,
    cases) | None``, as a bias may (:class:`flax_posenc.PositionBias`): the kernel
    then runs the tile's step with the strategy ``cases[index]``."""

    def __call__(
        self,
        q_block: jax.Array,
        k_block: jax.Array,
        q_positions: jax.Array | None,
        k_positions: jax.Array | None,
        precision: Any,
    ) -> jax.Array: ...


def dot_logits(
    q_block: jax.Array,
    k_block: jax.Array,
    q_positions: jax.Array | None,
    k_positions: jax.Array | None,
    precision: Any,
) -> jax.Array:
    """The plain strategy: ``q . k`` of every pair (grouped heads, no repeat)."""
    del q_positions, k_positions
    return jnp.einsum(
        "blkgh,bskh->bkgls",
        q_block,
        k_block,
        precision=precision,
        preferred_element_type=jnp.float32,
    )


Select = Callable[[jax.Array, jax.Array], jax.Array]


@dataclasses.dataclass(frozen=True)
class RemappedLogits:
    """The strategy of attentions that rotate q and k at remapped positions.

    q and k are copies, each rotated at its own map of the positions, concatenated
    on the feature axis (:func:`rotated_copies`: ``Hq = Cq H``, ``Hk = Ck H``).
    ``select(q_positions [B or 1, l], k_positions [B or 1, s])`` gives an int ``[B
    or 1, l, s]`` indexing ``pairs``; pair ``(i, j)``'s logit is q's copy ``i``
    dotted with k's copy ``j``. Each pair's tile is formed and merged by ``where``
    (one matmul per pair: stacking DCA's three q copies into one matmul was faster
    forward but kept a three-tile cotangent, 225 instead of 161 MiB of gradient
    temp memory at ``L = 4096``).

    ``tile_cases`` lets the kernel run a tile whose pairs all choose one pair
    as that pair's matmul alone (most tiles, when the maps change every few
    hundred positions); only the tiles where the choice changes merge.
    """

    pairs: tuple[tuple[int, int], ...]  # (q copy, k copy) of each choice
    select: Select
    head_dim: int  # H, the features of one copy
    merged: bool = True  # False: one case of tile_cases, no cases of its own

    def tile_cases(
        self, q_positions: jax.Array, k_positions: jax.Array
    ) -> tuple[jax.Array, tuple[RemappedLogits, ...]] | None:
        """None for a case, else the int32 index of the case exact on this tile
        and the cases: each pair alone, then the merge."""
        if not self.merged:
            return None
        choice = self.select(q_positions, k_positions)
        low, high = jnp.min(choice), jnp.max(choice)
        index = jnp.where(low == high, low, len(self.pairs)).astype(jnp.int32)
        alone = tuple(
            dataclasses.replace(self, pairs=(pair,), merged=False)
            for pair in self.pairs
        )
        return index, (*alone, dataclasses.replace(self, merged=False))

    def __call__(
        self,
        q_block: jax.Array,
        k_block: jax.Array,
        q_positions: jax.Array | None,
        k_positions: jax.Array | None,
        precision: Any,
    ) -> jax.Array:
        # The remapped attentions are causal: their tiles always have positions.
        assert q_positions is not None and k_positions is not None
        size = self.head_dim

        def pair(i: int, j: int) -> jax.Array:
            q_copy = q_block[..., i * size : (i + 1) * size]
            k_copy = k_block[..., j * size : (j + 1) * size]
            return dot_logits(q_copy, k_copy, None, None, precision)

        logits = pair(*self.pairs[0])
        if len(self.pairs) > 1:
            choice = self.select(q_positions, k_positions)[:, None, None]
            for index, (i, j) in enumerate(self.pairs[1:], start=1):
                logits = jnp.where(choice == index, pair(i, j), logits)
        return logits


class Blocks(NamedTuple):
    """Everything the kernel reads, normalised; ``B`` is the flattened batch."""

    q: jax.Array  # [B, L, K, G, Hq]; Hq = H, or the copies of RemappedLogits
    k: jax.Array  # [B, S, K, Hk]
    v: jax.Array  # [B, S, K, Hv]
    q_positions: jax.Array | None  # int32 [B or 1, L]
    k_positions: jax.Array | None  # int32 [B or 1, S]
    q_segment_ids: jax.Array | None  # int32 [B or 1, L]
    k_segment_ids: jax.Array | None  # int32 [B or 1, S]
    mask: jax.Array | None  # [B or 1, N or 1, L or 1, S or 1]
    causal: bool
    scale: float
    block_q: int  # <= L
    block_k: int  # <= S
    batch_shape: tuple[int, ...]  # the leading axes of the inputs
    logits: Logits = dot_logits  # the tile's logits before the scale


class Tile(NamedTuple):
    """One ``[block_q, block_k]`` tile: the operands of one online-softmax step."""

    q_block: jax.Array  # [B, block_q, K, G, H]
    k_block: jax.Array  # [B, block_k, K, H]
    v_block: jax.Array  # [B, block_k, K, Hv]
    q_start: jax.Array
    k_start: jax.Array
    keep: jax.Array | None  # bool [B or 1, K or 1, G or 1, block_q, block_k]


def prepare(
    q: jax.Array, k: jax.Array, v: jax.Array, arrays: Arrays, options: Options
) -> Blocks:
    """The kernel's record: flattened batch, ``N = K * G`` heads grouped, int32 rows
    of positions and segment ids, the mask as ``[B or 1, N or 1, L or 1, S or 1]``,
    block sizes at most the lengths, the default scale."""
    batch_shape = q.shape[:-3]
    batch = math.prod(batch_shape)
    length, heads, head_dim = q.shape[-3:]
    keys, kv_heads = k.shape[-3:-1]
    qp = kp = qs = ks = mask = None
    if arrays.q_positions is not None:
        qp = _rows(arrays.q_positions, batch_shape)
        k_positions = arrays.k_positions
        kp = qp if k_positions is None else _rows(k_positions, batch_shape)
    if arrays.q_segment_ids is not None:
        qs = _rows(arrays.q_segment_ids, batch_shape)
        k_segment_ids = arrays.k_segment_ids
        ks = qs if k_segment_ids is None else _rows(k_segment_ids, batch_shape)
    if arrays.mask is not None:
        mask = _normalise_mask(arrays.mask, batch_shape)
    scale = 1.0 / math.sqrt(head_dim) if options.scale is None else options.scale
    return Blocks(
        q=q.reshape(batch, length, kv_heads, heads // kv_heads, head_dim),
        k=k.reshape(batch, keys, kv_heads, k.shape[-1]),
        v=v.reshape(batch, keys, kv_heads, v.shape[-1]),
        q_positions=qp,
        k_positions=kp,
        q_segment_ids=qs,
        k_segment_ids=ks,
        mask=mask,
        causal=options.causal,
        scale=scale,
        block_q=min(options.block_q, length),
        block_k=min(options.block_k, keys),
        batch_shape=batch_shape,
    )


def rotated_copies(
    x: jax.Array,
    positions: Sequence[jax.Array],
    rope: Any,
    factor: jax.Array | None = None,
) -> jax.Array:
    """``x [..., L, N, H]`` rotated by ``rope`` at each of ``positions`` (integer
    ``[..., L]``), each copy times ``factor [..., L]`` (float32) if given,
    concatenated on the feature axis: q or k for :class:`RemappedLogits`."""
    copies = []
    for p in positions:
        cos, sin = _rope.tables(p, rope, None)
        copy = _rope.rotate(x, cos, sin, rope.layout)
        if factor is not None:
            copy = copy.astype(jnp.float32) * factor[..., None, None]
        copies.append(copy)
    return jnp.concatenate(copies, axis=-1)


def remapped_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    arrays: Arrays,
    options: Options,
    logits: RemappedLogits,
    precision: Any,
) -> jax.Array:
    """The kernel with the ``logits`` strategy over q and k copies (see
    :func:`rotated_copies`; the scale is of one copy, ``1 / sqrt(H)`` by default).
    ``[..., L, N, Hv]`` in q's dtype."""
    if options.scale is None:
        options = options._replace(scale=1.0 / math.sqrt(logits.head_dim))
    blocks = prepare(q, k, v, arrays, options)._replace(logits=logits)
    return online_softmax(blocks, None, precision)


class Stats(NamedTuple):
    """The online softmax's running statistics of one or all query blocks, float32.

    Per query block ``[B, K, G, block_q]`` (and ``[..., Hv]`` for ``acc``); stacked
    over the query blocks of :func:`q_starts` as ``[Q, B, K, G, block_q, ...]``.
    """

    row_max: jax.Array  # running max of the logits (-inf: no key yet)
    denominator: jax.Array  # sum of exp(logit - row_max)
    acc: jax.Array  # sum of exp(logit - row_max) v


def q_starts(length: int, block_q: int) -> np.ndarray:
    """int32 start of each query block; the last starts at ``L - block_q``,
    overlapping the one before it when ``block_q`` does not divide ``L``."""
    return np.minimum(np.arange(0, length, block_q, dtype=np.int32), length - block_q)


def init_stats(blocks: Blocks, stacked: bool = True) -> Stats:
    """Statistics before any key: of one query block, or stacked over them."""
    batch, length, kv_heads, groups, _ = blocks.q.shape
    shape = (len(q_starts(length, blocks.block_q)),) if stacked else ()
    shape += (batch, kv_heads, groups, blocks.block_q)
    return Stats(
        jnp.full(shape, -jnp.inf, jnp.float32),
        jnp.zeros(shape, jnp.float32),
        jnp.zeros((*shape, blocks.v.shape[-1]), jnp.float32),
    )


def accumulate_in_place(
    blocks: Blocks, bias: Bias | None, precision: Any, stats: Stats
) -> Stats:
    """``stats`` (stacked) updated with every key of ``blocks.k``: a loop over the
    query blocks that updates them in place (one buffer, not a map's input and
    output), each a rematerialised scan over the key blocks. Once per ring step."""
    starts = jnp.asarray(q_starts(blocks.q.shape[1], blocks.block_q))

    def body(index: jax.Array, stats: Stats) -> Stats:
        block = Stats(*(x[index] for x in stats))
        block = _accumulate_q_block(blocks, bias, precision, starts[index], block)
        return Stats(*(x.at[index].set(y) for x, y in zip(stats, block, strict=True)))

    return jax.lax.fori_loop(0, len(starts), body, stats)


def normalise(stats: Stats, dtype: Any) -> jax.Array:
    """``acc / denominator`` (zeros for rows with no key) in ``dtype``, in the
    statistics' layout ``[..., B, K, G, block_q, Hv]``."""
    safe = jnp.where(stats.denominator == 0.0, 1.0, stats.denominator)
    return (stats.acc / safe[..., None]).astype(dtype)


def from_stats_layout(blocks: Blocks, stacked: jax.Array) -> jax.Array:
    """``[Q, B, K, G, block_q, ...]`` per query block to ``[..., L, N, ...]`` rows
    (the overlapping rows of the last block taken from it); linear."""
    num_blocks, batch, kv_heads, groups, block_q = stacked.shape[:5]
    trail = stacked.shape[5:]
    length = blocks.q.shape[1]
    out = jnp.moveaxis(stacked, 4, 2)  # [Q, B, block_q, K, G, ...]
    out = jnp.moveaxis(out, 0, 1).reshape(batch, num_blocks * block_q, -1, *trail)
    if length % block_q:
        overlap = num_blocks * block_q - length
        last = out[:, (num_blocks - 1) * block_q + overlap :]
        out = jnp.concatenate([out[:, : (num_blocks - 1) * block_q], last], axis=1)
    return out.reshape(*blocks.batch_shape, length, kv_heads * groups, *trail)


def online_softmax(blocks: Blocks, bias: Bias | None, precision: Any) -> jax.Array:
    """The kernel: a rematerialised map over query blocks; ``[..., L, N, Hv]``."""
    init = init_stats(blocks, stacked=False)

    def attend(q_start: jax.Array) -> jax.Array:
        stats = _accumulate_q_block(blocks, bias, precision, q_start, init)
        return normalise(stats, blocks.q.dtype)  # [B, K, G, block_q, Hv]

    starts = jnp.asarray(q_starts(blocks.q.shape[1], blocks.block_q))
    out = jax.lax.map(jax.checkpoint(attend, prevent_cse=False), starts)
    return from_stats_layout(blocks, out)


def _accumulate_q_block(
    blocks: Blocks,
    bias: Bias | None,
    precision: Any,
    q_start: jax.Array,
    stats: Stats,
) -> Stats:
    """One query block's ``stats`` after a rematerialised scan over the key
    blocks."""
    q_block = jax.lax.dynamic_slice_in_dim(blocks.q, q_start, blocks.block_q, axis=1)
    return accumulate_block(blocks, bias, precision, q_start, q_block, stats)


def accumulate_block(
    blocks: Blocks,
    bias: Bias | None,
    precision: Any,
    q_start: jax.Array,
    q_block: jax.Array,
    stats: Stats,
) -> Stats:
    """The query block ``q_block [B, block_q, K, G, H]`` (rows from ``q_start``)
    against every key of ``blocks``: a rematerialised scan over the key blocks
    (ring attention's backward differentiates it with respect to ``q_block``)."""
    step = functools.partial(_k_step, blocks, bias, precision, q_start, q_block)
    keys = blocks.k.shape[1]
    carry, _ = jax.lax.scan(
        jax.checkpoint(step, prevent_cse=False),
        tuple(stats),
        jnp.arange(-(-keys // blocks.block_k), dtype=jnp.int32),
    )
    return Stats(*carry)


def _k_step(
    blocks: Blocks,
    bias: Bias | None,
    precision: Any,
    q_start: jax.Array,
    q_block: jax.Array,
    carry: tuple[jax.Array, jax.Array, jax.Array],
    k_index: jax.Array,
) -> tuple[tuple[jax.Array, jax.Array, jax.Array], None]:
    """The scan body: slices key block ``k_index`` and updates the statistics."""
    block_k = blocks.block_k
    k_start = jnp.minimum(k_index * block_k, blocks.k.shape[1] - block_k)
    keep = _allowed_pairs(blocks, q_start, k_start, k_index)
    # Sliced outside the cond: their cotangents stay block-sized inside it.
    k_block = jax.lax.dynamic_slice_in_dim(blocks.k, k_start, block_k, axis=1)
    v_block = jax.lax.dynamic_slice_in_dim(blocks.v, k_start, block_k, axis=1)
    tile = Tile(q_block, k_block, v_block, q_start, k_start, keep)
    update = functools.partial(_update, blocks, bias, precision)
    if keep is None:
        return update(carry, tile), None
    # Tiles where every pair is masked (half of them, causal) are skipped.
    skip = lambda carry, _: carry
    return jax.lax.cond(jnp.any(keep), update, skip, carry, tile), None


def _allowed_pairs(
    blocks: Blocks, q_start: jax.Array, k_start: jax.Array, k_index: jax.Array
) -> jax.Array | None:
    """bool ``[B or 1, K or 1, G or 1, block_q, block_k]``, or None for all."""
    block_q, block_k = blocks.block_q, blocks.block_k
    qp, kp = blocks.q_positions, blocks.k_positions
    qs, ks = blocks.q_segment_ids, blocks.k_segment_ids
    terms = []
    if blocks.k.shape[1] % block_k:  # the last block overlaps the one before it
        index = k_start + jnp.arange(block_k, dtype=jnp.int32)
        terms.append((index >= k_index * block_k)[None, None, None, None, :])
    if blocks.causal and qp is not None and kp is not None:
        q_pos = jax.lax.dynamic_slice_in_dim(qp, q_start, block_q, axis=1)
        k_pos = jax.lax.dynamic_slice_in_dim(kp, k_start, block_k, axis=1)
        terms.append(_pairs(k_pos, q_pos, jnp.less_equal))
    if qs is not None and ks is not None:
        q_seg = jax.lax.dynamic_slice_in_dim(qs, q_start, block_q, axis=1)
        k_seg = jax.lax.dynamic_slice_in_dim(ks, k_start, block_k, axis=1)
        terms.append(_pairs(k_seg, q_seg, jnp.equal))
    if blocks.mask is not None:
        groups = blocks.q.shape[3]
        terms.append(
            _mask_tile(blocks.mask, q_start, block_q, k_start, block_k, groups)
        )
    if not terms:
        return None
    keep = terms[0]
    for term in terms[1:]:
        keep = keep & term
    return keep


def _update(
    blocks: Blocks,
    bias: Bias | None,
    precision: Any,
    carry: tuple[jax.Array, jax.Array, jax.Array],
    tile: Tile,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One online-softmax step over the keys ``[k_start, k_start + block_k)``.

    A bias with a ``tile_cases(q_positions, k_positions) -> (index, cases)``
    method (see :class:`flax_posenc.PositionBias`) picks, per tile, the case that
    is exact there; each case's step is its own branch, so its bias still fuses
    into the logits (a switch inside the bias would store its tile). A logits
    strategy with ``tile_cases`` (:class:`RemappedLogits`) is switched the same
    way, after the bias's."""
    q_pos, k_pos = _tile_positions(blocks, tile)
    bias_cases = getattr(bias, "tile_cases", None)
    if bias_cases is not None and q_pos is not None and k_pos is not None:
        index, cases = bias_cases(q_pos, k_pos)
        steps = [functools.partial(_update, blocks, case, precision) for case in cases]
        return jax.lax.switch(index, steps, carry, tile)
    logits_cases = getattr(blocks.logits, "tile_cases", None)
    found = None  # (index, cases) of the logits strategy, or None
    if logits_cases is not None and q_pos is not None and k_pos is not None:
        found = logits_cases(q_pos, k_pos)
    if found is not None:
        index, cases = found
        steps = [
            functools.partial(_update, blocks._replace(logits=case), bias, precision)
            for case in cases
        ]
        return jax.lax.switch(index, steps, carry, tile)
    logits = blocks.logits(tile.q_block, tile.k_block, q_pos, k_pos, precision)
    logits = logits * jnp.float32(blocks.scale)
    tile_bias = None
    if bias is not None and q_pos is not None and k_pos is not None:
        tile_bias = _bias_tile(bias, q_pos, k_pos, logits.shape)
    if tile.keep is not None:
        # Broadcast once: one mask residual for both selects under autodiff.
        keep = jnp.broadcast_to(tile.keep, logits.shape)
        logits = jnp.where(keep, logits, -jnp.inf)
        if tile_bias is not None:  # 0, not -inf: masked pairs stay -inf + 0
            tile_bias = jnp.where(keep, tile_bias, 0.0)
    if tile_bias is not None:
        # The add of two whole tiles comes last, so XLA:CPU stores these biased,
        # masked logits once and the max and the exp both read them. With the
        # select last it recomputed the add and select inside the exp, which
        # kept an expensive bias (log1p, power) as a second stored tile.
        logits = logits + tile_bias
    return _softmax_step(carry, logits, tile.v_block, precision)


def _tile_positions(
    blocks: Blocks, tile: Tile
) -> tuple[jax.Array | None, jax.Array | None]:
    """The tile's int32 positions ``[B or 1, l]`` and ``[B or 1, s]``, or None."""
    if blocks.q_positions is None or blocks.k_positions is None:
        return None, None
    rows, cols = tile.q_block.shape[1], tile.k_block.shape[1]
    q_pos = jax.lax.dynamic_slice_in_dim(blocks.q_positions, tile.q_start, rows, 1)
    k_pos = jax.lax.dynamic_slice_in_dim(blocks.k_positions, tile.k_start, cols, 1)
    return q_pos, k_pos


def _softmax_step(
    carry: tuple[jax.Array, jax.Array, jax.Array],
    logits: jax.Array,
    v_block: jax.Array,
    precision: Any,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The statistics ``carry`` updated with one tile's final logits."""
    row_max, denominator, acc = carry
    new_max = jax.lax.stop_gradient(jnp.maximum(row_max, logits.max(-1)))
    # A row masked so far has max -inf: subtract 0 instead (exp(-inf) = 0).
    shift = jnp.where(new_max == -jnp.inf, 0.0, new_max)
    probs = jnp.exp(logits - shift[..., None])
    correction = jnp.exp(row_max - shift)
    weighted = jnp.einsum(
        "bkgls,bskh->bkglh",
        probs.astype(v_block.dtype),
        v_block,
        precision=precision,
        preferred_element_type=jnp.float32,
    )
    denominator = denominator * correction + probs.sum(-1)
    return new_max, denominator, acc * correction[..., None] + weighted


def _rows(x: jax.Array, batch_shape: tuple[int, ...]) -> jax.Array:
    """int32 ``[1, n]`` if shared by the batch, else ``[..., n]`` as ``[B, n]``."""
    x = x.astype(jnp.int32)
    n = x.shape[-1]
    if all(d == 1 for d in x.shape[:-1]):
        return x.reshape(1, n)
    x = x.reshape((1,) * (len(batch_shape) + 1 - x.ndim) + x.shape)
    return jnp.broadcast_to(x, batch_shape + (n,)).reshape(-1, n)


def _normalise_mask(mask: Any, batch_shape: tuple[int, ...]) -> jax.Array:
    """``[B or 1, N or 1, L or 1, S or 1]`` from a checked mask."""
    mask = jnp.asarray(mask)
    mask = mask.reshape((1,) * (len(batch_shape) + 3 - mask.ndim) + mask.shape)
    if all(d == 1 for d in mask.shape[:-3]):
        return mask.reshape(1, *mask.shape[-3:])
    mask = jnp.broadcast_to(mask, batch_shape + mask.shape[-3:])
    return mask.reshape(-1, *mask.shape[-3:])


def _pairs(k_values: jax.Array, q_values: jax.Array, op: Callable) -> jax.Array:
    """bool ``[B, 1, 1, l, s]``: ``op(k_values[j], q_values[i])`` per pair."""
    pairs = op(k_values[:, None, :], q_values[:, :, None])
    return pairs[:, None, None]


def _mask_tile(
    mask: jax.Array,
    q_start: jax.Array,
    block_q: int,
    k_start: jax.Array,
    block_k: int,
    groups: int,
) -> jax.Array:
    """The bool ``[B or 1, K or 1, G or 1, l or 1, s or 1]`` tile of a normalised
    mask."""
    if mask.shape[2] != 1:
        mask = jax.lax.dynamic_slice_in_dim(mask, q_start, block_q, axis=2)
    if mask.shape[3] != 1:
        mask = jax.lax.dynamic_slice_in_dim(mask, k_start, block_k, axis=3)
    mask = mask != 0  # Flax's masks are float 0/1
    mask_heads = mask.shape[1]
    if mask_heads == 1:
        return mask[:, :, None]
    return mask.reshape(mask.shape[0], mask_heads // groups, groups, *mask.shape[2:])


def _bias_tile(
    bias: Bias,
    q_positions: jax.Array,
    k_positions: jax.Array,
    logits_shape: tuple[int, ...],
) -> jax.Array:
    """``bias`` of one tile (its shape checked with the spec) shaped like the logits
    ``[B, K, G, l, s]``, float32."""
    _, kv_heads, groups, rows, cols = logits_shape
    tile = getattr(bias, "tile", bias)(q_positions, k_positions)
    return tile.reshape(-1, kv_heads, groups, rows, cols).astype(jnp.float32)
