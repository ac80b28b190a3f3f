"""Learned absolute position embeddings (BERT, GPT-2): a lookup into a trained table.

JAX gathers never fail on an index past the end: depending on the call they clamp,
wrap or return NaN. A position the table has no row for is always a bug upstream, so
it is never clamped silently. The policy, by ``out_of_range``:

* ``"nan"`` (default): concrete positions out of ``[0, max_len)`` raise ``ValueError``
  at once; traced positions (under ``jit``) give rows of NaN, so the mistake shows
  in the loss instead of hiding in a clamped row.
* ``"checkify"``: like ``"nan"``, and additionally a ``jax.experimental.checkify``
  check, reported when the caller wraps the function in ``checkify.checkify``.
  Traced under ``jit`` (or ``eval_shape``, ``scan``: any staging) the wrapper is
  required, since a staged check cannot run without it: the call raises a
  ``ValueError`` naming ``out_of_range`` and the wrapping.
* ``"clip"``: explicit opt-in to clamp positions into ``[0, max_len - 1]``.
"""

from __future__ import annotations

import functools
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from flax_posenc._core.gather import take_rows
from flax_posenc._core.validation import (
    check_choice,
    check_float_array,
    check_integer_array,
    is_traced,
)

__all__ = ["OutOfRange", "learned_embedding_lookup"]

OutOfRange = Literal["nan", "checkify", "clip"]
"""What a position outside the table gives: NaN rows, a checkify error, or a clamp."""
_OUT_OF_RANGE = ("nan", "checkify", "clip")


def learned_embedding_lookup(
    table: jax.Array,
    positions: jax.Array,
    *,
    out_of_range: OutOfRange = "nan",
) -> jax.Array:
    """Rows of a learned position table: ``PE[..., :] = table[positions[...], :]``.

    Args:
      table: ``[max_len, D]``, floating point.
      positions: integer ``[...]``, traced or concrete.
      out_of_range: ``"nan"``, ``"checkify"`` or ``"clip"`` (see the module docstring).

    Returns:
      ``positions.shape + (D,)`` in ``table.dtype``.

    Raises:
      TypeError: non-integer ``positions`` or a non-floating ``table``.
      ValueError: ``table`` not of rank 2 or with no rows, unknown
        ``out_of_range``, concrete positions outside ``[0, max_len)`` (unless
        ``out_of_range="clip"``), ``out_of_range="checkify"`` staged (``jit``,
        ``eval_shape``, ``scan``) outside ``checkify.checkify``.

    Examples:
      >>> table = jnp.arange(12.0).reshape(4, 3)  # [max_len=4, D=3]
      >>> fp.learned_embedding_lookup(table, jnp.array([0, 3])).tolist()
      [[0.0, 1.0, 2.0], [9.0, 10.0, 11.0]]

      Past the end: an error for concrete positions, NaN rows under ``jit``:

      >>> fp.learned_embedding_lookup(table, jnp.array([4]))
      Traceback (most recent call last):
      ...
      ValueError: `positions` must lie in [0, max_len=4), got values in [4, 4]. Hint: use a larger max_len, or out_of_range="clip" to clamp on purpose.
      >>> jax.jit(fp.learned_embedding_lookup)(table, jnp.array([4])).tolist()
      [[nan, nan, nan]]
    """
    check_float_array("table", table)
    if table.ndim != 2:
        raise ValueError(f"`table` must be [max_len, D], got shape {table.shape}.")
    if table.shape[0] == 0:  # no row to gather: a TypeError from the gather under jit
        raise ValueError(
            "`table` must have at least one row (max_len >= 1), got shape "
            f"{table.shape}."
        )
    # Widened first: int8 cannot even hold max_len = 300, and an int64 position
    # past 2**31 is refused rather than wrapped into range.
    positions = check_integer_array("positions", positions)
    check_choice("out_of_range", out_of_range, _OUT_OF_RANGE)
    max_len = table.shape[0]
    if out_of_range != "clip":
        if not is_traced(positions) and positions.size:
            values = np.asarray(positions)
            low, high = int(values.min()), int(values.max())
            if low < 0 or high >= max_len:
                raise ValueError(
                    f"`positions` must lie in [0, max_len={max_len}), got values in "
                    f"[{low}, {high}]. Hint: use a larger max_len, or "
                    'out_of_range="clip" to clamp on purpose.'
                )
        # Concrete values were checked above; traced ones by checkify at run time.
        if out_of_range == "checkify" and positions.size and is_traced(positions):
            _check_functionalized()
            checkify.check(
                jnp.all((positions >= 0) & (positions < max_len)),
                f"positions must lie in [0, max_len={max_len}); got values in "
                "[{low}, {high}]",
                low=jnp.min(positions),
                high=jnp.max(positions),
            )
    return _lookup(table, positions, clip=out_of_range == "clip")


def _check_functionalized() -> None:
    """Raises where JAX would refuse the staged check when compiling: a staging
    trace (``jit``, ``eval_shape``, ``scan``) with no ``checkify.checkify`` trace
    below it. JAX exposes no public way to ask, so this walks its private trace
    chain; where that chain is not there (another JAX), it says nothing and JAX's
    own error stands."""
    try:
        from jax._src.core import trace_ctx
    except ImportError:
        return
    trace = getattr(trace_ctx, "trace", None)
    staged = False
    while trace is not None:
        frame = getattr(trace, "frame", None)
        traced_for = getattr(getattr(frame, "debug_info", None), "traced_for", None)
        if traced_for == "checkify":
            return
        staged = staged or traced_for is not None
        trace = getattr(trace, "parent_trace", None)
    if staged:
        raise ValueError(
            '`out_of_range="checkify"` traced under jit (or eval_shape, scan) must '
            "run inside checkify.checkify, which turns the check into an error "
            "value: a staged check cannot run otherwise. Hint: `err, out = "
            "checkify.checkify(jax.jit(f))(...); err.throw()`, or "
            'out_of_range="nan" for NaN rows without the check.'
        )


@functools.partial(jax.jit, static_argnames="clip")
def _lookup(table: jax.Array, positions: jax.Array, clip: bool) -> jax.Array:
    """Rows ``table[positions]``: clamped into range if ``clip``, else NaN rows where
    a position is out of range."""
    max_len = table.shape[0]
    rows = take_rows(table, jnp.clip(positions, 0, max_len - 1))
    if clip:
        return rows
    # Gathers wrap negative indices or clamp; mask out-of-range rows explicitly.
    in_range = (positions >= 0) & (positions < max_len)
    return jnp.where(in_range[..., None], rows, jnp.nan).astype(table.dtype)
