"""Attention with positions: blockwise attention with per-tile biases, Flax
``attention_fn`` adaptors, ring attention and sharded decoding, Self-Extend and dual
chunk attention.

Every entry point checks its arguments into one spec (``_spec``) and runs the one
online-softmax kernel (``_blockwise``; on a ring, ``_ring``).
"""

from __future__ import annotations

from flax_posenc.attention.attention_fn import (
    attention_fn_override as attention_fn_override,
)
from flax_posenc.attention.attention_fn import (
    blockwise_attention_fn as blockwise_attention_fn,
)
from flax_posenc.attention.attention_fn import (
    positional_attention_fn as positional_attention_fn,
)
from flax_posenc.attention.blockwise import (
    AttentionImplementation as AttentionImplementation,
)
from flax_posenc.attention.blockwise import blockwise_attention as blockwise_attention
from flax_posenc.attention.context_parallel import ring_attention as ring_attention
from flax_posenc.attention.context_parallel import (
    ring_attention_fn as ring_attention_fn,
)
from flax_posenc.attention.context_parallel import (
    sharded_kv_cache_attention as sharded_kv_cache_attention,
)
from flax_posenc.attention.context_parallel import (
    sharded_ring_attention as sharded_ring_attention,
)
from flax_posenc.attention.dual_chunk import (
    dual_chunk_attention as dual_chunk_attention,
)
from flax_posenc.attention.self_extend import (
    self_extend_attention as self_extend_attention,
)

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
