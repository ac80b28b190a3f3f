"""``flax.nnx`` modules: thin wrappers over the functions of :mod:`flax_posenc`.

The same names, arguments and outputs as :mod:`flax_posenc.linen`; hyper-parameters
are keyword-only and ``rngs`` is needed only by modules with parameters.

``dtype=None`` infers the output dtype from the module's inputs and parameters, as
Flax does: the embeddings' for absolute encodings, the table's for T5 biases,
float32 for ALiBi, which has neither.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx
from flax.typing import Dtype

from flax_posenc._embed import add_learned, add_sinusoidal
from flax_posenc._exact_angles import AnglePrecision
from flax_posenc._validation import check_positive_int
from flax_posenc.alibi import alibi_bias
from flax_posenc.learned import OutOfRange
from flax_posenc.relative import _check_bucket_sizes, relative_position_bias
from flax_posenc.rope import RopeConfig, apply_rope_qk
from flax_posenc.rope_scaling import SeqLen
from flax_posenc.sinusoidal import SinusoidalLayout, SinusoidalSpacing

default_embedding_init = nnx.initializers.normal(stddev=0.02)
default_relative_bias_init = nnx.initializers.normal(stddev=0.02)


__all__ = [
    "ALiBi",
    "LearnedPositionalEmbedding",
    "RelativePositionBias",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
]


class SinusoidalPositionalEncoding(nnx.Module):
    """Adds :func:`flax_posenc.sinusoidal_encoding` to embeddings ``[..., L, D]``.

    See :class:`flax_posenc.linen.SinusoidalPositionalEncoding`.

    Examples:
      >>> from flax_posenc import nnx as pnnx
      >>> x = jnp.zeros((2, 8, 16), jnp.bfloat16)  # [B, L, D]
      >>> pnnx.SinusoidalPositionalEncoding(layout="half")(x).dtype
      dtype(bfloat16)
    """

    layout: SinusoidalLayout
    spacing: SinusoidalSpacing
    angle_precision: AnglePrecision

    def __init__(
        self,
        *,
        base: float = 10000.0,
        layout: SinusoidalLayout = "interleaved",
        spacing: SinusoidalSpacing = "paper",
        angle_precision: AnglePrecision = "float32",
        dtype: Dtype | None = None,
    ):
        self.base = base
        self.layout = layout
        self.spacing = spacing
        self.angle_precision = angle_precision
        self.dtype = dtype

    def __call__(
        self, embeddings: jax.Array, positions: jax.Array | None = None
    ) -> jax.Array:
        return add_sinusoidal(
            embeddings,
            positions,
            base=self.base,
            layout=self.layout,
            spacing=self.spacing,
            angle_precision=self.angle_precision,
            dtype=self.dtype,
        )


class LearnedPositionalEmbedding(nnx.Module):
    """Adds a learned table ``embedding [max_len, features]`` to embeddings ``[..., L, D]``.

    See :class:`flax_posenc.linen.LearnedPositionalEmbedding`.

    Examples:
      >>> from flax_posenc import nnx as pnnx
      >>> module = pnnx.LearnedPositionalEmbedding(32, 16, rngs=nnx.Rngs(0))
      >>> module.embedding.shape
      (32, 16)
      >>> module(jnp.zeros((2, 8, 16))).shape  # [B, L, D], positions 0..7
      (2, 8, 16)
    """

    out_of_range: OutOfRange

    def __init__(
        self,
        max_len: int,
        features: int,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        embedding_init: Callable[..., jax.Array] = default_embedding_init,
        out_of_range: OutOfRange = "nan",
        rngs: nnx.Rngs,
    ):
        # At construction: a negative size was an MLIRError from the initializer,
        # a 0-row table a gather TypeError under jit.
        self.max_len = check_positive_int("max_len", max_len)
        self.features = check_positive_int("features", features)
        self.dtype = dtype
        self.out_of_range = out_of_range
        self.embedding = nnx.Param(
            embedding_init(rngs.params(), (max_len, features), param_dtype)
        )

    def __call__(
        self, embeddings: jax.Array, positions: jax.Array | None = None
    ) -> jax.Array:
        return add_learned(
            embeddings,
            self.embedding[...],
            positions,
            out_of_range=self.out_of_range,
            dtype=self.dtype,
        )


class RotaryEmbedding(nnx.Module):
    """Rotates queries and keys with :func:`flax_posenc.rope_rotate` (RoPE).

    See :class:`flax_posenc.linen.RotaryEmbedding`.
    """

    def __init__(self, config: RopeConfig):
        from flax_posenc._validation import check_rope_config

        check_rope_config("config", config, RopeConfig)
        self.config = config

    def __call__(
        self,
        q: jax.Array,
        k: jax.Array,
        positions: jax.Array,
        k_positions: jax.Array | None = None,
        seq_len: SeqLen = None,
    ) -> tuple[jax.Array, jax.Array]:
        return apply_rope_qk(
            q, k, positions, self.config, k_positions=k_positions, seq_len=seq_len
        )


class ALiBi(nnx.Module):
    """The ALiBi attention bias :func:`flax_posenc.alibi_bias`, ``[..., N, L, S]``.

    See :class:`flax_posenc.linen.ALiBi`.

    Examples:
      >>> from flax_posenc import nnx as pnnx
      >>> pnnx.ALiBi(8)(jnp.array([4]), jnp.arange(5)).shape  # a decode step
      (8, 1, 5)
    """

    def __init__(self, num_heads: int, *, dtype: Dtype | None = None):
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.dtype = dtype

    def __call__(
        self, q_positions: jax.Array, k_positions: jax.Array | None = None
    ) -> jax.Array:
        k_positions = q_positions if k_positions is None else k_positions
        bias = alibi_bias(q_positions, k_positions, self.num_heads)
        return bias.astype(self.dtype or jnp.float32)


class RelativePositionBias(nnx.Module):
    """T5's learned relative position bias :func:`flax_posenc.relative_position_bias`.

    See :class:`flax_posenc.linen.RelativePositionBias`.

    Examples:
      >>> from flax_posenc import nnx as pnnx
      >>> module = pnnx.RelativePositionBias(4, rngs=nnx.Rngs(0))
      >>> module.relative_attention_bias.shape  # [num_buckets, N]
      (32, 4)
      >>> module(jnp.arange(6)[None]).shape  # [B, N, L, S]
      (1, 4, 6, 6)
    """

    def __init__(
        self,
        num_heads: int,
        *,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        embedding_init: Callable[..., jax.Array] = default_relative_bias_init,
        rngs: nnx.Rngs,
    ):
        self.num_heads = check_positive_int("num_heads", num_heads)
        _check_bucket_sizes(num_buckets, max_distance, bidirectional)
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.dtype = dtype
        self.relative_attention_bias = nnx.Param(
            embedding_init(rngs.params(), (num_buckets, num_heads), param_dtype)
        )

    def __call__(
        self, q_positions: jax.Array, k_positions: jax.Array | None = None
    ) -> jax.Array:
        k_positions = q_positions if k_positions is None else k_positions
        table = self.relative_attention_bias[...]
        bias = relative_position_bias(
            table,
            q_positions,
            k_positions,
            bidirectional=self.bidirectional,
            max_distance=self.max_distance,
        )
        return bias.astype(self.dtype or table.dtype)


class _InitSignature:
    """``inspect.signature(cls)`` (and so ``help(cls)``) shows ``cls.__init__`` less
    ``self``: nnx's metaclass constructs through ``__call__(*args, **kwargs)``.

    A descriptor, so that a subclass shows its own ``__init__`` and an instance keeps
    its ``__call__`` signature (``inspect`` reads ``__signature__`` on both).
    """

    def __get__(self, instance: object, owner: type) -> inspect.Signature:
        if instance is not None:
            raise AttributeError("__signature__")
        signature = inspect.signature(owner.__init__)
        return signature.replace(parameters=list(signature.parameters.values())[1:])


for _name in __all__:
    globals()[_name].__signature__ = _InitSignature()
