"""The rules by which a model type differs from the common reading, as registries
keyed by the names in ``hf/_models.py``: how its config class rewrites raw RoPE keys,
where its head size comes from, which of its layers skip RoPE, and which pairs it
rotates.

Adding a model type with a known quirk is one ``Model`` entry naming a rule; a new
quirk is one rule here plus its name in the ``Literal`` of ``_models.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flax_posenc._validation import check_bool, check_float, check_length
from flax_posenc.hf._config import Config, numbers
from flax_posenc.hf._models import ConfigRule, HeadDimRule, NopeRule
from flax_posenc.rope import RopeLayout

# --------------------------------------------------------------------------------------
# Config rewrites.
# --------------------------------------------------------------------------------------

_PER_LAYER_KEYS = ("rope_theta", "partial_rotary_factors", "rope_scaling")


def _mtp_layers(cfg: Config) -> int:
    """``num_nextn_predict_layers`` under that spelling only: the class pops it before
    its aliases apply, and adds it to the layer count (a null fails there)."""
    value = cfg.config.get("num_nextn_predict_layers", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(
            f"{cfg.where('num_nextn_predict_layers')} must be an integer >= 0 (the MTP "
            f"layers that pad the per-layer lists), got {value!r}: transformers' "
            f"{cfg.defaults['config_class']} adds it to num_hidden_layers and fails."
        )
    return value


def _entry(cfg: Config, key: str, values: Any, index: int, kind: str) -> float:
    """``values[index]`` of the per-layer list ``key``, as the class indexes it."""
    if not isinstance(values, list):  # rope_theta: one value for every layer
        return check_float(cfg.where(key), values)
    if index >= len(values):
        raise ValueError(
            f"{cfg.where(key)} has {len(values)} entries, but transformers' "
            f"{cfg.defaults['config_class']} reads entry {index} (the first {kind!r} "
            "layer) and fails (IndexError). Give one entry per layer "
            "(num_hidden_layers, then num_nextn_predict_layers MTP entries)."
        )
    return check_float(f"{cfg.where(key)}[{index}]", values[index])


def _nested_rope_parameters(cfg: Config, kinds: list[str]) -> dict | None:
    """The config's rope_parameters where the class keeps them (a block for every
    layer type), else None; refuses what the class would drop silently."""
    given = cfg.config.get("rope_parameters")
    if given is not None and not isinstance(given, Mapping):
        raise TypeError(
            f"{cfg.where('rope_parameters')} must be a dict or null, got {given!r}."
        )
    if given and all(isinstance(given.get(kind), Mapping) for kind in kinds):
        ignored = [
            k for k in _PER_LAYER_KEYS if cfg.config.get(k) not in (None, {}, [])
        ]
        if ignored:
            raise ValueError(
                f"The {cfg.model_type!r} config has rope_parameters nested by every "
                f"layer type {kinds} and {ignored}: transformers' "
                f"{cfg.defaults['config_class']} keeps the nested blocks and ignores "
                f"{ignored}. Remove {ignored}, or the nested blocks."
            )
        return {kind: dict(given[kind]) for kind in kinds}
    if given:
        raise ValueError(
            f"{cfg.where('rope_parameters')} has no block for every layer type "
            f"{kinds}: transformers' {cfg.defaults['config_class']} then ignores it and "
            "builds the blocks from rope_theta, partial_rotary_factors and "
            "rope_scaling. Give a block per layer type, or those keys."
        )
    return None


def _per_layer_rope_lists(cfg: Config, count: int) -> None:
    """Step 3.5 / 3.7 (``Step3p7TextConfig.__post_init__``, transformers 5.25): lists
    padded with ``num_nextn_predict_layers`` MTP entries lose them; the blocks, one
    per layer type, take ``rope_theta`` (a list, or one value for all layers) and
    ``partial_rotary_factors`` (a list) of the type's first layer, and
    ``rope_scaling`` updates the ``full_attention`` block. A rope_parameters nested
    by every layer type is kept as it is."""
    mtp = _mtp_layers(cfg)
    types = cfg.config.get("layer_types")
    if mtp and isinstance(types, list) and len(types) == count + mtp:
        cfg.config = {**cfg.config, "layer_types": types[:count]}
    types = layer_types(cfg, count) or ("full_attention",) * count
    kinds = list(dict.fromkeys(types))
    blocks = _nested_rope_parameters(cfg, kinds)
    if blocks is None:
        blocks = _blocks_from_lists(cfg, types, kinds)
    cfg.config = {
        **{k: v for k, v in cfg.config.items() if k not in _PER_LAYER_KEYS},
        "rope_parameters": blocks,
    }


def _blocks_from_lists(
    cfg: Config, types: tuple[str, ...], kinds: list[str]
) -> dict[str, dict]:
    """One block per layer type from the per-layer lists, as the class builds them."""
    default = cfg.defaults["rope_parameters"]["full_attention"]["rope_theta"]
    theta = cfg.config.get("rope_theta", default)
    factors = cfg.config.get("partial_rotary_factors")
    if factors and not isinstance(factors, list):
        raise TypeError(
            f"{cfg.where('partial_rotary_factors')} must be a list (one factor per "
            f"layer), got {factors!r}: transformers' {cfg.defaults['config_class']} "
            "indexes it and fails."
        )
    blocks: dict[str, dict] = {}
    for kind in kinds:
        index = types.index(kind)
        blocks[kind] = {
            "rope_type": "default",
            "rope_theta": _entry(cfg, "rope_theta", theta, index, kind),
        }
        if factors:
            blocks[kind]["partial_rotary_factor"] = _entry(
                cfg, "partial_rotary_factors", factors, index, kind
            )
    scaling = cfg.config.get("rope_scaling")
    if scaling:
        _check_full_scaling(cfg, scaling, kinds)
        blocks["full_attention"].update(scaling)
    return blocks


def _check_full_scaling(cfg: Config, scaling: Any, kinds: list[str]) -> None:
    """A rope_scaling the class merges into the full_attention block, and uses."""
    where = cfg.where("rope_scaling")
    if not isinstance(scaling, Mapping):
        raise TypeError(f"{where} must be a dict or null, got {scaling!r}.")
    if "full_attention" not in kinds:
        raise ValueError(
            f"{where} is set, but transformers' {cfg.defaults['config_class']} "
            "applies it to the full_attention block only, and this config's layers "
            f"are {kinds}: it is ignored. Remove it."
        )
    if "type" in scaling and "rope_type" not in scaling:
        raise ValueError(
            f"{where} names its family with the legacy key 'type' "
            f"({scaling['type']!r}): transformers' {cfg.defaults['config_class']} "
            "merges it into a block whose rope_type 'default' wins, and computes "
            "plain RoPE (warning of unrecognized keys). Rename 'type' to 'rope_type'."
        )


CONFIG_RULES: dict[ConfigRule, Callable[[Config, int], None]] = {
    "per_layer_rope_lists": _per_layer_rope_lists,
}
"""Each config rule: rewrites ``cfg.config`` (of ``count`` layers) as the model's
config class rewrites its raw RoPE keys, refusing what it would fail on or drop."""


# --------------------------------------------------------------------------------------
# Head size.
# --------------------------------------------------------------------------------------


def _ratio(cfg: Config, times: int = 1) -> int:
    """``times * hidden_size // num_attention_heads``."""
    hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    if hidden is None or heads is None:
        raise ValueError(
            f"The {cfg.model_type!r} config names no head_dim, and not both "
            "hidden_size and num_attention_heads."
        )
    width = check_length(cfg.where("hidden_size"), hidden) * times
    return width // check_length(cfg.where("num_attention_heads"), heads)


