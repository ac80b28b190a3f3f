"""One attention call, checked once: the record every attention entry point builds.

A :class:`Spec` holds everything an attention call means besides q, k and v: the
positions of q and k, segment ids, the mask, the bias, RoPE and its ``seq_len``, and
the options (causal, scale, block sizes). Two checks build it, each input checked by
one of them exactly once:

* :func:`check_settings` checks what does not depend on q/k/v: types and dtypes,
  which arguments need which (a Flax ``attention_fn`` runs it when it is built);
* :func:`check_call` checks the settings against q/k/v's shapes (when Flax calls
  the ``attention_fn``, or at once in a direct call: :func:`check_spec`).

The kernels (:mod:`flax_posenc.attention._blockwise`, :mod:`flax_posenc.attention._ring`) take a checked
spec and check nothing.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, cast

import jax
import jax.numpy as jnp

from flax_posenc._core.validation import (
    check_bool,
    check_broadcastable,
    check_choice,
    check_float_array,
    check_integer_array,
    check_positions_shape,
    check_positive_float,
    check_positive_int,
    check_rope_config,
    check_seq_len,
    check_seq_len_covers,
    check_seq_len_shape,
    obeys_positions_rule,
)
from flax_posenc.rope import _core as _rope
from flax_posenc.rope.config import RopeConfig
from flax_posenc.rope.scaling import SeqLen

Bias = Callable[[jax.Array, jax.Array], jax.Array]

AttentionImplementation = Literal[
    "xla", "pallas_tpu", "pallas_tpu_interpret", "pallas_gpu", "pallas_gpu_interpret"
]
"""Which kernel attends: ``"xla"`` (plain ``jnp`` on every backend, the reference),
``"pallas_tpu"`` (the TPU flash kernel with the bias and RoPE computed inside it),
``"pallas_gpu"`` (the GPU flash kernel, Triton, with the bias computed inside it), or
either ``*_interpret``: that kernel run by Pallas's interpreter on any backend (slow,
for tests on CPU)."""
IMPLEMENTATIONS = typing.get_args(AttentionImplementation)
# The TPU kernel's tiling units (8 sublanes, 128 lanes).
TPU_UNITS = {"block_q": 8, "block_k": 128}


class Options(NamedTuple):
    """The static options (hashable: a compiled kernel's static argument)."""

    causal: bool
    scale: float | None  # None: 1 / sqrt(H)
    block_q: int
    block_k: int
    implementation: AttentionImplementation = "xla"


class Arrays(NamedTuple):
    """Position-like arrays, as given (leading axes not broadcast)."""

    q_positions: jax.Array | None
    k_positions: jax.Array | None  # None with q_positions: q's
    q_segment_ids: jax.Array | None
    k_segment_ids: jax.Array | None  # None with q_segment_ids: q's
    mask: Any  # broadcastable to [..., N, L, S]


class Rotation(NamedTuple):
    """RoPE of q and k at their positions before attending."""

    config: RopeConfig
    seq_len: SeqLen  # checked; None: max(q, k positions) + 1 where it matters
    k_seq_len: SeqLen  # None: seq_len


class Spec(NamedTuple):
    """Everything an attention call means besides q, k and v."""

    arrays: Arrays
    bias: Bias | None
    options: Options
    rotation: Rotation | None


def check_settings(
    *,
    q_positions: Any = None,
    k_positions: Any = None,
    q_segment_ids: Any = None,
    k_segment_ids: Any = None,
    bias: Any = None,
    rope: Any = None,
    seq_len: Any = None,
    k_seq_len: Any = None,
    causal: Any = False,
    scale: Any = None,
    block_q: Any = None,
    block_k: Any = None,
    implementation: Any = "xla",
    rope_required: bool = False,
) -> Spec:
    """The checks that need no q/k/v: types, dtypes, and which argument needs which
    (the mask comes with the call: :func:`check_call`). ``rope_required``: attention
    that rotates q and k itself (Self-Extend, dual chunk attention)."""
    implementation = check_choice("implementation", implementation, IMPLEMENTATIONS)
    default = 64 if implementation.startswith("pallas_gpu") else 512
    options = Options(
        check_bool("causal", causal),
        None if scale is None else check_positive_float("scale", scale),
        default if block_q is None else check_positive_int("block_q", block_q),
        default if block_k is None else check_positive_int("block_k", block_k),
        implementation,
    )
    if bias is not None and not callable(bias):
        raise TypeError(
            "`bias` must be a function of (q_positions, k_positions), e.g. "
            f"fp.AlibiBias(num_heads), got {type(bias).__name__}. Hint: pass a "
            "materialised [B, N, L, S] array to positional_attention_fn instead."
        )
    if (bias is not None or options.causal) and q_positions is None:
        raise ValueError("`q_positions` is required with `bias` or `causal=True`.")
    rotation = _check_rotation(rope, q_positions, seq_len, k_seq_len, rope_required)
    if options.implementation != "xla":
        _check_pallas_settings(options, bias)
    arrays = Arrays(
        *_integer_pair("positions", q_positions, k_positions),
        *_integer_pair("segment_ids", q_segment_ids, k_segment_ids),
        None,
    )
    return Spec(arrays, cast(Bias | None, bias), options, rotation)


def _check_pallas_settings(options: Options, bias: Any) -> None:
    """What the Pallas kernels need: block sizes on the hardware's tiling, a bias
    with a kernel form."""
    on_tpu = options.implementation.startswith("pallas_tpu")
    for name in ("block_q", "block_k"):
        size = getattr(options, name)
        if on_tpu and size % TPU_UNITS[name]:
            unit = TPU_UNITS[name]
            raise ValueError(
                f"`{name}` must be a multiple of {unit} for implementation="
                f"{options.implementation!r} (TPU tiles are 8 x 128), got {size}. "
                f"Hint: {name}={max(unit, size // unit * unit)}."
            )
        if not on_tpu and (size < 16 or size & (size - 1)):
            raise ValueError(
                f"`{name}` must be a power of two of at least 16 for implementation="
                f"{options.implementation!r} (Triton's blocks), got {size}. Hint: "
                f"{name}={max(16, 1 << (size.bit_length() - 1))}."
            )
    if bias is not None and not callable(getattr(bias, "kernel_form", None)):
        raise TypeError(
            f"`bias` {type(bias).__name__} has no kernel_form(), which "
            f"implementation={options.implementation!r} computes in the kernel "
            "(fp.AlibiBias, fp.RelativeBias, fp.KerpleBias and fp.FireBias have it). "
            "Hint: implementation='xla' takes any function of the positions."
        )


def _check_rotation(
    rope: Any, q_positions: Any, seq_len: Any, k_seq_len: Any, required: bool = False
) -> Rotation | None:
    """The RoPE config and its lengths' types; None without ``rope`` (unless
    ``required``)."""
    if rope is None and not required:
        return None
    check_rope_config("rope", rope, RopeConfig)
    if q_positions is None:
        raise ValueError(
            "`q_positions` is required with `rope`: the position of every token "
            "(on a ring, its global position)."
        )
    if k_seq_len is not None:
        k_seq_len = check_seq_len(k_seq_len, name="k_seq_len")
    return Rotation(cast(RopeConfig, rope), check_seq_len(seq_len), k_seq_len)


def _integer_pair(kind: str, q_values: Any, k_values: Any) -> tuple[Any, Any]:
    """``q_{kind}`` and ``k_{kind}`` as integer arrays; k's needs q's."""
    if q_values is None:
        if k_values is not None:
            raise ValueError(f"`k_{kind}` needs `q_{kind}`.")
        return None, None
    q_values = check_integer_array(f"q_{kind}", q_values)
    if k_values is not None:
        k_values = check_integer_array(f"k_{kind}", k_values)
    return q_values, k_values


def check_call(spec: Spec, q: Any, k: Any, v: Any, mask: Any = None) -> Spec:
    """The settings against q ``[..., L, N, H]``, k ``[..., S, K, H]``, v ``[..., S,
    K, Hv]``: heads, the positions rule, the mask (checked here, it comes with the
    call), RoPE's head size and lengths."""
    heads = _check_qkv(q, k, v)
    if spec.bias is not None:
        _check_bias(spec.bias, spec.options, q.shape, k.shape[-3])
    qp, kp, qs, ks, _ = spec.arrays
    q_rows, k_rows = q.shape[:-2], k.shape[:-2]
    if qp is not None:
        check_positions_shape("q_positions", qp, "q.shape[:-2]", q_rows)
        if kp is None:
            name = "q_positions (also k's, as k_positions is None)"
            check_positions_shape(name, qp, "k.shape[:-2]", k_rows)
        else:
            check_positions_shape("k_positions", kp, "k.shape[:-2]", k_rows)
    if qs is not None:
        _check_segment_ids_shape("q_segment_ids", qs, q_rows)
        if ks is not None:
            _check_segment_ids_shape("k_segment_ids", ks, k_rows)
        elif k.shape[-3] != q.shape[-3]:
            raise ValueError(
                f"`k_segment_ids` is required when S ({k.shape[-3]}) != L "
                f"({q.shape[-3]})."
            )
    if mask is not None:
        if spec.options.implementation != "xla":
            raise ValueError(
                f"`mask` is not taken by implementation="
                f"{spec.options.implementation!r} (an [..., N, L, S] array is what "
                f"the kernel avoids), got shape {tuple(mask.shape)}. Hint: causal=True "
                "and segment ids (padding as its own id) express it, or "
                "implementation='xla'."
            )
        _check_mask(mask, q.shape[:-3] + (heads, q.shape[-3], k.shape[-3]))
    rotation = spec.rotation
    if rotation is not None:
        rotation = _check_rotation_shapes(rotation, q, spec.arrays)
    return spec._replace(arrays=spec.arrays._replace(mask=mask), rotation=rotation)


def with_causal(spec: Spec, causal: bool) -> Spec:
    """``spec`` made causal when ``causal`` (Flax's ``is_causal=True``)."""
    if not causal or spec.options.causal:
        return spec
    return spec._replace(options=spec.options._replace(causal=True))


def check_spec(q: Any, k: Any, v: Any, *, mask: Any = None, **settings: Any) -> Spec:
    """:func:`check_settings` then :func:`check_call`: a direct attention call."""
    return check_call(check_settings(**settings), q, k, v, mask)


def _check_rotation_shapes(rotation: Rotation, q: Any, arrays: Arrays) -> Rotation:
    """q's head size against the config; per-token lengths against the positions;
    concrete lengths above the positions they serve."""
    config, seq_len, k_seq_len = rotation
    head_dim = q.shape[-1]
    if head_dim != config.head_dim:
        raise ValueError(
            f"`q` and `k` must have H = rope.head_dim ({config.head_dim}), got H = "
            f"{head_dim}. Hint: fp.RopeConfig(head_dim={head_dim}, ...)."
        )
    qp = arrays.q_positions
    assert qp is not None  # checked: RoPE needs q_positions
    kp = qp if arrays.k_positions is None else arrays.k_positions
    k_length, k_name = (
        (seq_len, "seq_len") if k_seq_len is None else (k_seq_len, "k_seq_len")
    )
    for length, name, positions, positions_name in (
        (seq_len, "seq_len", qp, "q_positions"),
        (k_length, k_name, kp, "k_positions"),
    ):
        check_seq_len_shape(length, positions_name, positions.shape)
        check_seq_len_covers(length, positions, positions_name, config, name=name)
    return rotation


def position_pair(arrays: Arrays) -> tuple[jax.Array, jax.Array]:
    """int32 q and k positions of a checked spec's arrays (k's None: q's), as the
    caller gave them (leading axes not broadcast)."""
    q_pos = jnp.asarray(arrays.q_positions, jnp.int32)
    k_pos = arrays.k_positions
    return q_pos, q_pos if k_pos is None else jnp.asarray(k_pos, jnp.int32)


def rotate(q: jax.Array, k: jax.Array, spec: Spec) -> tuple[jax.Array, jax.Array]:
    """q and k rotated by the spec's RoPE (unchanged without one)."""
    if spec.rotation is None:
        return q, k
    config, seq_len, k_seq_len = spec.rotation
    arrays = spec.arrays
    assert arrays.q_positions is not None  # checked: RoPE needs q_positions
    return _rope.rotate_qk(
        q, k, arrays.q_positions, arrays.k_positions, config, seq_len, k_seq_len
    )


def _check_qkv(q: Any, k: Any, v: Any) -> int:
    """Validates q/k/v; returns q's number of heads ``N``."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_float_array(name, x)
    if q.ndim < 3 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ValueError(
            "`q`, `k`, `v` must be [..., L, N, H], [..., S, K, H], [..., S, K, Hv] "
            f"of one rank >= 3, got shapes {q.shape}, {k.shape}, {v.shape}."
        )
    length, heads, head_dim = q.shape[-3:]
    keys, kv_heads = k.shape[-3:-1]
    if (
        k.shape[:-3] != q.shape[:-3]
        or v.shape[:-3] != q.shape[:-3]
        or v.shape[-3:-1] != (keys, kv_heads)
        or k.shape[-1] != head_dim
    ):
        raise ValueError(
            "`q`, `k`, `v` must be [..., L, N, H], [..., S, K, H], [..., S, K, Hv] "
            f"with the same leading axes, got shapes {q.shape}, {k.shape}, {v.shape}."
        )
    if length == 0 or keys == 0:
        raise ValueError(f"`q` and `k` need L, S >= 1, got L = {length}, S = {keys}.")
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(
            f"q's heads N = {heads} must be a multiple of k/v's heads K = {kv_heads} "
            "(grouped-query attention)."
        )
    return heads


def _check_bias(bias: Bias, options: Options, q_shape: tuple, keys: int) -> None:
    """The bias's heads, and the shape and dtype of its tile (traced abstractly on
    the first tile's positions: the kernels then trust it)."""
    heads = q_shape[-2]
    bias_heads = getattr(bias, "num_heads", heads)
    if bias_heads != heads:
        raise ValueError(
            f"`bias` has {bias_heads} heads, q has N = {heads}; they must match."
        )
    rows, cols = min(options.block_q, q_shape[-3]), min(options.block_k, keys)
    tile = jax.eval_shape(
        getattr(bias, "tile", bias),
        jax.ShapeDtypeStruct((1, rows), jnp.int32),
        jax.ShapeDtypeStruct((1, cols), jnp.int32),
    )
    shape, want = tuple(getattr(tile, "shape", ())), (heads, rows, cols)
    batches = ((), (1,), (math.prod(q_shape[:-3]),))
    if len(shape) not in (3, 4) or shape[-3:] != want or shape[:-3] not in batches:
        raise ValueError(
            f"`bias` must return [B, N, l, s] or [N, l, s] = {want} for positions "
            f"[B, {rows}] and [B, {cols}], got shape {shape}."
        )
    check_float_array("bias(q_positions, k_positions)", tile)


def _check_segment_ids_shape(name: str, ids: Any, target: tuple[int, ...]) -> None:
    if not obeys_positions_rule(tuple(ids.shape), tuple(target)):
        raise ValueError(
            f"`{name}` must be [..., {target[-1]}], one id per token, with leading "
            f"axes that broadcast to {tuple(target[:-1])}; got shape {ids.shape}."
        )


def _check_mask(mask: Any, logits_shape: tuple[int, ...]) -> None:
    """Raises unless ``mask`` is bool or numeric and broadcasts to the logits."""
    dtype = getattr(mask, "dtype", None)
    if dtype is None or not (
        dtype == jnp.bool_
        or jnp.issubdtype(dtype, jnp.integer)
        or jnp.issubdtype(dtype, jnp.floating)
    ):
        raise TypeError(
            "`mask` must be a bool or 0/1 numeric array (non-zero: attend), got "
            f"{type(mask).__name__} of dtype {dtype}."
        )
    check_broadcastable("mask", mask.shape, "[..., N, L, S]", logits_shape)
