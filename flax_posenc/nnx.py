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

from flax_posenc._core.exact_angles import AnglePrecision
from flax_posenc._core.validation import (
    check_bucket_sizes,
    check_choice,
    check_positive_float,
    check_positive_int,
    check_rope_config,
)
from flax_posenc._embed import add_learned, add_sinusoidal
from flax_posenc.bias.alibi import AlibiBias
from flax_posenc.bias.cope import cope_bias
from flax_posenc.bias.fire import FireBias, FireParams
from flax_posenc.bias.kerple import KerpleBias, KerpleKernel
from flax_posenc.bias.relative import RelativeBias
from flax_posenc.learned import OutOfRange
from flax_posenc.rope.apply import apply_rope_qk
from flax_posenc.rope.config import RopeConfig
from flax_posenc.rope.scaling import SeqLen
from flax_posenc.sinusoidal import SinusoidalLayout, SinusoidalSpacing

default_embedding_init = nnx.initializers.normal(stddev=0.02)
default_relative_bias_init = nnx.initializers.normal(stddev=0.02)


__all__ = [
    "FIRE",
    "ALiBi",
    "CoPE",
    "Kerple",
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
    """Rotates queries and keys with RoPE: calls :func:`flax_posenc.apply_rope_qk`.

    See :class:`flax_posenc.linen.RotaryEmbedding`.

    Examples:
      >>> from flax_posenc import nnx as pnnx
      >>> rope = pnnx.RotaryEmbedding(fp.RopeConfig(head_dim=64))
      >>> q = jnp.ones((2, 1, 8, 64))  # [B, L, N, H]: one decode step
      >>> k = jnp.ones((2, 16, 2, 64))  # [B, S, K, H]: the whole cache, 2 kv heads
      >>> q, k = rope(q, k, jnp.full((2, 1), 15), jnp.arange(16))
      >>> q.shape, k.shape
      ((2, 1, 8, 64), (2, 16, 2, 64))
    """

    def __init__(self, config: RopeConfig):
        check_rope_config("config", config, RopeConfig)
        self.config = config

    def __call__(
        self,
        q: jax.Array,
        k: jax.Array,
        positions: jax.Array,
        k_positions: jax.Array | None = None,
        seq_len: SeqLen = None,
        k_seq_len: SeqLen = None,
    ) -> tuple[jax.Array, jax.Array]:
        return apply_rope_qk(
            q,
            k,
            positions,
            self.config,
            k_positions=k_positions,
            seq_len=seq_len,
            k_seq_len=k_seq_len,
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

    def position_bias(self) -> AlibiBias:
        """See :meth:`flax_posenc.linen.ALiBi.position_bias`."""
        return AlibiBias(self.num_heads)

    def __call__(
        self, q_positions: jax.Array, k_positions: jax.Array | None = None
    ) -> jax.Array:
        k_positions = q_positions if k_positions is None else k_positions
        bias = self.position_bias()(q_positions, k_positions)
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
        check_bucket_sizes(num_buckets, max_distance, bidirectional)
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.dtype = dtype
        self.relative_attention_bias = nnx.Param(
            embedding_init(rngs.params(), (num_buckets, num_heads), param_dtype)
        )

    def position_bias(self) -> RelativeBias:
        """See :meth:`flax_posenc.linen.RelativePositionBias.position_bias`."""
        return RelativeBias(
            self.relative_attention_bias[...],
            bidirectional=self.bidirectional,
            max_distance=self.max_distance,
        )

    def __call__(
        self, q_positions: jax.Array, k_positions: jax.Array | None = None
    ) -> jax.Array:
        k_positions = q_positions if k_positions is None else k_positions
        bias = self.position_bias()(q_positions, k_positions)
        return bias.astype(self.dtype or self.relative_attention_bias.dtype)


def default_kerple_init(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
    """See :func:`flax_posenc.linen.default_kerple_init`."""
    return jax.random.uniform(key, shape, dtype, -2.0, 1.0)


class Kerple(nnx.Module):
    """Kerple's learned kernel bias :func:`flax_posenc.kerple_bias`.

    See :class:`flax_posenc.linen.Kerple`.

    Examples:
      >>> from flax_posenc import nnx as pnnx
      >>> module = pnnx.Kerple(4, kernel="power", rngs=nnx.Rngs(0))
      >>> module.r1_unconstrained.shape
      (4,)
      >>> module(jnp.arange(6)).shape  # [N, L, S]
      (4, 6, 6)
    """

    def __init__(
        self,
        num_heads: int,
        *,
        kernel: KerpleKernel = "log",
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        r1_init: Callable[..., jax.Array] = default_kerple_init,
        r2_init: Callable[..., jax.Array] = default_kerple_init,
        rngs: nnx.Rngs,
    ):
        self.num_heads = check_positive_int("num_heads", num_heads)
        check_choice("kernel", kernel, ("log", "power"))
        self.kernel: KerpleKernel = kernel
        self.dtype = dtype
        shape = (self.num_heads,)
        self.r1_unconstrained = nnx.Param(r1_init(rngs.params(), shape, param_dtype))
        self.r2_unconstrained = nnx.Param(r2_init(rngs.params(), shape, param_dtype))

    def position_bias(self) -> KerpleBias:
        """See :meth:`flax_posenc.linen.Kerple.position_bias`."""
        return KerpleBias(
            self.r1_unconstrained[...], self.r2_unconstrained[...], kernel=self.kernel
        )

    def __call__(
        self, q_positions: jax.Array, k_positions: jax.Array | None = None
    ) -> jax.Array:
        k_positions = q_positions if k_positions is None else k_positions
        bias = self.position_bias()(q_positions, k_positions)
        return bias.astype(self.dtype or self.r1_unconstrained.dtype)


class FIRE(nnx.Module):
    """FIRE's learned bias :func:`flax_posenc.fire_bias`.

    See :class:`flax_posenc.linen.FIRE`.

    Examples:
      >>> from flax_posenc import nnx as pnnx
      >>> module = pnnx.FIRE(4, init_threshold=16.0, rngs=nnx.Rngs(0))
      >>> module.output_kernel.shape  # [W, N]
      (32, 4)
      >>> module(jnp.arange(6)).shape  # [N, L, S]
      (4, 6, 6)
    """

    def __init__(
        self,
        num_heads: int,
        *,
        mlp_width: int = 32,
        init_threshold: float = 512.0,
        eps: float = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        heads = self.num_heads = check_positive_int("num_heads", num_heads)
        width = self.mlp_width = check_positive_int("mlp_width", mlp_width)
        self.init_threshold = check_positive_float("init_threshold", init_threshold)
        self.eps = check_positive_float("eps", eps)
        self.dtype = dtype
        self.c = nnx.Param(jnp.full((), 0.1, param_dtype))
        self.threshold_multiplier = nnx.Param(jnp.ones((), param_dtype))
        self.hidden_kernel = nnx.Param(
            nnx.initializers.normal(1.0)(rngs.params(), (width,), param_dtype)
        )
        self.hidden_bias = nnx.Param(jnp.zeros((width,), param_dtype))
        self.output_kernel = nnx.Param(
            nnx.initializers.lecun_normal()(rngs.params(), (width, heads), param_dtype)
        )
        self.output_bias = nnx.Param(jnp.zeros((heads,), param_dtype))

    def position_bias(self) -> FireBias:
        """See :meth:`flax_posenc.linen.FIRE.position_bias`."""
        params = FireParams(*(getattr(self, name)[...] for name in FireParams._fields))
        return FireBias(params, init_threshold=self.init_threshold, eps=self.eps)

    def __call__(
        self, q_positions: jax.Array, k_positions: jax.Array | None = None
    ) -> jax.Array:
        k_positions = q_positions if k_positions is None else k_positions
        bias = self.position_bias()(q_positions, k_positions)
        return bias.astype(self.dtype or self.c.dtype)


class CoPE(nnx.Module):
    """CoPE's contextual position bias :func:`flax_posenc.cope_bias`.

    See :class:`flax_posenc.linen.CoPE`.

    Examples:
      >>> from flax_posenc import nnx as pnnx
      >>> q = jnp.ones((6, 2, 8))  # [L, N, H]
      >>> module = pnnx.CoPE(8, num_positions=7, rngs=nnx.Rngs(0))
      >>> module(q, q, jnp.arange(6)).shape  # [N, L, S]
      (2, 6, 6)
    """

    def __init__(
        self,
        head_dim: int,
        *,
        num_positions: int,
        scale: float | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        embedding_init: Callable[..., jax.Array] = nnx.initializers.zeros,
        rngs: nnx.Rngs,
    ):
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.num_positions = check_positive_int("num_positions", num_positions)
        self.scale = None if scale is None else check_positive_float("scale", scale)
        self.dtype = dtype
        shape = (self.num_positions, self.head_dim)
        self.pos_emb = nnx.Param(embedding_init(rngs.params(), shape, param_dtype))

    def __call__(
        self,
        q: jax.Array,
        k: jax.Array,
        q_positions: jax.Array,
        k_positions: jax.Array | None = None,
        mask: jax.Array | None = None,
    ) -> jax.Array:
        k_positions = q_positions if k_positions is None else k_positions
        pos_emb = self.pos_emb[...]
        bias = cope_bias(
            q,
            k,
            pos_emb,
            q_positions=q_positions,
            k_positions=k_positions,
            mask=mask,
            scale=self.scale,
        )
        return bias.astype(self.dtype or pos_emb.dtype)


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
