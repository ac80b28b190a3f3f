"""The rules by which a model type differs from the common reading, as registries
keyed by the names in ``hf/_models.py``: how its config class rewrites raw RoPE keys
(:data:`CONFIG_RULES`), where its head size and rotated features come from
(:data:`HEAD_DIM_RULES`), which of its layers skip RoPE (:data:`NOPE_RULES`), its
position-dependent query factor (:data:`QUERY_SCALING_RULES`), its M-RoPE sections
(:data:`MROPE_RULES`), and which pairs it rotates.

Each rule name has one owner, its registry entry: the rest of the reader looks a
model's rule up and calls what it finds, and never compares a rule name itself.
Adding a model type with a known quirk is one ``Model`` entry naming a rule; a new
quirk is one rule here plus its name in the ``Literal`` of ``_models.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal

from flax_posenc._core.validation import check_bool, check_float, check_length
from flax_posenc.hf._config import Config, lengths, numbers
from flax_posenc.hf._models import (
    ConfigRule,
    HeadDimRule,
    MropeRule,
    NopeRule,
    QueryScalingRule,
)
from flax_posenc.rope.config import RopeLayout
from flax_posenc.rope.nd import MropeLayout
from flax_posenc.rope.query_scaling import QueryScaling

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


def _per_layer_rope_lists(cfg: Config, count: int) -> Config:
    """Step 3.5 / 3.7 (``Step3p7TextConfig.__post_init__``, transformers 5.25): lists
    padded with ``num_nextn_predict_layers`` MTP entries lose them; the blocks, one
    per layer type, take ``rope_theta`` (a list, or one value for all layers) and
    ``partial_rotary_factors`` (a list) of the type's first layer, and
    ``rope_scaling`` updates the ``full_attention`` block. A rope_parameters nested
    by every layer type is kept as it is."""
    mtp = _mtp_layers(cfg)
    types = cfg.config.get("layer_types")
    if mtp and isinstance(types, list) and len(types) == count + mtp:
        cfg = cfg.rewritten({**cfg.config, "layer_types": types[:count]})
    types = layer_types(cfg, count) or ("full_attention",) * count
    kinds = list(dict.fromkeys(types))
    blocks = _nested_rope_parameters(cfg, kinds)
    if blocks is None:
        blocks = _blocks_from_lists(cfg, types, kinds)
    return cfg.rewritten(
        {
            **{k: v for k, v in cfg.config.items() if k not in _PER_LAYER_KEYS},
            "rope_parameters": blocks,
        }
    )


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


def _as_given(cfg: Config, count: int) -> Config:
    return cfg


CONFIG_RULES: dict[ConfigRule | None, Callable[[Config, int], Config]] = {
    None: _as_given,
    "per_layer_rope_lists": _per_layer_rope_lists,
}
"""Each config rule: the config (of ``count`` layers) as the model's config class
rewrites its raw RoPE keys, a new :class:`Config` (the one given is left as it is),
refusing what the class would fail on or drop."""


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


def _partial_of_head(cfg: Config, head_dim: int, partial: float, where: str) -> int:
    """``int(head_dim * partial_rotary_factor)``, as the rotary modules size it."""
    return int(head_dim * partial)


def _whole_rope_slice(cfg: Config, rope_dim: int, partial: float, where: str) -> int:
    """MLA rotates all of its rope slice ``qk_rope_head_dim``. A partial factor sizes
    the frequencies from the full head (Mistral 4: ``int(128 * 0.5) ==
    qk_rope_head_dim``); transformers fails unless ``int(head_dim * factor)`` is the
    rope slice."""
    full = cfg.get("head_dim")
    if partial == 1.0 or full is None:
        return rope_dim
    rotated = int(check_length(cfg.where("head_dim"), full) * partial)
    if rotated != rope_dim:
        raise ValueError(
            f"{where}['partial_rotary_factor'] is {partial}: transformers' "
            f"{cfg.model_type!r} computes int(head_dim {full} x {partial}) = "
            f"{rotated} rotated features for a rope slice (qk_rope_head_dim) of "
            f"{rope_dim}, and fails. Give {rope_dim / full} or leave the factor out."
        )
    return rope_dim


@dataclasses.dataclass(frozen=True)
class HeadDimReading:
    """One head-size rule.

    Attributes:
      size: the rotated head size of a layer with no override.
      rotated: the features a block rotates (before rounding down to even), of
        ``(cfg, head size, the block's partial_rotary_factor, where the block is)``.
      features: where the rotated features sit in the model's q/k heads.
    """

    size: Callable[[Config], int]
    rotated: Callable[[Config, int, float, str], int] = _partial_of_head
    features: Literal["first", "last"] = "first"


HEAD_DIM_RULES: dict[HeadDimRule, HeadDimReading] = {
    "head_dim": HeadDimReading(_head_dim_key),
    "ratio": HeadDimReading(_ratio),
    # attention over [hidden, embeddings] (Zamba 2)
    "twice_ratio": HeadDimReading(lambda cfg: _ratio(cfg, times=2)),
    # MLA: heads are [nope | rope], the rope slice rotated whole
    "qk_rope_head_dim": HeadDimReading(
        lambda cfg: check_length(
            cfg.where("qk_rope_head_dim"), cfg.get("qk_rope_head_dim")
        ),
        rotated=_whole_rope_slice,
        features="last",
    ),
}
"""Each head-size rule: the head size, rotated features and their place."""


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
    return HEAD_DIM_RULES[cfg.model.head_dim].size(cfg)


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


BlockThetas = Mapping[str | None, float | None]
"""The ``rope_theta`` of each block (by layer type; None: every layer's block)."""


def _per_layer_thetas(cfg: Config, count: int) -> tuple[float, ...]:
    """``layer_rope_theta``, one base per layer."""
    thetas = numbers(cfg.where("layer_rope_theta"), cfg.config["layer_rope_theta"])
    if len(thetas) != count:
        raise ValueError(
            f"{cfg.where('layer_rope_theta')} has {len(thetas)} entries for "
            f"num_hidden_layers = {count}."
        )
    return thetas


def _layer_rope_theta(
    cfg: Config, count: int, blocks: BlockThetas
) -> tuple[float | None, ...]:
    """Granite SWA: each layer's base, 0 for NoPE (left out: the class repeats
    ``rope_theta``)."""
    if cfg.config.get("layer_rope_theta") is None:
        return (None,) * count
    return _per_layer_thetas(cfg, count)


def _layer_rope_switch(
    cfg: Config, count: int, blocks: BlockThetas
) -> tuple[float | None, ...]:
    """Muse: the same list, read only as RoPE on/off; its rotary module uses the
    block's ``rope_theta``, so another nonzero entry raises."""
    if cfg.config.get("layer_rope_theta") is None:
        raise ValueError(
            f"The {cfg.model_type!r} config needs `layer_rope_theta`: its class "
            "derives it from the layer count; give the list (config.to_dict() has it)."
        )
    thetas = _per_layer_thetas(cfg, count)
    theta = blocks[None]
    for i, value in enumerate(thetas):
        if value not in (0, theta):
            raise ValueError(
                f"{cfg.where('layer_rope_theta')}[{i}] is {value}: transformers' "
                f"{cfg.model_type!r} reads it only as RoPE on/off and rotates with "
                f"rope_theta = {theta}; give 0 or {theta}."
            )
    return thetas


def _block_thetas(
    cfg: Config, count: int, blocks: BlockThetas
) -> tuple[float | None, ...]:
    return (None,) * count


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


@dataclasses.dataclass(frozen=True)
class NopeReading:
    """One NoPE rule.

    Attributes:
      uses_rope: which of ``count`` layers (of ``types``) apply RoPE.
      thetas: each layer's own base (0: NoPE), or None where it rotates with its
        block's ``rope_theta`` (given each block's).
      rotates: False where the model never calls its rotary function, so that no
        RoPE key of its config is read.
    """

    uses_rope: Callable[[Config, int, tuple[str, ...] | None], tuple[bool, ...]] = (
        _every_layer
    )
    thetas: Callable[[Config, int, BlockThetas], tuple[float | None, ...]] = (
        _block_thetas
    )
    rotates: bool = True


NOPE_RULES: dict[NopeRule | None, NopeReading] = {
    None: NopeReading(),
    "no_rope_layers": NopeReading(_no_rope_layers),
    "use_mem_rope": NopeReading(_use_mem_rope),
    "position_embedding_type": NopeReading(_position_embedding_type),
    # AFMoE
    "sliding_attention": NopeReading(lambda cfg, count, types: _sliding(cfg, types)),
    "sliding_only": NopeReading(_sliding_only),
    "sliding_or_no_window": NopeReading(_sliding_or_no_window),
    # per-layer bases, 0 = NoPE
    "layer_rope_theta": NopeReading(thetas=_layer_rope_theta),
    "layer_rope_switch": NopeReading(thetas=_layer_rope_switch),
    # Jamba, Nemotron-H: the rotary function is defined and never called
    "all": NopeReading(lambda cfg, count, types: (False,) * count, rotates=False),
}
"""Each NoPE rule: which layers apply RoPE, with which base, if any."""


# --------------------------------------------------------------------------------------
# Query scaling.
# --------------------------------------------------------------------------------------


def _no_temperature(cfg: Config) -> QueryScaling | None:
    return None


def _no_beta(block: Mapping[str, Any], where: str) -> float | None:
    return None


def _llama4_temperature(cfg: Config) -> QueryScaling | None:
    """Llama 4's ``attn_temperature_tuning`` query factor."""
    if not check_bool(
        cfg.where("attn_temperature_tuning"), cfg.get("attn_temperature_tuning", False)
    ):
        return None
    return QueryScaling(
        scale=check_float(cfg.where("attn_scale"), cfg.get("attn_scale")),
        floor_scale=check_float(cfg.where("floor_scale"), cfg.get("floor_scale")),
        offset=1,
    )


def _llama_4_scaling_beta(block: Mapping[str, Any], where: str) -> float | None:
    """Ministral 3's ``llama_4_scaling_beta`` of the rope block (0 or left out:
    none)."""
    if not block.get("llama_4_scaling_beta"):
        return None
    return check_float(
        f"{where}['llama_4_scaling_beta']", block["llama_4_scaling_beta"]
    )


@dataclasses.dataclass(frozen=True)
class QueryScalingReading:
    """One query-scaling rule.

    Attributes:
      temperature: the query factor of the model's NoPE layers, or None.
      beta: the ``beta`` of a rope block's query factor on every layer of the block
        (its floor the block's original length), of ``(block, where)``, or None.
    """

    temperature: Callable[[Config], QueryScaling | None] = _no_temperature
    beta: Callable[[Mapping[str, Any], str], float | None] = _no_beta


QUERY_SCALING_RULES: dict[QueryScalingRule | None, QueryScalingReading] = {
    None: QueryScalingReading(),
    "llama4": QueryScalingReading(temperature=_llama4_temperature),
    "llama_4_scaling_beta": QueryScalingReading(beta=_llama_4_scaling_beta),
}
"""Each query-scaling rule: where the model's position-dependent query factor comes
from."""


# --------------------------------------------------------------------------------------
# M-RoPE.
# --------------------------------------------------------------------------------------

MropeSections = tuple[tuple[int, ...] | None, MropeLayout]
"""A block's M-RoPE pairs per position row (None: 1-D RoPE) and their layout."""


def _one_d(
    cfg: Config, block: Mapping[str, Any], where: str, rotated: int
) -> MropeSections:
    if block.get("mrope_section") is not None:
        raise ValueError(
            f"{where} has mrope_section, but transformers' {cfg.model_type!r} "
            "attention applies 1-D RoPE; remove it."
        )
    return None, "contiguous"


def _alternating(
    cfg: Config, block: Mapping[str, Any], where: str, rotated: int
) -> MropeSections:
    """NeoMME: pair ``j`` from row ``j % 2``, whatever the sections: interleaved
    sections ``(R/4, R/4)``."""
    half = rotated // 2
    return (half // 2, half - half // 2), "interleaved"


@dataclasses.dataclass(frozen=True)
class _Sections:
    """M-RoPE in ``layout``, the block's ``mrope_section`` else the model's default;
    ``covers_pairs``: the sections must sum to the rotated pairs (transformers fails
    otherwise); ``interleaved``: what a ``mrope_interleaved`` key must say (the rotary
    module ignores the key)."""

    layout: MropeLayout
    covers_pairs: bool = False
    interleaved: bool = False

    def __call__(
        self, cfg: Config, block: Mapping[str, Any], where: str, rotated: int
    ) -> MropeSections:
        sections = block.get("mrope_section", cfg.model.mrope_section)
        if sections is None:
            raise ValueError(
                f"{where} needs mrope_section: transformers' {cfg.model_type!r} "
                "rotary module has no default for it."
            )
        sections = lengths(f"{where}['mrope_section']", sections)
        if self.covers_pairs and sum(sections) != rotated // 2:
            raise ValueError(
                f"{where}['mrope_section'] is {list(sections)} (sum {sum(sections)}), "
                f"but the {rotated} rotated features (head size x "
                f"partial_rotary_factor) make {rotated // 2} pairs: transformers' "
                f"{cfg.model_type!r} rotary module fails on it. Give sections that "
                f"sum to {rotated // 2}."
            )
        given = block.get("mrope_interleaved")
        if (
            given is not None
            and check_bool(f"{where}['mrope_interleaved']", given) != self.interleaved
        ):
            raise ValueError(
                f"{where}['mrope_interleaved'] is {given}, but transformers' "
                f"{cfg.model_type!r} rotary module ignores the key and always uses "
                f"{self.layout} sections; remove it."
            )
        return sections, self.layout


MROPE_RULES: dict[
    MropeRule | None, Callable[[Config, Mapping[str, Any], str, int], MropeSections]
] = {
    None: _one_d,
    "contiguous": _Sections("contiguous", covers_pairs=True),
    "interleaved": _Sections("interleaved", interleaved=True),
    "hw_alternating": _Sections("hw_alternating"),
    "xd": _Sections("xd"),
    "alternating": _alternating,
}
"""Each M-RoPE rule: a block's sections and layout, of ``(cfg, block, where, rotated
features)``."""


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
