"""Rotary position embedding (RoPE; Su et al., "RoFormer", 2021): the functions.

Pairs of features ``(a, b)`` of q and k are rotated by ``theta_i * p`` at position
``p``: ``(a, b) -> (a cos - b sin, b cos + a sin)``, so the score ``q_m . k_n`` depends
on ``m - n`` only. Two pairings are in use:

* ``layout="half"`` (GPT-NeoX, Hugging Face Llama ``rotate_half``): pairs
  ``(j, j + R/2)``;
* ``layout="interleaved"`` (GPT-J, RoFormer, Meta Llama, DeepSeek): pairs
  ``(2j, 2j + 1)``.

Partial rotary (``rotary_dim = R < H``) rotates the first ``R`` features and passes the
rest through. Tables ``cos, sin`` are half width ``[..., R/2]``, float32, with the
scaling family's attention factor multiplied in (as Hugging Face does). Angles are
float32 ``position * inv_freq`` products, never formed in the activation dtype; with
``RopeConfig(angle_precision="exact")`` they are reduced mod 2 pi exactly instead
(see :data:`flax_posenc.AnglePrecision`), for positions past ``1e5``.
"""

from __future__ import annotations

import functools
import typing

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core.validation import (
    check_choice,
    check_float_array,
    check_heads_array,
    check_integer_array,
    check_positions,
    check_positions_shape,
    check_positive_int,
    check_rope_config,
    check_rotary_dim,
    check_seq_len,
    check_seq_len_covers,
    check_seq_len_shape,
    obeys_positions_rule,
)
from flax_posenc.rope import _core as _rope
from flax_posenc.rope.config import RopeConfig, RopeLayout, RopeTables
from flax_posenc.rope.scaling import RopeFrequencies, SeqLen

_LAYOUTS = typing.get_args(RopeLayout)

__all__ = [
    "apply_rope",
    "apply_rope_qk",
    "rope_cos_sin",
    "rope_frequencies",
    "rope_permute_layout",
    "rope_rotate",
]


def rope_frequencies(config: RopeConfig, *, seq_len: SeqLen = None) -> RopeFrequencies:
    """Inverse frequencies and attention scaling of ``config``: the one entry point.

    ``inv_freq[i] = theta^(-2i/R)`` before scaling; the scaling family changes them.

    Args:
      config: the RoPE configuration.
      seq_len: the sequence length seen: an int, a traced int scalar, or an integer
        array ``[...]`` giving each token its own length (transformers' decode
        policy, see :func:`flax_posenc.hf_decode_seq_lens`). Only dynamic NTK and
        LongRoPE use it; None means their pre-training regime.

    Returns:
      ``RopeFrequencies(inv_freq float32 [R/2] (or seq_len.shape + [R/2]),
      attention_scaling)``.

    Raises:
      TypeError: a ``seq_len`` that is not an integer.
      ValueError: a ``seq_len`` below 1.

    Examples:
      >>> fp.rope_frequencies(fp.RopeConfig(head_dim=8)).inv_freq.tolist()
      [1.0, 0.10000000149011612, 0.009999999776482582, 0.0010000000474974513]
      >>> linear = fp.RopeConfig(head_dim=8, scaling=fp.LinearScaling(factor=2.0))
      >>> fp.rope_frequencies(linear).inv_freq.tolist()
      [0.5, 0.05000000074505806, 0.004999999888241291, 0.0005000000237487257]
    """
    check_rope_config("config", config, RopeConfig)
    return RopeFrequencies(*_rope.frequencies(config, check_seq_len(seq_len)))


