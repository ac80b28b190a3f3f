"""xPos: RoPE with a per-pair exponential decay (Sun et al., "A Length-Extrapolatable
Transformer", 2022).

Pair ``i < R/2`` (``R = config.rotated_features``) of q at position ``m`` is rotated as in
RoPE and multiplied by ``zeta_i^((m - c) / scale_base)``; pair ``i`` of k at position
``n`` by ``zeta_i^(-(n - c) / scale_base)``, with

    ``zeta_i = (2i/R + gamma) / (1 + gamma)``   (``gamma = 0.4``, ``scale_base = 512``).

So ``q_m . k_n`` carries ``zeta_i^((m - n) / scale_base)`` per pair: it depends on
``m - n`` only (the centre ``c`` cancels) and, since ``zeta_i < 1``, decays as the key
falls further behind the query (the high-frequency pairs, small ``i``, fastest). xPos
is meant for causal attention (``n <= m``); for ``n > m`` the factor grows.

Reference implementation: ``XPOS`` in torchscale, the authors' library. Its
conventions: ``zeta_i = (2i + 0.4 H) / (1.4 H)`` over the head dim ``H`` (here ``R``,
equal for full rotary); q gets ``scale`` and k ``1 / scale`` (``downscale=True``; here
``is_key=True``); pairs are interleaved ``(2i, 2i + 1)`` (use
``layout="interleaved"`` to load its weights) with ``inv_freq = 10000^(-2i/H)``; the
rotation uses positions ``0 .. T - 1`` but the scale exponent uses centred positions
``p - ceil(T / 2)``, ``T`` the total (cached + new) length: ``center=(T + 1) // 2``
here. Centring changes no score; it keeps the factors near 1.

Range (defaults): the largest factor is ``zeta_0^(-|p - c| / scale_base) =
3.5^(|p - c| / 512)``, which overflows float32 and bfloat16 beyond ``|p - c|`` of about 36000 and float16
beyond about 4500; centre long sequences.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core.angles import position_angles
from flax_posenc._core.validation import (
    check_bool,
    check_broadcastable,
    check_heads_array,
    check_integer_array,
    check_positions,
    check_positive_float,
    check_rope_config,
    check_seq_len,
    check_seq_len_covers,
)
from flax_posenc.rope import _core as _rope
from flax_posenc.rope.config import RopeConfig, RopeTables
from flax_posenc.rope.scaling import SeqLen

__all__ = [
    "apply_xpos",
    "xpos_cos_sin",
]


def xpos_cos_sin(
    positions: jax.Array,
    config: RopeConfig,
    *,
    is_key: bool,
    scale_base: float = 512.0,
    gamma: float = 0.4,
    center: int | jax.Array = 0,
    seq_len: SeqLen = None,
) -> RopeTables:
    """RoPE tables with the xPos scale folded in: ``(cos * s, sin * s)``.

    ``s[..., i] = exp(+-(p - c) * log(zeta_i) / scale_base)`` (``+`` for queries,
    ``-`` for keys), the exponent a float32 elementwise product of ``p - c`` and
    ``log(zeta_i) / scale_base`` (computed in float64, rounded once), like RoPE's
    angles.

    Args:
      positions: integer ``[...]``.
      config: the RoPE configuration (its scaling family, if any, applies as usual).
      is_key: False for queries (scale ``zeta^((p - c)/b)``), True for keys (the
        inverse); torchscale's ``downscale``.
      scale_base: ``b``, the decay length scale (paper: 512).
      gamma: ``gamma`` of ``zeta_i`` (paper: 0.4).
      center: integer ``c``, scalar or broadcastable to ``positions``; q and k must
        use the same. See the module docstring for torchscale's choice.
      seq_len: see :func:`flax_posenc.rope_cos_sin`.

    Returns:
      ``RopeTables(cos, sin)``, each float32 ``positions.shape + (R/2,)``.

    Raises:
      TypeError: non-integer positions or center, non-bool ``is_key``.
      ValueError: non-positive ``scale_base`` or ``gamma``, bad ``center`` shape.
    """
    check_rope_config("config", config, RopeConfig)
    positions = check_integer_array("positions", positions)
    center, decay = _check_decay(is_key, scale_base, gamma, center, positions)
    seq_len = check_seq_len(seq_len, "positions", positions.shape)
    check_seq_len_covers(seq_len, positions, "positions", config)
    return _xpos_tables(positions, center, config=config, seq_len=seq_len, **decay)


def _check_decay(
    is_key: Any, scale_base: Any, gamma: Any, center: Any, positions: jax.Array
) -> tuple[jax.Array, dict[str, Any]]:
    """The checked ``center`` and the static decay hyper-parameters."""
    check_bool("is_key", is_key)
    scale_base = check_positive_float("scale_base", scale_base)
    gamma = check_positive_float("gamma", gamma)
    center = check_integer_array("center", center)
    check_broadcastable("center", center.shape, "positions", positions.shape)
    return center, {"is_key": is_key, "scale_base": scale_base, "gamma": gamma}


@_rope.jit_angles("config", "is_key", "scale_base", "gamma")
def _xpos_tables(
    positions: jax.Array,
    center: jax.Array,
    *,
    config: RopeConfig,
    is_key: bool,
    scale_base: float,
    gamma: float,
    seq_len: Any,
) -> RopeTables:
    """:func:`xpos_cos_sin` of checked arguments, as one compiled program."""
    cos, sin = _rope.tables(positions, config, seq_len)
    rotary_dim = config.rotated_features
    zeta = (2.0 * np.arange(rotary_dim // 2) / rotary_dim + gamma) / (1.0 + gamma)
    log_decay = np.log(zeta) / scale_base * (-1.0 if is_key else 1.0)
    offsets = positions - jnp.broadcast_to(center, positions.shape)
    scale = jnp.exp(position_angles(offsets, jnp.asarray(log_decay, jnp.float32)))
    return RopeTables(cos * scale, sin * scale)


def apply_xpos(
    x: jax.Array,
    positions: jax.Array,
    config: RopeConfig,
    *,
    is_key: bool,
    scale_base: float = 512.0,
    gamma: float = 0.4,
    center: int | jax.Array = 0,
    seq_len: SeqLen = None,
) -> jax.Array:
    """Applies xPos to q (``is_key=False``) or k (``is_key=True``).

    ``out = R(p) x`` with pair ``i`` scaled by ``zeta_i^(+-(p - c)/scale_base)``; see
    the module docstring and :func:`xpos_cos_sin`. Computed in float32, rounded once
    to ``x.dtype``.

    Args:
      x: ``[..., L, N, H]`` with ``H == config.head_dim``.
      positions: integer ``[..., L]``, broadcastable to ``x.shape[:-2]``.
      config: the RoPE configuration.
      is_key: False for queries, True for keys; see :func:`xpos_cos_sin`.
      scale_base: ``b``, the decay length scale; see :func:`xpos_cos_sin`.
      gamma: ``gamma`` of ``zeta_i``; see :func:`xpos_cos_sin`.
      center: integer ``c``, the same for q and k; see :func:`xpos_cos_sin`.
      seq_len: see :func:`flax_posenc.rope_cos_sin`.

    Returns:
      ``[..., L, N, H]`` in ``x.dtype``; features past ``rotary_dim`` unchanged.

    Raises:
      ValueError: bad shapes or hyper-parameters.
      TypeError: non-integer positions or center, non-bool ``is_key``.

    Examples:
      >>> config = fp.RopeConfig(head_dim=64, layout="interleaved")
      >>> q = k = jnp.ones((2, 16, 4, 64), jnp.bfloat16)
      >>> positions = jnp.arange(16)
      >>> q = fp.apply_xpos(q, positions, config, is_key=False, center=8)
      >>> k = fp.apply_xpos(k, positions, config, is_key=True, center=8)
      >>> q.shape, k.dtype
      ((2, 16, 4, 64), dtype(bfloat16))
    """
    check_rope_config("config", config, RopeConfig)
    check_heads_array("x", x, config.head_dim)
    positions = check_positions("positions", positions, "x.shape[:-2]", x.shape[:-2])
    center, decay = _check_decay(is_key, scale_base, gamma, center, positions)
    seq_len = check_seq_len(seq_len, "positions", positions.shape)
    check_seq_len_covers(seq_len, positions, "positions", config)
    # Two programs, as apply_rope: xpos_cos_sin's tables, then the rotation.
    cos, sin = _xpos_tables(positions, center, config=config, seq_len=seq_len, **decay)
    return _rope.rotate(x, cos, sin, config.layout)
