"""RoPE scaling families: each turns ``(theta, rotary_dim, seq_len)`` into
``(inv_freq [R/2], attention_scaling)``, numerically as Hugging Face transformers does.

``R`` is ``rotary_dim``; ``inv_freq_default[i] = theta^(-2i/R)``. Each family is a small
frozen dataclass of plain host data whose fields carry the Hugging Face names; it
follows the :class:`RopeScalingFamily` protocol: ``validate`` checks it against a
rotary size in pure Python (no device work), and ``frequencies`` is the one function
computing its inverse frequencies. Static families are computed in float64 numpy and
rounded once to float32 (XLA folds them as constants); ``seq_len``-dependent families
(dynamic NTK, LongRoPE) compute inside the graph, so changing ``seq_len`` never
recompiles. ``frequencies_float64`` gives the unrounded float64 values on the host
(for a static ``seq_len``), which exact angles (``angle_precision="exact"``) start
from.

References: position interpolation (Chen et al., 2023); NTK-aware scaling (bloc97,
2023); YaRN (Peng et al., 2023); LongRoPE (Ding et al., 2024); Llama 3 (Meta, 2024);
Resonance RoPE (Wang et al., 2024).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import ClassVar, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core.angles import default_inv_freq
from flax_posenc._core.deprecation import warn_deprecated
from flax_posenc._core.validation import (
    check_bool,
    check_float,
    check_length,
    check_positive_float,
)

__all__ = [
    "DynamicNTKScaling",
    "LinearScaling",
    "Llama3Scaling",
    "LongRopeScaling",
    "NTKScaling",
    "ProportionalScaling",
    "ResonanceScaling",
    "RopeFrequencies",
    "RopeScaling",
    "RopeScalingFamily",
    "SeqLen",
    "YarnScaling",
]

SeqLen = int | jax.Array | None
"""A sequence length: a Python int, a traced int scalar, or None (see each family)."""


class RopeFrequencies(NamedTuple):
    """``inv_freq``: float32 ``[R/2]`` (or ``[..., R/2]`` for a per-token
    ``seq_len``); ``attention_scaling``: multiplies cos and sin."""

    inv_freq: jax.Array
    attention_scaling: float | jax.Array


class RopeScalingFamily(Protocol):
    """What every scaling family provides (:class:`RopeConfig` relies on nothing else).

    Attributes:
      depends_on_seq_len: whether ``frequencies`` uses ``seq_len``.
    """

    depends_on_seq_len: ClassVar[bool]

    def validate(self, theta: float, rotary_dim: int) -> None:
        """Raises ``ValueError`` unless the family fits ``theta`` and ``rotary_dim``."""
        ...

    def frequencies(
        self, theta: float, rotary_dim: int, seq_len: SeqLen = None
    ) -> RopeFrequencies:
        """``(inv_freq, attention_scaling)`` for ``rotary_dim`` rotated features."""
        ...

    def frequencies_float64(
        self, theta: float, rotary_dim: int, seq_len: int | None = None
    ) -> tuple[np.ndarray, float]:
        """float64 host ``(inv_freq [R/2], attention_scaling)`` at a static
        ``seq_len`` (None: as in ``frequencies``), before any float32 rounding."""
        ...


def _static(inv_freq: np.ndarray, attention_scaling: float = 1.0) -> RopeFrequencies:
    return RopeFrequencies(jnp.asarray(inv_freq, jnp.float32), float(attention_scaling))


def _per_token(table: np.ndarray | jax.Array, seq_len: jax.Array) -> jax.Array:
    """float32 ``table [F]`` as ``[1, ..., 1, F]`` to pair with ``seq_len [...]``."""
    table = jnp.asarray(table, jnp.float32)
    return table.reshape((1,) * seq_len.ndim + table.shape)


def _name(scaling: object, field: str) -> str:
    return f"{type(scaling).__name__}.{field}"


def _positive(scaling: object, field: str) -> None:
    """Checks (and normalises to float) the positive finite field ``field``."""
    value = check_positive_float(_name(scaling, field), getattr(scaling, field))
    object.__setattr__(scaling, field, value)


def _optional_positive(scaling: object, field: str) -> None:
    if getattr(scaling, field) is not None:
        _positive(scaling, field)


def _length(scaling: object, field: str = "original_max_position_embeddings") -> None:
    """Checks (and normalises to int) the length field ``field``."""
    value = check_length(_name(scaling, field), getattr(scaling, field))
    object.__setattr__(scaling, field, value)


class _StaticFrequencies:
    """``frequencies`` of the families that do not use ``seq_len``: their
    ``frequencies_float64``, rounded once to float32."""

    depends_on_seq_len: ClassVar[bool] = False

    def frequencies_float64(
        self, theta: float, rotary_dim: int, seq_len: int | None = None
    ) -> tuple[np.ndarray, float]:
        raise NotImplementedError

    def frequencies(
        self, theta: float, rotary_dim: int, seq_len: SeqLen = None
    ) -> RopeFrequencies:
        """``frequencies_float64`` rounded once to float32 (``seq_len`` unused)."""
        del seq_len
        return _static(*self.frequencies_float64(theta, rotary_dim))


class _NTKExponent:
    """``validate`` of the NTK families: the exponent ``R / (R - 2)`` needs ``R > 2``."""

    def validate(self, theta: float, rotary_dim: int) -> None:
        """Needs ``rotary_dim > 2``."""
        del theta
        if rotary_dim <= 2:
            raise ValueError(
                f"{type(self).__name__} needs rotary_dim > 2 (its exponent is "
                f"R / (R - 2)), got {rotary_dim}."
            )


class _FitsAnyRotary:
    """``validate`` of the families that fit any ``theta`` and ``rotary_dim``."""

    def validate(self, theta: float, rotary_dim: int) -> None:
        """Any ``theta`` and ``rotary_dim`` fit."""
        del theta, rotary_dim


class _AttentionFactorOldName:
    """``default_attention_factor()``, the deprecated name of the families'
    ``effective_attention_factor()``."""

    def effective_attention_factor(self) -> float:
        raise NotImplementedError

    def default_attention_factor(self) -> float:
        """Deprecated name of ``effective_attention_factor()``."""
        warn_deprecated("default_attention_factor()", "effective_attention_factor()")
        return self.effective_attention_factor()


def _ntk_theta(theta: float, factor: float, rotary_dim: int) -> float:
    return theta * factor ** (rotary_dim / (rotary_dim - 2))


@dataclasses.dataclass(frozen=True)
class LinearScaling(_StaticFrequencies, _FitsAnyRotary):
    """Position interpolation: ``inv_freq = inv_freq_default / factor``.

    Attributes:
      factor: the interpolation factor (> 0), HF's ``factor``.
    """

    factor: float

    def __post_init__(self):
        _positive(self, "factor")

    def frequencies_float64(
        self, theta: float, rotary_dim: int, seq_len: int | None = None
    ) -> tuple[np.ndarray, float]:
        """``theta^(-2i/R) / factor``, in float64 on the host."""
        del seq_len
        return default_inv_freq(theta, rotary_dim) / self.factor, 1.0


@dataclasses.dataclass(frozen=True, init=False)
class NTKScaling(_StaticFrequencies, _NTKExponent):
    """Static NTK-aware scaling: ``theta' = theta * factor^(R / (R - 2))``.

    transformers' static NTK (and Hunyuan's ``alpha``) use this formula.

    Attributes:
      factor: the NTK factor (> 0). ``NTKScaling(alpha=...)`` is a deprecated
        spelling of it.
    """

    factor: float

    def __init__(self, factor: float | None = None, *, alpha: float | None = None):
        if alpha is not None:
            # Checked under its own name first: the error names what was passed.
            alpha = check_positive_float("NTKScaling.alpha", alpha)
            warn_deprecated("NTKScaling(alpha=...)", "NTKScaling(factor=...)")
            if factor is not None:
                raise ValueError("Give NTKScaling `factor` or `alpha`, not both.")
            factor = alpha
        if factor is None:
            raise TypeError("NTKScaling needs `factor`.")
        object.__setattr__(self, "factor", factor)
        _positive(self, "factor")

    @property
    def alpha(self) -> float:
        """Deprecated name of ``factor``."""
        warn_deprecated("NTKScaling.alpha", "NTKScaling.factor")
        return self.factor

    def frequencies_float64(
        self, theta: float, rotary_dim: int, seq_len: int | None = None
    ) -> tuple[np.ndarray, float]:
        """``theta'^(-2i/R)`` with ``theta' = theta * factor^(R/(R-2))``, in float64 on the host."""
        del seq_len
        scaled_theta = _ntk_theta(theta, self.factor, rotary_dim)
        return default_inv_freq(scaled_theta, rotary_dim), 1.0


@dataclasses.dataclass(frozen=True)
class DynamicNTKScaling(_NTKExponent):
    """Dynamic NTK: the base grows with the sequence length once it passes the
    pre-training length ``original_max_position_embeddings`` (HF's
    ``config.max_position_embeddings`` for ``rope_type="dynamic"``):

    ``s = max(seq_len, orig)``, ``theta' = theta * (factor * s / orig - (factor - 1))^(R/(R-2))``.

    Attributes:
      factor: the scaling factor (> 0).
      original_max_position_embeddings: ``orig``, the pre-training length.
    """

    factor: float
    original_max_position_embeddings: int
    depends_on_seq_len: ClassVar[bool] = True

    def __post_init__(self):
        _positive(self, "factor")
        _length(self)

    def frequencies(
        self, theta: float, rotary_dim: int, seq_len: SeqLen = None
    ) -> RopeFrequencies:
        """The frequencies at ``seq_len`` (int, traced, or ``[...]`` per token);
        None means ``orig`` (the unscaled frequencies)."""
        original = self.original_max_position_embeddings
        if seq_len is None:
            seq_len = original
        seq_len = jnp.maximum(jnp.asarray(seq_len, jnp.float32), float(original))
        ratio = self.factor * seq_len / original - (self.factor - 1.0)
        # theta'^(-2i/R) = theta^(-2i/R) * ratio^(-(R/(R-2)) 2i/R): the static part is
        # rounded once, and the traced correction is exactly 1 up to the original length.
        exponent = _per_token(np.arange(0, rotary_dim, 2) / (rotary_dim - 2), ratio)
        growth = jnp.exp(-jnp.log(ratio)[..., None] * exponent)
        base = _per_token(default_inv_freq(theta, rotary_dim), ratio)
        return RopeFrequencies(base * growth, 1.0)

    def frequencies_float64(
        self, theta: float, rotary_dim: int, seq_len: int | None = None
    ) -> tuple[np.ndarray, float]:
        """``theta'^(-2i/R)`` in float64 on the host, for an int ``seq_len`` (None:
        ``orig``), as transformers forms ``theta'``."""
        original = self.original_max_position_embeddings
        length = original if seq_len is None else max(seq_len, original)
        ratio = self.factor * length / original - (self.factor - 1.0)
        scaled_theta = _ntk_theta(theta, ratio, rotary_dim)
        return default_inv_freq(scaled_theta, rotary_dim), 1.0


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1 * mscale * ln(scale) + 1`` (1 for scale <= 1)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


