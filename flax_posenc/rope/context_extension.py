"""Planning a context extension: the RoPE scaling of a recipe for a target length,
and the per-pair wavelengths the recipes are defined on.

Pair ``j`` of RoPE turns by ``inv_freq[j]`` per position: its wavelength is ``2 pi /
inv_freq[j]`` tokens, and within ``L`` tokens it makes ``L / wavelength`` turns. Pairs
that turned many times within the training length have seen every angle and can
extrapolate to longer contexts; pairs with less than a turn have not, and must be
interpolated (their frequencies divided, so the target length maps onto angles seen
in training). The recipes differ in which pairs they interpolate: linear all, NTK and
dynamic NTK progressively more towards the slow pairs, YaRN and Llama 3 by bands of
rotations (YaRN: more than ``beta_fast`` turns kept, fewer than ``beta_slow``
interpolated; Llama 3: wavelengths shorter than ``orig / high_freq_factor`` kept,
longer than ``orig / low_freq_factor`` interpolated).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, NamedTuple

import numpy as np

from flax_posenc._core.validation import (
    check_choice,
    check_length,
    check_positive_float,
    check_positive_int,
    check_rope_config,
)
from flax_posenc.rope import _core as _rope
from flax_posenc.rope.config import RopeConfig
from flax_posenc.rope.scaling import (
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    NTKScaling,
    RopeScaling,
    YarnScaling,
)

__all__ = ["ExtensionMethod", "RopeWavelengths", "extend_context", "rope_wavelengths"]

ExtensionMethod = Literal["linear", "ntk", "dynamic", "yarn", "llama3"]
"""A context-extension recipe of :func:`extend_context` (Hugging Face ``rope_type``
names; ``"ntk"`` is static NTK-aware scaling)."""

# method -> (family, its published defaults besides factor and original length).
_RECIPES: dict[str, tuple[type, dict[str, float]]] = {
    "linear": (LinearScaling, {}),
    "ntk": (NTKScaling, {}),
    "dynamic": (DynamicNTKScaling, {}),
    # YaRN (Peng et al., 2023) and transformers' defaults.
    "yarn": (YarnScaling, {"beta_fast": 32.0, "beta_slow": 1.0}),
    # Llama 3.1's published bands (Meta, 2024); transformers has no defaults.
    "llama3": (Llama3Scaling, {"low_freq_factor": 1.0, "high_freq_factor": 4.0}),
}
_ORIGINAL = "original_max_position_embeddings"


class RopeWavelengths(NamedTuple):
    """Per-pair wavelengths of a RoPE configuration and its turns within a length.

    Attributes:
      wavelength: float64 ``[R/2]``: ``2 pi / inv_freq`` tokens per full turn of
        pair ``j`` (``inf`` for a pair that does not rotate).
      rotations: float64 ``[R/2]``: ``length / wavelength``, the (fractional)
        number of turns pair ``j`` makes within ``length`` tokens: YaRN's ``r``.
      length: the length the rotations are counted in.
    """

    wavelength: np.ndarray
    rotations: np.ndarray
    length: int


def extend_context(
    config: RopeConfig,
    target_len: int,
    *,
    method: ExtensionMethod,
    original_max_position_embeddings: int | None = None,
    factor: float | None = None,
    **fields: Any,
) -> RopeConfig:
    """``config`` extended from its training length to ``target_len`` by a recipe.

    The factor is the length ratio ``target_len / original_max_position_embeddings``
    unless given; the recipe's other fields take their published defaults (YaRN:
    ``beta_fast=32, beta_slow=1``, attention factor ``0.1 ln(factor) + 1``; Llama 3:
    ``low_freq_factor=1, high_freq_factor=4``) unless given in ``fields``.

    | method | family | what it does |
    | --- | --- | --- |
    | ``"linear"`` | :class:`LinearScaling` | every pair interpolated by ``factor`` |
    | ``"ntk"`` | :class:`NTKScaling` | base ``theta * factor^(R / (R - 2))`` |
    | ``"dynamic"`` | :class:`DynamicNTKScaling` | that base, grown with the length |
    | ``"yarn"`` | :class:`YarnScaling` | bands of rotations, attention factor |
    | ``"llama3"`` | :class:`Llama3Scaling` | bands of wavelengths |

    Args:
      config: the unscaled configuration the model was trained with.
      target_len: the context length to reach (> the original length).
      method: ``"linear"``, ``"ntk"``, ``"dynamic"``, ``"yarn"`` or ``"llama3"``.
      original_max_position_embeddings: the training length. Required: a
        ``RopeConfig`` has no record of it (Hugging Face's
        ``max_position_embeddings`` of the original model).
      factor: the scaling factor (>= 1); None means ``target_len / original``
        (transformers' meaning of ``factor`` for every family). Published models
        sometimes choose another: Llama 3.1 went from 8192 to 131072 (16x) with
        ``factor=8``. Dynamic NTK's base at length ``L`` grows by ``factor * L /
        original - factor + 1``: ``factor=1`` gives exactly ``L / original`` there.
      fields: any other field of the family, overriding its default (e.g.
        DeepSeek-V3's ``mscale=1.0, mscale_all_dim=1.0`` for YaRN).

    Returns:
      ``config`` with the recipe's ``scaling``.

    Raises:
      TypeError: a ``config`` that is not a ``RopeConfig``, non-int lengths, or a
        field the family does not have.
      ValueError: a ``config`` that already has a scaling, an unknown ``method``, a
        missing original length, a ``target_len`` not above it, a ``factor < 1``,
        or fields the family rejects.

    Examples:
      Qwen2.5's published YaRN block (4x from 32768):

      >>> qwen = fp.RopeConfig(head_dim=128, theta=1000000.0)
      >>> fp.extend_context(qwen, 131072, method="yarn",
      ...     original_max_position_embeddings=32768).scaling
      YarnScaling(factor=4.0, original_max_position_embeddings=32768, beta_fast=32.0, beta_slow=1.0, mscale=None, mscale_all_dim=None, attention_factor=None, truncate=True)

      Llama 3.1's factor 8 for 16x is a choice, so it is passed:

      >>> llama = fp.RopeConfig(head_dim=128, theta=500000.0)
      >>> fp.extend_context(llama, 131072, method="llama3",
      ...     original_max_position_embeddings=8192, factor=8).scaling.factor
      8.0
    """
    check_rope_config("config", config, RopeConfig)
    if config.scaling is not None:
        raise ValueError(
            "`config` must be unscaled (the configuration the model was trained "
            f"with), got scaling={config.scaling!r}. Extending an extension is not "
            "a published recipe: pass dataclasses.replace(config, scaling=None) and "
            "the original length."
        )
    family, defaults = _RECIPES[check_choice("method", method, tuple(_RECIPES))]
    target_len = check_positive_int("target_len", target_len)
    if original_max_position_embeddings is None:
        raise ValueError(
            "`original_max_position_embeddings` is required: a RopeConfig has no "
            "record of the length the model was trained at. Pass it (the original "
            "model's max_position_embeddings)."
        )
    original = check_length(_ORIGINAL, original_max_position_embeddings)
    if target_len <= original:
        raise ValueError(
            f"`target_len` ({target_len}) must exceed "
            f"original_max_position_embeddings ({original}): nothing to extend."
        )
    if factor is None:
        factor = target_len / original
    elif check_positive_float("factor", factor) < 1:
        raise ValueError(f"`factor` must be >= 1 to extend a context, got {factor}.")
    names = {f.name for f in dataclasses.fields(family)}
    unknown = sorted(set(fields) - names)
    if unknown:
        allowed = sorted(names - {"factor", _ORIGINAL})
        raise TypeError(
            f"{family.__name__} has no field {', '.join(map(repr, unknown))}; "
            f"its other fields are {', '.join(allowed) or 'none'}."
        )
    kwargs = defaults | fields | {"factor": float(factor)}
    if _ORIGINAL in names:
        kwargs[_ORIGINAL] = original
    scaling: RopeScaling = family(**kwargs)
    return dataclasses.replace(config, scaling=scaling)


def rope_wavelengths(
    config: RopeConfig, *, seq_len: int | None = None
) -> RopeWavelengths:
    """Per-pair wavelengths ``2 pi / inv_freq`` and the turns within a length.

    Host-side float64 numpy, from the float32 frequencies the rotation uses
    (:func:`flax_posenc.rope_frequencies`).

    Args:
      config: the RoPE configuration.
      seq_len: the length to count turns in; for dynamic NTK and LongRoPE also the
        sequence length their frequencies are taken at. None means the scaling's
        ``original_max_position_embeddings`` (and, for those two families, their
        frequencies up to it).

    Returns:
      ``RopeWavelengths(wavelength [R/2], rotations [R/2], length)``.

    Raises:
      TypeError: a ``seq_len`` that is not a Python int.
      ValueError: ``seq_len`` None for a configuration without an original length
        (plain RoPE, linear, NTK, proportional), or below 1.

    Examples:
      >>> config = fp.RopeConfig(head_dim=8)
      >>> waves = fp.rope_wavelengths(config, seq_len=100)
      >>> waves.wavelength.round(1).tolist()  # 2 pi * 10000^(2j/8)
      [6.3, 62.8, 628.3, 6283.2]
      >>> waves.rotations.round(3).tolist()
      [15.915, 1.592, 0.159, 0.016]
    """
    check_rope_config("config", config, RopeConfig)
    if seq_len is not None:
        length = seq_len = check_positive_int("seq_len", seq_len)
    elif (original := getattr(config.scaling, _ORIGINAL, None)) is not None:
        length = int(original)
    else:
        raise ValueError(
            "`seq_len` is required: this config records no "
            "original_max_position_embeddings to count rotations in. Pass the "
            "length, e.g. seq_len=4096."
        )
    inv_freq = np.asarray(_rope.frequencies(config, seq_len)[0], np.float64)
    with np.errstate(divide="ignore"):
        wavelength = 2 * math.pi / inv_freq
    return RopeWavelengths(wavelength, length / wavelength, length)
