"""The reader: a transformers ``config.json`` dict in, per-layer RoPE descriptions out.

It follows transformers' own reading (``convert_rope_params_to_dict`` and
``standardize_rope_params`` of 5.25, and each model type's modeling code through
``hf/_models.py``), and never guesses: an unknown model type, an unknown key of a rope
block, a key the model ignores, a value of the wrong JSON type, or a behaviour that
the chosen function cannot express raises ``ValueError``/``TypeError`` naming it.

Two phases: ``hf/_record.py`` normalises the config into a typed record (every raw
key read there, once); :func:`_build` makes the layers from that record alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from flax_posenc.hf._record import BlockRecord, Record, normalise
from flax_posenc.rope.config import RopeConfig
from flax_posenc.rope.dual_chunk import DualChunkAttentionConfig
from flax_posenc.rope.nd import MropeLayout
from flax_posenc.rope.query_scaling import QueryScaling
from flax_posenc.rope.scaling import YarnScaling

__all__ = ["HFRope", "LayerRope", "read_hf_rope", "rope_config_from_hf"]


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
      dual_chunk_attention: the published ``dual_chunk_attention_config``
        (Qwen2.5-1M) as a :class:`~flax_posenc.DualChunkAttentionConfig`, for
        :func:`flax_posenc.dual_chunk_attention`; None without one. transformers
        ignores the block; vLLM computes with it.
    """

    model_type: str
    layers: tuple[LayerRope, ...]
    layer_types: tuple[str, ...] | None = None
    dual_chunk_attention: DualChunkAttentionConfig | None = None

    def layer(self, index: int) -> LayerRope:
        """The :class:`LayerRope` of decoder layer ``index``."""
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"`index` must be an int, got {index!r}.")
        if not -len(self.layers) <= index < len(self.layers):
            raise ValueError(
                f"`index` must be in [0, {len(self.layers)}), got {index}."
            )
        return self.layers[index]


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
    return _build(normalise(config))


def _build(record: Record) -> HFRope:
    """Phase 2: the layers of a normalised config."""
    built = {
        key: None if block is None else _layer(record, block)
        for key, block in record.blocks.items()
    }
    layers = []
    for layer in record.layers:
        if layer.use == "no_attention":
            layers.append(LayerRope(rope=None))
        elif layer.use == "nope":
            layers.append(LayerRope(rope=None, query_scaling=record.temperature))
        else:
            rope = built[layer.block] or LayerRope(rope=None)
            if layer.theta is not None and rope.rope is not None:  # its own base
                rope = dataclasses.replace(
                    rope, rope=dataclasses.replace(rope.rope, theta=layer.theta)
                )
            layers.append(rope)
    return HFRope(
        record.model_type,
        tuple(layers),
        record.layer_types,
        record.dual_chunk_attention,
    )


def _layer(record: Record, block: BlockRecord) -> LayerRope:
    """The :class:`LayerRope` of the layers that use ``block``."""
    query_scaling = None
    if block.query_beta is not None and block.original is not None:
        query_scaling = QueryScaling(
            scale=block.query_beta, floor_scale=float(block.original)
        )
    softmax = 1.0
    if record.softmax_mscale and isinstance(block.rope.scaling, YarnScaling):
        softmax = block.rope.scaling.softmax_scale_factor()
    return LayerRope(
        rope=block.rope,
        mrope_section=block.mrope_section,
        mrope_layout=block.mrope_layout,
        query_scaling=query_scaling,
        softmax_scale_factor=softmax,
        rope_features=record.rope_features,
        position_sign=record.position_sign,
    )


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
    spec = _build(normalise(config))
    if spec.dual_chunk_attention is not None:
        raise ValueError(
            f"This {spec.model_type!r} config has a dual_chunk_attention_config, "
            "which a RopeConfig alone would drop; use "
            "fp.read_hf_rope(config).dual_chunk_attention with "
            "fp.dual_chunk_attention."
        )
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
