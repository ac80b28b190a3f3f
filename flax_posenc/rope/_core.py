"""The unchecked RoPE core: frequencies, unit cos/sin tables and the rotation.

Callers check their inputs first (:mod:`flax_posenc.rope`, :mod:`flax_posenc.rope.nd`,
:mod:`flax_posenc.rope.xpos`, :mod:`flax_posenc.rope.cache_shift`); nothing here validates
again. ``config`` is a :class:`flax_posenc.RopeConfig` (read by attribute: this
module sits below it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core import cpu as _cpu
from flax_posenc._core.angles import default_inv_freq, position_angles
from flax_posenc._core.exact_angles import exact_sin_cos, int32_positions
from flax_posenc._core.sincos import sin_cos

T = TypeVar("T")


def frequencies(config: Any, seq_len: Any) -> tuple[jax.Array, Any]:
    """``(inv_freq float32 [R/2] or seq_len.shape + [R/2], attention_scaling)``."""
    if config.scaling is None:
        inv_freq = default_inv_freq(config.theta, config.rotated_features)
        return jnp.asarray(inv_freq, jnp.float32), 1.0
    return config.scaling.frequencies(config.theta, config.rotated_features, seq_len)


def _seq_len_of(positions: jax.Array, config: Any, seq_len: Any) -> Any:
    """``seq_len``, or ``max(positions) + 1`` in-graph for the families that need it."""
    if seq_len is None and config.depends_on_seq_len:
        return jnp.max(positions, initial=0) + 1
    return seq_len


@jax.jit
def shared_seq_len(positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    """``max(positions, k_positions) + 1``, the ``seq_len`` q and k share where the
    frequencies depend on it (:func:`flax_posenc.apply_rope_qk`), as one program."""
    return (
        jnp.maximum(jnp.max(positions, initial=0), jnp.max(k_positions, initial=0)) + 1
    )


def rotate_qk(
    q: jax.Array,
    k: jax.Array,
    positions: jax.Array,
    k_positions: jax.Array | None,
    config: Any,
    seq_len: Any,
    k_seq_len: Any,
) -> tuple[jax.Array, jax.Array]:
    """q and k rotated with one set of frequencies (checked inputs;
    :func:`flax_posenc.apply_rope_qk`). ``k_positions`` None with ``k_seq_len`` None:
    q's tables serve k; a ``seq_len``-dependent family without lengths uses
    ``max(positions, k_positions) + 1`` for both."""
    if k_positions is None and k_seq_len is None:
        cos, sin = tables(positions, config, seq_len)
        return rotate(q, cos, sin, config.layout), rotate(k, cos, sin, config.layout)
    if k_positions is None:
        k_positions = positions
    if seq_len is None and k_seq_len is None and config.depends_on_seq_len:
        seq_len = shared_seq_len(positions, k_positions)
    q_cos, q_sin = tables(positions, config, seq_len)
    k_cos, k_sin = tables(
        k_positions, config, seq_len if k_seq_len is None else k_seq_len
    )
    return (
        rotate(q, q_cos, q_sin, config.layout),
        rotate(k, k_cos, k_sin, config.layout),
    )


def _host_seq_len(config: Any, seq_len: Any) -> int | None:
    """The ``seq_len`` exact angles' host frequencies depend on: a Python int for a
    ``seq_len``-dependent family (its frequencies are not known on the host
    otherwise), None for the others (they ignore it)."""
    if not config.depends_on_seq_len:
        return None
    if not isinstance(seq_len, int):
        given = "None" if seq_len is None else f"an array of shape {seq_len.shape}"
        raise ValueError(
            f"`seq_len` must be a Python int for {type(config.scaling).__name__} with "
            "angle_precision='exact' (its frequencies depend on seq_len, and exact "
            "angles need their float64 values on the host), got "
            f"{given}; None means max(positions) + 1, computed in the graph. Hint: "
            "pass seq_len=<the sequence length>, or use angle_precision='float32'."
        )
    return seq_len


def _frequencies_float64(config: Any, seq_len: Any) -> tuple[np.ndarray, float]:
    """The float64 host frequencies exact angles start from."""
    if config.scaling is None:
        return default_inv_freq(config.theta, config.rotated_features), 1.0
    return config.scaling.frequencies_float64(
        config.theta, config.rotated_features, _host_seq_len(config, seq_len)
    )


def unit_cos_sin(
    positions: jax.Array, config: Any, seq_len: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``cos(p * inv_freq)``, ``sin(p * inv_freq)`` (unit magnitude) and the
    attention scaling, float32, shaped to multiply them.

    ``positions`` is a checked integer array; ``seq_len`` None, an int, or an integer
    array whose shape obeys the positions rule for ``positions``.
    """
    if config.angle_precision == "exact":
        inv_freq64, attention_scaling = _frequencies_float64(config, seq_len)
        sin, cos = exact_sin_cos(positions, inv_freq64)
    else:
        seq_len = _seq_len_of(positions, config, seq_len)
        if isinstance(seq_len, jax.Array) and seq_len.ndim:
            seq_len = jnp.broadcast_to(seq_len, positions.shape)
        inv_freq, attention_scaling = frequencies(config, seq_len)
        # XLA's sin/cos, or on CPU a vectorised polynomial (flax_posenc._core.cpu)
        sin, cos = sin_cos(position_angles(positions, inv_freq))
    scale = jnp.asarray(attention_scaling, jnp.float32)
    scale = scale.reshape(scale.shape + (1,) * (sin.ndim - scale.ndim))
    return cos, sin, scale


