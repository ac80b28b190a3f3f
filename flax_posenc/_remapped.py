"""Attention whose logits pick, per query/key pair, one of several position maps.

The training-free extensions (Self-Extend, dual chunk attention) rotate q and k at
*remapped* positions, differently for near and far pairs. Here each map is a pair
(q rotated one way, k rotated one way), and ``select(q_pos, k_pos)`` says per pair
which one supplies the logit. Tiles of ``[block_q, block_k]`` logits are formed for
every map, merged with ``where`` and folded into an online softmax (as in
``_blockwise``), so no ``[N, L, S]`` array exists. Causal; the keys a query may see
are ``valid`` keys with ``k_pos <= q_pos``.

Everything here runs inside the callers' compiled cores (``jax.jit`` with the
configuration static), after the checks of :mod:`flax_posenc._remap_checks`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from flax_posenc import _rope

Select = Callable[[jax.Array, jax.Array], jax.Array]


def batched(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_positions: jax.Array,
    k_positions: jax.Array,
) -> tuple[jax.Array, ...]:
    """``q, k, v`` as ``[B, L, N, H]`` (a batch axis added to rank 3, k/v heads
    repeated to q's) and the positions as int32 ``[B, L]`` / ``[B, S]``."""
    if q.ndim == 3:
        q, k, v = q[None], k[None], v[None]
    batch, repeats = q.shape[0], q.shape[2] // k.shape[2]
    q_positions = jnp.broadcast_to(q_positions.astype(jnp.int32), q.shape[:2])
    k_positions = jnp.broadcast_to(k_positions.astype(jnp.int32), (batch, k.shape[1]))
    k, v = jnp.repeat(k, repeats, axis=2), jnp.repeat(v, repeats, axis=2)
    return q, k, v, q_positions, k_positions


def rotate_at(x: jax.Array, positions: jax.Array, rope: Any) -> jax.Array:
    """``x [B, L, N, H]`` rotated at int32 ``positions [B, L]`` by the RoPE core."""
    cos, sin = _rope.tables(positions, rope, None)
    return _rope.rotate(x, cos, sin, rope.layout)


def _pad(x: jax.Array, axis: int, size: int, value=0) -> jax.Array:
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, pad, constant_values=value)


def remapped_attention(
    qs: Sequence[jax.Array],
    ks: Sequence[jax.Array],
    v: jax.Array,
    q_positions: jax.Array,
    k_positions: jax.Array,
    pairs: Sequence[tuple[int, int]],
    select: Select,
    scale: jax.Array | float,
    block_q: int,
    block_k: int,
) -> jax.Array:
    """``qs [B, L, N, H]``, ``ks [B, S, N, H]`` (heads already repeated), ``v [B, S,
    N, Hv]``, positions ``[B, L]`` / ``[B, S]``; ``select`` -> int ``[B, l, s]``
    indexing ``pairs``. Returns float32 ``[B, L, N, Hv]``."""
    batch, length = q_positions.shape
    keys = k_positions.shape[1]
    bq, bk = min(block_q, length), min(block_k, keys)
    lq, lk = -(-length // bq) * bq, -(-keys // bk) * bk
    qs = [_pad(q.astype(jnp.float32), 1, lq) for q in qs]
    ks = [_pad(k.astype(jnp.float32), 1, lk) for k in ks]
    v = _pad(v.astype(jnp.float32), 1, lk)
    valid = _pad(jnp.ones((batch, keys), bool), 1, lk, False)
    q_pos = _pad(q_positions, 1, lq)
    k_pos = _pad(k_positions, 1, lk)
    heads, value_dim = v.shape[2], v.shape[3]
    highest = jax.lax.Precision.HIGHEST

    def tile(carry, k_start, q_block, qp):
        m, l_sum, acc = carry
        kp = jax.lax.dynamic_slice_in_dim(k_pos, k_start, bk, axis=1)
        ok = jax.lax.dynamic_slice_in_dim(valid, k_start, bk, axis=1)
        v_tile = jax.lax.dynamic_slice_in_dim(v, k_start, bk, axis=1)
        choice = select(qp, kp)[:, None]  # [B, 1, l, s]

        def pair_logits(qi: int, ki: int) -> jax.Array:
            k_tile = jax.lax.dynamic_slice_in_dim(ks[ki], k_start, bk, axis=1)
            return jnp.einsum("blnh,bsnh->bnls", q_block[qi], k_tile, precision=highest)

        logits = pair_logits(*pairs[0])
        for index, (qi, ki) in enumerate(pairs[1:], start=1):
            logits = jnp.where(choice == index, pair_logits(qi, ki), logits)
        allowed = (kp[:, None, :] <= qp[:, :, None]) & ok[:, None, :]
        logits = jnp.where(allowed[:, None], scale * logits, -jnp.inf)
        m_new = jnp.maximum(m, logits.max(-1))
        m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
        p = jnp.exp(logits - m_safe[..., None])
        correction = jnp.exp(jnp.where(jnp.isfinite(m), m - m_safe, -jnp.inf))
        l_sum = l_sum * correction + p.sum(-1)
        pv = jnp.einsum("bnls,bsnh->bnlh", p, v_tile, precision=highest)
        acc = acc * correction[..., None] + pv
        return (m_new, l_sum, acc), None

    @jax.checkpoint
    def query_block(q_start):
        q_block = [jax.lax.dynamic_slice_in_dim(q, q_start, bq, axis=1) for q in qs]
        qp = jax.lax.dynamic_slice_in_dim(q_pos, q_start, bq, axis=1)
        init = (
            jnp.full((batch, heads, bq), -jnp.inf),
            jnp.zeros((batch, heads, bq)),
            jnp.zeros((batch, heads, bq, value_dim)),
        )
        step = jax.checkpoint(lambda c, s: tile(c, s, q_block, qp))
        (_, l_sum, acc), _ = jax.lax.scan(step, init, jnp.arange(0, lk, bk))
        out = jnp.where(
            l_sum[..., None] > 0, acc / jnp.maximum(l_sum, 1e-30)[..., None], 0
        )
        return jnp.swapaxes(out, 1, 2)  # [B, l, N, Hv]

    blocks = jax.lax.map(query_block, jnp.arange(0, lq, bq))  # [nq, B, l, N, Hv]
    out = jnp.moveaxis(blocks, 0, 1).reshape(batch, lq, heads, value_dim)
    return out[:, :length]
