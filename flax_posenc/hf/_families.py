"""A rope block's numbers: partial factor, pre-training length, scaling family.

As transformers' rope init functions and ``_validate_<type>_rope_parameters``
(5.25) read them, with the warnings transformers logs for values it still computes
with.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from flax_posenc._core.validation import check_bool, check_float, check_length
from flax_posenc.hf._blocks import NEEDS_ORIGINAL, RopeType
from flax_posenc.hf._config import Config, numbers
from flax_posenc.rope.scaling import (
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    NTKScaling,
    ProportionalScaling,
    RopeScaling,
    YarnScaling,
)


class BlockReading:
    """One rope block being read: the config, the block (legacy spellings
    replaced), its name in messages and its rope type. The numbers derived from
    several keys (partial factor, pre-training length) are read once, when first
    needed."""

    def __init__(
        self, cfg: Config, block: Mapping[str, Any], where: str, rope_type: RopeType
    ):
        self.cfg = cfg
        self.block = block
        self.where = where
        self.rope_type: RopeType = rope_type

    def number(self, key: str) -> float:
        """The block's ``key`` as a finite float."""
        return check_float(f"{self.where}[{key!r}]", self.block[key])

    def optional(self, key: str) -> float | None:
        """The block's ``key`` as a float, None where absent or null."""
        return None if self.block.get(key) is None else self.number(key)

    @functools.cached_property
    def partial(self) -> float:
        """The partial rotary factor in (0, 1]: the block's, the top level's, a legacy
        name's, the class's; 1 where a null drops the class's own (GLM family)."""
        cfg = self.cfg
        value = self.block.get("partial_rotary_factor")
        if value is None:
            value = cfg.explicit("partial_rotary_factor")
        for key in cfg.model.partial_keys:
            if value is None:
                value = cfg.config.get(key)
        unset = any(
            cfg.is_null(k) and cfg.null_rule(k) == "unset"
            for k in ("partial_rotary_factor", *cfg.model.partial_keys)
        )
        if value is None and unset:  # the class drops its own factor: full rotation
            return 1.0
        if value is None:
            value = (cfg.defaults.get("rope_parameters") or {}).get(
                "partial_rotary_factor"
            )
        if value is None:
            return 1.0
        value = check_float(f"{self.where}['partial_rotary_factor']", value)
        if not 0.0 < value <= 1.0:
            raise ValueError(
                f"{self.where}['partial_rotary_factor'] must be in (0, 1], got {value}."
            )
        return value

    @functools.cached_property
    def original(self) -> int:
        """transformers' pre-training length: a config class with its own
        ``original_max_position_embeddings`` attribute (Phi-3) overrides the block's;
        otherwise the block's, else ``max_position_embeddings``."""
        cfg = self.cfg
        if "original_max_position_embeddings" in cfg.defaults:
            value = cfg.get("original_max_position_embeddings")
            return check_length(cfg.where("original_max_position_embeddings"), value)
        if (
            cfg.explicit("original_max_position_embeddings") is not None
            and "original_max_position_embeddings" not in cfg.model.ignored_keys
        ):
            raise ValueError(
                f"{cfg.where('original_max_position_embeddings')}: transformers ignores "
                f"a top-level original_max_position_embeddings for {cfg.model_type!r} "
                "(only the rope block's counts); move it into the rope block."
            )
        if self.block.get("original_max_position_embeddings") is not None:
            return check_length(
                f"{self.where}['original_max_position_embeddings']",
                self.block["original_max_position_embeddings"],
            )
        return max_positions(cfg)


def max_positions(cfg: Config) -> int:
    """``max_position_embeddings``, which the config must name."""
    value = cfg.get("max_position_embeddings")
    if value is None:
        raise ValueError(
            f"The {cfg.model_type!r} config names no max_position_embeddings."
        )
    return check_length(cfg.where("max_position_embeddings"), value)


def scaling(reading: BlockReading) -> RopeScaling | None:
    """The scaling family of a checked block (None for ``default``), after the
    warnings transformers logs for it."""
    _warn_as_transformers(reading.cfg, reading.block, reading.rope_type, reading.where)
    return _FAMILIES[reading.rope_type](reading)


def _dynamic(r: BlockReading) -> RopeScaling:
    if r.cfg.model.alpha and r.block.get("alpha"):  # Hunyuan: static NTK
        return NTKScaling(factor=r.number("alpha"))
    return DynamicNTKScaling(
        factor=r.number("factor"),
        original_max_position_embeddings=max_positions(r.cfg),
    )


def _llama3(r: BlockReading) -> RopeScaling:
    return Llama3Scaling(
        factor=r.number("factor"),
        low_freq_factor=r.number("low_freq_factor"),
        high_freq_factor=r.number("high_freq_factor"),
        original_max_position_embeddings=r.original,
    )


