"""Griffe extension: Sphinx roles in docstrings become mkdocs-autorefs links.

The package's docstrings cross-reference with Sphinx roles (``:func:`apply_rope```,
``:class:`~flax_posenc.RopeConfig```, ``:mod:`flax_posenc.learned```), which read well
in ``help()``. For the docs site each becomes a link ``[`apply_rope`][path]`` that
mkdocs-autorefs resolves, so a reference to a name the site does not document fails
``mkdocs build --strict``. Unqualified names are looked up in the object's own module,
then in the package namespace.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:func|class|meth|mod|attr|data):`(~?)([\w.]+)`")


class SphinxRoles(griffe.Extension):
    """Rewrites Sphinx cross-reference roles once the package is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        del kwargs
        for obj in _walk(pkg):
            if obj.docstring is not None:
                obj.docstring.value = ROLE.sub(
                    lambda match, obj=obj: _link(obj, pkg, match), obj.docstring.value
                )


def _walk(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias and member.parent is obj:
            yield from _walk(member)


def _link(obj: griffe.Object, pkg: griffe.Module, match: re.Match) -> str:
    short, target = match.group(1) == "~", match.group(2)
    label = target.rsplit(".", 1)[-1] if short else target
    candidates = [target, f"{obj.module.path}.{target}", f"{pkg.path}.{target}"]
    for candidate in candidates:
        if candidate.startswith(pkg.path) and _exists(pkg, candidate):
            return f"[`{label}`][{candidate}]"
    raise ValueError(f"{obj.path}: cannot resolve the reference {match.group(0)}")


def _exists(pkg: griffe.Module, path: str) -> bool:
    try:
        pkg.modules_collection[path]
    except (KeyError, ValueError):
        return False
    return True
