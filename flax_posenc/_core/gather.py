"""The one table gather: rows of a lookup table, with sharding in types respected."""

from __future__ import annotations

import jax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P


def take_rows(table: jax.Array, indices: jax.Array) -> jax.Array:
    """``table[indices]`` for integer ``indices`` already in ``[0, table.shape[0])``.

    Callers clamp or mask out-of-range indices first: nothing is checked, and a
    negative index is not wrapped (out-of-range indices give undefined rows).

    On ``Explicit`` mesh axes JAX cannot infer a gather's output sharding, so it is
    given: each index's row is placed like the index, its features like the table's
    trailing axes. Without explicit axes (``Auto`` axes, one device, inside
    ``shard_map``) the partitioner decides as usual.

    Args:
      table: ``[T, ...]``.
      indices: integer ``[...]``, values in ``[0, T)``.

    Returns:
      ``indices.shape + table.shape[1:]`` in ``table.dtype``.
    """
    table_type, indices_type = jax.typeof(table), jax.typeof(indices)
    out_sharding = None
    for mesh in (indices_type.sharding.mesh, table_type.sharding.mesh):
        if AxisType.Explicit in mesh.axis_types:
            spec = P(*indices_type.sharding.spec, *table_type.sharding.spec[1:])
            out_sharding = NamedSharding(mesh, spec)
            break
    return table.at[indices].get(
        mode="promise_in_bounds", wrap_negative_indices=False, out_sharding=out_sharding
    )
