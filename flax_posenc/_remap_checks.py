"""Checks shared by the position-remapping attentions (Self-Extend, dual chunk)."""

from __future__ import annotations

from typing import Any

import jax

from flax_posenc._validation import (
    check_float_array,
    check_positions,
    check_positive_float,
    check_positive_int,
    check_rope_config,
)
from flax_posenc.rope import RopeConfig


def check_attention_inputs(
    q: Any,
    k: Any,
    v: Any,
    q_positions: Any,
    k_positions: Any,
    rope: Any,
    scale: Any,
    block_q: Any,
    block_k: Any,
) -> tuple[jax.Array, jax.Array, float]:
    """Checks everything and moves nothing: returns the positions as integer arrays
    (``k_positions`` defaulted to ``q_positions``) and the logit scale. Batching,
    int32 casts and the repeat of k/v heads happen in the compiled core
    (:func:`flax_posenc._remapped.batched`), so an eager call runs one program."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_float_array(name, x)
        if x.ndim not in (3, 4):
            raise ValueError(
                f"`{name}` must be [B, L, N, H] or [L, N, H], got shape "
                f"{tuple(x.shape)}."
            )
    check_rope_config("rope", rope, RopeConfig)
    if not (q.ndim == k.ndim == v.ndim) or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            "`q`, `k`, `v` must have the same rank and k/v the same [..., S, K], got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}."
        )
    if q.shape[:-3] != k.shape[:-3] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"`k` must share q's batch and head dim, got q {tuple(q.shape)} and k "
            f"{tuple(k.shape)}."
        )
    if q.shape[-1] != rope.head_dim:
        raise ValueError(
            f"`q` and `k` must have H = rope.head_dim ({rope.head_dim}), got H = "
            f"{q.shape[-1]}. Hint: fp.RopeConfig(head_dim={q.shape[-1]}, ...)."
        )
    heads, kv_heads = q.shape[-2], k.shape[-2]
    if heads % kv_heads:
        raise ValueError(
            f"q's heads N = {heads} must be a multiple of k's K = {kv_heads}."
        )
    q_positions = check_positions(
        "q_positions", q_positions, "q.shape[:-2]", q.shape[:-2]
    )
    k_positions = q_positions if k_positions is None else k_positions
    k_positions = check_positions(
        "k_positions", k_positions, "k.shape[:-2]", k.shape[:-2]
    )
    scale = (
        1.0 / float(q.shape[-1]) ** 0.5
        if scale is None
        else check_positive_float("scale", scale)
    )
    check_positive_int("block_q", block_q)
    check_positive_int("block_k", block_k)
    return q_positions, k_positions, scale
