"""Rotary position embedding (RoPE; Su et al., "RoFormer", 2021).

Pairs of features ``(a, b)`` of q and k are rotated by ``theta_i * p`` at position
``p``: ``(a, b) -> (a cos - b sin, b cos + a sin)``, so the score ``q_m . k_n`` depends
on ``m - n`` only. Two pairings are in use:

* ``layout="half"`` (GPT-NeoX, Hugging Face Llama ``rotate_half``): pairs
  ``(j, j + R/2)``;
* ``layout="interleaved"`` (GPT-J, RoFormer, Meta Llama, DeepSeek): pairs
  ``(2j, 2j + 1)``.

Partial rotary (``rotary_dim = R < H``) rotates the first ``R`` features and passes the
rest through. Tables ``cos, sin`` are half width ``[..., R/2]``, float32, with the
scaling family's attention factor multiplied in (as Hugging Face does). Angles are
float32 ``position * inv_freq`` products, never formed in the activation dtype.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._angles import position_angles
from flax_posenc._validation import (
    check_broadcastable,
    check_choice,
    check_integer_array,
    check_positive_float,
    check_positive_int,
)
from flax_posenc.rope_scaling import (
    SCALING_TYPES,
    SEQ_LEN_DEPENDENT,
    RopeFrequencies,
    RopeScaling,
    default_inv_freq,
)

RopeLayout = Literal["half", "interleaved"]
LAYOUTS = ("half", "interleaved")


@dataclasses.dataclass(frozen=True)
class RopeConfig:
    """Everything RoPE needs; frozen and hashable, so usable as a static argument.

    Attributes:
      head_dim: ``H``, the per-head feature size of q and k.
      theta: the frequency base (HF ``rope_theta``).
      rotary_dim: ``R``, the number of rotated features (even, ``<= H``); None means
        ``H``. HF's ``partial_rotary_factor`` gives ``R = int(H * factor)``.
      layout: ``"half"`` or ``"interleaved"`` pairing (see the module docstring).
      scaling: None (plain RoPE) or one of the families of
        :mod:`flax_posenc.rope_scaling`.

    Example:
      >>> config = RopeConfig(head_dim=128, theta=500000.0, scaling=Llama3Scaling(
      ...     factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
      ...     original_max_position_embeddings=8192))
    """

    head_dim: int
    theta: float = 10000.0
    rotary_dim: int | None = None  # type: ignore[assignment]
    layout: RopeLayout = "half"
    scaling: RopeScaling | None = None

    def __post_init__(self):
        head_dim = check_positive_int("head_dim", self.head_dim)
        check_positive_float("theta", self.theta)
        rotary_dim = head_dim if self.rotary_dim is None else self.rotary_dim
        check_positive_int("rotary_dim", rotary_dim)
        if rotary_dim % 2 or rotary_dim > head_dim:
            raise ValueError(
                f"`rotary_dim` must be even and <= head_dim ({head_dim}), got "
                f"{rotary_dim}."
            )
        object.__setattr__(self, "rotary_dim", rotary_dim)
        check_choice("layout", self.layout, LAYOUTS)
        if self.scaling is not None and not isinstance(self.scaling, SCALING_TYPES):
            names = ", ".join(t.__name__ for t in SCALING_TYPES)
            raise TypeError(
                f"`scaling` must be None or one of {names}, got {self.scaling!r}."
            )
        self.frequencies()  # validates the scaling against rotary_dim

    def frequencies(self, seq_len: Any = None) -> RopeFrequencies:
        """See :func:`rope_frequencies`."""
        rotary_dim: int = self.rotary_dim  # type: ignore[assignment]
        if self.scaling is None:
            inv_freq = default_inv_freq(self.theta, rotary_dim)
            return RopeFrequencies(jnp.asarray(inv_freq, jnp.float32), 1.0)
        return self.scaling.frequencies(self.theta, rotary_dim, seq_len)

    @classmethod
    def from_hf(cls, config: dict, *, layer_type: str | None = None) -> RopeConfig:
        """Builds a config from a Hugging Face ``config.json`` dict (v4 or v5 form).

        See :func:`flax_posenc.hf.rope_config_from_hf`.
        """
        from flax_posenc.hf import rope_config_from_hf

        return rope_config_from_hf(config, layer_type=layer_type)


class RopeTables(NamedTuple):
    """Half-width float32 tables ``[..., R/2]``, attention factor included."""

    cos: jax.Array
    sin: jax.Array


def rope_frequencies(config: RopeConfig, *, seq_len: Any = None) -> RopeFrequencies:
    """Inverse frequencies and attention scaling of ``config``.

    ``inv_freq[i] = theta^(-2i/R)`` before scaling; the scaling family changes them.

    Args:
      config: the RoPE configuration.
      seq_len: the sequence length seen (int or traced int scalar). Only dynamic NTK
        and LongRoPE use it; None means their pre-training regime.

    Returns:
      ``RopeFrequencies(inv_freq float32 [R/2], attention_scaling)``.
    """
    return config.frequencies(seq_len)


def rope_cos_sin(
    positions: jax.Array, config: RopeConfig, *, seq_len: Any = None
) -> RopeTables:
    """``cos(p * inv_freq) * a`` and ``sin(p * inv_freq) * a`` for integer positions.

    Args:
      positions: integer ``[...]`` (e.g. ``[B, L]`` or ``[L]``), traced or concrete.
      config: the RoPE configuration.
      seq_len: for dynamic NTK and LongRoPE; None means ``max(positions) + 1``,
        computed inside the graph (as Hugging Face does), so new position values never
        recompile.

    Returns:
      ``RopeTables(cos, sin)``, each float32 ``positions.shape + (R/2,)``, with the
      attention scaling ``a`` multiplied in.
    """
    positions = check_integer_array("positions", positions)
    if seq_len is None and isinstance(config.scaling, SEQ_LEN_DEPENDENT):
        seq_len = jnp.max(positions) + 1
    inv_freq, attention_scaling = rope_frequencies(config, seq_len=seq_len)
    angles = position_angles(positions, inv_freq)
    scale = jnp.asarray(attention_scaling, jnp.float32)
    return RopeTables(jnp.cos(angles) * scale, jnp.sin(angles) * scale)


def rope_rotate(
    x: jax.Array, cos: jax.Array, sin: jax.Array, *, layout: RopeLayout = "half"
) -> jax.Array:
    """Rotates the first ``R = 2 * cos.shape[-1]`` features of ``x``.

    ``half``: ``out[j] = x[j] c_j - x[j + R/2] s_j``, ``out[j + R/2] = x[j + R/2] c_j +
    x[j] s_j``; ``interleaved``: the same with pairs ``(2j, 2j + 1)``. Features past
    ``R`` pass through. Computed in float32, rounded once to ``x.dtype``.

    Args:
      x: ``[..., L, N, H]``.
      cos, sin: float ``[..., L, R/2]`` with ``R <= H``, leading dims broadcastable to
        ``x.shape[:-2]``.
      layout: ``"half"`` or ``"interleaved"``.

    Returns:
      ``[..., L, N, H]`` in ``x.dtype``.
    """
    check_choice("layout", layout, LAYOUTS)
    if x.ndim < 3:
        raise ValueError(
            f"`x` must be [..., L, N, H] (rank >= 3), got shape {x.shape}."
        )
    if cos.shape != sin.shape:
        raise ValueError(
            f"`cos` and `sin` must have one shape, got {cos.shape} and {sin.shape}."
        )
    if cos.ndim < 1 or 2 * cos.shape[-1] > x.shape[-1]:
        raise ValueError(
            f"`cos` must be [..., L, R/2] with R <= head_dim ({x.shape[-1]}), got "
            f"shape {cos.shape}."
        )
    check_broadcastable("cos.shape[:-1]", cos.shape[:-1], "x.shape[:-2]", x.shape[:-2])
    half = cos.shape[-1]
    rotary_dim = 2 * half
    # Pairs on an axis of size 2, so the partner of each feature is a reverse along
    # that axis: no concatenate over x, which XLA would not fuse.
    if layout == "half":
        pairs_shape, table_shape, pair_axis = (2, half), (1, 1, half), -2
    else:
        pairs_shape, table_shape, pair_axis = (half, 2), (1, half, 1), -1
    lead = (1,) * (x.ndim - 2 - (cos.ndim - 1))
    cos = cos.astype(jnp.float32).reshape(lead + cos.shape[:-1] + table_shape)
    sin = sin.astype(jnp.float32).reshape(lead + sin.shape[:-1] + table_shape)
    sign = np.array([-1.0, 1.0], np.float32).reshape(
        (2, 1) if layout == "half" else (1, 2)
    )
    sign = sign.reshape((1,) * (x.ndim - 1) + sign.shape)
    pairs = x[..., :rotary_dim].astype(jnp.float32).reshape(x.shape[:-1] + pairs_shape)
    partner = jnp.flip(pairs, axis=pair_axis)
    rotated = pairs * cos + partner * (sin * sign)
    rotated = rotated.reshape(x.shape[:-1] + (rotary_dim,)).astype(x.dtype)
    if rotary_dim == x.shape[-1]:
        return rotated
    return jnp.concatenate([rotated, x[..., rotary_dim:]], axis=-1)


def apply_rope(
    x: jax.Array, positions: jax.Array, config: RopeConfig, *, seq_len: Any = None
) -> jax.Array:
    """Applies RoPE to q or k at integer positions.

    Args:
      x: ``[..., L, N, H]`` with ``H == config.head_dim``.
      positions: integer ``[..., L]``, broadcastable to ``x.shape[:-2]``.
      config: the RoPE configuration.
      seq_len: see :func:`rope_cos_sin`.

    Returns:
      ``[..., L, N, H]`` in ``x.dtype``; features past ``rotary_dim`` unchanged.

    Raises:
      ValueError: ``H != config.head_dim`` or positions not broadcastable.
      TypeError: non-integer positions.

    Example:
      >>> q = jnp.ones((2, 16, 4, 64), jnp.bfloat16)
      >>> apply_rope(q, jnp.arange(16), RopeConfig(head_dim=64)).shape
      (2, 16, 4, 64)
    """
    if x.ndim < 3 or x.shape[-1] != config.head_dim:
        raise ValueError(
            f"`x` must be [..., L, N, H] with H = config.head_dim ({config.head_dim}), "
            f"got shape {x.shape}."
        )
    positions = check_integer_array("positions", positions)
    check_broadcastable("positions", positions.shape, "x.shape[:-2]", x.shape[:-2])
    cos, sin = rope_cos_sin(positions, config, seq_len=seq_len)
    return rope_rotate(x, cos, sin, layout=config.layout)


def rope_permute_layout(
    w: jax.Array,
    *,
    rotary_dim: int,
    source: RopeLayout,
    target: RopeLayout,
    axis: int = -1,
) -> jax.Array:
    """Reorders per-head features from one RoPE pairing to the other.

    What checkpoint converters do by hand (e.g. Meta Llama -> Hugging Face): apply it
    to the output-feature axis of the q and k projection kernels (size ``H`` per head,
    e.g. a ``[D, N, H]`` kernel with ``axis=-1``) and ``target``-layout RoPE on the
    new weights gives the permuted result of ``source``-layout RoPE on the old ones,
    with identical attention scores. Features past ``rotary_dim`` stay in place.

    Interleaved -> half takes features ``(0, 2, ..., R-2, 1, 3, ..., R-1)``.
    """
    check_choice("source", source, LAYOUTS)
    check_choice("target", target, LAYOUTS)
    size = w.shape[axis]
    check_positive_int("rotary_dim", rotary_dim)
    if rotary_dim % 2 or rotary_dim > size:
        raise ValueError(
            f"`rotary_dim` must be even and <= w.shape[{axis}] ({size}), got {rotary_dim}."
        )
    order = np.arange(size)
    if source != target:
        to_half = np.concatenate(
            [np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2)]
        )
        order[:rotary_dim] = to_half if target == "half" else np.argsort(to_half)
    return jnp.take(w, jnp.asarray(order), axis=axis)
