"""transformers' decode policy for the ``seq_len``-dependent families.

During ``generate`` with a KV cache, transformers rotates tokens as follows
(checked against ``generate`` itself, ``tests/fixtures/checkpoints/decode_golden.json``):

* **Dynamic NTK** (``dynamic_rope_update``): each forward computes its frequencies
  from ``max(position_ids) + 1``, keeping the longest length seen; a key keeps the
  rotation of the forward that wrote it. So the prompt's tokens are rotated with
  ``seq_len = prompt_length`` and a token decoded at position ``p`` with
  ``p + 1``: per token, ``max(p + 1, prompt_length)``.
* **LongRoPE** (Phi-3's ``prepare_inputs_for_generation``): once the sequence
  passes ``original_max_position_embeddings`` the cache is dropped and the whole
  sequence recomputed with the long factors, so every token of a step uses
  ``seq_len`` = the current length (the last query position + 1).

With a cache of *unrotated* keys (Flax's ``decode=True`` attention), pass the two
lengths this returns to :func:`flax_posenc.apply_rope_qk` (``seq_len=``,
``k_seq_len=``) or :func:`flax_posenc.positional_attention_fn` and decoding
matches ``generate`` step by step. A fixed ``seq_len`` instead keeps every step on
the same frequencies (scores stay exactly relative, but differ from transformers
once the sequence passes the original length): choose it for models trained that
way, or to compare with a full forward pass.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from flax_posenc._core.validation import (
    check_integer_array,
    check_positive_int,
    check_rope_config,
)
from flax_posenc.rope.config import RopeConfig
from flax_posenc.rope.scaling import DynamicNTKScaling, LongRopeScaling

__all__ = ["hf_decode_seq_lens"]


def hf_decode_seq_lens(
    config: RopeConfig,
    q_positions: jax.Array,
    k_positions: jax.Array,
    *,
    prompt_length: int | jax.Array,
) -> tuple[jax.Array | None, jax.Array | None]:
    """The ``(seq_len, k_seq_len)`` with which transformers rotates q and k.

    Args:
      config: the RoPE configuration.
      q_positions: integer ``[..., L]``, the positions of this step's queries.
      k_positions: integer ``[..., S]``, the positions of every key slot.
      prompt_length: the prompt's length (int or traced int scalar): the length of
        the first forward pass of ``generate``.

    Returns:
      ``(seq_len, k_seq_len)``: per-token integer arrays shaped like the positions
      (dynamic NTK), one shared scalar twice (LongRoPE), or ``(None, None)`` for
      the families whose frequencies do not depend on the length.

    Raises:
      TypeError: non-integer positions or ``prompt_length``.
      ValueError: a ``prompt_length`` below 1.

    Examples:
      >>> config = fp.RopeConfig(head_dim=8, scaling=fp.DynamicNTKScaling(
      ...     factor=2.0, original_max_position_embeddings=4))
      >>> q_len, k_len = fp.hf_decode_seq_lens(config, jnp.array([6]),
      ...     jnp.arange(8), prompt_length=3)
      >>> q_len.tolist(), k_len.tolist()
      ([7], [3, 3, 3, 4, 5, 6, 7, 8])
    """
    check_rope_config("config", config, RopeConfig)
    q_positions = check_integer_array("q_positions", q_positions)
    k_positions = check_integer_array("k_positions", k_positions)
    if isinstance(prompt_length, int):
        prompt_length = check_positive_int("prompt_length", prompt_length)
    else:
        prompt_length = check_integer_array("prompt_length", prompt_length)
    if isinstance(config.scaling, DynamicNTKScaling):
        return _dynamic_seq_lens(q_positions, k_positions, prompt_length)
    if isinstance(config.scaling, LongRopeScaling):
        length = _longrope_seq_len(q_positions)
        return length, length
    return None, None


@jax.jit
def _dynamic_seq_lens(
    q_positions: jax.Array, k_positions: jax.Array, prompt_length: Any
) -> tuple[jax.Array, jax.Array]:
    """Dynamic NTK: each token's call saw ``max(position + 1, prompt_length)``."""
    return (
        jnp.maximum(q_positions + 1, prompt_length),
        jnp.maximum(k_positions + 1, prompt_length),
    )


@jax.jit
def _longrope_seq_len(q_positions: jax.Array) -> jax.Array:
    """LongRoPE: the step's own ``max(q_positions) + 1``, for q and k alike."""
    return jnp.max(q_positions, initial=0) + 1
