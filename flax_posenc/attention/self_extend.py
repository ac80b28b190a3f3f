"""Self-Extend: grouped positions for far tokens, exact ones for neighbours (Jin et
al., 2024).

A RoPE model trained at length ``T`` reads longer inputs without training: for query
position ``i`` and key position ``j <= i`` with ``d = i - j``::

    d <  window:  the logit of q rotated at i            and k rotated at j
    d >= window:  the logit of q rotated at i // G + window - window // G
                               and k rotated at j // G

so neighbours keep their distance and far keys see ``i // G - j // G + window -
window // G``, which continues the neighbour range and grows ``G`` times slower: a
context ``C <= (T - window) G + window`` stays inside ``T``. The two logits are
merged per tile inside the online softmax of :func:`flax_posenc.blockwise_attention`.

Reference: Jin et al., "LLM Maybe LongLM: Self-Extend LLM Context Window Without
Tuning", ICML 2024 (Section 3, eq. 3, Figure 2); the authors' code (``group_size_1 =
G``, ``group_size_2 = window``).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from flax_posenc._core.eager import jit_when_eager
from flax_posenc._core.validation import check_positive_int
from flax_posenc.attention import _blockwise
from flax_posenc.attention._spec import Arrays, Options, check_spec, position_pair
from flax_posenc.rope.config import RopeConfig

__all__ = ["self_extend_attention"]


def self_extend_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    q_positions: jax.Array,
    k_positions: jax.Array | None = None,
    rope: RopeConfig,
    group_size: int,
    window: int,
    scale: float | None = None,
    block_q: int = 512,
    block_k: int = 512,
    precision: Any = jax.lax.Precision.HIGHEST,
) -> jax.Array:
    """Causal RoPE attention with Self-Extend's remapped positions.

    q and k come *unrotated*: they are rotated here at the neighbour and the grouped
    positions (see the module docstring). Grouped-query attention as
    :func:`flax_posenc.blockwise_attention`; a query with no visible key gets zeros.

    Args:
      q: floating ``[..., L, N, H]``.
      k: floating ``[..., S, K, H]`` (q's rank), ``N`` a multiple of ``K``.
      v: floating ``[..., S, K, Hv]``.
      q_positions: integer ``[..., L]``.
      k_positions: integer ``[..., S]``; None means ``q_positions``.
      rope: the model's :class:`flax_posenc.RopeConfig` (usually unscaled).
      group_size: ``G``, the floor divisor of far positions (``group_size_1``).
      window: neighbours closer than this keep exact positions (``group_size_2``).
      scale: the logit scale; None is ``1 / sqrt(H)``.
      block_q: query rows per tile.
      block_k: keys per tile.
      precision: ``jax.lax.Precision`` of the two matmuls; the default, ``HIGHEST``,
        keeps float32 logits on every backend.

    Returns:
      ``[..., L, N, Hv]`` in q's dtype.

    Raises:
      TypeError: non-floating q/k/v, non-integer positions, ``rope`` not a
        RopeConfig, non-int sizes.
      ValueError: shapes that disagree, positions that break the positions rule,
        sizes ``<= 0``.

    Examples:
      >>> q = jax.random.normal(jax.random.key(0), (1, 64, 2, 8))  # [B, L, N, H]
      >>> out = fp.self_extend_attention(q, q, q, q_positions=jnp.arange(64),
      ...     rope=fp.RopeConfig(head_dim=8), group_size=4, window=16, block_q=32)
      >>> out.shape
      (1, 64, 2, 8)

    Reference: Jin et al., ICML 2024.
    """
    group_size = check_positive_int("group_size", group_size)
    window = check_positive_int("window", window)
    spec = check_spec(
        q,
        k,
        v,
        q_positions=q_positions,
        k_positions=k_positions,
        rope=rope,
        rope_required=True,
        causal=True,
        scale=scale,
        block_q=block_q,
        block_k=block_k,
    )
    return _self_extend(
        q,
        k,
        v,
        spec.arrays,
        rope=rope,
        group_size=group_size,
        window=window,
        options=spec.options,
        precision=precision,
    )


@jit_when_eager("rope", "group_size", "window", "options", "precision")
def _self_extend(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    arrays: Arrays,
    *,
    rope: RopeConfig,
    group_size: int,
    window: int,
    options: Options,
    precision: Any,
) -> jax.Array:
    q_pos, k_pos = position_pair(arrays)
    shift = window - window // group_size
    qs = _blockwise.rotated_copies(q, [q_pos, q_pos // group_size + shift], rope)
    ks = _blockwise.rotated_copies(k, [k_pos, k_pos // group_size], rope)
    logits = _blockwise.RemappedLogits(
        ((0, 0), (1, 1)), functools.partial(_far, window=window), q.shape[-1]
    )
    return _blockwise.remapped_attention(
        qs, ks, v, arrays, options, logits, precision
    ).astype(q.dtype)


def _far(q_positions: jax.Array, k_positions: jax.Array, *, window: int) -> jax.Array:
    """1 where the pair is ``window`` or more apart (grouped logits), else 0."""
    distance = q_positions[:, :, None] - k_positions[:, None, :]
    return (distance >= window).astype(jnp.int32)
