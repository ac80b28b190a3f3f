"""Flax's ``attention_fn`` signature around a kernel that has no dropout and forms
no attention weights (blockwise attention, ring attention).

``linen.MultiHeadDotProductAttention`` and ``nnx.MultiHeadAttention`` call their
``attention_fn`` with the keywords of ``flax.nnx.dot_product_attention``;
:func:`flax_signature` takes them, refuses what the kernel cannot do (dropout in
training, ``sow_weights``), casts to ``dtype`` and passes the rest on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

Kernel = Callable[..., jax.Array]  # (query, key, value, mask, precision, is_causal)


def flax_signature(kernel: Kernel, name: str, dropout_hint: str) -> Kernel:
    """``kernel(query, key, value, mask, precision, is_causal)`` with Flax's
    keywords; ``name`` (say "Ring attention") and ``dropout_hint`` word the
    errors."""

    def attend(
        query: jax.Array,
        key: jax.Array,
        value: jax.Array,
        mask: jax.Array | None = None,
        dropout_rng: jax.Array | None = None,
        dropout_rate: float = 0.0,
        broadcast_dropout: bool = True,
        deterministic: bool = False,
        dtype: Any = None,
        precision: Any = None,
        module: Any = None,
        is_causal: bool = False,
    ) -> jax.Array:
        """The kernel of ``query [..., L, N, H]``, ``key``, ``value [..., S, K, H]``."""
        del dropout_rng, broadcast_dropout  # only meaningful with dropout
        if dropout_rate > 0.0 and not deterministic:
            raise ValueError(
                f"{name} has no dropout, got dropout_rate={dropout_rate} with "
                f"deterministic=False. Hint: {dropout_hint}"
            )
        if module is not None:
            raise ValueError(
                f"{name} forms no attention weights to sow; use sow_weights=False."
            )
        if dtype is not None:
            query, key, value = (x.astype(dtype) for x in (query, key, value))
        return kernel(query, key, value, mask, precision, is_causal)

    return attend
