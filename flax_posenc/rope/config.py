"""The RoPE configuration (:class:`RopeConfig`), its layouts and its tables: the
bottom of :mod:`flax_posenc.rope`, which every RoPE function and the RoPE core read
(the rotation itself is described in :mod:`flax_posenc.rope.apply`)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Literal, NamedTuple

import jax

from flax_posenc._core.exact_angles import ANGLE_PRECISIONS, AnglePrecision
from flax_posenc._core.validation import (
    check_choice,
    check_float,
    check_positive_int,
    check_rotary_dim,
)
from flax_posenc.rope.scaling import RopeScaling

__all__ = ["RopeConfig", "RopeLayout", "RopeTables"]

RopeLayout = Literal["half", "interleaved"]
"""RoPE pairing: ``"half"`` pairs ``(j, j + R/2)``, ``"interleaved"`` ``(2j, 2j + 1)``."""
_LAYOUTS = typing.get_args(RopeLayout)
_SCALING_TYPES = typing.get_args(RopeScaling)


@dataclasses.dataclass(frozen=True)
class RopeConfig:
    """Everything RoPE needs; frozen and hashable, so usable as a static argument.

    Attributes:
      head_dim: ``H``, the per-head feature size of q and k.
      theta: the frequency base (HF ``rope_theta``), > 1.
      rotary_dim: the number of rotated features (even, ``<= H``) as given; None
        means the whole head. HF's ``partial_rotary_factor`` gives
        ``int(H * factor)``. The resolved ``R`` is ``rotated_features``, so
        ``dataclasses.replace(config, head_dim=...)`` keeps a None rotating the
        whole new head.
      layout: ``"half"`` or ``"interleaved"`` pairing (see the module docstring).
      scaling: None (plain RoPE) or one of the families of
        :mod:`flax_posenc.rope.scaling`.
      angle_precision: ``"float32"`` (transformers' rounding, off by about ``p 2^-23``
        rad at position ``p``) or ``"exact"`` (the family's float64 frequencies
        times the int32 position, reduced mod 2 pi exactly: cos and sin within 3e-7
        at any position; see :data:`flax_posenc.AnglePrecision`). Dynamic NTK and
        LongRoPE then need ``seq_len`` as a Python int.

    Raises:
      TypeError: non-int ``head_dim`` or ``rotary_dim``, or a ``scaling`` that is not
        one of the families.
      ValueError: ``head_dim <= 0``, an odd ``head_dim`` with ``rotary_dim=None``,
        ``theta <= 1``, an odd ``rotary_dim`` or one larger than ``head_dim``, an
        unknown ``layout`` or ``angle_precision``, or a scaling that does not fit
        ``rotary_dim``.

    Examples:
      Llama 3.1 8B:

      >>> config = fp.RopeConfig(head_dim=128, theta=500000.0, scaling=fp.Llama3Scaling(
      ...     factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
      ...     original_max_position_embeddings=8192))
      >>> config.rotary_dim is None, config.rotated_features
      (True, 128)

      Partial rotary (GPT-NeoX rotates a quarter of each head):

      >>> fp.RopeConfig(head_dim=64, rotary_dim=16)
      RopeConfig(head_dim=64, theta=10000.0, rotary_dim=16, layout='half', scaling=None, angle_precision='float32')

      Exact angles for a 1M-token context:

      >>> fp.RopeConfig(head_dim=128, theta=1e6, angle_precision="exact").angle_precision
      'exact'
    """

    head_dim: int
    theta: float = 10000.0
    rotary_dim: int | None = None
    layout: RopeLayout = "half"
    scaling: RopeScaling | None = None
    angle_precision: AnglePrecision = "float32"

    def __post_init__(self):
        head_dim = check_positive_int("head_dim", self.head_dim)
        object.__setattr__(self, "head_dim", head_dim)
        theta = check_float("theta", self.theta)
        if theta <= 1.0:  # 0 and negatives too: one rule, one message
            raise ValueError(
                f"`theta` must be > 1, got {theta}: inv_freq = theta^(-2i/R), so "
                "theta = 1 gives every pair the same frequency 1 and theta < 1 "
                "reverses their order. Hint: the Hugging Face rope_theta, e.g. "
                "10000.0."
            )
        object.__setattr__(self, "theta", theta)
        if self.rotary_dim is not None:
            rotary_dim = check_rotary_dim(self.rotary_dim, head_dim, "head_dim")
            object.__setattr__(self, "rotary_dim", rotary_dim)
        elif head_dim % 2:
            raise ValueError(
                f"`head_dim` must be even when `rotary_dim` is None (every feature "
                f"is rotated, in pairs), got {head_dim}. Hint: pass an even "
                f"`rotary_dim` <= {head_dim} to rotate part of the head."
            )
        check_choice("layout", self.layout, _LAYOUTS)
        check_choice("angle_precision", self.angle_precision, ANGLE_PRECISIONS)
        if self.scaling is not None:
            if not isinstance(self.scaling, _SCALING_TYPES):
                names = ", ".join(t.__name__ for t in _SCALING_TYPES)
                raise TypeError(
                    f"`scaling` must be None or one of {names}, got {self.scaling!r}."
                )
            self.scaling.validate(self.theta, self.rotated_features)

    @property
    def rotated_features(self) -> int:
        """``R``, the number of rotated features: ``rotary_dim``, or ``head_dim``
        where ``rotary_dim`` is None."""
        return self.head_dim if self.rotary_dim is None else self.rotary_dim

    @property
    def depends_on_seq_len(self) -> bool:
        """Whether the frequencies depend on ``seq_len`` (dynamic NTK, LongRoPE)."""
        return self.scaling is not None and self.scaling.depends_on_seq_len


class RopeTables(NamedTuple):
    """Half-width float32 tables ``[..., R/2]``, attention factor included.

    Returned by :func:`rope_cos_sin`; pass both to :func:`rope_rotate`.

    Attributes:
      cos: ``cos(p * inv_freq) * attention_scaling``, float32 ``[..., R/2]``.
      sin: ``sin(p * inv_freq) * attention_scaling``, float32 ``[..., R/2]``.
    """

    cos: jax.Array
    sin: jax.Array