def _factor(r: BlockReading) -> float:
    """YaRN's and LongRoPE's factor: given, else max / original as transformers."""
    factor = r.optional("factor")
    return max_positions(r.cfg) / r.original if factor is None else factor


def _yarn(r: BlockReading) -> RopeScaling:
    truncate = r.block.get("truncate", True)
    if truncate is None:  # transformers tests it as falsy: no truncation
        truncate = False
    return YarnScaling(
        factor=_factor(r),
        original_max_position_embeddings=r.original,
        beta_fast=r.optional("beta_fast") or 32.0,  # transformers reads 0 as unset
        beta_slow=r.optional("beta_slow") or 1.0,
        mscale=r.optional("mscale"),
        mscale_all_dim=r.optional("mscale_all_dim"),
        attention_factor=r.optional("attention_factor"),
        truncate=check_bool(f"{r.where}['truncate']", truncate),
    )


def _longrope(r: BlockReading) -> RopeScaling:
    short = numbers(f"{r.where}['short_factor']", r.block["short_factor"])
    long = numbers(f"{r.where}['long_factor']", r.block["long_factor"])
    if r.cfg.model.mscale_regimes:  # Phi-3.5-MoE never switches factors
        return LongRopeScaling(
            short_factor=short,
            long_factor=short,
            original_max_position_embeddings=r.original,
            factor=_factor(r),
            attention_factor=r.optional("attention_factor"),
            short_mscale=r.number("short_mscale"),
            long_mscale=r.number("long_mscale"),
        )
    return LongRopeScaling(
        short_factor=short,
        long_factor=long,
        original_max_position_embeddings=r.original,
        factor=_factor(r),
        attention_factor=r.optional("attention_factor"),
    )


_FAMILIES: dict[RopeType, Callable[[BlockReading], RopeScaling | None]] = {
    "default": lambda r: None,
    "linear": lambda r: LinearScaling(factor=r.number("factor")),
    "dynamic": _dynamic,
    "yarn": _yarn,
    "longrope": _longrope,
    "llama3": _llama3,
    "proportional": lambda r: ProportionalScaling(
        partial_rotary_factor=r.partial, factor=r.optional("factor") or 1.0
    ),
}
"""Each rope type's family, built from the block's reading."""


def _warn(message: str) -> None:
    """A ``UserWarning`` pointing at the first caller outside the package."""
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(
        f"transformers warns and computes on: {message}", UserWarning, stacklevel=level
    )


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _warn_as_transformers(
    cfg: Config, block: Mapping[str, Any], rope_type: RopeType, where: str
) -> None:
    """The warnings transformers' ``_validate_*_rope_parameters`` log for values it
    still computes with (same content; the numbers follow transformers too)."""
    factor = block.get("factor")
    if rope_type in ("linear", "dynamic", "yarn", "llama3") or factor is not None:
        if factor is None or (isinstance(factor, (int, float)) and factor < 1.0):
            _warn(f"{where}'s factor field must be a float or int >= 1, got {factor}")
    original = block.get("original_max_position_embeddings")
    if original is None and rope_type in NEEDS_ORIGINAL:
        original = cfg.get("max_position_embeddings")  # as transformers fills it in
    maximum = cfg.get("max_position_embeddings")
    if rope_type == "yarn":
        if factor is not None and original and maximum:
            implicit = maximum / original
            if implicit not in (factor, 1):
                _warn(
                    f"The explicitly set RoPE scaling factor ({where}['factor'] = "
                    f"{factor}) does not match the ratio implicitly set by other "
                    "parameters (max_position_embeddings / "
                    f"original_max_position_embeddings = {implicit}). Using the "
                    f"explicit factor ({factor}) in YaRN."
                )
    if rope_type == "llama3":
        low, high = block.get("low_freq_factor"), block.get("high_freq_factor")
        if isinstance(low, (int, float)) and isinstance(high, (int, float)):
            if high <= low:
                _warn(
                    f"{where}'s high_freq_factor field must be greater than "
                    f"low_freq_factor, got high_freq_factor={high} and "
                    f"low_freq_factor={low}"
                )
        if (
            isinstance(original, int)
            and isinstance(maximum, int)
            and original >= maximum
        ):
            _warn(
                f"{where}'s original_max_position_embeddings field must be less than "
                f"max_position_embeddings, got {original} and "
                f"max_position_embeddings={maximum}"
            )
    if rope_type == "longrope" and factor is None and original is not None:
        _warn(
            f"{where} has no factor: transformers takes max_position_embeddings / "
            "original_max_position_embeddings for it, and recommends setting "
            "`factor` to that ratio instead."
        )
