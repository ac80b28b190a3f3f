"""``flax.nnx`` modules: thin wrappers over the functions of :mod:`flax_posenc`.

The same names, arguments and outputs as :mod:`flax_posenc.linen`; hyper-parameters
are keyword-only and ``rngs`` is needed only by modules with parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from flax_posenc._embed import add_encoding, check_features, embedding_positions
from flax_posenc._rotary import rotate_queries_keys
from flax_posenc.learned import OutOfRange, learned_embedding_lookup
from flax_posenc.rope import RopeConfig
from flax_posenc.sinusoidal import Layout, Spacing, sinusoidal_encoding

default_embedding_init = nnx.initializers.normal(stddev=0.02)


class SinusoidalPositionalEncoding(nnx.Module):
    """Adds :func:`flax_posenc.sinusoidal_encoding` to embeddings ``[..., L, D]``.

    See :class:`flax_posenc.linen.SinusoidalPositionalEncoding`.
    """

    def __init__(
        self,
        *,
        base: float = 10000.0,
        layout: Layout = "interleaved",
        spacing: Spacing = "paper",
        dtype: Any = None,
    ):
        self.base = base
        self.layout = layout
        self.spacing = spacing
        self.dtype = dtype

    def __call__(
        self, embeddings: jax.Array, positions: jax.Array | None = None
    ) -> jax.Array:
        positions = embedding_positions(embeddings, positions)
        encoding = sinusoidal_encoding(
            positions,
            embeddings.shape[-1],
            base=self.base,
            layout=self.layout,
            spacing=self.spacing,
        )
        return add_encoding(embeddings, encoding, self.dtype)


class LearnedPositionalEmbedding(nnx.Module):
    """Adds a learned table ``embedding [max_len, features]`` to embeddings ``[..., L, D]``.

    See :class:`flax_posenc.linen.LearnedPositionalEmbedding`.
    """

    def __init__(
        self,
        max_len: int,
        features: int,
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        embedding_init: Callable[..., jax.Array] = default_embedding_init,
        out_of_range: OutOfRange = "nan",
        rngs: nnx.Rngs,
    ):
        self.max_len = max_len
        self.features = features
        self.dtype = dtype
        self.out_of_range = out_of_range
        self.embedding = nnx.Param(
            embedding_init(rngs.params(), (max_len, features), param_dtype)
        )

    def __call__(
        self, embeddings: jax.Array, positions: jax.Array | None = None
    ) -> jax.Array:
        check_features(embeddings, self.max_len, self.features)
        positions = embedding_positions(embeddings, positions)
        encoding = learned_embedding_lookup(
            self.embedding[...], positions, out_of_range=self.out_of_range
        )
        return add_encoding(embeddings, encoding, self.dtype)


class RotaryEmbedding(nnx.Module):
    """Rotates queries and keys with :func:`flax_posenc.rope_rotate` (RoPE).

    See :class:`flax_posenc.linen.RotaryEmbedding`.
    """

    def __init__(self, config: RopeConfig):
        self.config = config

    def __call__(
        self,
        q: jax.Array,
        k: jax.Array,
        positions: jax.Array,
        k_positions: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        return rotate_queries_keys(q, k, positions, k_positions, self.config)
