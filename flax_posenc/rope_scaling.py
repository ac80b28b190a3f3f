"""RoPE scaling families: each turns ``(theta, rotary_dim, seq_len)`` into
``(inv_freq [R/2], attention_scaling)``, numerically as Hugging Face transformers does.

``R`` is ``rotary_dim``; ``inv_freq_default[i] = theta^(-2i/R)``. Each family is a small
frozen dataclass whose fields carry the Hugging Face names, and whose ``frequencies``
method is the one function computing its inverse frequencies. Static families are
computed in float64 numpy and rounded once to float32 (XLA folds them as constants);
``seq_len``-dependent families (dynamic NTK, LongRoPE) compute inside the graph, so
changing ``seq_len`` never recompiles.

References: position interpolation (Chen et al., 2023); NTK-aware scaling (bloc97,
2023); YaRN (Peng et al., 2023); LongRoPE (Ding et al., 2024); Llama 3 (Meta, 2024).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._validation import check_positive_float, check_positive_int


class RopeFrequencies(NamedTuple):
    """``inv_freq``: float32 ``[R/2]``; ``attention_scaling``: multiplies cos and sin."""

    inv_freq: jax.Array
    attention_scaling: float | jax.Array


def default_inv_freq(theta: float, rotary_dim: int) -> np.ndarray:
    """``theta^(-2i/R)`` for ``i < R/2`` in float64 (round to float32 once, later)."""
    return theta ** -(np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def _static(inv_freq: np.ndarray, attention_scaling: float = 1.0) -> RopeFrequencies:
    return RopeFrequencies(jnp.asarray(inv_freq, jnp.float32), float(attention_scaling))


def _check_factor(scaling, name: str = "factor") -> None:
    check_positive_float(f"{type(scaling).__name__}.{name}", getattr(scaling, name))


def _check_original_length(scaling) -> None:
    """The pre-training length ``original_max_position_embeddings`` is an int >= 1."""
    check_positive_int(
        f"{type(scaling).__name__}.original_max_position_embeddings",
        scaling.original_max_position_embeddings,
    )


def _check_rotary_dim_above_two(scaling, rotary_dim: int) -> None:
    """The NTK exponent ``R / (R - 2)`` needs ``R > 2``."""
    if rotary_dim <= 2:
        raise ValueError(
            f"{type(scaling).__name__} needs rotary_dim > 2, got {rotary_dim}."
        )


@dataclasses.dataclass(frozen=True)
class LinearScaling:
    """Position interpolation: ``inv_freq = inv_freq_default / factor``."""

    factor: float

    def __post_init__(self):
        _check_factor(self)

    def frequencies(self, theta, rotary_dim, seq_len=None) -> RopeFrequencies:
        del seq_len
        return _static(default_inv_freq(theta, rotary_dim) / self.factor)


@dataclasses.dataclass(frozen=True)
class NTKScaling:
    """Static NTK-aware scaling: ``theta' = theta * alpha^(R / (R - 2))``."""

    alpha: float

    def __post_init__(self):
        _check_factor(self, "alpha")

    def frequencies(self, theta, rotary_dim, seq_len=None) -> RopeFrequencies:
        del seq_len
        _check_rotary_dim_above_two(self, rotary_dim)
        scaled_theta = theta * self.alpha ** (rotary_dim / (rotary_dim - 2))
        return _static(default_inv_freq(scaled_theta, rotary_dim))


