"""The one way the package deprecates a name: a ``DeprecationWarning`` that says
what is deprecated, what replaces it and the release that removes it (listed under
``### Deprecated`` in ``CHANGELOG.md``)."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

REMOVAL = "0.3.0"
"""The release that removes every name deprecated today."""


def warn_deprecated(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warns that ``old`` is deprecated in favour of ``new``; ``stacklevel`` counts
    from the caller of this function's caller (3: the user who wrote ``old``)."""
    warnings.warn(
        f"{old} is deprecated and will be removed in flax_posenc {REMOVAL}; use {new}.",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def moved_module(old: str, new: str) -> tuple[Callable[[str], Any], list[str]]:
    """``(__getattr__, __all__)`` for the module ``old``, which moved to ``new``: a
    name read from ``old`` comes from ``new`` with a ``DeprecationWarning``."""
    module = importlib.import_module(new)

    def __getattr__(name: str) -> Any:
        value = getattr(module, name)  # AttributeError as from any module
        warn_deprecated(f"{old}.{name}", f"{new}.{name} (or flax_posenc.{name})")
        return value

    return __getattr__, list(getattr(module, "__all__", ()))
