"""The reader: a transformers ``config.json`` dict in, per-layer RoPE descriptions out.

It follows transformers' own reading (``convert_rope_params_to_dict`` and
``standardize_rope_params`` of 5.24, and each model type's modeling code through
``hf/_models.py``), and never guesses: an unknown model type, an unknown key of a rope
block, a key the model ignores, a value of the wrong JSON type, or a behaviour that
the chosen function cannot express raises ``ValueError``/``TypeError`` naming it.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any, Literal

from flax_posenc._validation import check_bool, check_float, check_length
from flax_posenc.hf._defaults import DEFAULTS, NEAR_TYPO_CHECKED
from flax_posenc.hf._models import (
    COMMON,
    COMMON_TYPES,
    EXCLUDED,
    LEARNED,
    MODELS,
    PARTIAL_ROTARY,
    Model,
)
from flax_posenc.hf._typos import resembled
from flax_posenc.query_scaling import QueryScaling
from flax_posenc.rope import RopeConfig
from flax_posenc.rope_nd import MropeLayout
from flax_posenc.rope_scaling import (
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    NTKScaling,
    ProportionalScaling,
    RopeScaling,
    YarnScaling,
)

__all__ = ["HFRope", "LayerRope", "read_hf_rope", "rope_config_from_hf"]

_COMMON_KEYS = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor"})
# rope_type -> (required keys, optional keys), as transformers' _validate_*_parameters.
_FAMILY_KEYS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "default": (frozenset(), frozenset()),
    "linear": (frozenset({"factor"}), frozenset()),
    "dynamic": (frozenset({"factor"}), frozenset()),
    "yarn": (
        frozenset({"factor", "original_max_position_embeddings"}),
        frozenset(
            {
                "attention_factor",
                "beta_fast",
                "beta_slow",
                "mscale",
                "mscale_all_dim",
                "truncate",
            }
        ),
    ),
    "longrope": (
        frozenset({"short_factor", "long_factor", "original_max_position_embeddings"}),
        frozenset({"attention_factor", "factor"}),
    ),
    "llama3": (
        frozenset(
            {
                "factor",
                "low_freq_factor",
                "high_freq_factor",
                "original_max_position_embeddings",
            }
        ),
        frozenset(),
    ),
    "proportional": (frozenset(), frozenset({"factor"})),
}
_ALIASES = {"mrope": "default"}  # Qwen2-VL's legacy type name
# Block keys transformers indexes and computes with, so that a null fails there
# (optional keys it reads with .get() or ``or`` treat a null as absent).
_NULL_FAILS = frozenset(
    {"rope_theta", "original_max_position_embeddings", "partial_rotary_factor"}
)
# Top-level keys whose None the class keeps and the reader follows: no sliding
# window; head_dim from hidden_size // num_attention_heads (the rotary modules'
# ``getattr(config, "head_dim", None) or ...``); rope_interleave and
# position_embedding_type tested as falsy / not "rope".
_NULLS_READ = frozenset(
    {"sliding_window", "head_dim", "rope_interleave", "position_embedding_type"}
)
# Families whose pre-training length transformers moves into the block.
_NEEDS_ORIGINAL = ("llama3", "yarn", "longrope")


@dataclasses.dataclass(frozen=True)
class LayerRope:
    """What one attention layer of a transformers model does with positions.

    Plain host data, hashable, usable as a static argument under ``jit``.

    Attributes:
      rope: the layer's :class:`~flax_posenc.RopeConfig`; None for a NoPE layer.
      mrope_section: M-RoPE pairs per position row (apply with
        :func:`flax_posenc.apply_mrope`), or None for 1-D RoPE.
      mrope_layout: how the sections share out the pairs (see
        :func:`flax_posenc.mrope_cos_sin`): ``"interleaved"`` for Qwen3-VL,
        ``"hw_alternating"`` for Ernie-4.5-VL.
      query_scaling: a position-dependent query factor applied after RoPE
        (:func:`flax_posenc.apply_query_scaling`), or None.
      softmax_scale_factor: multiplies the attention's ``1 / sqrt(d)`` softmax
        scale (DeepSeek's YaRN ``mscale_all_dim``); 1 for most models.
      rope_features: which features of the model's q/k head ``rope.head_dim``
        covers: ``"first"``, or ``"last"`` for multi-head latent attention
        (DeepSeek-V2/V3 heads are ``[nope | rope]``: apply RoPE to
        ``q[..., -rope.head_dim:]``).
      position_sign: ``-1`` where the model rotates by ``-theta`` (NanoChat): apply
        RoPE at ``-positions``.
    """

    rope: RopeConfig | None
    mrope_section: tuple[int, ...] | None = None
    mrope_layout: MropeLayout = "contiguous"
    query_scaling: QueryScaling | None = None
    softmax_scale_factor: float = 1.0
    rope_features: Literal["first", "last"] = "first"
    position_sign: Literal[1, -1] = 1

    def only_rope(self, what: str) -> RopeConfig:
        """The ``RopeConfig``, or a ValueError if the layer needs more than it."""
        extras = []
        if self.rope is None:
            extras.append("no RoPE (a NoPE layer)")
        if self.mrope_section is not None:
            extras.append(f"M-RoPE sections {self.mrope_section} (apply_mrope)")
        if self.query_scaling is not None:
            extras.append(f"a query scaling {self.query_scaling}")
        if self.softmax_scale_factor != 1.0:
            extras.append(f"a softmax scale factor {self.softmax_scale_factor}")
        if self.position_sign == -1:
            extras.append("rotation by -theta (apply RoPE at -positions)")
        if extras or self.rope is None:
            raise ValueError(
                f"{what} has {', '.join(extras)}: a RopeConfig alone would drop it. "
                "Use fp.read_hf_rope(config).layer(i) and apply every field."
            )
        return self.rope


@dataclasses.dataclass(frozen=True)
class HFRope:
    """A transformers model's position handling, layer by layer.

    Attributes:
      model_type: the config's ``model_type`` (of the text config for multimodal
        models).
      layers: one :class:`LayerRope` per decoder layer.
      layer_types: the config's per-layer type names (``"full_attention"``,
        ``"sliding_attention"``, ...), or None.
    """

    model_type: str
    layers: tuple[LayerRope, ...]
    layer_types: tuple[str, ...] | None = None

    def layer(self, index: int) -> LayerRope:
        """The :class:`LayerRope` of decoder layer ``index``."""
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"`index` must be an int, got {index!r}.")
        if not -len(self.layers) <= index < len(self.layers):
            raise ValueError(
                f"`index` must be in [0, {len(self.layers)}), got {index}."
            )
        return self.layers[index]


# --------------------------------------------------------------------------------------
# JSON lists: each entry checked like a single value, named by its index.
# --------------------------------------------------------------------------------------


def _numbers(where: str, value: Any) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{where} must be a list of numbers, got {value!r}.")
    return tuple(check_float(f"{where}[{i}]", v) for i, v in enumerate(value))


def _lengths(where: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{where} must be a list of integers, got {value!r}.")
    return tuple(check_length(f"{where}[{i}]", v) for i, v in enumerate(value))


# --------------------------------------------------------------------------------------
# The config: model type, aliases, defaults.
# --------------------------------------------------------------------------------------


class _Config:
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
            like = None if key in NEAR_TYPO_CHECKED else resembled(key)
            if like is not None:
                raise ValueError(
                    f"config[{key!r}] is not a key of any transformers config, and it "
                    f"is close to {like!r}, which sets RoPE: transformers would "
                    f"ignore it silently. Rename it to {like!r}, or remove it."
                )

    def null_rule(self, key: str) -> str | None:
        """What the class makes of ``key`` (under any spelling) set to null, where
        that differs from leaving it out (see ``_defaults.DEFAULTS[t]["null"]``)."""
        for name in (key, *self.spellings(key)):
            if name in self.nulls:
                return self.nulls[name]
        return None

    def where(self, key: str) -> str:
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


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(config, Mapping):
        raise TypeError(f"`config` must be a dict, got {type(config).__name__}.")
    text = config.get("text_config")
    if isinstance(text, Mapping) and text.get("model_type") in DEFAULTS:
        return text
    return config


# --------------------------------------------------------------------------------------
# Rope blocks, per layer type.
# --------------------------------------------------------------------------------------


def _split_blocks(cfg: _Config, given: dict | None) -> dict[str | None, dict | None]:
    """DeepSeek-V4's blocks from its flat v4 form, as its config class splits them:
    ``main`` (plain RoPE at ``rope_theta``) and ``compress`` (the flat block, e.g.
    YaRN with ``attention_factor`` 1, at ``compress_rope_theta``)."""
    names = sorted({block for _, block in cfg.model.layer_blocks})
    if given and all(isinstance(given.get(name), Mapping) for name in names):
        return {name: dict(given[name]) for name in names}
    flat = {k: v for k, v in (given or {}).items() if k not in names}
    nested = cfg.defaults["rope_parameters"]
    partial = cfg.explicit("partial_rotary_factor")
    rope_dim = cfg.explicit("qk_rope_head_dim")  # the legacy spelling
    if partial is None and rope_dim is not None:
        head = check_length(cfg.where("head_dim"), cfg.get("head_dim"))
        partial = check_length(cfg.where("qk_rope_head_dim"), rope_dim) / head
    if partial is None:
        partial = cfg.defaults["partial_rotary_factor"]
    theta = cfg.explicit("rope_theta")
    main = {
        "rope_type": "default",
        "rope_theta": nested["main"]["rope_theta"] if theta is None else theta,
        "partial_rotary_factor": partial,
    }
    rope_type = flat.pop("rope_type", flat.pop("type", "default"))
    compress = {
        **flat,
        "rope_type": rope_type,
        "rope_theta": cfg.get("compress_rope_theta", nested["compress"]["rope_theta"]),
        "partial_rotary_factor": partial,
    }
    if rope_type == "yarn":
        compress.setdefault("attention_factor", 1.0)
    return {"main": main, "compress": compress}


def _blocks(cfg: _Config) -> dict[str | None, dict | None]:
    """The rope block of every layer type (``None``: one block for all layers)."""
    given = cfg.config.get("rope_parameters")
    if given is None:
        given = cfg.config.get("rope_scaling")
    if given is not None and not isinstance(given, Mapping):
        raise TypeError(
            f"config['rope_parameters'/'rope_scaling'] must be a dict or null, got "
            f"{given!r}."
        )
    if cfg.model.layer_blocks:
        return _split_blocks(cfg, None if given is None else dict(given))
    default = cfg.defaults.get("rope_parameters") or {}
    nested_default = bool(default) and all(
        isinstance(v, Mapping) or v is None for v in default.values()
    )
    if cfg.model.fixed_theta is not None:
        keys = [
            k
            for k in ("rope_parameters", "rope_scaling", "rope_theta")
            if k in cfg.config
        ]
        if keys:
            raise ValueError(
                f"config {keys}: transformers' {cfg.model_type!r} has no RoPE keys "
                f"(its rotary base is fixed at {cfg.model.fixed_theta}); remove them."
            )
        return {None: {"rope_theta": cfg.model.fixed_theta}}
    given = copy.deepcopy(dict(given)) if given else None
    if given and any(isinstance(v, Mapping) or v is None for v in given.values()):
        for key in cfg.model.dangling_keys:  # as transformers drops them
            given.pop(key, None)
    theta = cfg.explicit("rope_theta")
    for key in cfg.model.theta_keys:  # legacy names, e.g. GPT-NeoX's rotary_emb_base
        if theta is None:
            theta = cfg.config.get(key)
    if given and all(isinstance(v, Mapping) or v is None for v in given.values()):
        blocks: dict[str | None, dict | None] = {}
        for key, block in given.items():
            if block is not None:
                fallback = (default.get(key) or {}) if nested_default else default
                block = dict(block)
                block.setdefault(
                    "rope_theta",
                    theta if theta is not None else fallback.get("rope_theta", 10000.0),
                )
            blocks[key] = block
        return blocks
    if not nested_default:
        if given is None:  # the class's default block; top-level keys still win
            given = {
                k: v
                for k, v in copy.deepcopy(default).items()
                if k not in ("rope_theta", "partial_rotary_factor")
            }
        if theta is not None:
            given.setdefault("rope_theta", theta)
        given.setdefault("rope_theta", default.get("rope_theta", 10000.0))
        return {None: given}
    # A flat v4 block for a model whose class nests per layer type (Gemma 3).
    by_type: dict[str | None, dict | None] = {
        k: (None if v is None else dict(v)) for k, v in default.items()
    }
    kinds = sorted(str(k) for k in by_type)
    if cfg.model.local_theta_key is None:
        if given is not None:
            raise ValueError(
                f"model_type {cfg.model_type!r} has per-layer-type rope_parameters "
                f"{kinds}; give rope_parameters nested by layer type, got a flat "
                f"block {given}."
            )
        if theta is not None:
            raise ValueError(
                f"model_type {cfg.model_type!r} has per-layer-type rope_parameters "
                f"{kinds}; a top-level rope_theta ({theta}) is ambiguous: give "
                "rope_parameters nested by layer type."
            )
        return by_type
    full_default = dict(default["full_attention"])
    full = given if given is not None else dict(full_default)
    if theta is not None:
        full["rope_theta"] = full.get("rope_theta", theta)
    full.setdefault("rope_theta", full_default["rope_theta"])
    sliding = dict(default["sliding_attention"])
    local = cfg.config.get(cfg.model.local_theta_key)
    if local is not None:
        sliding["rope_theta"] = local
    return {"full_attention": full, "sliding_attention": sliding}


def _legacy_block(cfg: _Config, block: Mapping[str, Any], where: str) -> dict:
    """The block with the model's legacy spellings replaced, as its config class
    does (HunYuan-VL: type ``xdrope`` is ``dynamic``, ``xdrope_section`` is
    ``mrope_section``)."""
    block = dict(block)
    for key in ("rope_type", "type"):
        if block.get(key) in dict(cfg.model.legacy_types):
            block[key] = dict(cfg.model.legacy_types)[block[key]]
    for old, new in cfg.model.legacy_keys:
        if old in block:
            value = block.pop(old)
            if block.get(new, value) != value:
                raise ValueError(
                    f"{where} has {old}={value} and {new}={block[new]}; transformers "
                    "refuses two different values too."
                )
            block[new] = value
    return block


def _rope_type(block: Mapping[str, Any], where: str) -> str:
    rope_type = block.get("rope_type", block.get("type", "default"))  # as transformers
    if not isinstance(rope_type, str):
        raise TypeError(f"{where}['rope_type'] must be a string, got {rope_type!r}.")
    rope_type = _ALIASES.get(rope_type, rope_type)
    if rope_type not in _FAMILY_KEYS:
        raise ValueError(
            f"Unknown rope_type {rope_type!r} in {where}; known: "
            f"{', '.join(sorted(_FAMILY_KEYS))}."
        )
    return rope_type


def _check_keys(cfg: _Config, block: Mapping[str, Any], rope_type: str, where: str):
    required, optional = _FAMILY_KEYS[rope_type]
    if cfg.model.alpha and rope_type == "dynamic" and block.get("alpha"):
        required, optional = frozenset(), optional | {"factor"}  # alpha wins
    nulls = sorted(
        k
        for k, v in block.items()
        if v is None
        and (k in required or k in _NULL_FAILS)
        and (rope_type, k) != ("yarn", "factor")  # max / original, as transformers
    )
    if nulls:
        raise ValueError(
            f"{where} sets {nulls} to null (rope_type {rope_type!r}): transformers "
            "reads a null as the value None and fails on it; give numbers, or leave "
            "optional keys out."
        )
    present = set(block)
    if rope_type in _NEEDS_ORIGINAL:
        present.add("original_max_position_embeddings")  # filled in from the config
    missing = sorted(required - present)
    if missing:
        raise ValueError(
            f"rope_type {rope_type!r} needs keys {missing} in {where}; got "
            f"{sorted(block)}. transformers rejects this block too."
        )
    known = required | optional | _COMMON_KEYS | cfg.model.block_keys
    unknown = sorted(set(block) - known)
    if unknown:
        raise ValueError(
            f"Unknown keys {unknown} in {where} (rope_type {rope_type!r}, model_type "
            f"{cfg.model_type!r}); known: {sorted(known)}. flax_posenc does not "
            "guess what they mean."
        )


# --------------------------------------------------------------------------------------
# One layer type's RopeConfig.
# --------------------------------------------------------------------------------------


def _layer_head_dim(
    cfg: _Config, layer_types: tuple[str, ...] | None, layer_type: str | None
) -> Any:
    """The ``per_layer_config`` head size of the layers of ``layer_type``, or None
    (transformers' per-layer-type view refuses layers of one type that differ)."""
    per_layer = cfg.config.get("per_layer_config")
    if not per_layer:
        return None
    if not isinstance(per_layer, Mapping):
        raise TypeError(
            f"{cfg.where('per_layer_config')} must be a dict, got {per_layer!r}."
        )
    by_index: dict[int, Any] = {}
    for key, value in per_layer.items():
        if (
            isinstance(key, bool)
            or not str(key).isdigit()
            or not isinstance(value, Mapping)
        ):
            raise ValueError(
                f"{cfg.where('per_layer_config')} must map layer indices to dicts of "
                f"overrides, got {key!r}: {value!r}."
            )
        by_index[int(key)] = dict(value)
    rope_keys = sorted(
        {
            k
            for v in by_index.values()
            for k in v
            if k == "head_dim"
            or "rope" in k
            or "rotary" in k
            or k.startswith("partial")
        }
    )
    if (rope_keys and cfg.model.global_head_dim is None) or set(rope_keys) - {
        "head_dim"
    }:
        raise ValueError(
            f"{cfg.where('per_layer_config')} overrides {rope_keys} per layer, which "
            f"transformers' {cfg.model_type!r} rotary module does not read per layer; "
            "flax_posenc does not guess which one it uses."
        )
    if not rope_keys:
        return None
    indices = [i for i, t in enumerate(layer_types or ()) if t == layer_type]
    chosen = {by_index.get(i, {}).get("head_dim") for i in indices}
    if len(chosen) > 1:
        raise ValueError(
            f"{cfg.where('per_layer_config')}: the {layer_type!r} layers {indices} have "
            f"different head_dim overrides {sorted(map(str, chosen))}; transformers' "
            "rotary module refuses that too."
        )
    return chosen.pop() if chosen else None


def _head_dim(
    cfg: _Config, layer_type: str | None, layer_types: tuple[str, ...] | None
) -> int:
    override = _layer_head_dim(cfg, layer_types, layer_type)
    if override is not None:
        return check_length(cfg.where("per_layer_config head_dim"), override)
    if cfg.model.global_head_dim is not None and layer_type == "full_attention":
        value = cfg.config.get("global_head_dim", cfg.model.global_head_dim)
        return check_length(cfg.where("global_head_dim"), value)
    rule = cfg.model.head_dim
    if rule == "qk_rope_head_dim":
        return check_length(cfg.where("qk_rope_head_dim"), cfg.get("qk_rope_head_dim"))
    if rule == "head_dim" and cfg.get("head_dim") is not None:
        return check_length(cfg.where("head_dim"), cfg.get("head_dim"))
    hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    if hidden is None or heads is None:
        raise ValueError(
            f"The {cfg.model_type!r} config names no head_dim, and not both "
            "hidden_size and num_attention_heads."
        )
    width = check_length(cfg.where("hidden_size"), hidden)
    if rule == "twice_ratio":  # attention over [hidden, embeddings] (Zamba 2)
        width *= 2
    return width // check_length(cfg.where("num_attention_heads"), heads)


def _check_partial_is_read(
    cfg: _Config, block: Mapping[str, Any], rope_type: str, where: str
) -> None:
    """Refuses a ``partial_rotary_factor`` the model does not read (see
    ``_models.PARTIAL_ROTARY``); 1 and the class's own factor change nothing."""
    if cfg.model_type in PARTIAL_ROTARY:
        return
    default = cfg.defaults.get("rope_parameters") or {}
    blocks = [default] if "rope_type" in default else [*default.values()]
    factors = {b.get("partial_rotary_factor") for b in blocks if isinstance(b, Mapping)}
    own = {float(f) for f in factors if f is not None}
    # Where every block of the class carries one factor, a top-level copy of it (as
    # to_dict writes one) changes nothing.
    same = next(iter(own)) if len(factors) == 1 and own else None
    given = [
        (cfg.where("partial_rotary_factor"), cfg.explicit("partial_rotary_factor"))
    ]
    if not own:  # a class with a factor of its own reads the block's
        given.append(
            (f"{where}['partial_rotary_factor']", block.get("partial_rotary_factor"))
        )
    for name, value in given:
        if value is None or value == 1.0 or value == same:
            continue
        effect = (
            f"it keeps its own factor {sorted(own)}"
            if own
            else "with the default RoPE it rotates the whole head, with a scaling "
            "family its first forward fails on the shapes"
        )
        raise ValueError(
            f"{name} is {value}, but transformers' {cfg.model_type!r} does not read "
            f"it (rope_type {rope_type!r}): {effect}. Remove the key."
        )


def _partial(cfg: _Config, block: Mapping[str, Any], where: str) -> float:
    value = block.get("partial_rotary_factor")
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
        value = (cfg.defaults.get("rope_parameters") or {}).get("partial_rotary_factor")
    if value is None:
        return 1.0
    value = check_float(f"{where}['partial_rotary_factor']", value)
    if not 0.0 < value <= 1.0:
        raise ValueError(
            f"{where}['partial_rotary_factor'] must be in (0, 1], got {value}."
        )
    return value


def _original(cfg: _Config, block: Mapping[str, Any], where: str) -> int:
    """transformers' pre-training length: a config class with its own
    ``original_max_position_embeddings`` attribute (Phi-3) overrides the block's;
    otherwise the block's, else ``max_position_embeddings``."""
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
    if block.get("original_max_position_embeddings") is not None:
        return check_length(
            f"{where}['original_max_position_embeddings']",
            block["original_max_position_embeddings"],
        )
    return _max_positions(cfg)


def _max_positions(cfg: _Config) -> int:
    value = cfg.get("max_position_embeddings")
    if value is None:
        raise ValueError(
            f"The {cfg.model_type!r} config names no max_position_embeddings."
        )
    return check_length(cfg.where("max_position_embeddings"), value)


def _scaling(
    cfg: _Config, block: Mapping[str, Any], rope_type: str, where: str
) -> RopeScaling | None:
    def number(key: str) -> float:
        return check_float(f"{where}[{key!r}]", block[key])

    def optional(key: str) -> float | None:
        return None if block.get(key) is None else number(key)

    _warn_as_transformers(cfg, block, rope_type, where)
    if rope_type == "default":
        return None
    if rope_type == "linear":
        return LinearScaling(factor=number("factor"))
    if rope_type == "dynamic":
        if cfg.model.alpha and block.get("alpha"):
            return NTKScaling(factor=number("alpha"))
        return DynamicNTKScaling(
            factor=number("factor"),
            original_max_position_embeddings=_max_positions(cfg),
        )
    if rope_type == "llama3":
        return Llama3Scaling(
            factor=number("factor"),
            low_freq_factor=number("low_freq_factor"),
            high_freq_factor=number("high_freq_factor"),
            original_max_position_embeddings=_original(cfg, block, where),
        )
    if rope_type == "proportional":
        return ProportionalScaling(
            partial_rotary_factor=_partial(cfg, block, where),
            factor=optional("factor") or 1.0,
        )
    original = _original(cfg, block, where)
    factor = optional("factor")
    if factor is None:
        factor = _max_positions(cfg) / original
    if rope_type == "yarn":
        truncate = block.get("truncate", True)
        if truncate is None:  # transformers tests it as falsy: no truncation
            truncate = False
        return YarnScaling(
            factor=factor,
            original_max_position_embeddings=original,
            beta_fast=optional("beta_fast") or 32.0,  # transformers reads 0 as unset
            beta_slow=optional("beta_slow") or 1.0,
            mscale=optional("mscale"),
            mscale_all_dim=optional("mscale_all_dim"),
            attention_factor=optional("attention_factor"),
            truncate=check_bool(f"{where}['truncate']", truncate),
        )
    short = _numbers(f"{where}['short_factor']", block["short_factor"])
    long = _numbers(f"{where}['long_factor']", block["long_factor"])
    if cfg.model.mscale_regimes:
        return LongRopeScaling(
            short_factor=short,
            long_factor=short,  # Phi-3.5-MoE's rotary module never switches factors
            original_max_position_embeddings=original,
            factor=factor,
            attention_factor=optional("attention_factor"),
            short_mscale=number("short_mscale"),
            long_mscale=number("long_mscale"),
        )
    return LongRopeScaling(
        short_factor=short,
        long_factor=long,
        original_max_position_embeddings=original,
        factor=factor,
        attention_factor=optional("attention_factor"),
    )


def _warn(message: str) -> None:
    warnings.warn(
        f"transformers warns and computes on: {message}", UserWarning, stacklevel=4
    )


def _warn_as_transformers(
    cfg: _Config, block: Mapping[str, Any], rope_type: str, where: str
) -> None:
    """The warnings transformers' ``_validate_*_rope_parameters`` log for values it
    still computes with (same content; the numbers follow transformers too)."""
    factor = block.get("factor")
    if rope_type in ("linear", "dynamic", "yarn", "llama3") or factor is not None:
        if factor is None or (isinstance(factor, (int, float)) and factor < 1.0):
            _warn(f"{where}'s factor field must be a float or int >= 1, got {factor}")
    original = block.get("original_max_position_embeddings")
    if original is None and rope_type in _NEEDS_ORIGINAL:
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


def _layout(cfg: _Config) -> str:
    if cfg.model.interleave_key:
        value = cfg.get("rope_interleave", False)
        if value is None:  # a null the class keeps: its attention tests it as falsy
            return "half"
        return (
            "interleaved" if check_bool(cfg.where("rope_interleave"), value) else "half"
        )
    if cfg.explicit("rope_interleave") is not None:
        raise ValueError(
            f"{cfg.where('rope_interleave')}: transformers' {cfg.model_type!r} "
            f"attention ignores rope_interleave (it always rotates "
            f"{cfg.model.layout!r} pairs); remove the key."
        )
    return cfg.model.layout


def _layer_rope(
    cfg: _Config,
    block: Mapping[str, Any] | None,
    layer_type: str | None,
    layer_types: tuple[str, ...] | None,
) -> LayerRope:
    where = "rope_parameters" + ("" if layer_type is None else f"[{layer_type!r}]")
    if block is None:
        return LayerRope(rope=None)
    block = _legacy_block(cfg, block, where)
    rope_type = _rope_type(block, where)
    _check_keys(cfg, block, rope_type, where)
    _check_partial_is_read(cfg, block, rope_type, where)
    head_dim = _head_dim(cfg, layer_type, layer_types)
    theta = check_float(f"{where}['rope_theta']", block.get("rope_theta", 10000.0))
    if cfg.model.rotary_dim_key is not None:
        rotary = cfg.get(cfg.model.rotary_dim_key)
        rotary = (
            head_dim
            if rotary is None
            else check_length(cfg.where("rotary_dim"), rotary)
        )
    elif rope_type == "proportional":
        rotary = head_dim  # unrotated pairs get inv_freq 0 (Gemma 4)
    elif cfg.model.head_dim == "qk_rope_head_dim":
        rotary = head_dim  # MLA rotates all of its rope slice (Mistral 4's partial
        # factor applies to the full head: int(128 * 0.5) == qk_rope_head_dim)
    else:
        rotary = int(head_dim * _partial(cfg, block, where))
    if cfg.model.rope_slice_last:  # the rotated slice is the last `rotary` features
        head_dim = rotary
    scaling = _scaling(cfg, block, rope_type, where)
    rope = RopeConfig(
        head_dim=head_dim,
        theta=theta,
        rotary_dim=None if rotary == head_dim else rotary - rotary % 2,
        layout=_layout(cfg),  # type: ignore[arg-type]
        scaling=scaling,
    )
    mrope_section = None
    mrope_layout: MropeLayout = "contiguous"
    if cfg.model.mrope == "alternating":  # rows alternate pair by pair (NeoMME)
        half = rope.rotated_features // 2
        mrope_section, mrope_layout = (half // 2, half - half // 2), "interleaved"
    elif cfg.model.mrope is not None:
        sections = block.get("mrope_section", cfg.model.mrope_section)
        if sections is None:
            raise ValueError(
                f"{where} needs mrope_section: transformers' {cfg.model_type!r} "
                "rotary module has no default for it."
            )
        mrope_section = _lengths(f"{where}['mrope_section']", sections)
        mrope_layout = cfg.model.mrope  # type: ignore[assignment]
        given = block.get("mrope_interleaved")
        if given is not None and check_bool(f"{where}['mrope_interleaved']", given) != (
            mrope_layout == "interleaved"
        ):
            raise ValueError(
                f"{where}['mrope_interleaved'] is {given}, but transformers' "
                f"{cfg.model_type!r} rotary module ignores the key and always uses "
                f"{cfg.model.mrope} sections; remove it."
            )
    elif block.get("mrope_section") is not None:
        raise ValueError(
            f"{where} has mrope_section, but transformers' {cfg.model_type!r} "
            "attention applies 1-D RoPE; remove it."
        )
    query_scaling = None
    if cfg.model.query_scaling == "llama_4_scaling_beta" and block.get(
        "llama_4_scaling_beta"
    ):
        query_scaling = QueryScaling(
            scale=check_float(
                f"{where}['llama_4_scaling_beta']", block["llama_4_scaling_beta"]
            ),
            floor_scale=float(_original(cfg, block, where)),
        )
    softmax = 1.0
    if cfg.model.softmax_mscale and isinstance(scaling, YarnScaling):
        softmax = scaling.softmax_scale_factor()
    return LayerRope(
        rope=rope,
        mrope_section=mrope_section,
        mrope_layout=mrope_layout,
        query_scaling=query_scaling,
        softmax_scale_factor=softmax,
        rope_features="last"
        if cfg.model.head_dim == "qk_rope_head_dim" or cfg.model.rope_slice_last
        else "first",
        position_sign=-1 if cfg.model.position_sign == -1 else 1,
    )


# --------------------------------------------------------------------------------------
# Layers.
# --------------------------------------------------------------------------------------


def _layer_types(cfg: _Config, count: int) -> tuple[str, ...] | None:
    values = cfg.explicit("layer_types")
    if values is None:
        if cfg.defaults.get("layer_types_required"):
            raise ValueError(
                f"The {cfg.model_type!r} config needs `layer_types`: its class "
                "derives them from the layer count in a way flax_posenc does not "
                "repeat; give the list (config.to_dict() has it)."
            )
        unit = cfg.defaults.get("layer_types_pattern")
        if unit is None:
            return None
        if cfg.model.paired_mlp:
            unit = unit[::2]
        values = [unit[i % len(unit)] for i in range(count)]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"{cfg.where('layer_types')} must be a list of strings.")
    if len(values) != count:
        raise ValueError(
            f"{cfg.where('layer_types')} has {len(values)} entries for "
            f"num_hidden_layers = {count}."
        )
    return tuple(values)


def _layer_thetas(cfg: _Config, count: int) -> tuple[float | None, ...]:
    """``layer_rope_theta`` (Granite SWA, Muse): each layer's base, 0 for NoPE; None
    where the layer uses the block's ``rope_theta``."""
    if cfg.model.nope not in ("layer_rope_theta", "layer_rope_switch"):
        return (None,) * count
    values = cfg.config.get("layer_rope_theta")
    if values is None and cfg.model.nope == "layer_rope_theta":
        return (None,) * count  # the class repeats rope_theta
    if values is None:
        raise ValueError(
            f"The {cfg.model_type!r} config needs `layer_rope_theta`: its class "
            "derives it from the layer count; give the list (config.to_dict() has it)."
        )
    thetas = _numbers(cfg.where("layer_rope_theta"), values)
    if len(thetas) != count:
        raise ValueError(
            f"{cfg.where('layer_rope_theta')} has {len(thetas)} entries for "
            f"num_hidden_layers = {count}."
        )
    return thetas


def _uses_rope(cfg: _Config, count: int, layer_types: tuple[str, ...] | None):
    if cfg.model.nope == "no_rope_layers":
        values = cfg.config.get("no_rope_layers")
        if values is None and cfg.defaults.get("no_rope_layers_required"):
            raise ValueError(
                f"The {cfg.model_type!r} config needs `no_rope_layers` (its class "
                "derives them from the layer count); give the list."
            )
        if values is None:
            unit = cfg.defaults.get("no_rope_layers_pattern") or [1]
            values = [unit[i % len(unit)] for i in range(count)]
        flags = tuple(
            check_bool(
                f"{cfg.where('no_rope_layers')}[{i}]", bool(v) if v in (0, 1) else v
            )
            for i, v in enumerate(values)
        )
        if len(flags) != count:
            raise ValueError(
                f"{cfg.where('no_rope_layers')} has {len(flags)} entries for "
                f"num_hidden_layers = {count}."
            )
        return flags
    if cfg.model.nope == "use_mem_rope":  # Zamba 2 opts in
        flag = check_bool(cfg.where("use_mem_rope"), cfg.get("use_mem_rope", False))
        return (flag,) * count
    if cfg.model.nope == "position_embedding_type":  # Granite hybrids opt in
        value = cfg.get("position_embedding_type")
        if value not in (None, "rope"):
            raise ValueError(
                f"{cfg.where('position_embedding_type')} must be 'rope' or null, got "
                f"{value!r}."
            )
        return (value == "rope",) * count
    if cfg.model.nope in ("sliding_attention", "sliding_only", "sliding_or_no_window"):
        if layer_types is None:
            raise ValueError(f"The {cfg.model_type!r} config needs layer_types.")
        window = cfg.get("sliding_window")
        sliding = tuple(t == "sliding_attention" for t in layer_types)
        if cfg.model.nope == "sliding_attention":  # AFMoE: RoPE on local layers
            return sliding
        if cfg.model.nope == "sliding_only":  # Cohere 2: RoPE where a window applies
            return tuple(s and window is not None for s in sliding)
        return tuple(s or window is None for s in sliding)  # EXAONE 4
    return (True,) * count


def read_hf_rope(config: Mapping[str, Any]) -> HFRope:
    """Reads a transformers ``config.json`` into per-layer position handling.

    Covers every model type of transformers' table in :mod:`flax_posenc.hf`: layout
    (``rotate_half`` or interleaved pairs, as the model's attention rotates them),
    partial rotary, head-size rules, per-layer-type parameters (Gemma local/global),
    NoPE layers (Llama 4, SmolLM3, Cohere 2, EXAONE 4), M-RoPE sections (Qwen2-VL,
    Qwen3-VL), every scaling family, and attention-side factors (Llama 4's
    temperature tuning, Ministral 3's ``llama_4_scaling_beta``, DeepSeek's YaRN
    softmax scale). Missing keys take the config class's defaults, as transformers
    does; nothing else is guessed.

    Args:
      config: a ``config.json`` as a dict, v4 (``rope_theta`` / ``rope_scaling``)
        or v5 (``rope_parameters``) form; for multimodal models the whole config
        (its ``text_config`` is read) or the text config itself.

    Returns:
      An :class:`HFRope` with one :class:`LayerRope` per decoder layer.

    Raises:
      ValueError: an unknown or out-of-scope model type, an unknown ``rope_type``,
        missing or unknown keys, a key transformers ignores for this model, or
        inconsistent per-layer lists.
      TypeError: a value of the wrong JSON type (a string for a bool or a number,
        ``4096.7`` for a length).

    Examples:
      >>> spec = fp.read_hf_rope({"model_type": "llama4_text", "hidden_size": 512,
      ...     "num_attention_heads": 4, "head_dim": 128, "num_hidden_layers": 4})
      >>> [layer.rope is None for layer in spec.layers]  # every 4th layer is NoPE
      [False, False, False, True]
      >>> spec.layer(0).rope.layout, spec.layer(3).query_scaling.floor_scale
      ('interleaved', 8192.0)
    """
    cfg = _Config(_text_config(config))
    count = cfg.explicit("num_hidden_layers")
    for alias in ("num_layers", "n_layer"):  # classes that name it otherwise
        if count is None:
            count = cfg.config.get(alias)
    types = cfg.explicit("layer_types")
    if count is None and isinstance(types, list):  # Nemotron-H: derived from them
        count = len(types)
    if count is None:
        count = cfg.defaults.get("num_hidden_layers")
    count = check_length(cfg.where("num_hidden_layers"), count)
    if cfg.model.paired_mlp and isinstance(types, list) and "mlp" in types:
        if types[1::2] != ["mlp"] * (len(types) // 2) or len(types) % 2:
            raise ValueError(
                f"{cfg.where('layer_types')} must alternate attention types and "
                f"'mlp' (as {cfg.model_type!r}'s to_dict writes them), got {types}."
            )
        # As the class does on load: one decoder layer per (attention, mlp) pair.
        cfg.config = {**cfg.config, "layer_types": types[::2]}
        count //= 2
    if cfg.model.nope == "all":  # the model never calls its rotary function
        return HFRope(cfg.model_type, (LayerRope(rope=None),) * count, None)
    for flag in cfg.model.unsupported_flags:
        if check_bool(cfg.where(flag), cfg.get(flag, False)):
            raise ValueError(
                f"{cfg.where(flag)} is true: transformers' {cfg.model_type!r} then "
                "does more than a LayerRope describes; read its modeling code."
            )
    layer_types = _layer_types(cfg, count)
    blocks = _blocks(cfg)
    per_type = {
        key: _layer_rope(cfg, block, key, layer_types) for key, block in blocks.items()
    }
    uses_rope = _uses_rope(cfg, count, layer_types)
    thetas = _layer_thetas(cfg, count)
    if cfg.model.nope == "layer_rope_switch":  # its rotary module uses rope_theta
        theta = per_type[None].rope.theta  # type: ignore[union-attr]
        for i, value in enumerate(thetas):
            if value not in (0, theta):
                raise ValueError(
                    f"{cfg.where('layer_rope_theta')}[{i}] is {value}: transformers' "
                    f"{cfg.model_type!r} reads it only as RoPE on/off and rotates with "
                    f"rope_theta = {theta}; give 0 or {theta}."
                )
    temperature = None
    if cfg.model.query_scaling == "llama4" and check_bool(
        cfg.where("attn_temperature_tuning"), cfg.get("attn_temperature_tuning", False)
    ):
        temperature = QueryScaling(
            scale=check_float(cfg.where("attn_scale"), cfg.get("attn_scale")),
            floor_scale=check_float(cfg.where("floor_scale"), cfg.get("floor_scale")),
            offset=1,
        )
    layers = []
    for index in range(count):
        if None in per_type:
            layer = per_type[None]
        else:
            kind = layer_types[index] if layer_types else None
            kind = dict(cfg.model.layer_blocks).get(kind, kind)  # type: ignore[arg-type]
            if kind is not None and kind not in per_type and "attention" not in kind:
                layers.append(LayerRope(rope=None))  # an MLP / conv layer: no attention
                continue
            if kind is None:
                raise ValueError(
                    f"The {cfg.model_type!r} config's rope_parameters are nested by "
                    f"layer type {sorted(k for k in per_type if k)}, but it names no "
                    "layer_types, so which block layer "
                    f"{index} uses is unknown; give layer_types (one per layer), or "
                    "a flat rope_parameters block."
                )
            if kind not in per_type:
                raise ValueError(
                    f"Layer {index} is of type {kind!r}, which the config's "
                    f"rope_parameters {sorted(k for k in per_type if k)} do not cover."
                )
            layer = per_type[kind]
        if not uses_rope[index] or thetas[index] == 0:
            layer = LayerRope(rope=None, query_scaling=temperature)
        elif thetas[index] is not None and layer.rope is not None:  # its own base
            rope = dataclasses.replace(layer.rope, theta=thetas[index])
            layer = dataclasses.replace(layer, rope=rope)
        layers.append(layer)
    return HFRope(cfg.model_type, tuple(layers), layer_types)


def rope_config_from_hf(
    config: Mapping[str, Any], *, layer_type: str | None = None
) -> RopeConfig:
    """The :class:`~flax_posenc.RopeConfig` of a transformers model's RoPE layers.

    For models whose rotary layers all share one configuration. Anything a
    ``RopeConfig`` cannot carry raises instead of being dropped: per-layer-type
    configurations need ``layer_type``; NoPE layers, M-RoPE sections, query scaling
    and softmax factors need :func:`read_hf_rope`.

    Args:
      config: a ``config.json`` as a dict (see :func:`read_hf_rope`).
      layer_type: one of the config's layer types (Gemma 3/4:
        ``"full_attention"`` / ``"sliding_attention"``): the RoPE of those layers.
        None for configs whose layers share one RoPE; needed where they differ.

    Returns:
      The matching ``RopeConfig``.

    Raises:
      ValueError: as :func:`read_hf_rope`; a missing or unknown
        ``layer_type``; or a layer that needs more than a ``RopeConfig``.
      TypeError: as :func:`read_hf_rope`.

    Examples:
      >>> config = fp.rope_config_from_hf({"model_type": "llama", "hidden_size": 4096,
      ...     "num_attention_heads": 32, "max_position_embeddings": 131072,
      ...     "rope_theta": 500000.0,
      ...     "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
      ...     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      ...     "original_max_position_embeddings": 8192}})
      >>> config.head_dim, config.layout
      (128, 'half')
      >>> config.scaling
      Llama3Scaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)
      >>> fp.rope_config_from_hf({"model_type": "cohere", "hidden_size": 512,
      ...     "num_attention_heads": 4}).layout
      'interleaved'
    """
    spec = read_hf_rope(config)
    kinds = sorted(set(spec.layer_types or ()))
    distinct = set(spec.layers)
    if layer_type is None:
        if len(distinct) > 1:
            raise ValueError(
                f"This {spec.model_type!r} config has layers of types {kinds} with "
                "different RoPE; pass one as `layer_type`, or use fp.read_hf_rope."
            )
        return spec.layers[0].only_rope(f"This {spec.model_type!r} config")
    if not kinds:
        raise ValueError(
            f"`layer_type`={layer_type!r} given, but this {spec.model_type!r} config "
            "has no layer types; pass layer_type=None."
        )
    if not isinstance(layer_type, str) or layer_type not in kinds:
        raise ValueError(f"`layer_type` must be one of {kinds}, got {layer_type!r}.")
    chosen = {
        layer
        for kind, layer in zip(spec.layer_types or (), spec.layers, strict=True)
        if kind == layer_type
    }
    if len(chosen) > 1:
        raise ValueError(
            f"Layers of type {layer_type!r} differ (NoPE layers among them); use "
            "fp.read_hf_rope(config).layer(i)."
        )
    return chosen.pop().only_rope(f"Layer type {layer_type!r}")
