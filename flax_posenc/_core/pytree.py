"""Pytrees split into their arrays and the rest: frozen dataclasses registered with
their arrays as leaves, and any pytree cut into arrays and hashable constants."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax


def register_fields(
    cls: type, leaves: tuple[str, ...], static: tuple[str, ...]
) -> None:
    """Registers the frozen dataclass ``cls`` as a pytree: the fields ``leaves`` are
    its leaves (traced by ``jit``, differentiated by ``grad``), the fields ``static``
    its hashable metadata. Rebuilding bypasses ``__post_init__``: JAX rebuilds
    pytrees with placeholders, tracers and gradients that no check would pass."""

    def flatten(value: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        return (
            tuple(getattr(value, name) for name in leaves),
            tuple(getattr(value, name) for name in static),
        )

    def unflatten(meta: tuple[Any, ...], children: Any) -> Any:
        value = object.__new__(cls)
        for name, field in zip(leaves + static, (*children, *meta), strict=True):
            object.__setattr__(value, name, field)
        return value

    jax.tree_util.register_pytree_node(cls, flatten, unflatten)


class Constants(NamedTuple):
    """What of a pytree is not an array: its structure and its other leaves."""

    treedef: Any
    leaves: tuple[Any, ...]  # None where the leaf is an array


def split_arrays(tree: Any) -> tuple[list[Any], Constants]:
    """The array leaves of ``tree`` (to trace and differentiate: a T5 table, FIRE's
    MLP, positions) and the rest (static: configs, flags, functions);
    :func:`join_arrays` puts them back together."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    arrays = [x for x in leaves if is_array(x)]
    rest = tuple(None if is_array(x) else x for x in leaves)
    return arrays, Constants(treedef, rest)


def is_array(x: Any) -> bool:
    """Whether a leaf is an array (a jax or numpy array, a tracer)."""
    return hasattr(x, "shape") and hasattr(x, "dtype")


def join_arrays(arrays: list[Any], constants: Constants) -> Any:
    """The pytree of :func:`split_arrays`' parts, with ``arrays`` in place."""
    it = iter(arrays)
    leaves = [next(it) if c is None else c for c in constants.leaves]
    return jax.tree_util.tree_unflatten(constants.treedef, leaves)