def rope_cos_sin(
    positions: jax.Array, config: RopeConfig, *, seq_len: SeqLen = None
) -> RopeTables:
    """``cos(p * inv_freq) * a`` and ``sin(p * inv_freq) * a`` for integer positions.

    Args:
      positions: integer ``[...]`` (e.g. ``[B, L]`` or ``[L]``), traced or concrete.
      config: the RoPE configuration.
      seq_len: for dynamic NTK and LongRoPE: an int or int scalar shared by all
        tokens, or an integer array broadcastable to ``positions`` (one per token);
        None means ``max(positions) + 1``, computed inside the graph (as Hugging
        Face does), so new position values never recompile. With
        ``config.angle_precision="exact"`` they need a Python int.

    Returns:
      ``RopeTables(cos, sin)``, each float32 ``positions.shape + (R/2,)``, with the
      attention scaling ``a`` multiplied in.

    Raises:
      TypeError: non-integer positions or ``seq_len``.
      ValueError: a per-token ``seq_len`` that does not broadcast to ``positions``;
        where the frequencies depend on it, a concrete ``seq_len`` not above a
        concrete position (transformers uses ``max(position_ids) + 1``), and for
        exact angles a ``seq_len`` that is not an int.

    Examples:
      >>> cos, sin = fp.rope_cos_sin(jnp.arange(3), fp.RopeConfig(head_dim=4))
      >>> cos.shape
      (3, 2)
      >>> sin.round(4).tolist()  # sin(p * [1, 0.01])
      [[0.0, 0.0], [0.8414999842643738, 0.009999999776482582], [0.9092999696731567, 0.019999999552965164]]
    """
    check_rope_config("config", config, RopeConfig)
    positions = check_integer_array("positions", positions)
    seq_len = check_seq_len(seq_len, "positions", positions.shape)
    check_seq_len_covers(seq_len, positions, "positions", config)
    return RopeTables(*_rope.tables(positions, config, seq_len))


def rope_rotate(
    x: jax.Array, cos: jax.Array, sin: jax.Array, *, layout: RopeLayout = "half"
) -> jax.Array:
    """Rotates the first ``R = 2 * cos.shape[-1]`` features of ``x``.

    ``half``: ``out[j] = x[j] c_j - x[j + R/2] s_j``, ``out[j + R/2] = x[j + R/2] c_j +
    x[j] s_j``; ``interleaved``: the same with pairs ``(2j, 2j + 1)``. Features past
    ``R`` pass through. Computed in float32, rounded once to ``x.dtype``.

    Args:
      x: ``[..., L, N, H]``.
      cos: float ``[..., L, R/2]`` with ``R <= H``, leading dims broadcastable to
        ``x.shape[:-2]`` (e.g. from :func:`rope_cos_sin`).
      sin: the same shape as ``cos``.
      layout: ``"half"`` or ``"interleaved"``.

    Returns:
      ``[..., L, N, H]`` in ``x.dtype``.

    Raises:
      ValueError: ``x`` of rank < 3, ``cos`` and ``sin`` of different shapes, ``R >
        H``, table dimensions that do not broadcast, or an unknown ``layout``.

    Examples:
      A quarter turn of the pair ``(1, 0)``:

      >>> x = jnp.array([[[1.0, 0.0]]])  # [L=1, N=1, H=2]
      >>> fp.rope_rotate(x, jnp.array([[0.0]]), jnp.array([[1.0]])).tolist()
      [[[0.0, 1.0]]]
    """
    check_choice("layout", layout, _LAYOUTS)
    check_float_array("x", x)
    check_float_array("cos", cos)
    check_float_array("sin", sin)
    if x.ndim < 3:
        raise ValueError(
            f"`x` must be [..., L, N, H] (rank >= 3), got shape {x.shape}."
        )
    if cos.shape != sin.shape:
        raise ValueError(
            f"`cos` and `sin` must have one shape, got {cos.shape} and {sin.shape}."
        )
    if cos.ndim < 1 or 2 * cos.shape[-1] > x.shape[-1]:
        raise ValueError(
            f"`cos` must be [..., L, R/2] with R <= head_dim ({x.shape[-1]}), got "
            f"shape {cos.shape}."
        )
    table_shape = cos.shape[:-1]
    if not obeys_positions_rule(table_shape, x.shape[:-2]):
        raise ValueError(
            f"`cos` and `sin` must be [..., L, R/2] with L = x.shape[-3] "
            f"({x.shape[-3]}) and leading axes that broadcast to x.shape[:-3] "
            f"{x.shape[:-3]}, got shape {cos.shape}."
        )
    return _rope.rotate(x, cos, sin, layout)