def check_heads_divide_hidden(cfg: Config) -> None:
    """Refuses what the config class refuses (``_defaults``' ``heads_divide_hidden``:
    LlamaConfig's ``validate_architecture``): a ``hidden_size`` that
    ``num_attention_heads`` does not divide, ``head_dim`` given or not."""
    hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    if not cfg.defaults.get("heads_divide_hidden") or hidden is None or heads is None:
        return
    hidden = check_length(cfg.where("hidden_size"), hidden)
    if hidden % check_length(cfg.where("num_attention_heads"), heads):
        raise ValueError(
            f"{cfg.where('hidden_size')} is {hidden}, which num_attention_heads "
            f"({heads}) does not divide: transformers' {cfg.defaults['config_class']} "
            "refuses the config (it needs hidden_size % num_attention_heads == 0, "
            "head_dim given or not). Give the checkpoint's own hidden_size and "
            "num_attention_heads."
        )


def _head_dim_key(cfg: Config) -> int:
    if cfg.get("head_dim") is not None:
        return check_length(cfg.where("head_dim"), cfg.get("head_dim"))
    return _ratio(cfg)


HEAD_DIM_RULES: dict[HeadDimRule, Callable[[Config], int]] = {
    "head_dim": _head_dim_key,
    "ratio": _ratio,
    # attention over [hidden, embeddings] (Zamba 2)
    "twice_ratio": lambda cfg: _ratio(cfg, times=2),
    "qk_rope_head_dim": lambda cfg: check_length(
        cfg.where("qk_rope_head_dim"), cfg.get("qk_rope_head_dim")
    ),
}
"""Each head-size rule: the rotated head size of a layer with no override."""


