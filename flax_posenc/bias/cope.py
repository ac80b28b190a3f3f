"""CoPE: contextual position encoding (Golovneva et al., 2024).

Positions counted by the content: query ``i`` gates every key ``j`` it may attend to,
and a key's position is the number of gated keys between it and the query::

    g_ij = sigmoid(scale * q_i . k_j)                     0 where i may not attend j
    p_ij = sum_{t = j .. i} g_it                          fractional, in [0, i - j + 1]
    e[p] = (p - floor p) e[ceil p] + (1 - p + floor p) e[floor p]
    bias_ij = q_i . e[p_ij]                               add to q_i . k_j

with ``e`` a learned table ``pos_emb [P, H]`` of ``P`` integer positions, shared by
the heads (``p`` is clamped to ``P - 1``). The authors' code computes ``q . e`` for
the ``P`` integer positions once and interpolates those logits; the result is the
same. Causal: keys after the query (by position) get ``g = 0``.

The bias depends on ``q`` and ``k`` (the content), not on positions alone, so it is
not a :class:`flax_posenc.PositionBias` and there is no blockwise form here: ``p_ij``
is a suffix sum over *all* keys of a row, which a tile cannot see; a two-pass form
needs the key loop of :func:`flax_posenc.blockwise_attention` to hand its tiles q
and k, which it does not. Use dense attention: ``logits = scale * (q . k + bias)``
(the authors' default adds the bias before the ``1 / sqrt(H)`` scale).

Reference: Golovneva, Wang, Weston, Sukhbaatar, "Contextual Position Encoding:
Learning to Count What's Important", 2024 (arXiv 2405.18719), Section 3 (eqs. 3-6:
gates, positions, interpolation, attention).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core.offsets import offsets
from flax_posenc._core.validation import (
    check_float_array,
    check_position_pairs,
    check_positive_float,
)

__all__ = ["cope_bias"]


def _check(q: jax.Array, k: jax.Array, pos_emb: jax.Array) -> None:
    for name, value in (("q", q), ("k", k)):
        check_float_array(name, value)
        if value.ndim < 3:
            raise ValueError(
                f"`{name}` must be [..., L, N, H] (rank >= 3), got shape "
                f"{tuple(value.shape)}."
            )
    check_float_array("pos_emb", pos_emb)
    heads, head_dim = q.shape[-2:]
    if k.shape[-1] != head_dim or heads % k.shape[-2] or k.shape[:-3] != q.shape[:-3]:
        raise ValueError(
            "`k` must be [..., S, K, H] with q's leading dimensions and H, and N a "
            f"multiple of K; got q {tuple(q.shape)} and k {tuple(k.shape)}."
        )
    if pos_emb.ndim != 2 or pos_emb.shape[1] != head_dim:
        raise ValueError(
            f"`pos_emb` must be [P, H] with H = {head_dim}, got shape "
            f"{tuple(pos_emb.shape)}."
        )


def cope_bias(
    q: jax.Array,
    k: jax.Array,
    pos_emb: jax.Array,
    *,
    q_positions: jax.Array,
    k_positions: jax.Array,
    mask: jax.Array | None = None,
    scale: float | None = None,
) -> jax.Array:
    """The CoPE logit bias ``q_i . e[p_ij]`` ``[..., N, L, S]``.

    See the module docstring for the formulas. Keys must be in position order along
    ``S`` (the count runs from key ``j`` to the last key the query may see).
    Grouped-query attention: q head ``h`` reads k head ``h // (N // K)``.

    Args:
      q: floating ``[..., L, N, H]``.
      k: floating ``[..., S, K, H]``.
      pos_emb: floating ``[P, H]``, the embedding of each integer position.
      q_positions: integer ``[..., L]``.
      k_positions: integer ``[..., S]``; keys with ``k_pos > q_pos`` are not
        counted (causal).
      mask: optional bool ``[..., N or 1, L, S]``-broadcastable, true where query
        ``i`` may attend key ``j`` (padding, segments); masked keys are not counted.
      scale: the gates' logit scale; None is ``1 / sqrt(H)`` (the authors' code;
        the paper's formula is ``scale = 1``).

    Returns:
      float32 ``[..., N, L, S]``.

    Raises:
      TypeError: non-floating q/k/pos_emb, non-integer positions, non-numeric
        ``scale``.
      ValueError: shapes that disagree, ``scale <= 0``, positions that do not
        broadcast.

    Examples:
      >>> q = k = jnp.zeros((4, 1, 2))  # [L, N, H]: every gate sigmoid(0) = 1/2
      >>> pos_emb = jnp.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]])
      >>> p = jnp.arange(4)
      >>> fp.cope_bias(q + jnp.array([[[1.0, 0.0]]]), k, pos_emb, q_positions=p,
      ...     k_positions=p)[0, 3].tolist()  # q . e[p], p = 2, 1.5, 1, 0.5
      [2.0, 1.5, 1.0, 0.5]

    Reference: Golovneva et al., 2024.
    """
    _check(q, k, pos_emb)
    scale = (
        1.0 / math.sqrt(q.shape[-1])
        if scale is None
        else check_positive_float("scale", scale)
    )
    q_positions, k_positions = check_position_pairs(q_positions, k_positions)
    # An array mask is passed as it is (jnp.asarray would compile a copy program).
    given = mask if mask is None or hasattr(mask, "dtype") else np.asarray(mask)
    return _cope(q, k, pos_emb, q_positions, k_positions, given, scale)


@functools.partial(jax.jit, static_argnames="scale")
def _cope(q, k, pos_emb, q_positions, k_positions, mask, scale):
    """:func:`cope_bias` of checked arguments."""
    allowed = (offsets(q_positions, k_positions) <= 0)[..., None, :, :]
    if mask is not None:
        allowed = allowed & (mask != 0)
    groups = q.shape[-2] // k.shape[-2]
    q32 = q.astype(jnp.float32)
    k32 = jnp.repeat(k.astype(jnp.float32), groups, axis=-2)
    highest = jax.lax.Precision.HIGHEST
    logits = jnp.einsum("...lnh,...snh->...nls", q32, k32, precision=highest)
    allowed = jnp.broadcast_to(allowed, logits.shape)
    gates = jnp.where(allowed, jax.nn.sigmoid(scale * logits), 0.0)
    # p_ij = sum_{t >= j} g_it (keys after the query are gated to 0).
    positions = jnp.flip(jnp.cumsum(jnp.flip(gates, -1), axis=-1), -1)
    positions = jnp.minimum(positions, pos_emb.shape[0] - 1)
    table = jnp.einsum(
        "...lnh,ph->...nlp", q32, pos_emb.astype(jnp.float32), precision=highest
    )
    floor = jnp.floor(positions)
    low = jnp.take_along_axis(table, floor.astype(jnp.int32), axis=-1)
    high = jnp.take_along_axis(table, jnp.ceil(positions).astype(jnp.int32), axis=-1)
    weight = positions - floor  # differentiable; floor and ceil are not
    return weight * high + (1.0 - weight) * low
