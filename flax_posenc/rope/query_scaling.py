"""Position-dependent query scaling: attention temperature that grows with position.

Some long-context models multiply each query by a factor that grows slowly with its
position, after RoPE (or in place of it on NoPE layers), so that attention stays
sharp over long contexts (Nakanishi, "Scalable-Softmax Is Superior for Attention",
2025):

``q'[..., l, :, :] = q[..., l, :, :] * (1 + scale * ln(1 + floor((p_l + offset) /
floor_scale)))``.

* Llama 4 (``attn_temperature_tuning``, NoPE layers only): ``scale = attn_scale``,
  ``floor_scale = floor_scale``, ``offset = 1``, with ``p`` the cache index.
* Ministral 3 / Mistral 4 (``llama_4_scaling_beta``, every layer, after RoPE):
  ``scale = llama_4_scaling_beta``, ``floor_scale =
  original_max_position_embeddings``, ``offset = 0``.

The factor is exactly 1 for ``p + offset < floor_scale``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from flax_posenc._core.validation import (
    check_float,
    check_float_array,
    check_integer_array,
    check_positions,
    check_positive_float,
)

__all__ = ["QueryScaling", "apply_query_scaling", "query_scale"]


@dataclasses.dataclass(frozen=True)
class QueryScaling:
    """``1 + scale * ln(1 + floor((p + offset) / floor_scale))``; see the module.

    Attributes:
      scale: the slope of the logarithm (Llama 4 ``attn_scale``, Ministral 3
        ``llama_4_scaling_beta``).
      floor_scale: the position step (Llama 4 ``floor_scale``, Ministral 3
        ``original_max_position_embeddings``), > 0.
      offset: added to the position first (Llama 4: 1, Ministral 3: 0).

    Examples:
      >>> llama4 = fp.QueryScaling(scale=0.1, floor_scale=8192.0, offset=1)
      >>> fp.query_scale(jnp.array([0, 8190, 8191, 10**6]), llama4).tolist()
      [1.0, 1.0, 1.06931471824646, 1.4812184572219849]
    """

    scale: float
    floor_scale: float
    offset: int = 0

    def __post_init__(self):
        object.__setattr__(self, "scale", check_float("QueryScaling.scale", self.scale))
        object.__setattr__(
            self,
            "floor_scale",
            check_positive_float("QueryScaling.floor_scale", self.floor_scale),
        )
        if isinstance(self.offset, bool) or not isinstance(self.offset, int):
            raise TypeError(
                f"`QueryScaling.offset` must be an int, got {self.offset!r}."
            )


def query_scale(positions: jax.Array, scaling: QueryScaling) -> jax.Array:
    """The factor of each position, float32 ``positions.shape``.

    Args:
      positions: integer ``[...]``.
      scaling: the :class:`QueryScaling`.

    Returns:
      float32 ``positions.shape``; exactly 1 below ``floor_scale - offset``.

    Raises:
      TypeError: non-integer positions.
    """
    return _scale(check_integer_array("positions", positions), scaling)


@functools.partial(jax.jit, static_argnames="scaling")
def _scale(positions: jax.Array, scaling: QueryScaling) -> jax.Array:
    """:func:`query_scale` of checked positions, as one compiled program."""
    steps = jnp.floor(
        (positions.astype(jnp.float32) + float(scaling.offset)) / scaling.floor_scale
    )
    return 1.0 + scaling.scale * jnp.log1p(steps)


def apply_query_scaling(
    q: jax.Array, positions: jax.Array, scaling: QueryScaling
) -> jax.Array:
    """Multiplies each query by its position's factor, in float32, rounded once.

    Args:
      q: ``[..., L, N, H]`` floating.
      positions: integer ``[..., L]`` (the positions rule of :func:`apply_rope`).
      scaling: the :class:`QueryScaling`.

    Returns:
      ``[..., L, N, H]`` in ``q.dtype``.

    Raises:
      ValueError: positions that break the positions rule, or q of rank < 3.
      TypeError: non-integer positions or a non-floating q.

    Examples:
      >>> q = jnp.ones((1, 3, 2, 4), jnp.bfloat16)
      >>> beta = fp.QueryScaling(scale=0.1, floor_scale=4.0)
      >>> fp.apply_query_scaling(q, jnp.array([0, 4, 12]), beta)[0, :, 0, 0].tolist()
      [1.0, 1.0703125, 1.140625]
    """
    check_float_array("q", q)
    if q.ndim < 3:
        raise ValueError(
            f"`q` must be [..., L, N, H] (rank >= 3), got shape {q.shape}."
        )
    positions = check_positions("positions", positions, "q.shape[:-2]", q.shape[:-2])
    return _scaled_queries(q, positions, scaling)


@functools.partial(jax.jit, static_argnames="scaling")
def _scaled_queries(
    q: jax.Array, positions: jax.Array, scaling: QueryScaling
) -> jax.Array:
    """:func:`apply_query_scaling` of checked arguments, as one compiled program."""
    factor = _scale(positions, scaling)[..., None, None]
    factor = factor.reshape((1,) * (q.ndim - factor.ndim) + factor.shape)
    return (q.astype(jnp.float32) * factor).astype(q.dtype)