def apply_rope(
    x: jax.Array, positions: jax.Array, config: RopeConfig, *, seq_len: SeqLen = None
) -> jax.Array:
    """Applies RoPE to q or k at integer positions.

    For q and k together (one ``seq_len`` for both, as dynamic NTK and LongRoPE
    need), use :func:`apply_rope_qk`.

    Args:
      x: ``[..., L, N, H]`` floating, with ``H == config.head_dim``.
      positions: integer ``[..., L]``: one position per token (the length axis
        equals ``L``); leading axes broadcast to ``x.shape[:-3]``.
      config: the RoPE configuration.
      seq_len: see :func:`rope_cos_sin`.

    Returns:
      ``[..., L, N, H]`` in ``x.dtype``; features past ``rotary_dim`` unchanged.

    Raises:
      ValueError: ``H != config.head_dim``, positions that break the positions
        rule (e.g. ``[1]`` for ``L = 5``, or a shape that would enlarge the output),
        or a ``seq_len`` :func:`rope_cos_sin` refuses.
      TypeError: non-integer positions, a non-floating ``x``, or a ``config`` that
        is not a :class:`RopeConfig` (e.g. a ``config.json`` dict).

    Examples:
      >>> q = jnp.ones((2, 16, 4, 64), jnp.bfloat16)  # [B, L, N, H]
      >>> fp.apply_rope(q, jnp.arange(16), fp.RopeConfig(head_dim=64)).shape
      (2, 16, 4, 64)

      Per-sequence positions ``[B, L]``, e.g. of packed or left-padded batches:

      >>> positions = jnp.array([[0, 1, 2, 0] * 4, [0] * 8 + list(range(8))])
      >>> fp.apply_rope(q, positions, fp.RopeConfig(head_dim=64)).dtype
      dtype(bfloat16)
    """
    check_rope_config("config", config, RopeConfig)
    check_heads_array("x", x, config.head_dim)
    positions = check_positions("positions", positions, "x.shape[:-2]", x.shape[:-2])
    seq_len = check_seq_len(seq_len, "positions", positions.shape)
    check_seq_len_covers(seq_len, positions, "positions", config)
    cos, sin = _rope.tables(positions, config, seq_len)
    return _rope.rotate(x, cos, sin, config.layout)


def apply_rope_qk(
    q: jax.Array,
    k: jax.Array,
    positions: jax.Array,
    config: RopeConfig,
    *,
    k_positions: jax.Array | None = None,
    seq_len: SeqLen = None,
    k_seq_len: SeqLen = None,
) -> tuple[jax.Array, jax.Array]:
    """Applies RoPE to q and k with one set of frequencies, so scores stay relative.

    Dynamic NTK and LongRoPE depend on ``seq_len``: rotating q and k with separate
    :func:`apply_rope` calls would give them ``max(positions) + 1`` of their own
    positions, hence different frequencies in a decode step. Here both see the
    same ``seq_len`` (given, or ``max`` over q's and k's positions ``+ 1``). k may
    have fewer heads than q (grouped-query attention).

    Args:
      q: ``[..., L, N, H]`` floating, ``H == config.head_dim``.
      k: ``[..., S, K, H]`` floating (``K`` kv heads).
      positions: integer ``[..., L]``.
      config: the RoPE configuration.
      k_positions: integer ``[..., S]``; None means ``positions`` (then ``S`` must
        equal ``L``, and one cos/sin table serves both). Pass it for a key cache.
      seq_len: see :func:`rope_cos_sin`; shared by q and k unless ``k_seq_len``
        is given.
      k_seq_len: k's own ``seq_len`` (e.g. per key, for transformers' decode
        policy: :func:`flax_posenc.hf_decode_seq_lens`); None means ``seq_len``.
        Given with ``seq_len=None``, q's frequencies follow q's own
        ``max(positions) + 1``.

    Returns:
      ``(q, k)`` rotated, in their own dtypes.

    Raises:
      ValueError: head sizes, or positions that break the positions rule (e.g. a
        decode step's ``[B, 1]`` q positions used for a whole key cache).
      TypeError: non-integer positions, non-floating q/k, or a ``config`` that is
        not a :class:`RopeConfig`.

    Examples:
      >>> q = jnp.ones((2, 1, 8, 64))  # one decode step, 8 query heads
      >>> k = jnp.ones((2, 16, 2, 64))  # the whole cache, 2 kv heads
      >>> config = fp.RopeConfig(head_dim=64)
      >>> q, k = fp.apply_rope_qk(q, k, jnp.full((2, 1), 15), config,
      ...     k_positions=jnp.arange(16))
      >>> q.shape, k.shape
      ((2, 1, 8, 64), (2, 16, 2, 64))
    """
    check_rope_config("config", config, RopeConfig)
    check_heads_array("q", q, config.head_dim)
    check_heads_array("k", k, config.head_dim)
    positions = check_positions("positions", positions, "q.shape[:-2]", q.shape[:-2])
    seq_len = check_seq_len(seq_len, "positions", positions.shape)
    if k_positions is None and k_seq_len is None:
        check_positions_shape(
            "positions (also k's, as k_positions is None)",
            positions,
            "k.shape[:-2]",
            k.shape[:-2],
        )
        check_seq_len_covers(seq_len, positions, "positions", config)
        return _rope.rotate_qk(q, k, positions, None, config, seq_len, None)
    if k_positions is None:
        check_positions_shape("k_positions", positions, "k.shape[:-2]", k.shape[:-2])
        k_positions = positions
    else:
        k_positions = check_positions(
            "k_positions", k_positions, "k.shape[:-2]", k.shape[:-2]
        )
    if k_seq_len is not None:
        k_seq_len = check_seq_len(
            k_seq_len, "k_positions", k_positions.shape, name="k_seq_len"
        )
    else:
        check_seq_len_shape(seq_len, "k_positions", k_positions.shape)
    check_seq_len_covers(seq_len, positions, "positions", config)
    if k_seq_len is None:
        check_seq_len_covers(seq_len, k_positions, "k_positions", config)
    else:
        check_seq_len_covers(
            k_seq_len, k_positions, "k_positions", config, name="k_seq_len"
        )
    return _rope.rotate_qk(q, k, positions, k_positions, config, seq_len, k_seq_len)


