"""Dual chunk attention (An et al., 2024), as Qwen2.5-1M publishes and vLLM runs it.

A RoPE model trained at ``chunk_size`` reads far longer inputs by cutting positions
into chunks of ``c = chunk_size - local_size``; keys sit at ``j % c`` and each query
at one of three positions, by its chunk's relation to the key's::

    key in the query's chunk       (intra):      q at  i % c
    key in the previous chunk      (successive): q at  min(i % c + c, chunk_size)
    key in an earlier chunk        (inter):      q at  min(2 c - 1, chunk_size)

so every relative distance stays below ``chunk_size`` (vLLM's
``DualChunkRotaryEmbedding`` caches). With ``original_max_position_embeddings = T0 >
0`` the query and the key of every logit are each scaled by the factor of the step
that computed them, ``s(n) = max(1, 0.1 ln(n / T0) + 1)`` with ``n =
max(prompt_length, p + 1)`` for the token at ``p``: ``s(prompt_length)`` squared in
a prefill, ``s(p + 1) s(max(prompt_length, j + 1))`` for a decode step's key ``j``.

The three logits are merged per tile inside the online softmax of
:func:`flax_posenc.blockwise_attention`, which equals vLLM's three flash-attention
calls merged by their log-sum-exp. vLLM's sparse "critical" queries
(``sparse_attention_config``) are a speed device and are not implemented.

Reference: An et al., "Training-Free Long-Context Scaling of Large Language Models",
ICML 2024 (Section 3); vLLM's ``dual_chunk_rope.py`` and ``dual_chunk_flash_attn.py``.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core.eager import jit_when_eager
from flax_posenc._core.validation import (
    check_instance,
    check_integer_array,
    is_traced,
)
from flax_posenc.attention import _blockwise
from flax_posenc.attention._spec import Arrays, Options, check_spec, position_pair
from flax_posenc.rope.config import RopeConfig
from flax_posenc.rope.dual_chunk import DualChunkAttentionConfig

__all__ = ["dual_chunk_attention"]


def dual_chunk_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    q_positions: jax.Array,
    k_positions: jax.Array | None = None,
    prompt_length: int | jax.Array | None = None,
    rope: RopeConfig,
    config: DualChunkAttentionConfig,
    scale: float | None = None,
    block_q: int = 512,
    block_k: int = 512,
    precision: Any = jax.lax.Precision.HIGHEST,
) -> jax.Array:
    """Causal RoPE attention with dual chunk attention's remapped positions.

    q and k come *unrotated*. Each pair's intra, successive or inter logit is chosen
    by ``q_pos // c - k_pos // c`` (0, 1, >= 2), then scaled as the module docstring
    says. Grouped-query attention as :func:`flax_posenc.blockwise_attention`.

    Args:
      q: floating ``[..., L, N, H]``.
      k: floating ``[..., S, K, H]`` (q's rank), ``N`` a multiple of ``K``.
      v: floating ``[..., S, K, Hv]``.
      q_positions: integer ``[..., L]``, non-negative.
      k_positions: integer ``[..., S]``; None means ``q_positions`` (a prefill of
        the whole prompt).
      prompt_length: the number of prompt tokens, an int or int ``[B]`` (vLLM's
        ``prompt_len``); tokens past it were decoded one per step. Required with
        a logit factor when ``k_positions`` is given (a decode step, a chunked
        prefill); None with ``k_positions=None`` is ``max(q_positions) + 1``.
      rope: the model's :class:`flax_posenc.RopeConfig`.
      config: a :class:`DualChunkAttentionConfig`.
      scale: the logit scale before DCA's factors; None is ``1 / sqrt(H)``.
      block_q: query rows per tile.
      block_k: keys per tile.
      precision: ``jax.lax.Precision`` of the two matmuls; the default, ``HIGHEST``,
        keeps float32 logits on every backend.

    Returns:
      ``[..., L, N, Hv]`` in q's dtype.

    Raises:
      TypeError: non-floating q/k/v, non-integer positions or ``prompt_length``,
        ``rope`` or ``config`` of another type, non-int block sizes.
      ValueError: shapes that disagree, positions that break the positions rule,
        block sizes ``<= 0``, ``prompt_length`` missing, ``< 1`` or not one per
        sequence.

    Examples:
      >>> q = jax.random.normal(jax.random.key(0), (1, 64, 2, 8))  # [B, L, N, H]
      >>> config = fp.DualChunkAttentionConfig(chunk_size=16, local_size=4,
      ...     original_max_position_embeddings=16)
      >>> fp.dual_chunk_attention(q, q, q, q_positions=jnp.arange(64),
      ...     rope=fp.RopeConfig(head_dim=8), config=config, block_q=32).shape
      (1, 64, 2, 8)

      A decode step at position 63 of a sequence whose prompt had 60 tokens:

      >>> fp.dual_chunk_attention(q[:, -1:], q, q, q_positions=jnp.array([63]),
      ...     k_positions=jnp.arange(64), prompt_length=60,
      ...     rope=fp.RopeConfig(head_dim=8), config=config).shape
      (1, 1, 2, 8)

    Reference: An et al., ICML 2024; vLLM's dual chunk attention.
    """
    check_instance("config", config, DualChunkAttentionConfig)
    spec = check_spec(
        q,
        k,
        v,
        q_positions=q_positions,
        k_positions=k_positions,
        rope=rope,
        rope_required=True,
        causal=True,
        scale=scale,
        block_q=block_q,
        block_k=block_k,
    )
    prompt = _check_prompt_length(prompt_length, k_positions, config, q.shape[:-3])
    return _dual_chunk(
        q,
        k,
        v,
        spec.arrays,
        prompt,
        rope=rope,
        config=config,
        options=spec.options,
        precision=precision,
    )


def _check_prompt_length(
    value: Any, k_positions: Any, config: DualChunkAttentionConfig, batch: tuple
) -> jax.Array | None:
    """``prompt_length`` as an integer array of shape ``()`` or ``batch``, or None
    where the prefill default is right (see :func:`dual_chunk_attention`)."""
    if value is None:
        if k_positions is not None and config.original_max_position_embeddings > 0:
            raise ValueError(
                "`prompt_length` must be given with `k_positions` when "
                "config.original_max_position_embeddings > 0: each key carries the "
                "logit factor of the step that cached it, which the prompt's "
                "length decides (vLLM's prompt_len), got None. Hint: "
                "prompt_length=<prompt tokens> (an int, or [B] per sequence); for "
                "a prefill of the whole prompt, leave k_positions=None."
            )
        return None
    dtype = None
    if not isinstance(value, (bool, str, bytes)):
        dtype = value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype
    if dtype is None or not jnp.issubdtype(dtype, jnp.integer):
        shown = f"dtype {dtype}" if hasattr(value, "dtype") else repr(value)
        raise TypeError(
            "`prompt_length` must be an int or an integer array [B] (the prompt's "
            f"token count per sequence), got {type(value).__name__} {shown}. Hint: "
            "prompt_length=len(prompt_tokens)."
        )
    value = check_integer_array("prompt_length", value)
    if value.shape not in ((), batch):
        raise ValueError(
            f"`prompt_length` must be a scalar or one count per sequence, shape "
            f"{batch} (q.shape[:-3]), got shape {tuple(value.shape)}."
        )
    least = None if is_traced(value) else int(np.asarray(value).min(initial=1))
    if least is not None and least < 1:
        raise ValueError(
            f"`prompt_length` must be >= 1 (a prompt holds a token), got a minimum "
            f"of {least}. Hint: the number of tokens prefilled."
        )
    return value


def _factor(
    positions: jax.Array, prompt: jax.Array, original: int, shape: tuple[int, ...]
) -> jax.Array:
    """float32 ``s(max(prompt, p + 1))`` of shape ``shape`` (``x.shape[:-2]``) for
    int32 positions ``[..., L]`` and ``prompt``, one count per sequence: vLLM's
    ``(0.1 ln(orig_seq_len / original) + 1).clip(min=1)`` at the step that computed
    the token's key and query."""
    written = jnp.maximum(
        _expand(prompt[..., None], shape), _expand(positions + 1, shape)
    )
    return jnp.maximum(0.1 * jnp.log(written.astype(jnp.float32) / original) + 1.0, 1.0)


def _expand(x: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """``x`` broadcast to ``shape``, leading axes added explicitly."""
    return jnp.broadcast_to(x.reshape((1,) * (len(shape) - x.ndim) + x.shape), shape)


@jit_when_eager("rope", "config", "options", "precision")
def _dual_chunk(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    arrays: Arrays,
    prompt: jax.Array | None,
    *,
    rope: RopeConfig,
    config: DualChunkAttentionConfig,
    options: Options,
    precision: Any,
) -> jax.Array:
    q_pos, k_pos = position_pair(arrays)
    qp, kp = config.remap(q_pos), config.remap(k_pos)
    q_factor = k_factor = None
    original = config.original_max_position_embeddings
    if original > 0:
        if prompt is None:  # a prefill of the whole prompt, per sequence
            prompt = jnp.max(q_pos, axis=-1) + 1
        prompt = jnp.asarray(prompt).astype(jnp.int32)
        q_factor = _factor(q_pos, prompt, original, q.shape[:-2])
        k_factor = _factor(k_pos, prompt, original, k.shape[:-2])
    qs = _blockwise.rotated_copies(
        q, [qp.intra, qp.successive, qp.inter], rope, q_factor
    )
    ks = _blockwise.rotated_copies(k, [kp.key], rope, k_factor)
    logits = _blockwise.RemappedLogits(
        ((0, 0), (1, 0), (2, 0)),
        functools.partial(_chunks_apart, chunk_len=config.chunk_len),
        q.shape[-1],
    )
    return _blockwise.remapped_attention(
        qs, ks, v, arrays, options, logits, precision
    ).astype(q.dtype)


def _chunks_apart(
    q_positions: jax.Array, k_positions: jax.Array, *, chunk_len: int
) -> jax.Array:
    """0, 1 or 2: the key in the query's chunk, the one before, or an earlier one."""
    apart = q_positions[:, :, None] // chunk_len - k_positions[:, None, :] // chunk_len
    return jnp.minimum(apart, 2)
