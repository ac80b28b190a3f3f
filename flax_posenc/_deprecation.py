"""The one way the package deprecates a name: a ``DeprecationWarning`` that says
what is deprecated, what replaces it and the release that removes it (listed under
``### Deprecated`` in ``CHANGELOG.md``)."""

from __future__ import annotations

import warnings

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
