"""The tile math of the Pallas kernels (:mod:`flax_posenc.attention._pallas_tpu`,
:mod:`flax_posenc.attention._pallas_gpu`): what one step computes of a ``[block_q,
block_k]`` tile, shared by the forward kernel and the two backward kernels of both.

Functions take values in fast memory (or read the kernel's scalar refs) and return
values; a row statistic is ``[block_q, 1]``. The TPU kernels keep theirs
lane-broadcast ``[block_q, 128]`` in memory (TPU layouts) and pass the first lane.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from flax_posenc.attention._pallas_rope import RopeStatic

LANES = 128  # a TPU vector register's lanes: block_k's unit
SUBLANES = 8  # its sublanes: block_q's unit


# a block of q or k: the array, or its feature segments (the GPU kernel's RoPE)
Features = jax.Array | tuple[jax.Array, ...]


class Static(NamedTuple):
    """What the kernels are compiled for."""

    scale: float
    causal: bool
    positions: bool  # q/k positions are inputs
    segments: bool  # q/k segment ids are inputs
    tile: Callable[..., jax.Array] | None  # KernelBias.tile, or no bias
    params_per_head: int  # P of KernelBias.head_params
    shared_params: int  # Q of KernelBias.shared_params
    keys: int  # S before padding (keys from S on are masked)
    block_q: int
    block_k: int
    groups: int  # G = N // K
    batch_rows: bool  # positions / segment ids per sequence (else shared)
    precision: Any  # of the matmuls
    interpret: bool
    rope: RopeStatic | None = None  # RoPE of the q and k tiles, or none
    float32_out: bool = False  # the forward's output in float32 (a ring's steps)


class Params(NamedTuple):
    """The bias's scalars as the kernel reads them: ``head(i)`` and ``shared(j)``."""

    head: Callable[[int], Any]
    shared: Callable[[int], Any]


def scalar_params(static: Static, head_ref: Any, shared_ref: Any, h: Any) -> Params:
    """Head ``h``'s scalars and the shared ones, read from scalar memory."""
    per_head = static.params_per_head
    return Params(
        lambda index: head_ref[h * per_head + index],
        lambda index: shared_ref[index],
    )