@dataclasses.dataclass(frozen=True)
class DynamicNTKScaling:
    """Dynamic NTK: the base grows with the sequence length once it passes the
    pre-training length ``original_max_position_embeddings`` (HF's
    ``config.max_position_embeddings`` for ``rope_type="dynamic"``):

    ``s = max(seq_len, orig)``, ``theta' = theta * (factor * s / orig - (factor - 1))^(R/(R-2))``.
    ``seq_len`` may be traced; None means ``orig`` (the unscaled frequencies).
    """

    factor: float
    original_max_position_embeddings: int

    def __post_init__(self):
        _check_factor(self)
        _check_original_length(self)

    def frequencies(self, theta, rotary_dim, seq_len=None) -> RopeFrequencies:
        _check_rotary_dim_above_two(self, rotary_dim)
        original = self.original_max_position_embeddings
        if seq_len is None:
            seq_len = original
        seq_len = jnp.maximum(jnp.asarray(seq_len, jnp.float32), float(original))
        ratio = self.factor * seq_len / original - (self.factor - 1.0)
        # theta'^(-2i/R) = theta^(-2i/R) * ratio^(-(R/(R-2)) 2i/R): the static part is
        # rounded once, and the traced correction is exactly 1 up to the original length.
        exponent = np.arange(0, rotary_dim, 2) / (rotary_dim - 2)
        growth = jnp.exp(-jnp.log(ratio) * jnp.asarray(exponent, jnp.float32))
        base = jnp.asarray(default_inv_freq(theta, rotary_dim), jnp.float32)
        return RopeFrequencies(base * growth, 1.0)


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1 * mscale * ln(scale) + 1`` (1 for scale <= 1)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