def _layer_head_dim(
    cfg: Config, layer_types: tuple[str, ...] | None, layer_type: str | None
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


def head_dim(
    cfg: Config, layer_type: str | None, layer_types: tuple[str, ...] | None
) -> int:
    """The head size RoPE covers in layers of ``layer_type``: a per-layer override,
    Gemma 4's global head size on full-attention layers, else the model's rule."""
    override = _layer_head_dim(cfg, layer_types, layer_type)
    if override is not None:
        return check_length(cfg.where("per_layer_config head_dim"), override)
    if cfg.model.global_head_dim is not None and layer_type == "full_attention":
        value = cfg.config.get("global_head_dim", cfg.model.global_head_dim)
        return check_length(cfg.where("global_head_dim"), value)
    return HEAD_DIM_RULES[cfg.model.head_dim](cfg)


# --------------------------------------------------------------------------------------
# Layers.
# --------------------------------------------------------------------------------------


def layer_types(cfg: Config, count: int) -> tuple[str, ...] | None:
    """The per-layer type names: the config's, the class's pattern, or None."""
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


def layer_thetas(cfg: Config, count: int) -> tuple[float | None, ...]:
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
    thetas = numbers(cfg.where("layer_rope_theta"), values)
    if len(thetas) != count:
        raise ValueError(
            f"{cfg.where('layer_rope_theta')} has {len(thetas)} entries for "
            f"num_hidden_layers = {count}."
        )
    return thetas


def _flags(cfg: Config, key: str, values: list, count: int) -> tuple[bool, ...]:
    flags = tuple(
        check_bool(f"{cfg.where(key)}[{i}]", bool(v) if v in (0, 1) else v)
        for i, v in enumerate(values)
    )
    if len(flags) != count:
        raise ValueError(
            f"{cfg.where(key)} has {len(flags)} entries for num_hidden_layers = "
            f"{count}."
        )
    return flags


def _no_rope_layers(cfg: Config, count: int, types: tuple[str, ...] | None):
    """SmolLM3, Llama 4: a 0/1 list, 0 = NoPE."""
    values = cfg.config.get("no_rope_layers")
    if values is None and cfg.defaults.get("no_rope_layers_required"):
        raise ValueError(
            f"The {cfg.model_type!r} config needs `no_rope_layers` (its class "
            "derives them from the layer count); give the list."
        )
    if values is None:
        unit = cfg.defaults.get("no_rope_layers_pattern") or [1]
        values = [unit[i % len(unit)] for i in range(count)]
    return _flags(cfg, "no_rope_layers", values, count)


def _use_mem_rope(cfg: Config, count: int, types: tuple[str, ...] | None):
    """Zamba 2 opts in."""
    flag = check_bool(cfg.where("use_mem_rope"), cfg.get("use_mem_rope", False))
    return (flag,) * count


def _position_embedding_type(cfg: Config, count: int, types: tuple[str, ...] | None):
    """Granite hybrids opt in."""
    value = cfg.get("position_embedding_type")
    if value not in (None, "rope"):
        raise ValueError(
            f"{cfg.where('position_embedding_type')} must be 'rope' or null, got "
            f"{value!r}."
        )
    return (value == "rope",) * count


def _sliding(cfg: Config, types: tuple[str, ...] | None) -> tuple[bool, ...]:
    if types is None:
        raise ValueError(f"The {cfg.model_type!r} config needs layer_types.")
    return tuple(t == "sliding_attention" for t in types)


def _sliding_only(cfg: Config, count: int, types: tuple[str, ...] | None):
    """Cohere 2: RoPE on sliding-window layers, none without a window."""
    window = cfg.get("sliding_window")
    return tuple(s and window is not None for s in _sliding(cfg, types))


def _sliding_or_no_window(cfg: Config, count: int, types: tuple[str, ...] | None):
    """EXAONE 4: NoPE on full-attention layers when a window is set."""
    window = cfg.get("sliding_window")
    return tuple(s or window is None for s in _sliding(cfg, types))


def _every_layer(cfg: Config, count: int, types: tuple[str, ...] | None):
    return (True,) * count


NOPE_RULES: dict[
    NopeRule | None,
    Callable[[Config, int, tuple[str, ...] | None], tuple[bool, ...]],
] = {
    None: _every_layer,
    "no_rope_layers": _no_rope_layers,
    "use_mem_rope": _use_mem_rope,
    "position_embedding_type": _position_embedding_type,
    "sliding_attention": lambda cfg, count, types: _sliding(cfg, types),  # AFMoE
    "sliding_only": _sliding_only,
    "sliding_or_no_window": _sliding_or_no_window,
    # per-layer bases (0 = NoPE) are read by layer_thetas
    "layer_rope_theta": _every_layer,
    "layer_rope_switch": _every_layer,
    # Jamba, Nemotron-H: the rotary function is defined and never called
    "all": lambda cfg, count, types: (False,) * count,
}
"""Each NoPE rule: which of ``count`` layers (of ``types``) apply RoPE."""


# --------------------------------------------------------------------------------------
# Layout.
# --------------------------------------------------------------------------------------


def layout(cfg: Config) -> RopeLayout:
    """The pairs the model's attention rotates (``rope_interleave`` where read)."""
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
