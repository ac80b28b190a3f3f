"""The rope blocks of a transformers config, one per layer type, and their keys.

transformers' ``convert_rope_params_to_dict`` / ``standardize_rope_params`` (5.25):
v4 (``rope_theta`` + ``rope_scaling``) and v5 (``rope_parameters``, flat or nested by
layer type) forms, legacy spellings, the class's own blocks where the config gives
none; then each block's keys checked as ``_validate_<type>_rope_parameters`` does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal

from flax_posenc._core.validation import check_length
from flax_posenc.hf._config import Config
from flax_posenc.hf._models import PARTIAL_BLOCK_ONLY, PARTIAL_FAILS, PARTIAL_ROTARY

RopeType = Literal[
    "default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional"
]
"""The rope types (scaling families) transformers computes, as the reader names them."""

_COMMON_KEYS = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor"})
# rope_type -> (required keys, optional keys), as transformers' _validate_*_parameters.
FAMILY_KEYS: dict[RopeType, tuple[frozenset[str], frozenset[str]]] = {
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
_ALIASES: dict[str, RopeType] = {"mrope": "default"}  # Qwen2-VL's legacy type name
# Block keys transformers indexes and computes with, so that a null fails there
# (optional keys it reads with .get() or ``or`` treat a null as absent).
_NULL_FAILS = frozenset(
    {"rope_theta", "original_max_position_embeddings", "partial_rotary_factor"}
)
# Families whose pre-training length transformers moves into the block.
NEEDS_ORIGINAL = ("llama3", "yarn", "longrope")


def _split_blocks(cfg: Config, given: dict | None) -> dict[str | None, dict | None]:
    """DeepSeek-V4's blocks from its flat v4 form, as its config class splits them:
    ``main`` (plain RoPE at ``rope_theta``) and ``compress`` (the flat block, e.g.
    YaRN with ``attention_factor`` 1, at ``compress_rope_theta``)."""
    names = sorted({block for _, block in cfg.model.layer_blocks})
    if _class_blocks_given(cfg):
        return {name: dict((given or {})[name]) for name in names}
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


def _class_blocks_given(cfg: Config) -> bool:
    """Whether the config gives every block the class names (DeepSeek-V4's ``main``
    and ``compress``), which the class keeps as they are; otherwise it builds them from
    the flat form and the top-level keys (``partial_rotary_factor`` included)."""
    given = cfg.config.get("rope_scaling") or cfg.config.get("rope_parameters")
    names = {block for _, block in cfg.model.layer_blocks}
    return isinstance(given, Mapping) and all(
        isinstance(given.get(name), Mapping) for name in names
    )


def blocks(cfg: Config) -> dict[str | None, dict | None]:
    """The rope block of every layer type (``None``: one block for all layers), with
    ``rope_theta`` filled in as transformers does."""
    # PreTrainedConfig: ``rope_scaling or rope_parameters`` (a given rope_scaling wins)
    given = cfg.config.get("rope_scaling") or cfg.config.get("rope_parameters")
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
    return _flat_into_nested(cfg, given, default, theta)


def _flat_into_nested(
    cfg: Config, given: dict | None, default: Mapping[str, Any], theta: Any
) -> dict[str | None, dict | None]:
    """A flat v4 block for a model whose class nests its blocks per layer type:
    Gemma 3's global block, with ``rope_local_base_freq`` for the sliding one;
    refused where the class has no such reading."""
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


def legacy_block(cfg: Config, block: Mapping[str, Any], where: str) -> dict:
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


def rope_type(block: Mapping[str, Any], where: str) -> RopeType:
    """The block's ``rope_type`` (or legacy ``type``), checked against the
    families."""
    rope_type = block.get("rope_type", block.get("type", "default"))  # as transformers
    if not isinstance(rope_type, str):
        raise TypeError(f"{where}['rope_type'] must be a string, got {rope_type!r}.")
    rope_type = _ALIASES.get(rope_type, rope_type)
    if rope_type not in FAMILY_KEYS:
        raise ValueError(
            f"Unknown rope_type {rope_type!r} in {where}; known: "
            f"{', '.join(sorted(FAMILY_KEYS))}."
        )
    return rope_type


def check_keys(
    cfg: Config, block: Mapping[str, Any], rope_type: RopeType, where: str
) -> None:
    """Refuses nulls transformers fails on, missing required keys and unknown keys
    of a rope block."""
    required, optional = FAMILY_KEYS[rope_type]
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
    if rope_type in NEEDS_ORIGINAL:
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


def check_partial_is_read(
    cfg: Config, block: Mapping[str, Any], rope_type: RopeType, where: str
) -> None:
    """Refuses a ``partial_rotary_factor`` where the model does not read it (see
    ``_models.PARTIAL_ROTARY`` and ``PARTIAL_BLOCK_ONLY``); 1 and the class's own
    factor change nothing."""
    reads = cfg.model_type in PARTIAL_ROTARY | PARTIAL_FAILS
    if reads and cfg.model_type not in PARTIAL_BLOCK_ONLY:
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
    if cfg.model.layer_blocks and not _class_blocks_given(cfg):
        given = []  # the class splits the flat form, the factor into every block
    if not reads and not own:  # a class with a factor of its own reads the block's
        given.append(
            (f"{where}['partial_rotary_factor']", block.get("partial_rotary_factor"))
        )
    for name, value in given:
        if value is None or value == 1.0 or value == same:
            continue
        if reads:
            fix = (
                "Remove the key"  # a factor below 1 fails there too
                if cfg.model_type in PARTIAL_FAILS
                else "Move it into rope_parameters"
            )
            raise ValueError(
                f"{name} is {value}, but transformers' {cfg.model_type!r} reads the "
                f"factor only inside its rope blocks (rope_type {rope_type!r}); at "
                f"the top level it is ignored or overridden. {fix}."
            )
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


def check_partial_computes(cfg: Config, partial: float, where: str) -> None:
    """Refuses a partial factor below 1 for a model whose rotary module reads it but
    whose attention rotates the whole head (``_models.PARTIAL_FAILS``)."""
    if cfg.model_type in PARTIAL_FAILS and partial != 1.0:
        raise ValueError(
            f"{where}['partial_rotary_factor'] is {partial}: transformers' "
            f"{cfg.model_type!r} computes fewer frequencies from it, but its attention "
            "rotates the whole head, so its first forward fails on the shapes "
            "(expected 1 or no factor). Remove the key."
        )