@dataclasses.dataclass(frozen=True)
class YarnScaling:
    """YaRN: interpolate slow frequencies, keep fast ones, ramp in between, and scale
    cos/sin by an attention factor.

    With ``d(r) = R * ln(orig / (2 pi r)) / (2 ln theta)``, the ramp runs over
    dimensions ``[d(beta_fast), d(beta_slow)]`` (floored/ceiled when ``truncate``), and
    ``inv_freq = interp * (1 - e) + extrap * e`` where ``e = 1 - ramp``,
    ``extrap = inv_freq_default``, ``interp = extrap / factor``.
    ``attention_factor`` defaults to ``mscale(factor, mscale) / mscale(factor,
    mscale_all_dim)`` when both are set, else ``0.1 ln(factor) + 1``.
    """

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True

    def __post_init__(self):
        _check_factor(self)
        _check_factor(self, "beta_fast")
        _check_factor(self, "beta_slow")
        _check_original_length(self)
        if self.attention_factor is not None:
            _check_factor(self, "attention_factor")

    def default_attention_factor(self) -> float:
        if self.attention_factor is not None:
            return self.attention_factor
        if self.mscale and self.mscale_all_dim:
            return yarn_mscale(self.factor, self.mscale) / yarn_mscale(
                self.factor, self.mscale_all_dim
            )
        return yarn_mscale(self.factor)

    def frequencies(self, theta, rotary_dim, seq_len=None) -> RopeFrequencies:
        del seq_len
        if theta <= 1:
            raise ValueError(
                f"YarnScaling needs theta > 1 (it divides by ln theta), got {theta}."
            )

        def correction_dim(rotations):
            wavelengths = self.original_max_position_embeddings / (
                rotations * 2 * math.pi
            )
            return rotary_dim * math.log(wavelengths) / (2 * math.log(theta))

        low, high = correction_dim(self.beta_fast), correction_dim(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, rotary_dim - 1)
        if low == high:
            high += 0.001  # as HF: avoid a zero-width ramp
        ramp = np.clip((np.arange(rotary_dim // 2) - low) / (high - low), 0.0, 1.0)
        extrapolation = default_inv_freq(theta, rotary_dim)
        interpolation = extrapolation / self.factor
        inv_freq = interpolation * ramp + extrapolation * (1.0 - ramp)
        return _static(inv_freq, self.default_attention_factor())


@dataclasses.dataclass(frozen=True)
class LongRopeScaling:
    """LongRoPE (Phi-3): per-dimension rescale factors, ``short_factor`` up to the
    pre-training length and ``long_factor`` past it:
    ``inv_freq = inv_freq_default / ext``, ``ext = long_factor if seq_len > orig else
    short_factor``. ``attention_factor`` defaults to ``sqrt(1 + ln(factor) / ln(orig))``
    (1 when ``factor <= 1``), ``factor`` being HF's ``max_position_embeddings / orig``.
    ``seq_len`` may be traced; None means the short factors.
    """

    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    original_max_position_embeddings: int
    factor: float = 1.0
    attention_factor: float | None = None

    def __post_init__(self):
        for name in ("short_factor", "long_factor"):
            value = tuple(float(v) for v in getattr(self, name))
            if not all(v > 0 and math.isfinite(v) for v in value):
                raise ValueError(
                    f"`LongRopeScaling.{name}` must be positive, got {value}."
                )
            object.__setattr__(self, name, value)
        _check_factor(self)
        _check_original_length(self)
        if self.attention_factor is not None:
            _check_factor(self, "attention_factor")

    def default_attention_factor(self) -> float:
        if self.attention_factor is not None:
            return self.attention_factor
        if self.factor <= 1.0:
            return 1.0
        ratio = math.log(self.factor) / math.log(self.original_max_position_embeddings)
        return math.sqrt(1 + ratio)

    def frequencies(self, theta, rotary_dim, seq_len=None) -> RopeFrequencies:
        for name in ("short_factor", "long_factor"):
            if len(getattr(self, name)) != rotary_dim // 2:
                raise ValueError(
                    f"`LongRopeScaling.{name}` must have rotary_dim // 2 = "
                    f"{rotary_dim // 2} entries, got {len(getattr(self, name))}."
                )
        base = default_inv_freq(theta, rotary_dim)
        short = jnp.asarray(base / np.asarray(self.short_factor), jnp.float32)
        long = jnp.asarray(base / np.asarray(self.long_factor), jnp.float32)
        attention = self.default_attention_factor()
        if seq_len is None:
            return RopeFrequencies(short, attention)
        is_long = jnp.asarray(seq_len) > self.original_max_position_embeddings
        return RopeFrequencies(jnp.where(is_long, long, short), attention)


@dataclasses.dataclass(frozen=True)
class Llama3Scaling:
    """Llama 3.1: wavelengths ``w = 2 pi / inv_freq`` longer than ``orig /
    low_freq_factor`` are divided by ``factor``, shorter than ``orig /
    high_freq_factor`` kept, and those between blended with
    ``s = (orig / w - low) / (high - low)``: ``(1 - s) inv_freq / factor + s inv_freq``.
    """

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self):
        _check_factor(self)
        _check_factor(self, "low_freq_factor")
        _check_factor(self, "high_freq_factor")
        _check_original_length(self)
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(
                "`Llama3Scaling.high_freq_factor` must exceed low_freq_factor, got "
                f"{self.high_freq_factor} <= {self.low_freq_factor}."
            )

    def frequencies(self, theta, rotary_dim, seq_len=None) -> RopeFrequencies:
        del seq_len
        original = self.original_max_position_embeddings
        inv_freq = default_inv_freq(theta, rotary_dim)
        wavelength = 2 * math.pi / inv_freq
        smooth = (original / wavelength - self.low_freq_factor) / (
            self.high_freq_factor - self.low_freq_factor
        )
        blended = (1 - smooth) * inv_freq / self.factor + smooth * inv_freq
        scaled = np.where(
            wavelength > original / self.low_freq_factor,
            inv_freq / self.factor,
            np.where(wavelength < original / self.high_freq_factor, inv_freq, blended),
        )
        return _static(scaled)


@dataclasses.dataclass(frozen=True)
class ProportionalScaling:
    """Gemma 4's proportional RoPE: frequencies use the exponent ``2i / R`` of the
    full rotation but only the first ``int(partial_rotary_factor * R // 2)`` are
    non-zero (the rest do not rotate); all are divided by ``factor``.
    """

    partial_rotary_factor: float
    factor: float = 1.0

    def __post_init__(self):
        _check_factor(self)
        if not 0.0 < self.partial_rotary_factor <= 1.0:
            raise ValueError(
                "`ProportionalScaling.partial_rotary_factor` must be in (0, 1], got "
                f"{self.partial_rotary_factor}."
            )

    def frequencies(self, theta, rotary_dim, seq_len=None) -> RopeFrequencies:
        del seq_len
        rotated = int(self.partial_rotary_factor * rotary_dim // 2)
        inv_freq = default_inv_freq(theta, rotary_dim)
        inv_freq[rotated:] = 0.0
        return _static(inv_freq / self.factor)


RopeScaling = (
    LinearScaling
    | NTKScaling
    | DynamicNTKScaling
    | YarnScaling
    | LongRopeScaling
    | Llama3Scaling
    | ProportionalScaling
)
SCALING_TYPES = typing.get_args(RopeScaling)
SEQ_LEN_DEPENDENT = (DynamicNTKScaling, LongRopeScaling)
