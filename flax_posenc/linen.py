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
from flax_posenc._validation import check_positive_int
from flax_posenc.alibi import alibi_bias
from flax_posenc.learned import OutOfRange, learned_embedding_lookup
from flax_posenc.relative import check_bucket_sizes, relative_position_bias
from flax_posenc.sinusoidal import Layout, Spacing, sinusoidal_encoding

default_embedding_init = nn.initializers.normal(stddev=0.02)
default_relative_bias_init = nn.initializers.normal(stddev=0.02)


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


class ALiBi(nn.Module):
    """The ALiBi attention bias :func:`flax_posenc.alibi_bias`, ``[..., N, L, S]``.

    ``module(q_positions, k_positions=None)`` with integer ``q_positions [..., L]``
    and ``k_positions [..., S]`` (default: ``q_positions``, i.e. self-attention)
    returns ``-slope_h * |q_pos - k_pos|``, to add to attention logits. No
    parameters.

    Attributes:
      num_heads: ``N``.
      dtype: output dtype; None gives float32.
    """

    num_heads: int
    dtype: Any = None

    def __call__(
        self, q_positions: jax.Array, k_positions: jax.Array | None = None
    ) -> jax.Array:
        k_positions = q_positions if k_positions is None else k_positions
        bias = alibi_bias(q_positions, k_positions, self.num_heads)
        return bias.astype(self.dtype or jnp.float32)


class RelativePositionBias(nn.Module):
    """T5's learned relative position bias :func:`flax_posenc.relative_position_bias`.

    ``module(q_positions, k_positions=None)`` with integer ``q_positions [..., L]``
    and ``k_positions [..., S]`` (default: ``q_positions``) returns ``[..., N, L, S]``,
    to add to attention logits. The parameter ``relative_attention_bias
    [num_buckets, num_heads]`` has Hugging Face's T5 layout, initialised
    ``N(0, 0.02^2)`` by default.

    Attributes:
      num_heads: ``N``.
      num_buckets, max_distance, bidirectional: as in
        :func:`flax_posenc.relative_position_bucket`.
      dtype: output dtype; None keeps ``param_dtype``.
      param_dtype: dtype of the table.
      embedding_init: initializer of the table.
    """

    num_heads: int
    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    embedding_init: Callable[..., jax.Array] = default_relative_bias_init

    @nn.compact
    def __call__(
        self, q_positions: jax.Array, k_positions: jax.Array | None = None
    ) -> jax.Array:
        check_positive_int("num_heads", self.num_heads)
        check_bucket_sizes(self.num_buckets, self.max_distance, self.bidirectional)
        table = self.param(
            "relative_attention_bias",
            self.embedding_init,
            (self.num_buckets, self.num_heads),
            self.param_dtype,
        )
        k_positions = q_positions if k_positions is None else k_positions
        bias = relative_position_bias(
            table,
            q_positions,
            k_positions,
            bidirectional=self.bidirectional,
            max_distance=self.max_distance,
        )
        return bias.astype(self.dtype or table.dtype)
