"""Flax's ``attention_fn`` signature around a kernel that has no dropout and forms
no attention weights (blockwise attention, ring attention).

``linen.MultiHeadDotProductAttention`` and ``nnx.MultiHeadAttention`` call their
``attention_fn`` with the keywords of ``flax.nnx.dot_product_attention``;
:func:`flax_attention_fn` takes them, refuses what the kernel cannot do (dropout in
training, ``sow_weights``), casts to ``dtype``, checks the call against the
settings the ``attention_fn`` was built with, and runs the kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from flax_posenc.attention._spec import Spec, check_call, with_causal

Run = Callable[..., jax.Array]  # (query, key, value, spec, precision)


def require_positions(q_positions: Any, name: str) -> None:
    """An ``attention_fn`` of ``name`` (say "ring attention") is built with the
    positions: there is no call-time default for them."""
    if q_positions is None:
        raise ValueError(
            f"`q_positions` is required: {name} computes its bias and causal mask "
            "from the positions."
        )


def flax_attention_fn(
    settings: Spec, run: Run, name: str, dropout_hint: str
) -> Callable[..., jax.Array]:
    """``run(query, key, value, spec, precision)`` with Flax's keywords, the spec
    the ``settings`` checked against the call (with Flax's ``mask`` and
    ``is_causal``); ``name`` (say "Ring attention") and ``dropout_hint`` word the
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
        spec = check_call(with_causal(settings, is_causal), query, key, value, mask)
        return run(query, key, value, spec, precision)

    return attend
