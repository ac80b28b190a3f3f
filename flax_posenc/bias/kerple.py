"""Kerple: kernelized relative positional embeddings (Chi et al., 2022).

Each head ``h`` adds a conditionally positive definite kernel of the distance
``d = |q_pos - k_pos|`` to its attention logits, with two learnable scalars per head:

* logarithmic: ``bias[h, i, j] = -r1_h * log(1 + r2_h * d)``, ``r1_h, r2_h > 0``;
* power: ``bias[h, i, j] = -r1_h * d ** r2_h``, ``r1_h > 0``, ``0 < r2_h <= 2``.

The constraints hold by construction: the parameters are unconstrained reals and
``r1 = softplus(r1_unconstrained)``, ``r2 = softplus(r2_unconstrained)`` (log) or
``r2 = 2 * sigmoid(r2_unconstrained)`` (power), each floored at the smallest normal
float32 (``2^-126``, reached only below a raw value of about -87, where softplus
would round to 0), so no optimiser step can leave the kernel's domain (the authors'
code clamps at ``1e-2`` after each step instead). Such tiny parameters still give a
bias that rounds to 0: the kernel without a bias, never a sign flip. ALiBi is the power kernel with ``r2 = 1`` and fixed ``r1``.

A function of ``q_pos - k_pos`` only, so it is shift invariant, and it serves causal
and bidirectional attention alike. :class:`KerpleBias` is its tile form for
:func:`flax_posenc.blockwise_attention`.

Reference: Chi, Fan, Ramadge, Rudnicky, "KERPLE: Kernelized Relative Positional
Embedding for Length Extrapolation", NeurIPS 2022 (Section 4: the power and
logarithmic variants).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc._core.offsets import offsets
from flax_posenc._core.pytree import register_fields
from flax_posenc._core.validation import (
    check_choice,
    check_float_array,
    check_position_pairs,
)
from flax_posenc.bias.position_bias import KernelBias, Scalar

__all__ = [
    "KerpleBias",
    "KerpleKernel",
    "kerple_bias",
    "kerple_parameters",
]

KerpleKernel = Literal["log", "power"]
"""``"log"``: ``-r1 log(1 + r2 d)``; ``"power"``: ``-r1 d^r2``."""
_KERNELS = ("log", "power")
_FLOOR = float(np.finfo(np.float32).tiny)  # the smallest normal float32, 2^-126


def _check_parameters(r1_unconstrained: Any, r2_unconstrained: Any) -> int:
    """Both floating ``[N]`` with the same ``N``; returns ``N``."""
    for name, value in (
        ("r1_unconstrained", r1_unconstrained),
        ("r2_unconstrained", r2_unconstrained),
    ):
        check_float_array(name, value)
        if value.ndim != 1:
            raise ValueError(
                f"`{name}` must be [N] (one value per head), got shape "
                f"{tuple(value.shape)}."
            )
    if r1_unconstrained.shape != r2_unconstrained.shape:
        raise ValueError(
            "`r1_unconstrained` and `r2_unconstrained` must both be [N], got shapes "
            f"{tuple(r1_unconstrained.shape)} and {tuple(r2_unconstrained.shape)}."
        )
    return r1_unconstrained.shape[0]


def kerple_parameters(
    r1_unconstrained: jax.Array,
    r2_unconstrained: jax.Array,
    *,
    kernel: KerpleKernel = "log",
) -> tuple[jax.Array, jax.Array]:
    """The constrained ``(r1, r2)``, float32 ``[N]`` each, of unconstrained ones.

    ``r1 = softplus(r1_unconstrained) > 0``; ``r2 = softplus(r2_unconstrained) > 0``
    (log) or ``2 sigmoid(r2_unconstrained)`` in ``(0, 2]`` (power); each at least
    ``2^-126``, the smallest normal float32 (softplus and sigmoid of a raw value
    below about -87 would round to 0).

    Args:
      r1_unconstrained: floating ``[N]``.
      r2_unconstrained: floating ``[N]``.
      kernel: ``"log"`` or ``"power"``.

    Returns:
      ``(r1, r2)``, float32 ``[N]``.

    Raises:
      TypeError: non-floating parameters.
      ValueError: parameters not both ``[N]``, an unknown ``kernel``.

    Examples:
      >>> r1, r2 = fp.kerple_parameters(jnp.zeros(2), jnp.zeros(2), kernel="power")
      >>> r2.tolist()  # 2 sigmoid(0)
      [1.0, 1.0]
    """
    check_choice("kernel", kernel, _KERNELS)
    _check_parameters(r1_unconstrained, r2_unconstrained)
    return _compiled_constrained(r1_unconstrained, r2_unconstrained, kernel)


def _constrained(
    r1: jax.Array, r2: jax.Array, kernel: str
) -> tuple[jax.Array, jax.Array]:
    r1 = jax.nn.softplus(jnp.asarray(r1, jnp.float32))
    r2 = jnp.asarray(r2, jnp.float32)
    r2 = jax.nn.softplus(r2) if kernel == "log" else 2.0 * jax.nn.sigmoid(r2)
    # softplus and sigmoid of a raw value below about -87 are subnormal, which XLA
    # flushes to 0: the floor keeps both strictly positive. It changes no value
    # above it, and the gradient it cuts was already flushed to 0.
    return jnp.maximum(r1, _FLOOR), jnp.maximum(r2, _FLOOR)


# kerple_parameters' core, as one compiled program (_kerple inlines _constrained).
_compiled_constrained = jax.jit(_constrained, static_argnames="kernel")


def kerple_bias(
    q_positions: jax.Array,
    k_positions: jax.Array,
    r1_unconstrained: jax.Array,
    r2_unconstrained: jax.Array,
    *,
    kernel: KerpleKernel = "log",
) -> jax.Array:
    """The Kerple attention bias ``[..., N, L, S]`` of distances ``|q_i - k_j|``.

    ``"log"``: ``-r1_h log(1 + r2_h |q_i - k_j|)``; ``"power"``: ``-r1_h |q_i -
    k_j|^r2_h``, with ``(r1, r2)`` from :func:`kerple_parameters`. Float32; finite
    gradients everywhere, at distance 0 too (the power kernel's ``d^r2`` is taken
    as 0 there without its ``log d`` in the gradient).

    Args:
      q_positions: integer ``[..., L]``.
      k_positions: integer ``[..., S]``; leading dimensions broadcast with
        ``q_positions``'s.
      r1_unconstrained: floating ``[N]``, the learnable scale of each head.
      r2_unconstrained: floating ``[N]``, the learnable shape of each head.
      kernel: ``"log"`` or ``"power"``.

    Returns:
      float32 ``[..., N, L, S]``.

    Raises:
      TypeError: non-integer positions, non-floating parameters.
      ValueError: parameters not both ``[N]``, an unknown ``kernel``, positions of
        rank 0 or whose leading dimensions do not broadcast.

    Examples:
      >>> r1 = r2 = jnp.full((1,), 0.5413249)  # softplus^-1(1): r1 = r2 = 1
      >>> bias = fp.kerple_bias(jnp.array([3]), jnp.arange(4), r1, r2)
      >>> [round(b, 4) for b in bias[0, 0].tolist()]  # -log(1 + d), d = 3, 2, 1, 0
      [-1.3863, -1.0986, -0.6931, -0.0]

    Reference: Chi et al., NeurIPS 2022.
    """
    check_choice("kernel", kernel, _KERNELS)
    _check_parameters(r1_unconstrained, r2_unconstrained)
    q_positions, k_positions = check_position_pairs(q_positions, k_positions)
    return _kerple(q_positions, k_positions, r1_unconstrained, r2_unconstrained, kernel)


@functools.partial(jax.jit, static_argnames="kernel")
def _kerple(
    q_positions: jax.Array,
    k_positions: jax.Array,
    r1: jax.Array,
    r2: jax.Array,
    kernel: str,
) -> jax.Array:
    """:func:`kerple_bias` of checked arguments: float32 ``[..., N, L, S]``."""
    distance = offsets(q_positions, k_positions)
    r1, r2 = _constrained(r1, r2, kernel)
    shape = (1,) * (distance.ndim - 2) + (-1, 1, 1)
    r1, r2 = r1.reshape(shape), r2.reshape(shape)
    d = jnp.abs(distance).astype(jnp.float32)[..., None, :, :]
    return _kernel_value(d, r1, r2, kernel)


def _kernel_value(d: jax.Array, r1: Any, r2: Any, kernel: str) -> jax.Array:
    """Kerple's value at float32 distances ``d`` for constrained ``r1, r2`` (arrays
    that broadcast against ``d``, or scalars)."""
    if kernel == "log":
        return -r1 * jnp.log1p(r2 * d)
    positive = d > 0
    # d^r2 = exp(r2 log d) for d > 0; at d = 0 the value and both gradients are 0.
    power = jnp.where(positive, jnp.exp(r2 * jnp.log(jnp.where(positive, d, 1.0))), 0.0)
    return -r1 * power


@dataclasses.dataclass(frozen=True)
class _KerpleTile:
    """One head's float32 ``[l, s]`` tile (:class:`flax_posenc.KernelBias`); a
    value, so that equal settings share a compiled kernel."""

    kernel: str

    def __call__(
        self,
        head: Scalar,
        shared: Scalar,
        q_positions: jax.Array,
        k_positions: jax.Array,
    ) -> jax.Array:
        del shared
        d = jnp.abs((k_positions - q_positions).astype(jnp.float32))
        return _kernel_value(d, head(0), head(1), self.kernel)


@dataclasses.dataclass(frozen=True, eq=False)
class KerpleBias:
    """Kerple as a :class:`flax_posenc.PositionBias`, for blockwise attention.

    ``KerpleBias(r1, r2, kernel)(q_positions, k_positions) == kerple_bias(
    q_positions, k_positions, r1, r2, kernel=kernel)``. A pytree whose leaves are the
    two parameters (they pass through ``jit`` and ``grad``; ``kernel`` is static).

    Attributes:
      r1_unconstrained: floating ``[N]``.
      r2_unconstrained: floating ``[N]``.
      kernel: ``"log"`` or ``"power"``.

    Raises:
      TypeError: non-floating parameters.
      ValueError: parameters not both ``[N]``, an unknown ``kernel``.

    Examples:
      >>> bias = fp.KerpleBias(jnp.zeros(4), jnp.zeros(4))
      >>> q = jnp.ones((1, 64, 4, 8))  # [B, L, N, H]
      >>> fp.blockwise_attention(q, q, q, q_positions=jnp.arange(64), bias=bias,
      ...     causal=True, block_q=16, block_k=16).shape
      (1, 64, 4, 8)
    """

    r1_unconstrained: jax.Array
    r2_unconstrained: jax.Array
    kernel: KerpleKernel = "log"

    def __post_init__(self):
        check_choice("kernel", self.kernel, _KERNELS)
        _check_parameters(self.r1_unconstrained, self.r2_unconstrained)

    @property
    def num_heads(self) -> int:
        """``N``, the parameters' length."""
        return self.r1_unconstrained.shape[0]

    def __call__(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
        """float32 ``[..., N, L, S]``, see :func:`flax_posenc.kerple_bias`."""
        return self.tile(*check_position_pairs(q_positions, k_positions))

    def tile(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
        """The call on checked integer positions (the kernels' tiles)."""
        return _kerple(
            q_positions,
            k_positions,
            self.r1_unconstrained,
            self.r2_unconstrained,
            self.kernel,
        )

    def kernel_form(self) -> KernelBias:
        """The bias for a Pallas kernel: each head's constrained ``r1, r2``."""
        r1, r2 = _constrained(self.r1_unconstrained, self.r2_unconstrained, self.kernel)
        return KernelBias(
            jnp.stack([r1, r2], axis=-1),
            jnp.zeros((1,), jnp.float32),
            _KerpleTile(self.kernel),
        )


register_fields(KerpleBias, ("r1_unconstrained", "r2_unconstrained"), ("kernel",))
