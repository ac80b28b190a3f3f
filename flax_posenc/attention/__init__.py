"""Attention with positions: blockwise attention with per-tile biases, Flax
``attention_fn`` adaptors, ring attention and sharded decoding, Self-Extend and dual
chunk attention.

Every entry point checks its arguments into one spec (``_spec``) and runs the one
online-softmax kernel (``_blockwise``; on a ring, ``_ring``).
"""

from __future__ import annotations

from flax_posenc.attention.attention_fn import (
    attention_fn_override,
    blockwise_attention_fn,
    positional_attention_fn,
)
from flax_posenc.attention.blockwise import AttentionImplementation, blockwise_attention
from flax_posenc.attention.context_parallel import (
    ring_attention,
    ring_attention_fn,
    sharded_kv_cache_attention,
    sharded_ring_attention,
)
from flax_posenc.attention.dual_chunk import dual_chunk_attention
from flax_posenc.attention.self_extend import self_extend_attention

__all__ = [
    "AttentionImplementation",
    "attention_fn_override",
    "blockwise_attention",
    "blockwise_attention_fn",
    "dual_chunk_attention",
    "positional_attention_fn",
    "ring_attention",
    "ring_attention_fn",
    "self_extend_attention",
    "sharded_kv_cache_attention",
    "sharded_ring_attention",
]
