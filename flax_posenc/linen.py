"""``flax.linen`` modules: thin wrappers over the functions of :mod:`flax_posenc`.

The same names, arguments and outputs as :mod:`flax_posenc.nnx`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from flax_posenc._embed import add_encoding, check_features, embedding_positions
from flax_posenc._rotary import rotate_queries_keys
from flax_posenc.learned import OutOfRange, learned_embedding_lookup
from flax_posenc.rope import RopeConfig
from flax_posenc.sinusoidal import Layout, Spacing, sinusoidal_encoding

default_embedding_init = nn.initializers.normal(stddev=0.02)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds :func:`flax_posenc.sinusoidal_encoding` to embeddings ``[..., L, D]``.

    ``module(embeddings, positions=None)`` returns ``embeddings + PE(positions)``, with
    positions integer ``[..., L]`` (default ``0..L-1``). No parameters.

    Attributes:
      base, layout, spacing: as in :func:`flax_posenc.sinusoidal_encoding`.
      dtype: output dtype; None keeps the embeddings' dtype.
    """

    base: float = 10000.0
    layout: Layout = "interleaved"
    spacing: Spacing = "paper"
    dtype: Any = None

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


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned table ``embedding [max_len, features]`` to embeddings ``[..., L, D]``.

    ``module(embeddings, positions=None)`` returns ``embeddings + embedding[positions]``.
    The table is initialised ``N(0, 0.02^2)`` as in BERT and GPT-2. Out-of-range
    positions follow ``out_of_range`` (see :mod:`flax_posenc.learned`), never a silent
    clamp.

    Attributes:
      max_len: number of rows (positions 0..max_len-1).
      features: ``D``; must equal the embeddings' last dimension.
      dtype: output dtype; None keeps the embeddings' dtype.
      param_dtype: dtype of the table.
      embedding_init: initializer of the table.
      out_of_range: ``"nan"``, ``"checkify"`` or ``"clip"``.
    """

    max_len: int
    features: int
    dtype: Any = None
    param_dtype: Any = jnp.float32
    embedding_init: Callable[..., jax.Array] = default_embedding_init
    out_of_range: OutOfRange = "nan"

    @nn.compact
    def __call__(
        self, embeddings: jax.Array, positions: jax.Array | None = None
    ) -> jax.Array:
        check_features(embeddings, self.max_len, self.features)
        positions = embedding_positions(embeddings, positions)
        table = self.param(
            "embedding",
            self.embedding_init,
            (self.max_len, self.features),
            self.param_dtype,
        )
        encoding = learned_embedding_lookup(
            table, positions, out_of_range=self.out_of_range
        )
        return add_encoding(embeddings, encoding, self.dtype)


class RotaryEmbedding(nn.Module):
    """Rotates queries and keys with :func:`flax_posenc.rope_rotate` (RoPE).

    ``module(q, k, positions, k_positions=None)`` returns the rotated ``(q, k)``, in
    their dtypes. ``q: [..., L, N, H]``, ``k: [..., S, N, H]``, ``positions: int
    [..., L]``. Without ``k_positions`` (self-attention, ``S = L``) one cos/sin table
    serves both. For KV-cache decoding pass ``k_positions: int [..., S]`` (e.g. the
    new keys' positions, or ``arange(S)`` for a whole cache); dynamic NTK and LongRoPE
    then use ``seq_len = max(positions, k_positions) + 1`` for both, so q and k share
    frequencies. No parameters.

    Attributes:
      config: the :class:`flax_posenc.RopeConfig`.
    """

    config: RopeConfig

    def __call__(
        self,
        q: jax.Array,
        k: jax.Array,
        positions: jax.Array,
        k_positions: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        return rotate_queries_keys(q, k, positions, k_positions, self.config)