def rope_permute_layout(
    w: jax.Array,
    *,
    rotary_dim: int,
    source: RopeLayout,
    target: RopeLayout,
    axis: int = -1,
    head_dim: int | None = None,
) -> jax.Array:
    """Reorders per-head features from one RoPE pairing to the other.

    What checkpoint converters do by hand (e.g. Meta Llama -> Hugging Face): apply it
    to the output-feature axis of the q and k projection kernels and
    ``target``-layout RoPE on the new weights gives the permuted result of
    ``source``-layout RoPE on the old ones, with identical attention scores.
    Features past ``rotary_dim`` stay in place within each head.

    Interleaved -> half takes features ``(0, 2, ..., R-2, 1, 3, ..., R-1)`` of
    every head.

    Args:
      w: an array whose ``axis`` holds ``N`` heads of ``H`` features each: a
        ``[D, N, H]`` kernel with the default ``axis=-1``, or a fused ``[D, N * H]``
        (flax) / ``[N * H, D]`` (torch, ``axis=0``) kernel with ``head_dim=H``.
      rotary_dim: ``R``, the number of rotated features per head (even, ``<= H``).
      source: the layout ``w`` was trained for, ``"half"`` or ``"interleaved"``.
      target: the layout it will be used with.
      axis: the feature axis of ``w``.
      head_dim: ``H``, the features per head along ``axis``; None means the whole
        axis is one head.

    Returns:
      ``w`` with that axis reordered head by head (unchanged when ``source ==
      target``).

    Raises:
      TypeError: non-int ``rotary_dim`` or ``head_dim``.
      ValueError: an unknown layout, an ``axis`` out of range, a ``head_dim`` that
        does not divide the axis, or an odd ``rotary_dim`` or one larger than ``H``.

    Examples:
      >>> fp.rope_permute_layout(jnp.arange(6), rotary_dim=4, source="interleaved",
      ...     target="half").tolist()
      [0, 2, 1, 3, 4, 5]

      A fused kernel of two heads of 4 features, permuted per head:

      >>> fp.rope_permute_layout(jnp.arange(8), rotary_dim=4, head_dim=4,
      ...     source="interleaved", target="half").tolist()
      [0, 2, 1, 3, 4, 6, 5, 7]
    """
    check_choice("source", source, _LAYOUTS)
    check_choice("target", target, _LAYOUTS)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"`axis` must be an int, got {axis!r}.")
    if not -w.ndim <= axis < w.ndim:
        raise ValueError(f"`axis` must index w of shape {w.shape}, got {axis}.")
    size = w.shape[axis]
    head = size if head_dim is None else check_positive_int("head_dim", head_dim)
    if size % head:
        raise ValueError(
            f"`head_dim` ({head}) must divide w.shape[{axis}] ({size}) into heads."
        )
    rotary_dim = check_rotary_dim(rotary_dim, head, "the head size")
    order = np.arange(head)
    if source != target:
        to_half = np.concatenate(
            [np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2)]
        )
        order[:rotary_dim] = to_half if target == "half" else np.argsort(to_half)
    order = (np.arange(0, size, head)[:, None] + order[None, :]).reshape(-1)
    return _permute(w, order, axis)


@functools.partial(jax.jit, static_argnames="axis")
def _permute(w: jax.Array, order: np.ndarray, axis: int) -> jax.Array:
    """:func:`rope_permute_layout` of a checked ``order``, as one compiled program
    (``order``, a host array, is placed as it is, not copied by a program)."""
    return jnp.take(w, order, axis=axis)
