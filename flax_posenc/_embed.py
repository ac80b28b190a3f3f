"""What the modules that add an absolute encoding to embeddings share."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from flax_posenc._core.exact_angles import AnglePrecision
from flax_posenc._core.validation import (
    check_positions,
    check_positive_int,
)
from flax_posenc.learned import OutOfRange, learned_embedding_lookup
from flax_posenc.sinusoidal import (
    SinusoidalLayout,
    SinusoidalSpacing,
    sinusoidal_encoding,
)


def embedding_positions(
    embeddings: jax.Array, positions: jax.Array | None
) -> jax.Array:
    """Checks ``positions [..., L]`` against ``embeddings [..., L, D]``.

    ``None`` means ``0..L-1`` for every sequence.
    """
    if embeddings.ndim < 2:
        raise ValueError(
            f"`embeddings` must be [..., L, D] (rank >= 2), got shape {embeddings.shape}."
        )
    if positions is None:
        return jnp.arange(embeddings.shape[-2])
    return check_positions(
        "positions", positions, "embeddings.shape[:-1]", embeddings.shape[:-1]
    )


def add_encoding(embeddings: jax.Array, encoding: jax.Array, dtype: Any) -> jax.Array:
    """``embeddings + encoding`` in float32 (one rounding), cast to ``dtype``.

    ``dtype=None`` keeps ``embeddings.dtype``.
    """
    encoding = jnp.broadcast_to(encoding, embeddings.shape)
    total = embeddings.astype(jnp.float32) + encoding.astype(jnp.float32)
    return total.astype(dtype or embeddings.dtype)


def check_features(embeddings: jax.Array, max_len: int, features: int) -> None:
    """Checks a learned table's sizes against ``embeddings [..., L, D]``."""
    check_positive_int("max_len", max_len)
    check_positive_int("features", features)
    if embeddings.shape[-1] != features:
        raise ValueError(
            f"`embeddings` last dimension must equal features={features}, got shape "
            f"{embeddings.shape}."
        )


def add_sinusoidal(
    embeddings: jax.Array,
    positions: jax.Array | None,
    *,
    base: float,
    layout: SinusoidalLayout,
    spacing: SinusoidalSpacing,
    angle_precision: AnglePrecision,
    dtype: Any,
) -> jax.Array:
    """``embeddings [..., L, D] + sinusoidal_encoding(positions, D)`` (the modules)."""
    positions = embedding_positions(embeddings, positions)
    encoding = sinusoidal_encoding(
        positions,
        embeddings.shape[-1],
        base=base,
        layout=layout,
        spacing=spacing,
        angle_precision=angle_precision,
    )
    return add_encoding(embeddings, encoding, dtype)


def add_learned(
    embeddings: jax.Array,
    table: jax.Array,
    positions: jax.Array | None,
    *,
    out_of_range: OutOfRange,
    dtype: Any,
) -> jax.Array:
    """``embeddings [..., L, D] + table[positions]`` (the modules)."""
    check_features(embeddings, table.shape[0], table.shape[1])
    positions = embedding_positions(embeddings, positions)
    encoding = learned_embedding_lookup(table, positions, out_of_range=out_of_range)
    return add_encoding(embeddings, encoding, dtype)
