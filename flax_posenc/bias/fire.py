"""FIRE: functional interpolation for relative positions (Li et al., 2023).

A learned function of the *progressively normalised* distance. For query ``i`` and key
``j`` (causal: ``j <= i``)::

    psi(x)      = log(c x + 1)
    u(i, j)     = psi(i - j) / (psi(max(threshold, i)) + eps)        in [0, 1]
    bias[h,i,j] = f(u(i, j))[h],   f(u) = W2 relu(W1 u + b1) + b2     (an MLP 1 -> W -> N)

with ``c`` and ``threshold = |threshold_multiplier * init_threshold|`` learnable, as in
the authors' code (which also takes ``|c x|``, so any real ``c`` is valid, and adds
``eps`` to the normaliser). Distances are ``|i - j|``: keys after the query, which
causal attention masks anyway, get the bias of the mirrored key.

Because ``u`` is normalised by the query's own position, the farthest key always sits
at ``u = 1`` whatever the length (``bias(i, 0) = f(1)`` for every ``i >= threshold``):
the bias is *not* a function of ``i - j`` alone, so FIRE is not shift invariant
beyond the threshold (it is below it, where the normaliser is constant).

:class:`FireBias` is its tile form for :func:`flax_posenc.blockwise_attention`; the
MLP is evaluated per tile as one fused accumulation over its hidden units, so the
forward stores no ``[l, s, W]`` hidden array. It is piecewise linear in ``u``: over
one tile's range of ``u`` most units keep one sign (far from the diagonal that
range is narrow), so a tile where at most 2 (or 8) change sign evaluates only
those, with the always-active ones summed into one line (``FireBias.tile_cases``);
other tiles evaluate all ``W``. Its derivatives form the hidden array for one tile
at a time and contract it with matmuls (the MLP's own JVP rule).

Reference: Li, You, Bhojanapalli, Li, Rawat, Reddi, Ye, Chern, Yu, Guo, Kumar,
"Functional Interpolation for Relative Positions Improves Long Context
Transformers", ICLR 2024 (arXiv 2310.04418), Section 3 (eq. 3 and the progressive
interpolation that follows it).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from flax_posenc._core.offsets import offsets
from flax_posenc._core.pytree import register_fields
from flax_posenc._core.validation import (
    check_float_array,
    check_position_pairs,
    check_positive_float,
)
from flax_posenc.bias.position_bias import KernelBias, Scalar

__all__ = [
    "FireBias",
    "FireParams",
    "fire_bias",
]


class FireParams(NamedTuple):
    """FIRE's learnable parameters (a pytree; the names of the modules' params).

    Attributes:
      c: floating ``[]`` or ``[N]`` (one per head), the log's slope (init 0.1).
      threshold_multiplier: floating ``[]`` or ``[N]``; the threshold is
        ``|threshold_multiplier * init_threshold|`` (init 1).
      hidden_kernel: floating ``[W]``, the first layer (input width 1).
      hidden_bias: floating ``[W]``.
      output_kernel: floating ``[W, N]``.
      output_bias: floating ``[N]``.
    """

    c: jax.Array
    threshold_multiplier: jax.Array
    hidden_kernel: jax.Array
    hidden_bias: jax.Array
    output_kernel: jax.Array
    output_bias: jax.Array


def _check_params(params: Any) -> int:
    """Validates ``params``; returns ``N``."""
    if not isinstance(params, FireParams):
        raise TypeError(
            "`params` must be a flax_posenc.FireParams, got "
            f"{type(params).__name__}. Hint: fp.FireParams(c=..., ...), or the "
            "parameters of flax_posenc.nnx.FIRE."
        )
    for name, value in params._asdict().items():
        check_float_array(f"params.{name}", value)
    if params.output_kernel.ndim != 2:
        raise ValueError(
            "`params.output_kernel` must be [W, N], got shape "
            f"{tuple(params.output_kernel.shape)}."
        )
    width, heads = (int(n) for n in params.output_kernel.shape)
    expected = {
        "hidden_kernel": (width,),
        "hidden_bias": (width,),
        "output_bias": (heads,),
    }
    for name, shape in expected.items():
        got = tuple(getattr(params, name).shape)
        if got != shape:
            raise ValueError(
                f"`params.{name}` must have shape {shape} (W = {width}, N = "
                f"{heads} from output_kernel [W, N]), got {got}."
            )
    for name in ("c", "threshold_multiplier"):
        got = tuple(getattr(params, name).shape)
        if got not in ((), (heads,)):
            raise ValueError(
                f"`params.{name}` must be a scalar [] or [N] = ({heads},), got "
                f"shape {got}."
            )
    return heads


def fire_bias(
    q_positions: jax.Array,
    k_positions: jax.Array,
    params: FireParams,
    *,
    init_threshold: float = 512.0,
    eps: float = 1e-6,
) -> jax.Array:
    """The FIRE attention bias ``f(psi(|i - j|) / psi(max(threshold, i)))``.

    See the module docstring for the formula. Float32; finite values and gradients
    at every distance (``log(|c| 0 + 1) = 0``).

    Args:
      q_positions: integer ``[..., L]``, non-negative (the normaliser uses them).
      k_positions: integer ``[..., S]``; leading dimensions broadcast with
        ``q_positions``'s.
      params: :class:`FireParams`.
      init_threshold: the threshold ``L`` at ``threshold_multiplier = 1`` (the
        authors' default 512); queries below it share one normaliser.
      eps: added to the normaliser (the authors' 1e-6).

    Returns:
      float32 ``[..., N, L, S]``.

    Raises:
      TypeError: non-integer positions, ``params`` not a :class:`FireParams` or
        with non-floating leaves, non-numeric ``init_threshold`` / ``eps``.
      ValueError: parameter shapes that disagree, ``init_threshold <= 0``, ``eps <=
        0``, positions of rank 0 or whose leading dimensions do not broadcast.

    Examples:
      >>> params = fp.FireParams(c=jnp.array(0.1), threshold_multiplier=jnp.array(1.0),
      ...     hidden_kernel=jnp.ones(1), hidden_bias=jnp.zeros(1),
      ...     output_kernel=jnp.ones((1, 1)), output_bias=jnp.zeros(1))
      >>> bias = fp.fire_bias(jnp.array([100, 200]), jnp.array([0, 100]), params,
      ...     init_threshold=4.0)
      >>> [round(b, 4) for b in bias[0, :, 0].tolist()]  # the farthest key: f(1)
      [1.0, 1.0]

    Reference: Li et al., ICLR 2024.
    """
    _check_params(params)
    init_threshold = check_positive_float("init_threshold", init_threshold)
    eps = check_positive_float("eps", eps)
    q_positions, k_positions = check_position_pairs(q_positions, k_positions)
    return _fire(q_positions, k_positions, params, init_threshold, eps)


@functools.partial(jax.jit, static_argnames=("init_threshold", "eps"))
def _fire(
    q_positions: jax.Array,
    k_positions: jax.Array,
    params: FireParams,
    init_threshold: float,
    eps: float,
) -> jax.Array:
    """:func:`fire_bias` of checked arguments: float32 ``[..., N, L, S]``."""
    f32 = _as_float32(params)
    u = _normalised_distance(q_positions, k_positions, f32, init_threshold, eps)
    out = _mlp(
        u, f32.hidden_kernel, f32.hidden_bias, f32.output_kernel, f32.output_bias
    )
    return jax.lax.optimization_barrier(out)


def _normalised_distance(
    q_positions: jax.Array,
    k_positions: jax.Array,
    f32: FireParams,
    init_threshold: float,
    eps: float,
) -> jax.Array:
    """``u(i, j)``, float32 ``[..., 1 or N, L, S]`` (one per head when ``c`` or the
    threshold is)."""
    distance = offsets(q_positions, k_positions)  # [..., L, S]
    q_positions = jnp.broadcast_to(q_positions, distance.shape[:-1])
    heads_shape = (1,) * (distance.ndim - 2) + (-1, 1, 1)
    c = jnp.abs(f32.c).reshape(heads_shape)  # [.., 1 or N, 1, 1]
    threshold = jnp.abs(f32.threshold_multiplier * init_threshold)
    threshold = threshold.reshape(heads_shape)
    d = jnp.abs(distance).astype(jnp.float32)[..., None, :, :]
    q = q_positions.astype(jnp.float32)[..., None, :, None]
    u = _normalised(q, d, c, threshold, eps)
    # Kept whole (an optimization barrier): fused into its consumers, XLA would
    # evaluate the logs once per hidden unit and head (two orders of magnitude
    # slower on CPU).
    return jax.lax.optimization_barrier(u)


def _normalised(
    q: jax.Array, d: jax.Array, c: Any, threshold: Any, eps: float
) -> jax.Array:
    """``u = log(1 + c d) / (log(1 + c max(q, threshold)) + eps)`` at float32 query
    positions ``q`` and distances ``d`` (``c`` and the threshold broadcast)."""
    return jnp.log1p(c * d) / (jnp.log1p(c * jnp.maximum(q, threshold)) + eps)


@dataclasses.dataclass(frozen=True)
class _FireTile:
    """One head's float32 ``[l, s]`` tile (:class:`flax_posenc.KernelBias`): the
    head's scalars are ``(|c|, threshold, b2, W2[:, h])``, the shared ones ``(W1,
    b1)``; every hidden unit is evaluated (no per-tile cases in a kernel)."""

    width: int  # W, the hidden units
    eps: float

    def __call__(
        self,
        head: Scalar,
        shared: Scalar,
        q_positions: jax.Array,
        k_positions: jax.Array,
    ) -> jax.Array:
        d = jnp.abs((k_positions - q_positions).astype(jnp.float32))
        u = _normalised(q_positions.astype(jnp.float32), d, head(0), head(1), self.eps)
        out = jnp.zeros(u.shape, jnp.float32) + head(2)
        for w in range(self.width):
            hidden = jax.nn.relu(u * shared(w) + shared(self.width + w))
            out = out + head(3 + w) * hidden
        return out


@jax.custom_jvp
def _mlp(
    u: jax.Array, w1: jax.Array, b1: jax.Array, w2: jax.Array, b2: jax.Array
) -> jax.Array:
    """``f(u)[h] = b2[h] + sum_w W2[w, h] relu(W1[w] u + b1[w])``, float32
    ``[..., N, l, s]`` from ``u [..., 1 or N, l, s]``.

    Accumulated over the ``W`` hidden units: one fused loop over the tile, no
    ``[..., l, s, W]`` hidden array. Its derivatives (:func:`_mlp_jvp`) are matmuls
    over that array instead: autodiff of the loop reduces the tile once per hidden
    unit and head, about ten times slower."""
    lead = (1,) * (u.ndim - 3)
    out = jnp.broadcast_to(
        b2.reshape(lead + (-1, 1, 1)), u.shape[:-3] + (b2.shape[0],) + u.shape[-2:]
    )
    for w in range(w1.shape[0]):
        hidden = jax.nn.relu(u * w1[w] + b1[w])
        out = out + w2[w].reshape(lead + (-1, 1, 1)) * hidden
    return out


@_mlp.defjvp
def _mlp_jvp(primals: tuple, tangents: tuple) -> tuple[jax.Array, jax.Array]:
    """The MLP's JVP through its ``[..., 1 or N, l, s, W]`` pre-activations; linear
    in the tangents as einsums, so reverse mode transposes it to matmuls."""
    u, w1, b1, w2, _ = primals  # b2 enters the tangent only through db2
    du, dw1, db1, dw2, db2 = tangents
    exact = jax.lax.Precision.HIGHEST  # float32 passes on every backend
    units = (1,) * u.ndim + (-1,)  # W last
    pre = u[..., None] * w1.reshape(units) + b1.reshape(units)
    active = pre > 0
    hidden = jnp.where(active, pre, 0.0)
    outer = lambda a, b: jnp.einsum("...ls,w->...lsw", a, b, precision=exact)
    d_pre = outer(du, w1) + outer(u, dw1) + db1.reshape(units)
    d_hidden = jnp.where(active, d_pre, 0.0)
    if u.shape[-3] == 1:  # one u for every head: [..., l, s, W] @ [W, N]
        spec = "...lsw,wn->...nls"
        hidden, d_hidden = hidden[..., 0, :, :, :], d_hidden[..., 0, :, :, :]
    else:  # u per head: [..., N, l, s, W] with W2's column of each head
        spec = "...nlsw,wn->...nls"
    d_out = jnp.einsum(spec, d_hidden, w2, precision=exact)
    d_out = d_out + jnp.einsum(spec, hidden, dw2, precision=exact)
    d_out = d_out + db2.reshape((1,) * (u.ndim - 3) + (-1, 1, 1))
    return _mlp(*primals), d_out


_Tile = Callable[..., jax.Array]  # one tile's bias, float32 [..., N, l, s]

# The tile form evaluates only the hidden units whose pre-activation changes sign
# over the tile's range of u, in the smallest of these windows that holds them
# (more take the full MLP): a unit active over the whole range is a line, folded
# into one, an inactive one is 0.
_WINDOWS = (2, 8)


def _select_units(
    u: jax.Array, w1: jax.Array, b1: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Classifies the hidden units over ``[min u, max u]``: ``(count, always,
    order)``, int32 ``[]`` (how many change sign), bool ``[W]`` (active
    throughout), and int32 ``[max(_WINDOWS)]``: the first units that change sign,
    padded with ``W``."""
    low, high = jnp.min(u), jnp.max(u)
    pre_low, pre_high = w1 * low + b1, w1 * high + b1  # linear: ends bound it
    always = (pre_low >= 0) & (pre_high >= 0)
    mixed = ~always & ~((pre_low <= 0) & (pre_high <= 0))  # NaN: mixed
    (order,) = jnp.nonzero(mixed, size=max(_WINDOWS), fill_value=w1.shape[0])
    return jnp.sum(mixed), always, order


@jax.custom_jvp
def _window_mlp(
    u: jax.Array,
    w1: jax.Array,
    b1: jax.Array,
    w2: jax.Array,
    b2: jax.Array,
    always: jax.Array,
    window: jax.Array,
) -> jax.Array:
    """:func:`_mlp` where every unit outside ``window`` keeps one sign over ``u``
    (see :func:`_select_units`): the ``always``-active ones summed into one line
    ``slope u + intercept``, the others 0, the ``window`` units evaluated. Equal to
    :func:`_mlp` up to rounding (a pre-activation within rounding of 0 at an end
    of the range may count as either sign); NaN parameters stay NaN."""
    lead = (1,) * (u.ndim - 3)
    per_head = lambda a: a.reshape(lead + (-1, 1, 1))
    slope = jnp.sum(jnp.where(always[:, None], w1[:, None] * w2, 0.0), axis=0)
    # 0 * w2, not 0: a NaN in an inactive unit's W2 is NaN in _mlp too.
    folded = jnp.where(always[:, None], b1[:, None] * w2, 0.0 * w2)
    out = per_head(slope) * u + per_head(b2 + jnp.sum(folded, axis=0))
    pad = lambda a: jnp.concatenate([a, jnp.zeros_like(a[:1])])[window]  # W: 0
    # Gathered whole (a barrier): fused, each tile element would gather them.
    w1, b1, w2 = jax.lax.optimization_barrier((pad(w1), pad(b1), pad(w2)))
    for m in range(window.shape[0]):
        hidden = jax.nn.relu(u * w1[m] + b1[m])
        out = out + per_head(w2[m]) * hidden
    return out


@_window_mlp.defjvp
def _window_mlp_jvp(primals: tuple, tangents: tuple) -> tuple[jax.Array, jax.Array]:
    """The MLP's own JVP (:func:`_mlp_jvp`): the selection has no tangent."""
    return _window_mlp(*primals), _mlp_jvp(primals[:5], tangents[:5])[1]


def _windowed(
    u: jax.Array, mlp: tuple, always: jax.Array, window: jax.Array, *_: Any
) -> jax.Array:
    """A tile case: :func:`_window_mlp` of the tile's ``u`` (positions ignored)."""
    return _window_mlp(u, *mlp, always, window)


def _as_float32(params: FireParams) -> FireParams:
    return FireParams(*(jnp.asarray(p, jnp.float32) for p in params))


@dataclasses.dataclass(frozen=True, eq=False)
class FireBias:
    """FIRE as a :class:`flax_posenc.PositionBias`, for blockwise attention.

    ``FireBias(params, init_threshold=..., eps=...)(q_positions, k_positions) ==
    fire_bias(q_positions, k_positions, params, ...)``. A pytree whose leaves are
    the parameters (through ``jit`` and ``grad``); the floats are static.

    Attributes:
      params: :class:`FireParams`.
      init_threshold: as in :func:`fire_bias`.
      eps: as in :func:`fire_bias`.

    Raises:
      TypeError: as :func:`fire_bias`, for the parameters and floats.
      ValueError: as :func:`fire_bias`, for the parameters and floats.

    Examples:
      >>> params = fp.FireParams(jnp.array(0.1), jnp.array(1.0), jnp.ones(8),
      ...     jnp.zeros(8), jnp.ones((8, 4)) / 8, jnp.zeros(4))
      >>> q = jnp.ones((1, 64, 4, 8))  # [B, L, N, H]
      >>> fp.blockwise_attention(q, q, q, q_positions=jnp.arange(64),
      ...     bias=fp.FireBias(params), causal=True, block_q=16, block_k=16).shape
      (1, 64, 4, 8)
    """

    params: FireParams
    init_threshold: float = 512.0
    eps: float = 1e-6

    def __post_init__(self):
        _check_params(self.params)
        init = check_positive_float("init_threshold", self.init_threshold)
        object.__setattr__(self, "init_threshold", init)
        object.__setattr__(self, "eps", check_positive_float("eps", self.eps))

    @property
    def num_heads(self) -> int:
        """``N``, the MLP's output width."""
        return self.params.output_kernel.shape[1]

    def __call__(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
        """float32 ``[..., N, L, S]``, see :func:`flax_posenc.fire_bias`."""
        return self.tile(*check_position_pairs(q_positions, k_positions))

    def kernel_form(self) -> KernelBias:
        """The bias for a Pallas kernel: each head's ``|c|``, threshold, output bias
        and output column; the hidden layer shared."""
        f32 = _as_float32(self.params)
        heads = self.num_heads
        per_head = lambda x: jnp.broadcast_to(x, (heads,))
        threshold = jnp.abs(f32.threshold_multiplier * self.init_threshold)
        head_params = jnp.concatenate(
            [
                jnp.stack([per_head(jnp.abs(f32.c)), per_head(threshold)], axis=-1),
                f32.output_bias[:, None],
                f32.output_kernel.T,
            ],
            axis=-1,
        )
        shared = jnp.concatenate([f32.hidden_kernel, f32.hidden_bias])
        return KernelBias(
            head_params, shared, _FireTile(f32.hidden_kernel.shape[0], self.eps)
        )

    def tile(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
        """The call on checked integer positions (the kernels' tiles)."""
        return _fire(
            q_positions, k_positions, self.params, self.init_threshold, self.eps
        )

    def tile_cases(
        self, q_positions: jax.Array, k_positions: jax.Array
    ) -> tuple[jax.Array, tuple[_Tile, ...]]:
        """The exact forms of one tile, for blockwise attention: ``(index,
        cases)``. Case ``i < len(_WINDOWS)`` evaluates only the hidden units that
        change sign over the tile's range of ``u``, at most ``_WINDOWS[i]`` of
        them (2 or 8); the last case is the whole MLP. ``index`` picks the first
        that holds them. Each ignores the positions it is called with: all are
        this tile's. The kernels call it on their checked int32 positions."""
        f32 = _as_float32(self.params)
        u = _normalised_distance(
            q_positions, k_positions, f32, self.init_threshold, self.eps
        )
        mlp = (f32.hidden_kernel, f32.hidden_bias, f32.output_kernel, f32.output_bias)
        count, always, order = _select_units(u, *mlp[:2])
        windowed = [
            functools.partial(_windowed, u, mlp, always, order[:size])
            for size in _WINDOWS
        ]
        full = lambda *_: _mlp(u, *mlp)
        index = jnp.sum(count > jnp.array(_WINDOWS, jnp.int32))
        return index, (*windowed, full)


register_fields(FireBias, ("params",), ("init_threshold", "eps"))