def tables(
    positions: jax.Array, config: Any, seq_len: Any
) -> tuple[jax.Array, jax.Array]:
    """``cos(p * inv_freq) * a`` and ``sin(p * inv_freq) * a`` (see
    :func:`flax_posenc.rope_cos_sin`).

    One compiled program (eagerly too: op by op they were some 30 programs per new
    shape). Exact angles start from host float64 frequencies at a Python-int
    ``seq_len``, a static argument where the family depends on it.
    """
    if config.angle_precision == "exact":
        return _compiled_exact_tables(
            int32_positions(positions), config, _host_seq_len(config, seq_len)
        )
    return _compiled_tables(positions, config, seq_len)


def _scaled_tables(
    positions: jax.Array, config: Any, seq_len: Any
) -> tuple[jax.Array, jax.Array]:
    cos, sin, scale = unit_cos_sin(positions, config, seq_len)
    return cos * scale, sin * scale


_compiled_tables = jax.jit(_scaled_tables, static_argnames="config")
_compiled_exact_tables = jax.jit(_scaled_tables, static_argnames=("config", "seq_len"))


def jit_angles(*static_argnames: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """``functools.partial(jax.jit, static_argnames=...)`` for an unchecked core
    ``core(positions, ..., *, config, seq_len, ...)`` that forms RoPE angles of
    ``positions``: one compiled program per static configuration, eagerly too.

    ``config`` must be among ``static_argnames``. float32 angles trace ``seq_len``
    (a new length never recompiles); exact angles take it static, as the Python
    int or None their host float64 frequencies need (the ``ValueError`` of
    :func:`tables` otherwise), and their 64-bit positions are checked for the
    int32 range here, while they are still concrete (the core casts them).
    """

    def wrap(core: Callable[..., T]) -> Callable[..., T]:
        traced = jax.jit(core, static_argnames=static_argnames)
        exact = jax.jit(core, static_argnames=(*static_argnames, "seq_len"))

        @functools.wraps(core)
        def call(positions: jax.Array, *args: Any, config: Any, seq_len: Any, **kw):
            if config.angle_precision == "exact":
                int32_positions(positions)  # the check; the core casts
                seq_len = _host_seq_len(config, seq_len)
                return exact(positions, *args, config=config, seq_len=seq_len, **kw)
            return traced(positions, *args, config=config, seq_len=seq_len, **kw)

        return call

    return wrap


def rotate(x: jax.Array, cos: jax.Array, sin: jax.Array, layout: str) -> jax.Array:
    """Rotates the first ``R = 2 * cos.shape[-1]`` features of ``x [..., L, N, H]``
    by the float ``[..., L, R/2]`` tables (see :func:`flax_posenc.rope_rotate`), as
    one compiled program."""
    if cos.shape[-1] == 0:
        return x
    return _compiled_rotate(x, cos, sin, layout)


@functools.partial(jax.jit, static_argnames="layout")
def _compiled_rotate(
    x: jax.Array, cos: jax.Array, sin: jax.Array, layout: str
) -> jax.Array:
    return _cpu.on_cpu(
        lambda x, cos, sin: _cpu.rotate(x, cos, sin, layout),
        lambda x, cos, sin: _reference(x, cos, sin, layout),
        x,
        cos,
        sin,
    )


def _reference(x: jax.Array, cos: jax.Array, sin: jax.Array, layout: str) -> jax.Array:
    """The rotation as written (what accelerators run; the tests' oracle with the
    CPU form of :func:`flax_posenc._core.cpu.rotate`): ``(a, b) -> (a c - b s, b c + a s)``
    for the pairs ``(a, b)`` of the layout, in float32, rounded once; features past
    ``R`` pass through."""
    half = cos.shape[-1]
    rotary = x[..., : 2 * half].astype(jnp.float32)
    lead = (1,) * (x.ndim - 1 - cos.ndim)
    c = cos.astype(jnp.float32).reshape(lead + cos.shape[:-1] + (1, half))
    s = sin.astype(jnp.float32).reshape(lead + sin.shape[:-1] + (1, half))
    if layout == "half":
        a, b = rotary[..., :half], rotary[..., half:]
        out = jnp.concatenate([a * c - b * s, b * c + a * s], -1)
    else:
        a, b = rotary[..., 0::2], rotary[..., 1::2]
        out = jnp.stack([a * c - b * s, b * c + a * s], -1).reshape(rotary.shape)
    return jnp.concatenate([out.astype(x.dtype), x[..., 2 * half :]], -1)
