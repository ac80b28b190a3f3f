"""``flax.linen`` modules: thin wrappers over the functions of :mod:`flax_posenc`.

The same names, arguments and outputs as :mod:`flax_posenc.nnx`.

``dtype=None`` infers the output dtype from the module's inputs and parameters, as
Flax does: the embeddings' for absolute encodings, the table's for T5 biases,
float32 for ALiBi, which has neither.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.typing import Dtype

from flax_posenc._core.exact_angles import AnglePrecision
from flax_posenc._core.validation import check_bucket_sizes, check_positive_int
from flax_posenc._embed import add_learned, add_sinusoidal, check_features
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

default_embedding_init = nn.initializers.normal(stddev=0.02)
default_relative_bias_init = nn.initializers.normal(stddev=0.02)


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


class SinusoidalPositionalEncoding(nn.Module):
    """Adds :func:`flax_posenc.sinusoidal_encoding` to embeddings ``[..., L, D]``.

    ``module(embeddings, positions=None)`` returns ``embeddings + PE(positions)``, with
    positions integer ``[..., L]`` (default ``0..L-1``). No parameters.

    Attributes:
      base: as in :func:`flax_posenc.sinusoidal_encoding`.
      layout: ``"interleaved"`` or ``"half"``.
      spacing: ``"paper"`` or ``"tensor2tensor"``.
      angle_precision: ``"float32"`` or ``"exact"`` (see
        :data:`flax_posenc.AnglePrecision`).
      dtype: output dtype; None infers it (the embeddings').

    Examples:
      >>> from flax_posenc import linen as plinen
      >>> x = jnp.zeros((2, 8, 16), jnp.bfloat16)  # [B, L, D]
      >>> module = plinen.SinusoidalPositionalEncoding()
      >>> y = module.apply({}, x)
      >>> y.shape, y.dtype
      ((2, 8, 16), dtype(bfloat16))
    """

    base: float = 10000.0
    layout: SinusoidalLayout = "interleaved"
    spacing: SinusoidalSpacing = "paper"
    angle_precision: AnglePrecision = "float32"
    dtype: Dtype | None = None

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


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned table ``embedding [max_len, features]`` to embeddings ``[..., L, D]``.

    ``module(embeddings, positions=None)`` returns ``embeddings + embedding[positions]``.
    The table is initialised ``N(0, 0.02^2)`` as in BERT and GPT-2. Out-of-range
    positions follow ``out_of_range`` (see :mod:`flax_posenc.learned`), never a silent
    clamp.

    Attributes:
      max_len: number of rows (positions 0..max_len-1).
      features: ``D``; must equal the embeddings' last dimension.
      dtype: output dtype; None infers it (the embeddings').
      param_dtype: dtype of the table.
      embedding_init: initializer of the table.
      out_of_range: ``"nan"``, ``"checkify"`` or ``"clip"``.

    Examples:
      >>> from flax_posenc import linen as plinen
      >>> module = plinen.LearnedPositionalEmbedding(max_len=32, features=16)
      >>> x = jnp.zeros((2, 8, 16))  # [B, L, D]
      >>> params = module.init(jax.random.key(0), x)
      >>> params["params"]["embedding"].shape
      (32, 16)
      >>> module.apply(params, x, jnp.arange(8) + 4).shape  # positions 4..11
      (2, 8, 16)
    """

    max_len: int
    features: int
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    embedding_init: Callable[..., jax.Array] = default_embedding_init
    out_of_range: OutOfRange = "nan"

    @nn.compact
    def __call__(
        self, embeddings: jax.Array, positions: jax.Array | None = None
    ) -> jax.Array:
        check_features(embeddings, self.max_len, self.features)
        table = self.param(
            "embedding",
            self.embedding_init,
            (self.max_len, self.features),
            self.param_dtype,
        )
        return add_learned(
            embeddings,
            table,
            positions,
            out_of_range=self.out_of_range,
            dtype=self.dtype,
        )


class RotaryEmbedding(nn.Module):
    """Rotates queries and keys with RoPE: calls :func:`flax_posenc.apply_rope_qk`.

    ``module(q, k, positions, k_positions=None, seq_len=None, k_seq_len=None)``
    returns the rotated ``(q, k)``, in their dtypes. ``q: [..., L, N, H]``, ``k:
    [..., S, K, H]`` (``K`` kv heads), ``positions: int [..., L]``. Without
    ``k_positions`` (self-attention, ``S = L``) one cos/sin table serves both. For
    KV-cache decoding pass ``k_positions: int [..., S]`` (e.g. the new keys'
    positions, or ``arange(S)`` for a whole cache); dynamic NTK and LongRoPE then use
    ``seq_len = max(positions, k_positions) + 1`` for both, so q and k share
    frequencies; pass a fixed ``seq_len`` so every decode step uses the same ones,
    and ``k_seq_len`` to give k its own (None means ``seq_len``), e.g. the per-key
    lengths of :func:`flax_posenc.hf_decode_seq_lens`. For q or k alone use
    :func:`flax_posenc.apply_rope`. No parameters.

    Attributes:
      config: the :class:`flax_posenc.RopeConfig`.

    Examples:
      >>> from flax_posenc import linen as plinen
      >>> module = plinen.RotaryEmbedding(fp.RopeConfig(head_dim=64))
      >>> q = jnp.ones((2, 16, 8, 64))  # [B, L, N, H]
      >>> k = jnp.ones((2, 16, 2, 64))  # [B, S, K, H], 2 kv heads
      >>> q_rot, k_rot = module.apply({}, q, k, jnp.arange(16))
      >>> q_rot.shape, k_rot.shape
      ((2, 16, 8, 64), (2, 16, 2, 64))

      A decode step of dynamic NTK as transformers runs it, each cached key rotated
      at its own length:

      >>> config = fp.RopeConfig(head_dim=8, scaling=fp.DynamicNTKScaling(
      ...     factor=2.0, original_max_position_embeddings=4))
      >>> positions, k_positions = jnp.array([7]), jnp.arange(8)
      >>> seq_len, k_seq_len = fp.hf_decode_seq_lens(config, positions, k_positions,
      ...     prompt_length=3)
      >>> k_seq_len.tolist()
      [3, 3, 3, 4, 5, 6, 7, 8]
      >>> q, k = plinen.RotaryEmbedding(config).apply({}, jnp.ones((1, 2, 8)),
      ...     jnp.ones((8, 2, 8)), positions, k_positions, seq_len, k_seq_len)
      >>> q.shape, k.shape
      ((1, 2, 8), (8, 2, 8))
    """

    config: RopeConfig

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


class ALiBi(nn.Module):
    """The ALiBi attention bias :func:`flax_posenc.alibi_bias`, ``[..., N, L, S]``.

    ``module(q_positions, k_positions=None)`` with integer ``q_positions [..., L]``
    and ``k_positions [..., S]`` (default: ``q_positions``, i.e. self-attention)
    returns ``-slope_h * |q_pos - k_pos|``, to add to attention logits. No
    parameters. ``module.apply({}, method="position_bias")`` is its tile form,
    :class:`flax_posenc.AlibiBias`, for blockwise and ring attention.

    Attributes:
      num_heads: ``N``.
      dtype: output dtype; None infers it (float32: no input or parameters).

    Examples:
      >>> from flax_posenc import linen as plinen
      >>> plinen.ALiBi(num_heads=8).apply({}, jnp.arange(5)).shape  # [N, L, S]
      (8, 5, 5)
    """

    num_heads: int
    dtype: Dtype | None = None

    def position_bias(self) -> AlibiBias:
        """This module as a :class:`flax_posenc.PositionBias`: ``AlibiBias(num_heads)``."""
        return AlibiBias(self.num_heads)

    def __call__(
        self, q_positions: jax.Array, k_positions: jax.Array | None = None
    ) -> jax.Array:
        k_positions = q_positions if k_positions is None else k_positions
        bias = self.position_bias()(q_positions, k_positions)
        return bias.astype(self.dtype or jnp.float32)


class RelativePositionBias(nn.Module):
    """T5's learned relative position bias :func:`flax_posenc.relative_position_bias`.

    ``module(q_positions, k_positions=None)`` with integer ``q_positions [..., L]``
    and ``k_positions [..., S]`` (default: ``q_positions``) returns ``[..., N, L, S]``,
    to add to attention logits. The parameter ``relative_attention_bias
    [num_buckets, num_heads]`` has Hugging Face's T5 layout, initialised
    ``N(0, 0.02^2)`` by default. ``module.apply(variables, method="position_bias")``
    is its tile form, a :class:`flax_posenc.RelativeBias` with the table and every
    bucket setting, for blockwise and ring attention.

    Attributes:
      num_heads: ``N``.
      num_buckets: as in :func:`flax_posenc.relative_position_bucket`.
      max_distance: as in :func:`flax_posenc.relative_position_bucket`.
      bidirectional: as in :func:`flax_posenc.relative_position_bucket`.
      dtype: output dtype; None infers it (the table's, ``param_dtype``).
      param_dtype: dtype of the table.
      embedding_init: initializer of the table.

    Examples:
      >>> from flax_posenc import linen as plinen
      >>> module = plinen.RelativePositionBias(num_heads=4, bidirectional=False)
      >>> positions = jnp.arange(6)[None]  # [B=1, L=6]
      >>> params = module.init(jax.random.key(0), positions)
      >>> params["params"]["relative_attention_bias"].shape  # [num_buckets, N]
      (32, 4)
      >>> module.apply(params, positions).shape  # [B, N, L, S]
      (1, 4, 6, 6)
    """

    num_heads: int
    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool = True
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    embedding_init: Callable[..., jax.Array] = default_relative_bias_init

    def setup(self):
        check_positive_int("num_heads", self.num_heads)
        check_bucket_sizes(self.num_buckets, self.max_distance, self.bidirectional)
        self.relative_attention_bias = self.param(
            "relative_attention_bias",
            self.embedding_init,
            (self.num_buckets, self.num_heads),
            self.param_dtype,
        )

    def position_bias(self) -> RelativeBias:
        """This module as a :class:`flax_posenc.PositionBias`: a
        :class:`flax_posenc.RelativeBias` of its table and bucket settings."""
        return RelativeBias(
            self.relative_attention_bias,
            bidirectional=self.bidirectional,
            max_distance=self.max_distance,
        )

    def __call__(
        self, q_positions: jax.Array, k_positions: jax.Array | None = None
    ) -> jax.Array:
        k_positions = q_positions if k_positions is None else k_positions
        bias = self.position_bias()(q_positions, k_positions)
        return bias.astype(self.dtype or self.param_dtype)


def default_kerple_init(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
    """Kerple's unconstrained parameters, uniform in ``[-2, 1)``: ``r1`` and the log
    kernel's ``r2`` in ``[0.13, 1.31)``, the power kernel's ``r2`` in ``[0.24,
    1.46)``, different per head."""
    return jax.random.uniform(key, shape, dtype, -2.0, 1.0)


class Kerple(nn.Module):
    """Kerple's learned kernel bias :func:`flax_posenc.kerple_bias`, ``[..., N, L, S]``.

    ``module(q_positions, k_positions=None)`` (default keys: the queries). The
    parameters ``r1_unconstrained [N]`` and ``r2_unconstrained [N]`` map to the
    kernel's constrained ``r1, r2`` (:func:`flax_posenc.kerple_parameters`).
    ``module.apply(variables, method="position_bias")`` is its tile form, a
    :class:`flax_posenc.KerpleBias` with the parameters and ``kernel``, for
    blockwise and ring attention.

    Attributes:
      num_heads: ``N``.
      kernel: ``"log"`` or ``"power"``.
      dtype: output dtype; None infers it (``param_dtype``).
      param_dtype: dtype of the parameters.
      r1_init: initializer of ``r1_unconstrained``.
      r2_init: initializer of ``r2_unconstrained``.

    Examples:
      >>> from flax_posenc import linen as plinen
      >>> module = plinen.Kerple(num_heads=4)
      >>> params = module.init(jax.random.key(0), jnp.arange(6))
      >>> module.apply(params, jnp.arange(6)).shape  # [N, L, S]
      (4, 6, 6)
    """

    num_heads: int
    kernel: KerpleKernel = "log"
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    r1_init: Callable[..., jax.Array] = default_kerple_init
    r2_init: Callable[..., jax.Array] = default_kerple_init

    def setup(self):
        shape = (check_positive_int("num_heads", self.num_heads),)
        dtype = self.param_dtype
        self.r1_unconstrained = self.param(
            "r1_unconstrained", self.r1_init, shape, dtype
        )
        self.r2_unconstrained = self.param(
            "r2_unconstrained", self.r2_init, shape, dtype
        )

    def position_bias(self) -> KerpleBias:
        """This module as a :class:`flax_posenc.PositionBias`: a
        :class:`flax_posenc.KerpleBias` of its parameters and ``kernel``."""
        return KerpleBias(
            self.r1_unconstrained, self.r2_unconstrained, kernel=self.kernel
        )

    def __call__(
        self, q_positions: jax.Array, k_positions: jax.Array | None = None
    ) -> jax.Array:
        k_positions = q_positions if k_positions is None else k_positions
        bias = self.position_bias()(q_positions, k_positions)
        return bias.astype(self.dtype or self.param_dtype)


class FIRE(nn.Module):
    """FIRE's learned bias :func:`flax_posenc.fire_bias`, ``[..., N, L, S]``.

    ``module(q_positions, k_positions=None)``. Parameters (the fields of
    :class:`flax_posenc.FireParams`): ``c`` (init 0.1), ``threshold_multiplier``
    (init 1), and the MLP ``hidden_kernel [W]`` (normal), ``hidden_bias [W]`` (0),
    ``output_kernel [W, N]`` (LeCun normal), ``output_bias [N]`` (0).
    ``module.apply(variables, method="position_bias")`` is its tile form, a
    :class:`flax_posenc.FireBias` with the parameters, ``init_threshold`` and
    ``eps``, for blockwise and ring attention.

    Attributes:
      num_heads: ``N``.
      mlp_width: ``W``, the hidden width (the authors' 32).
      init_threshold: as in :func:`flax_posenc.fire_bias`.
      eps: as in :func:`flax_posenc.fire_bias`.
      dtype: output dtype; None infers it (``param_dtype``).
      param_dtype: dtype of the parameters.

    Examples:
      >>> from flax_posenc import linen as plinen
      >>> module = plinen.FIRE(num_heads=4, init_threshold=16.0)
      >>> params = module.init(jax.random.key(0), jnp.arange(6))
      >>> module.apply(params, jnp.arange(6)).shape  # [N, L, S]
      (4, 6, 6)
    """

    num_heads: int
    mlp_width: int = 32
    init_threshold: float = 512.0
    eps: float = 1e-6
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32

    def setup(self):
        heads = check_positive_int("num_heads", self.num_heads)
        width = check_positive_int("mlp_width", self.mlp_width)
        dtype = self.param_dtype
        self.fire_params = FireParams(
            c=self.param("c", nn.initializers.constant(0.1), (), dtype),
            threshold_multiplier=self.param(
                "threshold_multiplier", nn.initializers.ones, (), dtype
            ),
            hidden_kernel=self.param(
                "hidden_kernel", nn.initializers.normal(1.0), (width,), dtype
            ),
            hidden_bias=self.param(
                "hidden_bias", nn.initializers.zeros, (width,), dtype
            ),
            output_kernel=self.param(
                "output_kernel", nn.initializers.lecun_normal(), (width, heads), dtype
            ),
            output_bias=self.param(
                "output_bias", nn.initializers.zeros, (heads,), dtype
            ),
        )

    def position_bias(self) -> FireBias:
        """This module as a :class:`flax_posenc.PositionBias`: a
        :class:`flax_posenc.FireBias` of its parameters, ``init_threshold`` and
        ``eps``."""
        return FireBias(
            self.fire_params, init_threshold=self.init_threshold, eps=self.eps
        )

    def __call__(
        self, q_positions: jax.Array, k_positions: jax.Array | None = None
    ) -> jax.Array:
        k_positions = q_positions if k_positions is None else k_positions
        bias = self.position_bias()(q_positions, k_positions)
        return bias.astype(self.dtype or self.param_dtype)


class CoPE(nn.Module):
    """CoPE's contextual position bias :func:`flax_posenc.cope_bias`.

    ``module(q, k, q_positions, k_positions=None, mask=None)`` with ``q [..., L, N,
    H]``, ``k [..., S, K, H]`` returns ``[..., N, L, S]`` to add to ``q . k`` before
    the logit scale. The parameter ``pos_emb [num_positions, head_dim]`` (the
    authors' name) starts at zero, as theirs.

    Attributes:
      head_dim: ``H``.
      num_positions: ``P``, the embedded integer positions (counts clamp at
        ``P - 1``).
      scale: the gates' logit scale; None is ``1 / sqrt(H)``.
      dtype: output dtype; None infers it (``param_dtype``).
      param_dtype: dtype of ``pos_emb``.
      embedding_init: initializer of ``pos_emb``.

    Examples:
      >>> from flax_posenc import linen as plinen
      >>> q = jnp.ones((6, 2, 8))  # [L, N, H]
      >>> module = plinen.CoPE(head_dim=8, num_positions=7)
      >>> params = module.init(jax.random.key(0), q, q, jnp.arange(6))
      >>> module.apply(params, q, q, jnp.arange(6)).shape  # [N, L, S]
      (2, 6, 6)
    """

    head_dim: int
    num_positions: int
    scale: float | None = None
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    embedding_init: Callable[..., jax.Array] = nn.initializers.zeros

    @nn.compact
    def __call__(
        self,
        q: jax.Array,
        k: jax.Array,
        q_positions: jax.Array,
        k_positions: jax.Array | None = None,
        mask: jax.Array | None = None,
    ) -> jax.Array:
        shape = (
            check_positive_int("num_positions", self.num_positions),
            check_positive_int("head_dim", self.head_dim),
        )
        pos_emb = self.param("pos_emb", self.embedding_init, shape, self.param_dtype)
        k_positions = q_positions if k_positions is None else k_positions
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
