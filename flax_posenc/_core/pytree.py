"""Frozen dataclasses as pytrees whose arrays are leaves."""

from __future__ import annotations

from typing import Any

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
