"""The types of an attention bias computed from positions, tile by tile.

Blockwise and ring attention never hold an ``[N, L, S]`` bias: they call the bias on
the positions of one ``[block_q, block_k]`` tile at a time. A bias is therefore a
function of positions, and these protocols say what the kernels read of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import jax

__all__ = ["PositionBias", "PositionBiasCases"]


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
