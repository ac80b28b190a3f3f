"""What the linen and nnx ``RotaryEmbedding`` modules share: RoPE on q and k."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from flax_posenc._validation import (
    check_broadcastable,
    check_heads_array,
    check_integer_array,
)
from flax_posenc.rope import RopeConfig, rope_cos_sin, rope_rotate
from flax_posenc.rope_scaling import SEQ_LEN_DEPENDENT


def rotate_queries_keys(
    q: jax.Array,
    k: jax.Array,
    positions: jax.Array,
    k_positions: jax.Array | None,
    config: RopeConfig,
    seq_len: Any = None,
) -> tuple[jax.Array, jax.Array]:
    """RoPE on ``q [..., L, N, H]`` at ``positions [..., L]`` and on ``k [..., S, N,
    H]`` at ``k_positions [..., S]`` (None: ``positions``, one cos/sin for both).

    Dynamic NTK and LongRoPE see one ``seq_len`` for q and k (given, or
    ``max(all positions) + 1``), so both are rotated with the same frequencies and
    scores stay relative.
    """
    check_heads_array("q", q, config.head_dim)
    check_heads_array("k", k, config.head_dim)
    positions = check_integer_array("positions", positions)
    check_broadcastable("positions", positions.shape, "q.shape[:-2]", q.shape[:-2])
    if k_positions is None:
        check_broadcastable("positions", positions.shape, "k.shape[:-2]", k.shape[:-2])
        cos, sin = rope_cos_sin(positions, config, seq_len=seq_len)
        return (
            rope_rotate(q, cos, sin, layout=config.layout),
            rope_rotate(k, cos, sin, layout=config.layout),
        )
    k_positions = check_integer_array("k_positions", k_positions)
    check_broadcastable("k_positions", k_positions.shape, "k.shape[:-2]", k.shape[:-2])
    if seq_len is None and isinstance(config.scaling, SEQ_LEN_DEPENDENT):
        seq_len = (
            jnp.maximum(jnp.max(positions, initial=0), jnp.max(k_positions, initial=0))
            + 1
        )
    q_cos, q_sin = rope_cos_sin(positions, config, seq_len=seq_len)
    k_cos, k_sin = rope_cos_sin(k_positions, config, seq_len=seq_len)
    return (
        rope_rotate(q, q_cos, q_sin, layout=config.layout),
        rope_rotate(k, k_cos, k_sin, layout=config.layout),
    )
