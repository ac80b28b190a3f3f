"""Re-rotating a RoPE key cache: keys rotated at ``p`` moved to ``p + delta``.

RoPE rotations compose, ``R(delta) R(p) = R(p + delta)``, so keys already rotated
and cached can be re-indexed in place: StreamingLLM's attention sinks with a rolling
window (Xiao et al., 2023), llama.cpp's context shift, or a cached prefix reused at
another offset. The shift is a unit rotation: an attention factor (YaRN, LongRoPE)
that scaled the keys once stays applied once.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from flax_posenc._core.validation import (
    check_heads_array,
    check_integer_array,
    check_positions,
    check_rope_config,
    check_seq_len,
)
from flax_posenc.rope import _core as _rope
from flax_posenc.rope.config import RopeConfig
from flax_posenc.rope.scaling import SeqLen

__all__ = ["rope_shift"]


def rope_shift(
    k: jax.Array, delta: jax.Array | int, config: RopeConfig, *, seq_len: SeqLen = None
) -> jax.Array:
    """Moves keys rotated at positions ``p`` to ``p + delta``, without recomputing them.

    Each rotated pair ``j`` turns by ``delta * inv_freq[j]`` (unit magnitude), so
    ``rope_shift(apply_rope(k, p, config), delta, config) == apply_rope(k, p + delta,
    config)`` up to float32 rounding (and a second rounding to ``k.dtype``), for
    both layouts, partial rotary and every scaling family: an attention factor is
    kept once. ``delta`` may be negative (e.g. evicting cache entries shifts the
    rest down).

    Args:
      k: ``[..., S, K, H]`` cached keys, already rotated, ``H == config.head_dim``.
      delta: an integer scalar (the same shift for every key) or integer
        ``[..., S]`` (one per key, leading axes broadcast, as positions).
      config: the RoPE configuration the keys were rotated with.
      seq_len: the ``seq_len`` the keys were rotated with and will be used at (an
        int, an int scalar, or integer ``[..., S]`` per key). Required exactly
        when the frequencies depend on it (dynamic NTK, LongRoPE): the shift is
        only a rotation when both positions share one set of frequencies.

    Returns:
      ``[..., S, K, H]`` in ``k.dtype``; features past ``rotary_dim`` unchanged.

    Raises:
      TypeError: non-floating ``k``, or non-integer ``delta`` or ``seq_len``.
      ValueError: ``H != config.head_dim``, a ``delta`` that breaks the positions
        rule (e.g. ``[1]`` for ``S = 5``), or a missing ``seq_len`` for dynamic NTK
        or LongRoPE.

    Examples:
      Evict the oldest window entry of a cache with 2 attention sinks: the
      sinks stay, the window moves down one position (after a roll of the slots).

      >>> config = fp.RopeConfig(head_dim=8)
      >>> k = fp.apply_rope(jnp.ones((6, 1, 8)), jnp.arange(6), config)  # [S, K, H]
      >>> kept = jnp.concatenate([k[:2], k[3:]])  # positions 0, 1, 3, 4, 5
      >>> shifted = fp.rope_shift(kept, jnp.array([0, 0, -1, -1, -1]), config)
      >>> want = fp.apply_rope(jnp.ones((5, 1, 8)), jnp.arange(5), config)
      >>> bool(jnp.allclose(shifted, want, atol=1e-6))
      True
    """
    check_rope_config("config", config, RopeConfig)
    check_heads_array("k", k, config.head_dim)
    delta = check_integer_array("delta", delta)
    if config.depends_on_seq_len and seq_len is None:
        raise ValueError(
            f"`seq_len` is required to shift keys of {type(config.scaling).__name__}: "
            "its frequencies depend on the sequence length, so the shift must use "
            "the seq_len the keys were rotated with (apply_rope's default, "
            "max(positions) + 1, is not known here). Pass seq_len=..."
        )
    seq_len = check_seq_len(seq_len)
    if delta.ndim == 0:  # one shift for every key: [S]
        shape = k.shape[-3:-2]
    else:
        shape = check_positions("delta", delta, "k.shape[:-2]", k.shape[:-2]).shape
    if getattr(seq_len, "ndim", 0) > len(shape):  # a per-key seq_len with batch axes
        shape = k.shape[:-2]
    check_seq_len(seq_len, "delta", shape)
    return _shift(delta, k, config=config, seq_len=seq_len, shape=shape)


@_rope.jit_angles("config", "shape")
def _shift(
    delta: jax.Array,
    k: jax.Array,
    *,
    config: RopeConfig,
    seq_len: Any,
    shape: tuple[int, ...],
) -> jax.Array:
    """:func:`rope_shift` of checked arguments, ``delta`` broadcast to ``shape``, as
    one compiled program."""
    delta = jnp.broadcast_to(delta, shape)
    cos, sin, _ = _rope.unit_cos_sin(delta, config, seq_len)  # no attention factor
    return _rope.rotate(k, cos, sin, config.layout)
