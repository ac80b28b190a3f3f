"""A transformers config dict with its model type's class defaults, key aliases and
null rules: the one place raw top-level keys are read.

A ``null`` is a value (``_defaults.DEFAULTS[t]["null"]`` says what the class makes of
it), and a key one or two edits away from a RoPE key raises, as transformers would
ignore it silently.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from flax_posenc._core.validation import check_float, check_length
from flax_posenc.hf._defaults import DEFAULTS, NEAR_TYPO_CHECKED
from flax_posenc.hf._models import (
    COMMON,
    COMMON_TYPES,
    EXCLUDED,
    LEARNED,
    MODELS,
    Model,
)
from flax_posenc.hf._typos import resembled

# Top-level keys whose None the class keeps and the reader follows: no sliding
# window; head_dim from hidden_size // num_attention_heads (the rotary modules'
# ``getattr(config, "head_dim", None) or ...``); rope_interleave and
# position_embedding_type tested as falsy / not "rope".
_NULLS_READ = frozenset(
    {"sliding_window", "head_dim", "rope_interleave", "position_embedding_type"}
)


def numbers(where: str, value: Any) -> tuple[float, ...]:
    """A JSON list of numbers, each checked like a single value, named by index."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{where} must be a list of numbers, got {value!r}.")
    return tuple(check_float(f"{where}[{i}]", v) for i, v in enumerate(value))


def lengths(where: str, value: Any) -> tuple[int, ...]:
    """A JSON list of lengths (whole numbers >= 1), named by index."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{where} must be a list of integers, got {value!r}.")
    return tuple(check_length(f"{where}[{i}]", v) for i, v in enumerate(value))


class Config:
    """A config dict with its model type's defaults and key aliases."""

    def __init__(self, config: Mapping[str, Any]):
        model_type = config.get("model_type")
        if not isinstance(model_type, str):
            raise ValueError(
                "The config names no `model_type` (a string), so its RoPE cannot be "
                "read without guessing. Pass the config.json of a transformers model, "
                "or build fp.RopeConfig(...) directly."
            )
        if model_type in EXCLUDED:
            raise ValueError(
                f"model_type {model_type!r} is out of flax_posenc's scope: "
                f"{EXCLUDED[model_type]}."
            )
        if model_type in LEARNED:
            raise ValueError(
                f"model_type {model_type!r} cannot be read from its config alone: "
                f"{LEARNED[model_type]}."
            )
        if model_type not in DEFAULTS or not (
            model_type in MODELS or model_type in COMMON_TYPES
        ):
            raise ValueError(
                f"model_type {model_type!r} is not in flax_posenc's table of "
                "transformers models, so its RoPE layout, head size and defaults "
                "are unknown. Build fp.RopeConfig(head_dim=..., theta=..., "
                "layout=..., rotary_dim=...) from its modeling code instead."
            )
        self.config = config
        self.model_type = model_type
        self.model: Model = MODELS.get(model_type, COMMON)
        self.defaults: dict[str, Any] = DEFAULTS[model_type]
        # Alias -> the attribute it stands for (GPT-J's hidden_size -> n_embd,
        # HunYuan-VL's legacy attention_head_dim -> head_dim).
        self.attribute_map: dict[str, str] = dict(
            self.defaults.get("attribute_map", {})
        )
        # What the config class makes of a null (None) value, where it differs
        # from leaving the key out: "none" (kept), "error", "ratio" (head_dim).
        self.nulls: dict[str, str] = dict(self.defaults.get("null", {}))
        self._check_keys()

    def _check_keys(self) -> None:
        """Refuses nulls the reader cannot follow, and near misses of RoPE keys."""
        for key, value in self.config.items():
            rule = self.null_rule(key)
            if value is None and (
                rule in ("error", "other")
                or (
                    rule == "none"
                    and self.attribute_map.get(key, key) not in _NULLS_READ
                )
            ):
                what = (
                    f"which transformers' {self.defaults['config_class']} cannot use"
                    if rule == "error"
                    else f"and flax_posenc does not follow what transformers' "
                    f"{self.defaults['config_class']} then does"
                )
                raise ValueError(
                    f"{self.where(key)} is null, {what} (JSON null is a value, not "
                    "'unset'); give a value, or leave the key out for the class "
                    "default."
                )
            own = key in NEAR_TYPO_CHECKED or key in self.model.own_keys
            like = None if own else resembled(key)
            if like is not None:
                raise ValueError(
                    f"config[{key!r}] is not a key of any transformers config, and it "
                    f"is close to {like!r}, which sets RoPE: transformers would "
                    f"ignore it silently. Rename it to {like!r}, or remove it."
                )

    def rewritten(self, config: Mapping[str, Any]) -> Config:
        """A new wrapper of ``config``, the config class's own rewrite of this one's
        keys (checked as the user gave them), with this one's model type, defaults and
        aliases; this one is left as it is."""
        new = copy.copy(self)
        new.config = config
        return new

    def null_rule(self, key: str) -> str | None:
        """What the class makes of ``key`` (under any spelling) set to null, where
        that differs from leaving it out (see ``_defaults.DEFAULTS[t]["null"]``)."""
        for name in (key, *self.spellings(key)):
            if name in self.nulls:
                return self.nulls[name]
        return None

    def where(self, key: str) -> str:
        """How messages name the config's ``key``."""
        return f"config[{key!r}] ({self.model_type})"

    def explicit(self, key: str) -> Any:
        """The config's own value of ``key`` under any of its spellings, else None.
        An alias wins over the attribute it stands for, as transformers sets the
        aliases after the fields."""
        for name in self.spellings(key):
            if name in self.config:
                return self.config[name]
        return None

    def spellings(self, key: str) -> tuple[str, ...]:
        """``key``'s aliases, then the attribute they stand for."""
        field = self.attribute_map.get(key, key)
        aliases = [a for a, f in self.attribute_map.items() if f == field]
        return (*aliases, field)

    def get(self, key: str, default: Any = None) -> Any:
        """The config's value of ``key`` (under any spelling), else the class's. A
        null the class keeps (or, for ``head_dim``, replaces by the ratio) is
        None."""
        value = self.explicit(key)
        if (
            value is None
            and self.is_null(key)
            and self.nulls.get(key)
            in (
                "none",
                "ratio",
            )
        ):
            return None
        return self.defaults.get(key, default) if value is None else value

    def is_null(self, key: str) -> bool:
        """Whether the config sets ``key`` (under any spelling) to null."""
        return any(
            name in self.config and self.config[name] is None
            for name in self.spellings(key)
        )


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The text config of a multimodal config, else ``config`` itself."""
    if not isinstance(config, Mapping):
        raise TypeError(f"`config` must be a dict, got {type(config).__name__}.")
    text = config.get("text_config")
    if isinstance(text, Mapping) and text.get("model_type") in DEFAULTS:
        return text
    return config
