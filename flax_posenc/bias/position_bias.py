"""The types of an attention bias computed from positions, tile by tile.

Blockwise and ring attention never hold an ``[N, L, S]`` bias: they call the bias on
the positions of one ``[block_q, block_k]`` tile at a time. A bias is therefore a
function of positions, and these protocols say what the kernels read of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax

__all__ = ["KernelBias", "PositionBias", "PositionBiasCases", "PositionBiasKernel"]


@runtime_checkable
class PositionBias(Protocol):
    """A bias as a function of positions: ``(q_positions [..., l], k_positions [...,
    s]) -> float [..., N, l, s]``, called on each tile by
    :func:`flax_posenc.blockwise_attention` and ring attention, and on all positions
    by dense attention.

    ``num_heads`` is ``N``; the kernels check it against q's heads before any work. A
    plain function of the positions works as well (its heads then show in the shape
    of the first tile). :class:`flax_posenc.AlibiBias`,
    :class:`flax_posenc.RelativeBias`, :class:`flax_posenc.KerpleBias` and
    :class:`flax_posenc.FireBias` are the library's; every bias module hands out its
    own with ``position_bias()``; they also define ``tile(q_positions,
    k_positions)``, the same function without the checks of its positions, which
    the kernels call on their checked int32 tile positions (a bias without it is
    called itself).
    """

    @property
    def num_heads(self) -> int:
        """``N``, the heads the bias is for."""
        ...

    def __call__(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
        """float ``[..., N, l, s]`` for integer ``q_positions [..., l]`` and
        ``k_positions [..., s]``."""
        ...


@runtime_checkable
class PositionBiasCases(PositionBias, Protocol):
    """A :class:`PositionBias` whose cheapest exact form depends on the tile.

    ``tile_cases(q_positions, k_positions) -> (index, cases)``: a tuple of functions
    of the tile's positions, each a form of the bias, and the int32 ``index`` of one
    that is exact on this tile. Blockwise and ring attention run each case as its own
    branch of the tile's step (``lax.switch``), so the chosen form still fuses into
    the logits; dense attention calls the bias itself.
    :class:`flax_posenc.FireBias` evaluates only the hidden units that change sign
    over the tile.
    """

    def tile_cases(
        self, q_positions: jax.Array, k_positions: jax.Array
    ) -> tuple[jax.Array, tuple[Callable[..., jax.Array], ...]]:
        """``(index, cases)`` for the tile at these positions."""
        ...


Scalar = Callable[[int], Any]
"""``scalar(i)``: the ``i``-th float32 scalar of a parameter row (a scalar in the
kernel, a 0-d array in the reference)."""


class KernelBias(NamedTuple):
    """A bias as a Pallas kernel computes it: one head's ``[l, s]`` tile from
    float32 scalars, with no ``[N, L, S]`` array and no gather.

    ``tile(head, shared, q_positions, k_positions)`` returns the float32 ``[l, s]``
    bias of one head for int32 position tiles ``[l, s]`` (every pair's query and
    key positions), where ``head(i)`` is ``head_params[h, i]`` and ``shared(j)`` is
    ``shared_params[j]``. The kernel holds both parameter arrays in scalar memory;
    its tests compare ``tile`` per head with the bias's own call.

    Attributes:
      head_params: float32 ``[N, P]``, each head's scalars (ALiBi's slope, a T5
        table column, Kerple's ``r1, r2``, FIRE's output column).
      shared_params: float32 ``[Q]``, ``Q >= 1``, the scalars of every head (FIRE's
        hidden layer).
      tile: the function above (static: part of the compiled kernel).
    """

    head_params: jax.Array
    shared_params: jax.Array
    tile: Callable[[Scalar, Scalar, jax.Array, jax.Array], jax.Array]


@runtime_checkable
class PositionBiasKernel(PositionBias, Protocol):
    """A :class:`PositionBias` that a Pallas kernel computes per tile:
    ``kernel_form()`` gives its :class:`KernelBias`.
    :class:`flax_posenc.AlibiBias`, :class:`flax_posenc.RelativeBias`,
    :class:`flax_posenc.KerpleBias` and :class:`flax_posenc.FireBias` have it; a
    bias without it runs on ``implementation="xla"`` only.
    """

    def kernel_form(self) -> KernelBias:
        """The bias's :class:`KernelBias`."""
        ...
