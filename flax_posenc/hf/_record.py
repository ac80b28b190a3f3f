"""Phase 1 of reading a transformers config: normalise it into a typed, frozen
:class:`Record` (each block's head size, theta, rotated features, scaling family and
M-RoPE sections; the layer types; each layer's RoPE use and block), raising on
anything transformers would not compute or that the reader does not follow.

Phase 2 (``hf/_reader.py``) builds the layers from the record alone, as transformers
splits standardising a config (``standardize_rope_params``) from computing with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from flax_posenc._core.validation import check_bool, check_float, check_length
from flax_posenc.hf import _blocks, _families, _rules
from flax_posenc.hf._config import Config, text_config
from flax_posenc.rope.config import RopeConfig
from flax_posenc.rope.dual_chunk import DualChunkAttentionConfig
from flax_posenc.rope.nd import MropeLayout
from flax_posenc.rope.query_scaling import QueryScaling

LayerUse = Literal["rope", "nope", "no_attention"]
"""A layer rotates (``"rope"``), is a NoPE attention layer (``"nope"``: it keeps
the model's query temperature), or has no attention (an MLP or convolution)."""


@dataclasses.dataclass(frozen=True)
class BlockRecord:
    """One rope block, normalised.

    Attributes:
      rope: the block's head size, theta, rotated features, layout and scaling
        family (validated).
      mrope_section: M-RoPE pairs per position row, or None for 1-D RoPE.
      mrope_layout: how the sections share out the pairs.
      query_beta: Ministral 3's ``llama_4_scaling_beta``, or None.
      original: the pre-training length, where ``query_beta`` needs it.
    """

    rope: RopeConfig
    mrope_section: tuple[int, ...] | None = None
    mrope_layout: MropeLayout = "contiguous"
    query_beta: float | None = None
    original: int | None = None


@dataclasses.dataclass(frozen=True)
class LayerRecord:
    """One decoder layer: its use of RoPE, its block (a ``"rope"`` layer whose block
    is None rotates nothing), and its own base (Granite SWA's ``layer_rope_theta``)
    or None."""

    use: LayerUse
    block: str | None = None
    theta: float | None = None


@dataclasses.dataclass(frozen=True)
class Record:
    """A transformers config, normalised: everything phase 2 reads.

    Attributes:
      model_type: the text config's ``model_type``.
      layer_types: the per-layer type names, or None.
      blocks: the block of each layer type (None: one block for every layer);
        a None block is a layer type without RoPE.
      layers: one :class:`LayerRecord` per decoder layer.
      temperature: Llama 4's query temperature on NoPE layers, or None.
      softmax_mscale: YaRN's ``mscale_all_dim`` also scales the softmax.
      rope_features: ``"last"`` where the rotated slice ends the head (MLA).
      position_sign: -1 where the model rotates by ``-theta``.
      dual_chunk_attention: Qwen2.5-1M's ``dual_chunk_attention_config``, or None.
    """

    model_type: str
    layer_types: tuple[str, ...] | None
    blocks: Mapping[str | None, BlockRecord | None]
    layers: tuple[LayerRecord, ...]
    temperature: QueryScaling | None = None
    softmax_mscale: bool = False
    rope_features: Literal["first", "last"] = "first"
    position_sign: Literal[1, -1] = 1
    dual_chunk_attention: DualChunkAttentionConfig | None = None


def normalise(config: Mapping[str, Any]) -> Record:
    """Phase 1: ``config`` (a ``config.json`` dict) as a :class:`Record`."""
    cfg = Config(text_config(config))
    _rules.check_heads_divide_hidden(cfg)
    count, cfg = _layer_count(cfg)
    cfg = _rules.CONFIG_RULES[cfg.model.config_rule](cfg, count)  # as its class does
    if not _rules.NOPE_RULES[cfg.model.nope].rotates:  # no rotary call, no RoPE keys
        return Record(cfg.model_type, None, {}, (LayerRecord("nope"),) * count)
    for flag in cfg.model.unsupported_flags:
        if check_bool(cfg.where(flag), cfg.get(flag, False)):
            raise ValueError(
                f"{cfg.where(flag)} is true: transformers' {cfg.model_type!r} then "
                "does more than a LayerRope describes; read its modeling code."
            )
    for key in cfg.model.unsupported_keys:
        if cfg.get(key) is not None:
            raise ValueError(
                f"{cfg.where(key)} is {cfg.get(key)!r}: transformers' "
                f"{cfg.model_type!r} then does more than a LayerRope describes; read "
                "its modeling code (null reads as a LayerRope)."
            )
    layer_types = _rules.layer_types(cfg, count)
    blocks = {
        key: None if block is None else _block(cfg, block, key, layer_types)
        for key, block in _blocks.blocks(cfg).items()
    }
    temperature = _rules.QUERY_SCALING_RULES[cfg.model.query_scaling].temperature(cfg)
    dual_chunk = _dual_chunk(cfg)
    return Record(
        model_type=cfg.model_type,
        layer_types=layer_types,
        blocks=blocks,
        layers=_layers(cfg, count, layer_types, blocks),
        temperature=temperature,
        softmax_mscale=cfg.model.softmax_mscale,
        rope_features="last"
        if cfg.model.rope_slice_last
        else _rules.HEAD_DIM_RULES[cfg.model.head_dim].features,
        position_sign=-1 if cfg.model.position_sign == -1 else 1,
        dual_chunk_attention=dual_chunk,
    )


_DUAL_CHUNK_KEYS = frozenset(
    {"chunk_size", "local_size", "original_max_position_embeddings"}
)


def _dual_chunk(cfg: Config) -> DualChunkAttentionConfig | None:
    """``dual_chunk_attention_config`` (Qwen2.5-1M; read by vLLM, ignored by
    transformers), with its published keys only; sparse attention is refused."""
    block = cfg.config.get("dual_chunk_attention_config")
    where = cfg.where("dual_chunk_attention_config")
    if block is None:
        return None
    if not isinstance(block, Mapping):
        raise TypeError(f"{where} must be a dict or null, got {block!r}.")
    sparse = block.get("sparse_attention_enabled", False)
    if check_bool(f"{where}['sparse_attention_enabled']", sparse):
        raise ValueError(
            f"{where} enables sparse attention, which dual_chunk_attention does not "
            "compute (vLLM's vertical-and-slash kernels); set it to false."
        )
    unknown = sorted(set(block) - _DUAL_CHUNK_KEYS - {"sparse_attention_enabled"})
    if unknown:
        raise ValueError(
            f"Unknown keys {unknown} in {where}; known: "
            f"{sorted(_DUAL_CHUNK_KEYS)} (and sparse_attention_enabled: false). "
            "flax_posenc does not guess what they mean."
        )
    missing = sorted({"chunk_size", "local_size"} - set(block))
    if missing:
        raise ValueError(f"{where} needs {missing}; got {sorted(block)}.")
    return DualChunkAttentionConfig(
        **{k: v for k, v in block.items() if k in _DUAL_CHUNK_KEYS}
    )


def _layer_count(cfg: Config) -> tuple[int, Config]:
    """``num_hidden_layers`` under any name, and the config as its class loads it:
    Dory's (attention, mlp) pairs halved back into one decoder layer each (a new
    :class:`Config`; the one given is left as it is)."""
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
        return count // 2, cfg.rewritten({**cfg.config, "layer_types": types[::2]})
    return count, cfg


def _block(
    cfg: Config,
    block: Mapping[str, Any],
    layer_type: str | None,
    layer_types: tuple[str, ...] | None,
) -> BlockRecord:
    """One rope block, checked and normalised."""
    where = "rope_parameters" + ("" if layer_type is None else f"[{layer_type!r}]")
    block = _blocks.legacy_block(cfg, block, where)
    rope_type = _blocks.rope_type(block, where)
    _blocks.check_keys(cfg, block, rope_type, where)
    _blocks.check_partial_is_read(cfg, block, rope_type, where)
    reading = _families.BlockReading(cfg, block, where, rope_type)
    _blocks.check_partial_computes(cfg, reading.partial, where)
    head_dim = _rules.head_dim(cfg, layer_type, layer_types)
    theta = check_float(f"{where}['rope_theta']", block.get("rope_theta", 10000.0))
    rotary = _rotary(cfg, reading, head_dim)
    _check_indexer(cfg, reading, layer_type, layer_types, rotary)
    if cfg.model.rope_slice_last:  # the rotated slice is the last `rotary` features
        head_dim = rotary
    rope = RopeConfig(
        head_dim=head_dim,
        theta=theta,
        rotary_dim=None if rotary == head_dim else rotary - rotary % 2,
        layout=_rules.layout(cfg),
        scaling=_families.scaling(reading),
    )
    mrope_section, mrope_layout = _rules.MROPE_RULES[cfg.model.mrope](
        cfg, block, where, rope.rotated_features
    )
    beta = _rules.QUERY_SCALING_RULES[cfg.model.query_scaling].beta(block, where)
    return BlockRecord(
        rope=rope,
        mrope_section=mrope_section,
        mrope_layout=mrope_layout,
        query_beta=beta,
        original=None if beta is None else reading.original,
    )


def _rotary(cfg: Config, reading: _families.BlockReading, head_dim: int) -> int:
    """The rotated features, before rounding down to even."""
    if cfg.model.rotary_dim_key is not None:  # GPT-J's rotary_dim; None: whole head
        rotary = cfg.get(cfg.model.rotary_dim_key)
        return (
            head_dim
            if rotary is None
            else check_length(cfg.where("rotary_dim"), rotary)
        )
    if reading.rope_type == "proportional":
        return head_dim  # unrotated pairs get inv_freq 0 (Gemma 4)
    return _rules.HEAD_DIM_RULES[cfg.model.head_dim].rotated(
        cfg, head_dim, reading.partial, reading.where
    )


def _check_indexer(
    cfg: Config,
    reading: _families.BlockReading,
    block: str | None,
    layer_types: tuple[str, ...] | None,
    rotary: int,
) -> None:
    """DeepSeek-V4: its compressed-sparse-attention layers rotate the last
    ``2 * ceil(rotary / 2)`` features of the lightning indexer's heads too
    (``index_head_dim``) with the same block; transformers fails where that is more
    than the indexer's heads."""
    if cfg.model.indexer is None:
        return
    kind, default = cfg.model.indexer
    if dict(cfg.model.layer_blocks).get(kind, kind) != block:
        return
    layers = [i for i, t in enumerate(layer_types or ()) if t == kind]
    index = check_length(
        cfg.where("index_head_dim"), cfg.config.get("index_head_dim", default)
    )
    rotated = rotary + rotary % 2  # one frequency per pair, as transformers sizes it
    if layers and rotated > index:
        raise ValueError(
            f"{reading.where} rotates {rotated} features (partial_rotary_factor "
            f"{reading.partial} of head_dim {cfg.get('head_dim')}), but transformers' "
            f"{cfg.model_type!r} also rotates its lightning indexer's heads of "
            f"index_head_dim = {index} features with it in its {kind} layers "
            f"{layers}, and fails on the shapes. Give a factor that rotates at most "
            f"{index} features, or index_head_dim >= {rotated}."
        )


def _layers(
    cfg: Config,
    count: int,
    layer_types: tuple[str, ...] | None,
    blocks: Mapping[str | None, BlockRecord | None],
) -> tuple[LayerRecord, ...]:
    """Each layer's RoPE use, block and own base."""
    nope = _rules.NOPE_RULES[cfg.model.nope]
    uses_rope = nope.uses_rope(cfg, count, layer_types)
    block_thetas = {k: None if b is None else b.rope.theta for k, b in blocks.items()}
    thetas = nope.thetas(cfg, count, block_thetas)
    layers = []
    for index in range(count):
        kind = _block_of(cfg, index, layer_types, blocks)
        if kind is _NO_ATTENTION:
            layers.append(LayerRecord("no_attention"))
        elif not uses_rope[index] or thetas[index] == 0:
            layers.append(LayerRecord("nope", kind))
        else:
            layers.append(LayerRecord("rope", kind, thetas[index]))
    return tuple(layers)


_NO_ATTENTION: Any = object()


def _block_of(
    cfg: Config,
    index: int,
    layer_types: tuple[str, ...] | None,
    blocks: Mapping[str | None, BlockRecord | None],
) -> Any:
    """The key of layer ``index``'s block, or ``_NO_ATTENTION``."""
    if None in blocks:
        return None
    kind = layer_types[index] if layer_types else None
    if kind is not None:
        kind = dict(cfg.model.layer_blocks).get(kind, kind)
    if kind is not None and kind not in blocks and "attention" not in kind:
        return _NO_ATTENTION  # an MLP / conv layer
    if kind is None:
        raise ValueError(
            f"The {cfg.model_type!r} config's rope_parameters are nested by "
            f"layer type {sorted(k for k in blocks if k)}, but it names no "
            f"layer_types, so which block layer {index} uses is unknown; give "
            "layer_types (one per layer), or a flat rope_parameters block."
        )
    if kind not in blocks:
        raise ValueError(
            f"Layer {index} is of type {kind!r}, which the config's "
            f"rope_parameters {sorted(k for k in blocks if k)} do not cover."
        )
    return kind
