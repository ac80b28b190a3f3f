"""Multi-dimensional RoPE: axial RoPE for image patches and Qwen2-VL's M-RoPE.

Both give each rotary pair ``j < R/2`` (``R = config.rotated_features``) one coordinate of a
multi-dimensional position and rotate with :func:`flax_posenc.rope.rope_rotate`, so
the layouts, partial rotary and dtype rules are those of 1-D RoPE. They differ in how
pairs and frequencies are shared out:

* **Axial** (:func:`apply_axial_rope`; EVA-02, Fang et al. 2023; Heo et al., "Rotary
  Position Embedding for Vision Transformer", 2024, "RoPE-Axial"): with ``A`` axes,
  pairs ``a * R/(2A) ... (a + 1) * R/(2A) - 1`` rotate with axis ``a`` (for images:
  the first half of the pairs with the row, the second half with the column), and
  every axis uses the same frequency set of 1-D RoPE on ``R/A`` features,
  ``theta^(-2i / (R/A))`` for ``i < R/(2A)``. This is EVA-02's
  ``VisionRotaryEmbeddingFast`` (``freqs_h`` then ``freqs_w``, interleaved pairs, so
  ``layout="interleaved"`` to load its weights); Heo et al.'s reference code puts the
  column (x) before the row (y): pass ``positions[..., ::-1]`` to port it.
* **M-RoPE** (:func:`apply_mrope`; Wang et al., "Qwen2-VL", 2024): the 1-D
  frequencies ``theta^(-2i/R)`` are kept and cut into contiguous sections
  ``mrope_section`` (e.g. ``(16, 24, 24)`` for ``H = 128``); section ``a`` takes its
  angles from position row ``a`` (temporal, height, width). Text tokens carry three
  equal rows, so M-RoPE is then exactly 1-D RoPE. Qwen3-VL interleaves the rows
  over the pairs instead (``mrope_layout="interleaved"``: pair ``j`` takes row
  ``j % 3`` within each row's section size); Ernie-4.5-VL alternates height and
  width pair by pair and ends with the temporal pairs
  (``mrope_layout="hw_alternating"``). HunYuan-VL's XD-RoPE (``mrope_layout="xd"``)
  gives rows to features rather than pairs: the two halves of a ``rotate_half``
  pair may take different rows, so it is a rotation only where those agree (text).

Positions are integers, as everywhere in flax_posenc: building them (patch grid,
image token offsets) is the caller's job, with
:func:`flax_posenc.grid_positions` for grids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core.validation import (
    check_choice,
    check_heads_array,
    check_integer_array,
    check_positive_int,
    check_rope_config,
    check_seq_len,
    obeys_positions_rule,
)
from flax_posenc.rope import _core as _rope
from flax_posenc.rope.config import RopeConfig, RopeTables
from flax_posenc.rope.scaling import SeqLen

__all__ = [
    "MropeLayout",
    "apply_axial_rope",
    "apply_mrope",
    "axial_rope_cos_sin",
    "mrope_cos_sin",
]

MropeLayout = Literal["contiguous", "interleaved", "hw_alternating", "xd"]
"""How M-RoPE shares the rotary pairs out among the position rows (see
:func:`mrope_cos_sin`): Qwen2-VL's ``"contiguous"`` sections, Qwen3-VL's
``"interleaved"`` rows, Ernie-4.5-VL's ``"hw_alternating"``, HunYuan-VL's ``"xd"``
(rows per feature)."""


def axial_rope_cos_sin(
    positions: jax.Array, config: RopeConfig, *, seq_len: SeqLen = None
) -> RopeTables:
    """Axial RoPE tables: each of ``A`` axes rotates its own block of pairs.

    ``cos[..., a * R/(2A) + i] = cos(positions[..., a] * theta^(-2i / (R/A)))`` for
    ``i < R/(2A)`` (likewise ``sin``), times the scaling family's attention factor.

    Args:
      positions: integer ``[..., A]``: one coordinate per axis (``(row, col)`` for
        images). Stack separate row and column arrays with
        ``jnp.stack([rows, cols], -1)``.
      config: the RoPE configuration; ``config.rotated_features`` must be a
        multiple of ``2A``. A scaling family applies to each axis's ``R/A``-feature frequency set.
      seq_len: for dynamic NTK and LongRoPE; None means ``max(positions) + 1`` over
        all axes.

    Returns:
      ``RopeTables(cos, sin)``, each float32 ``positions.shape[:-1] + (R/2,)``.

    Raises:
      ValueError: ``positions`` is a scalar, or ``R`` is not a multiple of ``2A``.
      TypeError: non-integer positions.
    """
    check_rope_config("config", config, RopeConfig)
    positions = check_integer_array("positions", positions)
    if positions.ndim < 1:
        raise ValueError(
            "`positions` must be [..., A] with one coordinate per axis, got a scalar."
        )
    _check_axes(config, positions.shape)
    seq_len = check_seq_len(seq_len, "positions", positions.shape)
    return _axial_tables(positions, config=config, seq_len=seq_len)


def _check_axes(config: RopeConfig, shape: tuple[int, ...]) -> None:
    num_axes, rotary_dim = shape[-1], config.rotated_features
    if num_axes == 0 or rotary_dim % (2 * num_axes):
        raise ValueError(
            f"`config.rotated_features` ({rotary_dim}: rotary_dim, or head_dim where "
            f"it is None) must be a multiple of 2 * A, with A = positions.shape[-1] "
            f"= {num_axes} axes, so every axis rotates "
            f"R / A features; got positions of shape {shape}."
        )


@_rope.jit_angles("config")
def _axial_tables(
    positions: jax.Array, *, config: RopeConfig, seq_len: Any
) -> RopeTables:
    """:func:`axial_rope_cos_sin` of checked arguments, as one compiled program."""
    rotary_dim = config.rotated_features
    axis_dim = rotary_dim // positions.shape[-1]
    axis_config = dataclasses.replace(config, head_dim=axis_dim, rotary_dim=axis_dim)
    cos, sin = _rope.tables(positions, axis_config, seq_len)
    shape = positions.shape[:-1] + (rotary_dim // 2,)  # axis blocks side by side
    return RopeTables(cos.reshape(shape), sin.reshape(shape))


def apply_axial_rope(
    x: jax.Array, positions: jax.Array, config: RopeConfig, *, seq_len: SeqLen = None
) -> jax.Array:
    """Applies axial RoPE (e.g. 2-D for ViT patches) to q or k.

    Pair ``j`` is rotated by ``positions[..., a] * theta^(-2i / (R/A))`` where
    ``a = j // (R/(2A))`` and ``i = j % (R/(2A))``; see :func:`axial_rope_cos_sin`. The
    score ``q . k`` then depends only on the offset along each axis. With ``A = 1`` this
    is :func:`flax_posenc.apply_rope`.

    Args:
      x: ``[..., L, N, H]`` with ``H == config.head_dim``.
      positions: integer ``[..., L, A]`` (e.g. ``(row, col)`` per patch, from
        :func:`grid_positions`); ``positions.shape[:-1]`` broadcastable to
        ``x.shape[:-2]``. Tokens off the grid (a CLS token) should be split off by
        the caller, as EVA-02 does, or given a coordinate of their own.
      config: the RoPE configuration (``rotary_dim`` a multiple of ``2A``). EVA-02's
        fine-tuning interpolation (coordinates ``arange(ft) * pt / ft``) is
        ``scaling=LinearScaling(factor=ft / pt)`` on integer coordinates.
      seq_len: see :func:`axial_rope_cos_sin`.

    Returns:
      ``[..., L, N, H]`` in ``x.dtype``; features past ``rotary_dim`` unchanged.

    Raises:
      ValueError: bad shapes, or ``rotary_dim`` not a multiple of ``2A``.
      TypeError: non-integer positions.

    Examples:
      >>> q = jnp.ones((2, 14 * 14, 4, 64), jnp.bfloat16)
      >>> config = fp.RopeConfig(head_dim=64, theta=10000.0, layout="interleaved")
      >>> fp.apply_axial_rope(q, fp.grid_positions((14, 14)), config).shape
      (2, 196, 4, 64)
    """
    check_rope_config("config", config, RopeConfig)
    check_heads_array("x", x, config.head_dim)
    positions = check_integer_array("positions", positions)
    if positions.ndim < 2 or not obeys_positions_rule(
        positions.shape[:-1], x.shape[:-2]
    ):
        raise ValueError(
            "`positions` must be [..., L, A] (one coordinate per axis for each "
            f"token, L = x.shape[-3] = {x.shape[-3]}, leading axes broadcasting to "
            f"x.shape[:-3] = {x.shape[:-3]}), got shape {positions.shape}."
        )
    _check_axes(config, positions.shape)
    seq_len = check_seq_len(seq_len, "positions", positions.shape)
    # Two programs, as apply_rope: axial_rope_cos_sin's tables, then the rotation.
    cos, sin = _axial_tables(positions, config=config, seq_len=seq_len)
    return _rope.rotate(x, cos, sin, config.layout)


def _check_mrope_section(
    mrope_section: Any, config: RopeConfig, layout: MropeLayout
) -> tuple[int, ...]:
    if isinstance(mrope_section, (str, bytes)) or not isinstance(
        mrope_section, Sequence
    ):
        raise TypeError(
            "`mrope_section` must be a sequence of positive ints (e.g. (16, 24, 24)), "
            f"got {mrope_section!r}."
        )
    sections = tuple(
        check_positive_int(f"mrope_section[{a}]", n)
        for a, n in enumerate(mrope_section)
    )
    half = config.rotated_features // 2
    if layout == "hw_alternating" and (
        len(sections) != 3 or sections[0] != sections[1]
    ):
        raise ValueError(
            "`mrope_section` must be (s_h, s_w, s_t) with s_h == s_w for "
            f"mrope_layout='hw_alternating', got {list(sections)}."
        )
    if layout == "xd" and config.layout != "half":
        raise ValueError(
            "mrope_layout='xd' (HunYuan-VL's XD-RoPE) rotates rotate_half pairs: "
            f"config.layout must be 'half', got {config.layout!r}."
        )
    if layout != "interleaved" and sum(sections) != half:
        raise ValueError(
            f"`mrope_section` must sum to config.rotated_features // 2 ({half}) for "
            f"mrope_layout={layout!r}, got {list(sections)} (sum {sum(sections)})."
        )
    return sections


def _check_mrope_layout(layout: Any) -> MropeLayout:
    return check_choice("mrope_layout", layout, get_args(MropeLayout))


def _check_mrope_positions(positions: Any, sections: tuple[int, ...]) -> jax.Array:
    positions = check_integer_array("positions", positions)
    if positions.ndim < 1 or positions.shape[0] != len(sections):
        raise ValueError(
            f"`positions` must be [A, ...] with A = len(mrope_section) = "
            f"{len(sections)} rows (temporal, height, width), got shape "
            f"{positions.shape}."
        )
    return positions


def _mrope_rows(
    sections: tuple[int, ...], layout: MropeLayout, half: int
) -> np.ndarray:
    """The position row each rotary pair takes its angle from, int ``[R/2]``.

    Contiguous (Qwen2-VL): ``sections[0]`` pairs from row 0, then ``sections[1]``
    from row 1, ... Interleaved (Qwen3-VL's ``apply_interleaved_mrope``): pair ``j``
    takes row ``a = j % A`` while ``j < A * sections[a]`` (for ``a >= 1``), else row 0.
    HW-alternating (Ernie-4.5-VL): pairs ``j < 2 * sections[0]`` take row 1 (even
    ``j``) or 2 (odd ``j``), the rest row 0. XD (HunYuan-VL): one row per feature,
    ``[R]``: the first ``2 * sections[0]`` features row 0, the next ``2 *
    sections[1]`` row 1, ...
    """
    if layout == "xd":
        return np.repeat(np.arange(len(sections)), 2 * np.asarray(sections))
    if layout == "contiguous":
        return np.repeat(np.arange(len(sections)), sections)
    pairs = np.arange(half)
    rows = np.zeros_like(pairs)
    if layout == "hw_alternating":
        hw = pairs < 2 * sections[0]
        rows[hw] = 1 + pairs[hw] % 2
        return rows
    count = len(sections)
    for row in range(1, count):
        rows[(pairs % count == row) & (pairs < count * sections[row])] = row
    return rows


def mrope_cos_sin(
    positions: jax.Array,
    config: RopeConfig,
    *,
    mrope_section: Sequence[int],
    mrope_layout: MropeLayout = "contiguous",
    seq_len: SeqLen = None,
) -> RopeTables:
    """M-RoPE tables: each pair's angle taken at one of the ``A`` position rows.

    ``cos[..., j] = cos(positions[row(j), ...] * inv_freq[j])`` (likewise ``sin``),
    ``inv_freq`` those of ``config`` (scaling and attention factor included).
    Contiguous sections (Qwen2-VL, ``mrope_layout="contiguous"``): with
    ``s_a = mrope_section[0] + ... + mrope_section[a - 1]``, ``row(j) = a`` for
    ``s_a <= j < s_(a+1)``. Interleaved (Qwen3-VL): ``row(j) = j % A`` while
    ``j < A * mrope_section[j % A]``, else ``0`` (temporal). HW-alternating
    (Ernie-4.5-VL, sections ``(s, s, s_t)``): ``row(j) = 1 + j % 2`` (height,
    width) for ``j < 2s``, else ``0``. XD (HunYuan-VL): the tables are full width,
    ``[..., R]``, as ``cat(cos, cos)`` of 1-D RoPE with feature ``f`` taken at row
    ``a`` for ``2 s_a <= f < 2 s_(a+1)``.

    Args:
      positions: integer ``[A, ...]``, ``A = len(mrope_section)`` rows (Qwen2-VL:
        temporal, height, width), e.g. ``[3, B, L]``.
      config: the RoPE configuration.
      mrope_section: pairs per row, static (Hugging Face
        ``rope_parameters["mrope_section"]``, e.g. ``(16, 24, 24)``). Contiguous
        sections sum to ``config.rotated_features // 2``; interleaved ones need not
        (pairs they do not reach take row 0, as in transformers).
      mrope_layout: ``"contiguous"`` (Qwen2/2.5-VL), ``"interleaved"`` (Qwen3-VL)
        or ``"hw_alternating"`` (Ernie-4.5-VL).
      seq_len: see :func:`flax_posenc.rope_cos_sin`; None means ``max + 1`` over all
        rows.

    Returns:
      ``RopeTables(cos, sin)``, each float32 ``positions.shape[1:] + (R/2,)``
      (``(R,)`` for ``"xd"``).

    Raises:
      ValueError: sections not summing to ``R/2``, or ``positions.shape[0] != A``.
      TypeError: non-integer positions or sections.
    """
    check_rope_config("config", config, RopeConfig)
    layout = _check_mrope_layout(mrope_layout)
    sections = _check_mrope_section(mrope_section, config, layout)
    positions = _check_mrope_positions(positions, sections)
    seq_len = check_seq_len(seq_len, "positions", positions.shape)
    return _mrope_tables(
        positions, config=config, sections=sections, layout=layout, seq_len=seq_len
    )


@_rope.jit_angles("config", "sections", "layout")
def _mrope_tables(
    positions: jax.Array,
    *,
    config: RopeConfig,
    sections: tuple[int, ...],
    layout: MropeLayout,
    seq_len: Any,
) -> RopeTables:
    """:func:`mrope_cos_sin` of checked arguments, as one compiled program."""
    cos, sin = _rope.tables(positions, config, seq_len)
    return _select_rows(cos, sin, sections, layout)


def _select_rows(
    cos: jax.Array, sin: jax.Array, sections: tuple[int, ...], layout: MropeLayout
) -> RopeTables:
    """Each pair's ``[..., R/2]`` table from its row of ``[A, ..., R/2]`` ``cos`` and
    ``sin``."""
    rows = _mrope_rows(sections, layout, cos.shape[-1])

    def select(table: jax.Array) -> jax.Array:
        # Exact: each pair is copied from its row, no arithmetic across rows.
        if layout == "xd":  # features, not pairs: the table over the full width
            table = jnp.concatenate([table, table], -1)
        row_of_pair = jnp.asarray(rows).reshape((1,) * (table.ndim - 2) + rows.shape)
        chosen = table[0]
        for row in range(1, len(sections)):
            chosen = jnp.where(row_of_pair == row, table[row], chosen)
        return chosen

    return RopeTables(select(cos), select(sin))


def apply_mrope(
    x: jax.Array,
    positions: jax.Array,
    config: RopeConfig,
    *,
    mrope_section: Sequence[int],
    mrope_layout: MropeLayout = "contiguous",
    seq_len: SeqLen = None,
) -> jax.Array:
    """Applies multimodal RoPE (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL) to q or k.

    Rotates like :func:`flax_posenc.apply_rope` with the tables of
    :func:`mrope_cos_sin`: the first ``mrope_section[0]`` pairs by the temporal
    position, the next ``mrope_section[1]`` by the height, the last by the width.
    When all rows are equal (text) the result equals ``apply_rope(x, positions[0],
    config)`` bit for bit. Matches transformers' ``Qwen2VLRotaryEmbedding`` +
    ``apply_rotary_pos_emb`` (``layout="half"``).

    Args:
      x: ``[..., L, N, H]`` with ``H == config.head_dim``.
      positions: integer ``[A, ..., L]``, ``A = len(mrope_section)``;
        ``positions.shape[1:]`` broadcastable to ``x.shape[:-2]``.
      config: the RoPE configuration (Qwen2-VL: ``head_dim=128, theta=1e6``).
      mrope_section: see :func:`mrope_cos_sin`.
      mrope_layout: see :func:`mrope_cos_sin` (``"interleaved"`` for Qwen3-VL).
      seq_len: see :func:`mrope_cos_sin`.

    Returns:
      ``[..., L, N, H]`` in ``x.dtype``; features past ``rotary_dim`` unchanged.

    Raises:
      ValueError: bad shapes or sections.
      TypeError: non-integer positions or sections.

    Examples:
      >>> q = jnp.ones((1, 10, 28, 128), jnp.bfloat16)
      >>> positions = jnp.broadcast_to(jnp.arange(10), (3, 1, 10))
      >>> config = fp.RopeConfig(head_dim=128, theta=1e6)
      >>> fp.apply_mrope(q, positions, config, mrope_section=(16, 24, 24)).shape
      (1, 10, 28, 128)
    """
    check_rope_config("config", config, RopeConfig)
    check_heads_array("x", x, config.head_dim)
    layout = _check_mrope_layout(mrope_layout)
    sections = _check_mrope_section(mrope_section, config, layout)
    positions = _check_mrope_positions(positions, sections)
    if not obeys_positions_rule(positions.shape[1:], x.shape[:-2]):
        raise ValueError(
            f"`positions` must be [A, ..., L] with L = x.shape[-3] = {x.shape[-3]} "
            f"and leading axes broadcasting to x.shape[:-3] = {x.shape[:-3]}, got "
            f"shape {positions.shape}."
        )
    seq_len = check_seq_len(seq_len, "positions", positions.shape)
    # Two programs, as apply_rope: mrope_cos_sin's tables, then the rotation.
    cos, sin = _mrope_tables(
        positions, config=config, sections=sections, layout=layout, seq_len=seq_len
    )
    if layout == "xd":
        return _rotate_half_per_feature(x, cos, sin)
    return _rope.rotate(x, cos, sin, config.layout)


@jax.jit
def _rotate_half_per_feature(x: jax.Array, cos: jax.Array, sin: jax.Array):
    """``x * cos + rotate_half(x) * sin`` with full-width ``[..., L, R]`` tables on
    the first ``R`` features, in float32, rounded once to ``x.dtype``."""
    rotary = cos.shape[-1]
    head = x[..., :rotary].astype(jnp.float32)
    first, second = jnp.split(head, 2, axis=-1)
    rotated = jnp.concatenate([-second, first], -1)
    out = head * cos[..., None, :] + rotated * sin[..., None, :]
    return jnp.concatenate([out.astype(x.dtype), x[..., rotary:]], -1)
