"""Dual chunk attention's position map (An et al., 2024; Qwen2.5-1M's
``dual_chunk_attention_config``): the config and the remapped RoPE positions that
:func:`flax_posenc.dual_chunk_attention` rotates q and k at (its module docstring has
the method). Here, below attention, so that the Hugging Face reader can build the
config.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from flax_posenc._core.validation import (
    check_instance,
    check_integer_array,
    check_positive_int,
)

__all__ = [
    "DualChunkAttentionConfig",
    "DualChunkPositions",
    "dual_chunk_positions",
]


@dataclasses.dataclass(frozen=True)
class DualChunkAttentionConfig:
    """Qwen2.5-1M's ``dual_chunk_attention_config``, validated host data.

    Attributes:
      chunk_size: the pretraining length the remapped distances stay below.
      local_size: the overlap; chunks are ``chunk_size - local_size`` long.
      original_max_position_embeddings: for the logit scale (``0``: no scaling,
        vLLM's ``> 0`` check).

    Raises:
      TypeError: non-int fields (a whole float from JSON is read as an int).
      ValueError: ``chunk_size <= 0``, ``local_size`` outside ``[0, chunk_size)``,
        ``original_max_position_embeddings < 0``.

    Examples:
      >>> config = fp.DualChunkAttentionConfig(chunk_size=262144, local_size=8192,
      ...     original_max_position_embeddings=262144)  # Qwen2.5-7B-Instruct-1M
      >>> config.chunk_len
      253952
    """

    chunk_size: int
    local_size: int
    original_max_position_embeddings: int = 0

    def __post_init__(self):
        def whole(name: str) -> int:
            value = getattr(self, name)
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"`{name}` must be an int, got {value!r} ({type(value).__name__})."
                )
            object.__setattr__(self, name, value)
            return value

        chunk = check_positive_int("chunk_size", whole("chunk_size"))
        local = whole("local_size")
        if not 0 <= local < chunk:
            raise ValueError(
                f"`local_size` must be in [0, chunk_size = {chunk}), got {local}: "
                "chunks are chunk_size - local_size long."
            )
        original = whole("original_max_position_embeddings")
        if original < 0:
            raise ValueError(
                f"`original_max_position_embeddings` must be >= 0 (0: no logit "
                f"scaling), got {original}."
            )

    @property
    def chunk_len(self) -> int:
        """``c = chunk_size - local_size``."""
        return self.chunk_size - self.local_size

    def remap(self, positions: jax.Array) -> DualChunkPositions:
        """:func:`dual_chunk_positions` of checked integer positions (no checks:
        dual chunk attention calls it inside its program)."""
        c, size = self.chunk_len, self.chunk_size
        within = positions % c
        return DualChunkPositions(
            intra=within,
            successive=jnp.minimum(within + c, size),
            inter=jnp.full_like(positions, min(2 * c - 1, size)),
            key=within,
        )


class DualChunkPositions(NamedTuple):
    """The RoPE positions of dual chunk attention, int32."""

    intra: jax.Array  # queries, keys of the same chunk: i % c
    successive: jax.Array  # queries, keys of the previous chunk
    inter: jax.Array  # queries, keys of earlier chunks (one value)
    key: jax.Array  # keys: j % c


def dual_chunk_positions(
    positions: jax.Array, config: DualChunkAttentionConfig
) -> DualChunkPositions:
    """The remapped RoPE positions of tokens at ``positions`` (see the module
    docstring).

    Args:
      positions: integer ``[...]``, non-negative.
      config: a :class:`DualChunkAttentionConfig`.

    Returns:
      :class:`DualChunkPositions`, each int32 ``positions.shape``.

    Raises:
      TypeError: non-integer positions, ``config`` of another type.

    Examples:
      >>> config = fp.DualChunkAttentionConfig(chunk_size=8, local_size=2)
      >>> p = fp.dual_chunk_positions(jnp.array([0, 5, 6, 13]), config)
      >>> p.intra.tolist(), p.successive.tolist(), p.inter.tolist(), p.key.tolist()
      ([0, 5, 0, 1], [6, 8, 6, 7], [8, 8, 8, 8], [0, 5, 0, 1])
    """
    check_instance("config", config, DualChunkAttentionConfig)
    return _compiled_positions(check_integer_array("positions", positions), config)


@functools.partial(jax.jit, static_argnames="config")
def _compiled_positions(
    positions: jax.Array, config: DualChunkAttentionConfig
) -> DualChunkPositions:
    return config.remap(positions.astype(jnp.int32))
