"""RoPE inside the Pallas kernels: q and k tiles rotated in fast memory from their
positions, so rotated q and k never exist in HBM.

The rotation of :func:`flax_posenc.rope_rotate` written per feature lane: with
``f`` the lane's frequency, ``a`` its attention scaling (1 on lanes past the
rotated ``R``, whose frequency is 0) and ``sign`` -1 on the first feature of each
rotated pair, +1 on the second,

    rotate(x)[i] = x[i] * a cos(p f[i]) + x[partner(i)] * sign[i] * a sin(p f[i])

where ``partner`` swaps the two features of a pair: ``i <-> i + R/2`` (``"half"``)
or ``2j <-> 2j + 1`` (``"interleaved"``), two lane rotations (``pltpu.roll``) and a
select. In float32 this is, term for term, the reference's ``(a c - b s, b c +
a s)``; the inverse (the gradient's) flips ``sign``.

The per-lane rows are computed once per call from the config (float32 angles by
elementwise multiply, as everywhere): ``[8, H]`` float32 (q's frequency and
scaling, k's, the signs; sublane-padded). Frequencies that depend on ``seq_len``
take it as given, or ``max(q, k positions) + 1`` as :func:`flax_posenc.apply_rope_qk`
does. Per-token lengths and exact angles have no such rows: q and k are then rotated
before the kernel (:mod:`flax_posenc.attention._dispatch`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu

from flax_posenc.rope import _core as _rope

Q_FREQ, Q_SCALE, K_FREQ, K_SCALE, SIGN = range(5)
ROWS = 8  # the rows' sublane-padded height


class RopeStatic(NamedTuple):
    """What the kernels are compiled for: the layout, ``R`` and ``H``."""

    layout: str
    rotated: int
    head_dim: int


class KernelRope(NamedTuple):
    """RoPE as a kernel takes it: what it is compiled for, and the rows."""

    static: RopeStatic
    rows: jax.Array  # float32 [8, H], see rows()


def kernel_rope(rotation: Any, blocks: Any) -> KernelRope:
    """A spec's ``Rotation`` for the prepared blocks (whose positions give the
    length a ``seq_len``-dependent family was not given)."""
    q_pos, k_pos = blocks.q_positions, blocks.k_positions
    assert q_pos is not None and k_pos is not None  # checked: RoPE needs positions
    config, seq_len, k_seq_len = rotation
    static = RopeStatic(config.layout, config.rotated_features, config.head_dim)
    return KernelRope(static, rows(config, seq_len, k_seq_len, q_pos, k_pos))


def rows(
    config: Any,
    seq_len: Any,
    k_seq_len: Any,
    q_positions: jax.Array,
    k_positions: jax.Array,
) -> jax.Array:
    """float32 ``[8, H]``: per lane q's frequency and scaling, k's, and the sign.

    ``q_positions`` / ``k_positions`` are the kernel's int32 rows (k's are q's when
    the caller gave none)."""
    if seq_len is None and config.depends_on_seq_len:
        # apply_rope_qk: q's and k's shared length, unless k brings its own
        shared = q_positions if k_seq_len is not None else k_positions
        seq_len = _rope.shared_seq_len(q_positions, shared)
    k_seq_len = seq_len if k_seq_len is None else k_seq_len
    rotated, head_dim = config.rotated_features, config.head_dim
    out = jnp.zeros((ROWS, head_dim), jnp.float32)
    for freq_row, length in ((Q_FREQ, seq_len), (K_FREQ, k_seq_len)):
        inv_freq, scaling = _rope.frequencies(config, length)
        lanes = _per_lane(jnp.asarray(inv_freq, jnp.float32), config.layout)
        out = out.at[freq_row, :rotated].set(lanes)
        out = out.at[freq_row + 1].set(1.0)
        out = out.at[freq_row + 1, :rotated].set(jnp.asarray(scaling, jnp.float32))
    first = jnp.ones(rotated // 2, jnp.float32)
    return out.at[SIGN, :rotated].set(_per_lane(first, config.layout, -1.0))


def _per_lane(half: jax.Array, layout: str, first_sign: float = 1.0) -> jax.Array:
    """``[R/2]`` values of the pairs as ``[R]`` lanes: each pair's first feature
    gets ``first_sign * value``, its second ``value``."""
    if layout == "half":
        return jnp.concatenate([first_sign * half, half])
    return jnp.stack([first_sign * half, half], -1).reshape(-1)


def rotate(
    static: RopeStatic,
    x: jax.Array,
    positions: jax.Array,
    rows_ref: Any,
    side: str,
    inverse: bool = False,
) -> jax.Array:
    """``x [rows, H]`` rotated at ``positions`` (lane-broadcast int32 ``[rows,
    128]``) with ``side``'s (``"q"`` or ``"k"``) rows; float32. ``inverse``: the
    transpose, which carries a gradient back to the unrotated input."""
    freq_row = Q_FREQ if side == "q" else K_FREQ
    freq = rows_ref[freq_row : freq_row + 1, :]
    scaling = rows_ref[freq_row + 1 : freq_row + 2, :]
    sign = rows_ref[SIGN : SIGN + 1, :]
    angles = positions[:, :1].astype(jnp.float32) * freq
    cos = jnp.cos(angles) * scaling
    sin = jnp.sin(angles) * scaling * (-sign if inverse else sign)
    x = x.astype(jnp.float32)
    return x * cos + _partner(static, x) * sin


def _partner(static: RopeStatic, x: jax.Array) -> jax.Array:
    """Each rotated lane's pair partner (lanes past ``R``: anything, their sine
    is 0)."""
    lane = jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)
    width = static.head_dim
    if static.layout == "half":
        half = static.rotated // 2
        later = pltpu.roll(x, width - half, 1)  # lane i reads i + R/2
        earlier = pltpu.roll(x, half, 1)  # lane i reads i - R/2
        return jnp.where(lane < half, later, earlier)
    later, earlier = pltpu.roll(x, width - 1, 1), pltpu.roll(x, 1, 1)
    return jnp.where(lane % 2 == 0, later, earlier)