def position_pairs(
    tile_refs: Sequence[Any], shape: tuple[int, int]
) -> list[tuple[jax.Array, jax.Array]]:
    """The ``[block_q, block_k]`` tiles of every pair's query and key positions,
    then segment ids (whichever the kernel reads), formed once per step."""
    return [
        pair_tiles(tile_refs[2 * n], tile_refs[2 * n + 1], shape)
        for n in range(len(tile_refs) // 2)
    ]


def logits(
    static: Static,
    pairs: Sequence[tuple[jax.Array, jax.Array]],
    params: Params,
    j: Any,
    q: Features,
    k: Features,
) -> jax.Array:
    """Tile ``(q block, key block j)``'s final logits, float32 ``[block_q,
    block_k]``: ``scale q . k`` plus the bias, -inf where masked (causal from the
    positions, segment ids, keys past ``S``). q and k may be tuples of feature
    segments (the GPU kernel's RoPE): their dot products are summed."""
    dots = jax.tree.map(lambda a, b: matmul(a, b, (1, 1), static.precision), q, k)
    out = sum(jax.tree.leaves(dots)) * jnp.float32(static.scale)
    shape = out.shape
    keep = None
    if static.keys % static.block_k:  # keys past S are padding
        column = j * static.block_k + jax.lax.broadcasted_iota(jnp.int32, shape, 1)
        keep = column < static.keys
    if static.causal:
        q_pos, k_pos = pairs[0]
        keep = _and(keep, k_pos <= q_pos)
    if static.segments:
        q_seg, k_seg = pairs[-1]
        keep = _and(keep, q_seg == k_seg)
    if static.tile is not None:
        out = out + static.tile(params.head, params.shared, *pairs[0])
    if keep is not None:
        out = jnp.where(keep, out, -jnp.inf)
    return out


def pair_tiles(
    q_ref: Any, k_ref: Any, shape: tuple[int, ...]
) -> tuple[jax.Array, jax.Array]:
    """int32 ``[block_q, block_k]`` tiles of every pair's query and key value, from
    the lane-broadcast ``[block_q, 128]`` and sublane-broadcast ``[8, block_k]``
    blocks."""
    q_values = jnp.tile(q_ref[...], (1, shape[1] // LANES))
    k_values = jnp.broadcast_to(k_ref[...][:1, :], shape)
    return q_values, k_values


def _and(keep: jax.Array | None, term: jax.Array) -> jax.Array:
    return term if keep is None else keep & term


def matmul(
    a: jax.Array, b: jax.Array, contract: tuple[int, int], precision: Any
) -> jax.Array:
    """``a`` and ``b`` contracted on axes ``contract``, float32."""
    return jax.lax.dot_general(
        a, b, (((contract[0],), (contract[1],)), ((), ())),
        precision=precision, preferred_element_type=jnp.float32,
    )  # fmt: skip


def softmax_step(
    scores: jax.Array,
    v: jax.Array,
    m_ref: Any,
    l_ref: Any,
    acc_ref: Any,
    precision: Any,
) -> None:
    """:func:`online_update` of the statistics in scratch (lane-broadcast)."""
    m, total, acc = online_update(
        scores, v, m_ref[...][:, :1], l_ref[...][:, :1], acc_ref[...], precision
    )
    acc_ref[...] = acc
    m_ref[...] = jnp.broadcast_to(m, m_ref.shape)
    l_ref[...] = jnp.broadcast_to(total, l_ref.shape)


def online_update(
    scores: jax.Array,
    v: jax.Array,
    row_max: jax.Array,
    total: jax.Array,
    acc: jax.Array,
    precision: Any,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The online softmax's row maximum ``[block_q, 1]``, denominator ``[block_q,
    1]`` and float32 accumulator ``[block_q, Hv]`` updated with one tile's
    logits."""
    new_max = jnp.maximum(row_max, scores.max(axis=-1, keepdims=True))
    # A row masked so far has max -inf: subtract 0 instead (exp(-inf) = 0).
    shift = jnp.where(new_max == -jnp.inf, 0.0, new_max)
    probs = jnp.exp(scores - shift)
    correction = jnp.exp(row_max - shift)
    total = total * correction + probs.sum(axis=-1, keepdims=True)
    weighted = matmul(probs.astype(v.dtype), v, (1, 0), precision)
    return new_max, total, acc * correction + weighted


def probabilities_and_grad(
    scores: jax.Array,
    lse: jax.Array,
    delta: jax.Array,
    d_out: jax.Array,
    v: jax.Array,
    precision: Any,
) -> tuple[jax.Array, jax.Array]:
    """``p = exp(s - lse)`` and the logits' gradient ``ds = p (d_out . v - D)``,
    float32 ``[block_q, block_k]``, from the rows' ``lse`` and ``D = d_out . out``
    (lane-broadcast; ``lse`` is +inf for a row with no key, so its ``p`` is 0)."""
    probs = jnp.exp(scores - lse)
    d_probs = matmul(d_out, v, (1, 1), precision)
    return probs, probs * (d_probs - delta)


def bias_grads(
    static: Static,
    positions: tuple[jax.Array, jax.Array],
    params: Params,
    d_scores: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """The tile's gradient of the bias's scalars, ``sum ds * d bias / d param``, by
    the bias's own VJP on the tile: float32 ``[1, 128]`` lanes, head scalar ``i``
    in lane ``i``, and the shared scalars likewise."""
    bias_tile = static.tile
    assert bias_tile is not None
    q_pos, k_pos = positions
    vector = lambda value: jnp.full((1, 1), value, jnp.float32)
    head = [vector(params.head(i)) for i in range(static.params_per_head)]
    shared = [vector(params.shared(i)) for i in range(static.shared_params)]

    def tile(head: list, shared: list) -> jax.Array:
        return bias_tile(lambda i: head[i], lambda i: shared[i], q_pos, k_pos)

    _, vjp = jax.vjp(tile, head, shared)
    d_head, d_shared = vjp(d_scores)
    return _lanes(d_head), _lanes(d_shared)


def _lanes(values: list[jax.Array]) -> jax.Array:
    """``[1, 1]`` values as lanes ``0..n-1`` of a float32 ``[1, 128]``."""
    lane = jax.lax.broadcasted_iota(jnp.int32, (1, LANES), 1)
    out = jnp.zeros((1, LANES), jnp.float32)
    for index, value in enumerate(values):
        out = jnp.where(lane == index, value, out)
    return out