@dataclasses.dataclass(frozen=True)
class YarnScaling(_StaticFrequencies, _AttentionFactorOldName):
    """YaRN: interpolate slow frequencies, keep fast ones, ramp in between, and scale
    cos/sin by an attention factor.

    With ``d(r) = R * ln(orig / (2 pi r)) / (2 ln theta)``, the ramp runs over
    dimensions ``[d(beta_fast), d(beta_slow)]`` (floored/ceiled when ``truncate``),
    and ``inv_freq = interp * ramp + extrap * (1 - ramp)`` where
    ``extrap = inv_freq_default``, ``interp = extrap / factor``.

    Attributes:
      factor: the context extension factor (> 0).
      original_max_position_embeddings: ``orig``, the pre-training length.
      beta_fast: rotations at which the ramp starts (> beta_slow).
      beta_slow: rotations at which the ramp ends.
      mscale: DeepSeek's ``mscale`` (with ``mscale_all_dim``), or None.
      mscale_all_dim: DeepSeek's ``mscale_all_dim``, or None.
      attention_factor: the cos/sin magnitude; None means
        ``mscale(factor, mscale) / mscale(factor, mscale_all_dim)`` when both are set,
        else ``0.1 ln(factor) + 1``.
      truncate: floor/ceil the ramp's ends (HF's default True; gpt-oss False).
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
        _positive(self, "factor")
        _length(self)
        _positive(self, "beta_fast")
        _positive(self, "beta_slow")
        if self.beta_fast <= self.beta_slow:
            raise ValueError(
                "`YarnScaling.beta_fast` must exceed beta_slow (the ramp runs from "
                f"the fast to the slow rotations), got beta_fast={self.beta_fast} <= "
                f"beta_slow={self.beta_slow}."
            )
        for field in ("mscale", "mscale_all_dim"):
            if getattr(self, field) is not None:
                object.__setattr__(
                    self, field, check_float(_name(self, field), getattr(self, field))
                )
        _optional_positive(self, "attention_factor")
        check_bool(_name(self, "truncate"), self.truncate)

    def effective_attention_factor(self) -> float:
        """The factor cos and sin are multiplied by (see ``attention_factor``)."""
        if self.attention_factor is not None:
            return self.attention_factor
        if self.mscale and self.mscale_all_dim:
            return _yarn_mscale(self.factor, self.mscale) / _yarn_mscale(
                self.factor, self.mscale_all_dim
            )
        return _yarn_mscale(self.factor)

    def softmax_scale_factor(self) -> float:
        """DeepSeek's correction of the softmax scale, ``mscale(factor,
        mscale_all_dim)^2`` (1 without ``mscale_all_dim``): DeepSeek-V2/V3 multiply
        ``1/sqrt(head_dim)`` by it, apart from the cos/sin factor."""
        if not self.mscale_all_dim:
            return 1.0
        return _yarn_mscale(self.factor, self.mscale_all_dim) ** 2

    def validate(self, theta: float, rotary_dim: int) -> None:
        """Needs ``theta > 1`` (the ramp divides by ``ln theta``)."""
        del rotary_dim
        if theta <= 1:
            raise ValueError(
                f"YarnScaling needs theta > 1 (it divides by ln theta), got {theta}."
            )

    def frequencies_float64(
        self, theta: float, rotary_dim: int, seq_len: int | None = None
    ) -> tuple[np.ndarray, float]:
        """The blended frequencies and the attention factor, in float64 on the host."""
        del seq_len

        def correction_dim(rotations: float) -> float:
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
        return inv_freq, self.effective_attention_factor()


def _factors(scaling: object, field: str) -> None:
    """A tuple of positive finite floats (a JSON string is not a list of factors)."""
    value = getattr(scaling, field)
    if isinstance(value, (str, bytes)) or not isinstance(
        value, (list, tuple, np.ndarray)
    ):
        raise TypeError(
            f"`{_name(scaling, field)}` must be a list of positive numbers, got "
            f"{value!r}."
        )
    value = tuple(
        check_positive_float(f"{_name(scaling, field)}[{i}]", v)
        for i, v in enumerate(np.asarray(value, dtype=object).reshape(-1).tolist())
    )
    object.__setattr__(scaling, field, value)


@dataclasses.dataclass(frozen=True)
class LongRopeScaling(_AttentionFactorOldName):
    """LongRoPE (Phi-3): per-dimension rescale factors, ``short_factor`` up to the
    pre-training length and ``long_factor`` past it:
    ``inv_freq = inv_freq_default / ext``, ``ext = long_factor if seq_len > orig else
    short_factor``.

    Attributes:
      short_factor: ``R/2`` factors used up to ``orig``.
      long_factor: ``R/2`` factors used past ``orig``.
      original_max_position_embeddings: ``orig``, the pre-training length.
      factor: HF's ``max_position_embeddings / orig`` (sets the default attention
        factor).
      attention_factor: the cos/sin magnitude; None means
        ``sqrt(1 + ln(factor) / ln(orig))`` (1 when ``factor <= 1``).
      short_mscale: Phi-3.5-MoE's cos/sin magnitude up to ``orig`` (replaces the
        attention factor there), or None.
      long_mscale: Phi-3.5-MoE's magnitude past ``orig``, or None.
    """

    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    original_max_position_embeddings: int
    factor: float = 1.0
    attention_factor: float | None = None
    short_mscale: float | None = None
    long_mscale: float | None = None
    depends_on_seq_len: ClassVar[bool] = True

    def __post_init__(self):
        _factors(self, "short_factor")
        _factors(self, "long_factor")
        _positive(self, "factor")
        _length(self)
        _optional_positive(self, "attention_factor")
        _optional_positive(self, "short_mscale")
        _optional_positive(self, "long_mscale")
        if (self.short_mscale is None) != (self.long_mscale is None):
            raise ValueError(
                "`LongRopeScaling.short_mscale` and `long_mscale` go together, got "
                f"short_mscale={self.short_mscale}, long_mscale={self.long_mscale}."
            )

    def effective_attention_factor(self) -> float:
        """The factor cos and sin are multiplied by (see ``attention_factor``)."""
        if self.attention_factor is not None:
            return self.attention_factor
        if self.factor <= 1.0:
            return 1.0
        ratio = math.log(self.factor) / math.log(self.original_max_position_embeddings)
        return math.sqrt(1 + ratio)

    def validate(self, theta: float, rotary_dim: int) -> None:
        """Needs ``rotary_dim / 2`` factors in each list."""
        del theta
        for field in ("short_factor", "long_factor"):
            if len(getattr(self, field)) != rotary_dim // 2:
                raise ValueError(
                    f"`LongRopeScaling.{field}` must have rotary_dim // 2 = "
                    f"{rotary_dim // 2} entries, got {len(getattr(self, field))}."
                )
        if self.factor > 1.0 and self.original_max_position_embeddings == 1:
            raise ValueError(
                "LongRopeScaling's default attention factor divides by "
                "ln(original_max_position_embeddings); it must exceed 1, got 1."
            )

    def frequencies(
        self, theta: float, rotary_dim: int, seq_len: SeqLen = None
    ) -> RopeFrequencies:
        """The factors of the regime of ``seq_len`` (int, traced or ``[...]`` per
        token); None means the short regime."""
        short, short_scale = self.frequencies_float64(theta, rotary_dim)
        long, long_scale = self.frequencies_float64(
            theta, rotary_dim, self.original_max_position_embeddings + 1
        )
        short = jnp.asarray(short, jnp.float32)
        long = jnp.asarray(long, jnp.float32)
        if seq_len is None:
            return RopeFrequencies(short, short_scale)
        is_long = jnp.asarray(seq_len) > self.original_max_position_embeddings
        scale: float | jax.Array = short_scale
        if long_scale != short_scale:
            scale = jnp.where(is_long, long_scale, short_scale).astype(jnp.float32)
        inv_freq = jnp.where(
            is_long[..., None], _per_token(long, is_long), _per_token(short, is_long)
        )
        return RopeFrequencies(inv_freq, scale)

    def frequencies_float64(
        self, theta: float, rotary_dim: int, seq_len: int | None = None
    ) -> tuple[np.ndarray, float]:
        """The regime of an int ``seq_len`` (None: short) in float64 on the host."""
        is_long = (
            seq_len is not None and seq_len > self.original_max_position_embeddings
        )
        factors = self.long_factor if is_long else self.short_factor
        mscale = self.long_mscale if is_long else self.short_mscale
        scale = mscale or self.effective_attention_factor()
        return default_inv_freq(theta, rotary_dim) / np.asarray(factors), scale


@dataclasses.dataclass(frozen=True)
class Llama3Scaling(_StaticFrequencies, _FitsAnyRotary):
    """Llama 3.1: wavelengths ``w = 2 pi / inv_freq`` longer than ``orig /
    low_freq_factor`` are divided by ``factor``, shorter than ``orig /
    high_freq_factor`` kept, and those between blended with
    ``s = (orig / w - low) / (high - low)``: ``(1 - s) inv_freq / factor + s inv_freq``.
    With ``high_freq_factor == low_freq_factor`` (Llama 4) there is no blend band.

    Attributes:
      factor: the scaling of the long wavelengths (> 0).
      low_freq_factor: sets the long-wavelength bound ``orig / low_freq_factor``.
      high_freq_factor: sets the short-wavelength bound (>= low_freq_factor).
      original_max_position_embeddings: ``orig``, the pre-training length.
    """

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self):
        _positive(self, "factor")
        _positive(self, "low_freq_factor")
        _positive(self, "high_freq_factor")
        _length(self)
        if self.high_freq_factor < self.low_freq_factor:
            raise ValueError(
                "`Llama3Scaling.high_freq_factor` must be >= low_freq_factor, got "
                f"{self.high_freq_factor} < {self.low_freq_factor}."
            )

    def frequencies_float64(
        self, theta: float, rotary_dim: int, seq_len: int | None = None
    ) -> tuple[np.ndarray, float]:
        """The banded frequencies, in float64 on the host."""
        del seq_len
        original = self.original_max_position_embeddings
        inv_freq = default_inv_freq(theta, rotary_dim)
        wavelength = 2 * math.pi / inv_freq
        low_bound = original / self.low_freq_factor
        high_bound = original / self.high_freq_factor
        scaled = np.where(wavelength > low_bound, inv_freq / self.factor, inv_freq)
        band = (wavelength <= low_bound) & (wavelength >= high_bound)
        if self.high_freq_factor > self.low_freq_factor and band.any():
            smooth = (original / wavelength[band] - self.low_freq_factor) / (
                self.high_freq_factor - self.low_freq_factor
            )
            scaled[band] = (1 - smooth) * inv_freq[band] / self.factor + smooth * (
                inv_freq[band]
            )
        return scaled, 1.0


@dataclasses.dataclass(frozen=True)
class ProportionalScaling(_StaticFrequencies, _FitsAnyRotary):
    """Gemma 4's proportional RoPE: frequencies use the exponent ``2i / R`` of the
    full rotation but only the first ``int(partial_rotary_factor * R // 2)`` are
    non-zero (the rest do not rotate); all are divided by ``factor``.

    Attributes:
      partial_rotary_factor: the rotated fraction, in ``(0, 1]``.
      factor: divides every frequency (> 0).
    """

    partial_rotary_factor: float
    factor: float = 1.0

    def __post_init__(self):
        _positive(self, "factor")
        _positive(self, "partial_rotary_factor")
        if self.partial_rotary_factor > 1.0:
            raise ValueError(
                "`ProportionalScaling.partial_rotary_factor` must be in (0, 1], got "
                f"{self.partial_rotary_factor}."
            )

    def frequencies_float64(
        self, theta: float, rotary_dim: int, seq_len: int | None = None
    ) -> tuple[np.ndarray, float]:
        """The proportional frequencies, zero past the rotated fraction, in float64 on the host."""
        del seq_len
        rotated = int(self.partial_rotary_factor * rotary_dim // 2)
        inv_freq = default_inv_freq(theta, rotary_dim)
        inv_freq[rotated:] = 0.0
        return inv_freq / self.factor, 1.0


_StaticScaling = (
    LinearScaling | NTKScaling | YarnScaling | Llama3Scaling | ProportionalScaling
)
"""The families with fixed frequencies, which :class:`ResonanceScaling` rounds."""


@dataclasses.dataclass(frozen=True)
class ResonanceScaling(_StaticFrequencies):
    """Resonance RoPE (Wang et al., 2024, Algorithm 1): every wavelength
    ``w_i = 2 pi / inv_freq_i`` of a static family rounded to the nearest integer,
    ``inv_freq_i' = 2 pi / round(w_i)``, so that each feature repeats exactly at
    integer positions and a position past the training length meets only phases
    seen in training (for the features whose wavelength is shorter than it). The
    inner family's attention factor is kept; a zero frequency (an infinite
    wavelength, as past Gemma 4's rotated fraction) stays zero.

    ``ResonanceScaling()`` rounds plain RoPE; ``ResonanceScaling(YarnScaling(...))``
    is the paper's Resonance YaRN. transformers has no such family, so the
    Hugging Face reader never builds one.

    Attributes:
      scaling: the static family whose frequencies are rounded (``LinearScaling``,
        ``NTKScaling``, ``YarnScaling``, ``Llama3Scaling`` or
        ``ProportionalScaling``), or None for plain RoPE.
    """

    scaling: _StaticScaling | None = None

    def __post_init__(self):
        if self.scaling is not None and not isinstance(self.scaling, _StaticScaling):
            raise TypeError(
                "`ResonanceScaling.scaling` must be a static family ("
                + ", ".join(
                    family.__name__ for family in typing.get_args(_StaticScaling)
                )
                + f") or None, got {self.scaling!r}. Frequencies that follow "
                "seq_len (dynamic NTK, LongRoPE) have no fixed wavelengths to round."
            )

    def validate(self, theta: float, rotary_dim: int) -> None:
        """The inner family's checks, and no wavelength rounding to 0 (one of at
        most 1/2: a frequency of at least 4 pi)."""
        if self.scaling is not None:
            self.scaling.validate(theta, rotary_dim)
        inv_freq, _ = self._inner_float64(theta, rotary_dim)
        if np.any(inv_freq >= 4 * math.pi):
            raise ValueError(
                f"ResonanceScaling rounds each wavelength 2 pi / inv_freq to an "
                f"integer, but the largest frequency {inv_freq.max()} has a "
                f"wavelength of at most 1/2, which rounds to 0; give a family whose "
                f"frequencies are below 4 pi (theta={theta}, rotary_dim={rotary_dim})."
            )

    def _inner_float64(self, theta: float, rotary_dim: int) -> tuple[np.ndarray, float]:
        if self.scaling is None:
            return default_inv_freq(theta, rotary_dim), 1.0
        return self.scaling.frequencies_float64(theta, rotary_dim)

    def frequencies_float64(
        self, theta: float, rotary_dim: int, seq_len: int | None = None
    ) -> tuple[np.ndarray, float]:
        """``2 pi / round(2 pi / inv_freq)`` of the inner frequencies, in float64 on the host."""
        del seq_len
        inv_freq, attention_scaling = self._inner_float64(theta, rotary_dim)
        rotating = inv_freq > 0
        rounded = np.zeros_like(inv_freq)
        rounded[rotating] = 2 * math.pi / np.round(2 * math.pi / inv_freq[rotating])
        return rounded, attention_scaling


RopeScaling = (
    LinearScaling
    | NTKScaling
    | DynamicNTKScaling
    | YarnScaling
    | LongRopeScaling
    | Llama3Scaling
    | ProportionalScaling
    | ResonanceScaling
)
"""Any of the scaling families."""
