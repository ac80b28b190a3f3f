"""The docs: every public name documented and listed in the API reference, and every
code block of the guide runs.

Docstring examples themselves run as doctests (``--doctest-modules`` in pyproject).
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import re
import sys
import types

import pytest

import flax_posenc
from flax_posenc import linen, nnx, testing

DOCS = pathlib.Path(__file__).parent.parent / "docs"
API_ENTRY = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)
SECTION = re.compile(r"^\s*(\w+):\s*$", re.MULTILINE)
CODE_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")


def _defined_in(module: types.ModuleType, kind) -> list[str]:
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and kind(value)
        and getattr(value, "__module__", None) == module.__name__
    )


def public_names() -> list[tuple[str, object]]:
    """``(dotted path, object)`` of everything the docs must cover."""
    names = [(f"flax_posenc.{n}", getattr(flax_posenc, n)) for n in flax_posenc.__all__]
    for module in (linen, nnx):
        names += [
            (f"{module.__name__}.{n}", getattr(module, n))
            for n in _defined_in(module, inspect.isclass)
        ]
    names += [
        (f"flax_posenc.testing.{n}", getattr(testing, n))
        for n in _defined_in(testing, inspect.isfunction)
    ]
    return names


def _alias_docstring(path: str) -> str | None:
    """The docstring griffe shows for a module-level alias (``X = ...; \"\"\"doc\"\"\"``)."""
    name = path.rpartition(".")[2]
    for module in sys.modules.copy().values():
        if not getattr(module, "__name__", "").startswith("flax_posenc."):
            continue
        if name not in vars(module) or not getattr(module, "__file__", None):
            continue
        tree = ast.parse(pathlib.Path(module.__file__).read_text())
        for node, following in zip(tree.body, tree.body[1:], strict=False):
            targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                if isinstance(following, ast.Expr) and isinstance(
                    following.value, ast.Constant
                ):
                    return following.value.value
    return None


def api_entries() -> set[str]:
    entries = set()
    for page in (DOCS / "api").glob("*.md"):
        entries.update(API_ENTRY.findall(page.read_text()))
    return entries


def test_public_names_found():
    paths = [path for path, _ in public_names()]
    # A floor, so that a broken discovery cannot pass vacuously.
    assert len(paths) >= 40, paths
    assert "flax_posenc.apply_rope" in paths
    assert "flax_posenc.nnx.ALiBi" in paths
    assert "flax_posenc.testing.assert_encoding_shape" in paths


@pytest.mark.parametrize(
    "path,obj", [pytest.param(path, obj, id=path) for path, obj in public_names()]
)
def test_documented(path, obj):
    if not (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj)):
        # A type alias: documented by the string right after its assignment.
        assert _alias_docstring(path), f"{path} has no docstring after its assignment"
        return
    doc = inspect.getdoc(obj)
    assert doc and doc.strip(), f"{path} has no docstring"
    if not inspect.isfunction(obj):
        return
    sections = set(SECTION.findall(doc))
    parameters = inspect.signature(obj).parameters
    if parameters:
        assert "Args" in sections, f"{path}: no Args section in {sorted(sections)}"
        documented = set(re.findall(r"^  (\w+):", doc.split("Args:")[1], re.MULTILINE))
        missing = set(parameters) - documented
        assert not missing, f"{path}: parameters {sorted(missing)} not in Args"
    returns = inspect.signature(obj).return_annotation
    if returns not in (None, "None"):
        assert sections & {"Returns", "Yields"}, f"{path}: no Returns/Yields section"


@pytest.mark.parametrize("path", [path for path, _ in public_names()])
def test_in_api_reference(path):
    assert path in api_entries(), f"docs/api/*.md has no '::: {path}' entry"


def test_api_entries_exist():
    """Every ``::: path`` entry names an importable object (no stale entries)."""
    for entry in api_entries():
        module_path, _, attribute = entry.rpartition(".")
        try:
            obj = __import__(entry, fromlist=["_"])
        except ImportError:
            obj = getattr(__import__(module_path, fromlist=["_"]), attribute, None)
        assert obj is not None, entry


def guide_pages() -> list[pathlib.Path]:
    return sorted([DOCS / "index.md", *(DOCS / "guide").glob("*.md")])


# The pages whose code compiles the most run with the `slow` tests.
@pytest.mark.parametrize(
    "page",
    [
        pytest.param(page, marks=pytest.mark.slow)
        if page.name
        in (
            "absolute.md",
            "attention.md",
            "blockwise.md",
            "context_extension.md",
            "context_parallel.md",
            "exact_angles.md",
            "length_generalisation.md",
            "rope.md",
            "testing.md",
        )
        else page
        for page in guide_pages()
    ],
    ids=lambda p: p.name,
)
def test_guide_code_runs(page, monkeypatch):
    """The page's python blocks, in order, in one module (as a reader would)."""
    blocks = CODE_BLOCK.findall(page.read_text())
    if page.parent.name == "guide":
        assert blocks, f"{page.name} has no example"
    module = types.ModuleType(f"docs_{page.stem}")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # for dataclasses
    for block in blocks:
        exec(compile(block, str(page), "exec"), module.__dict__)


@pytest.mark.parametrize("page", guide_pages(), ids=lambda p: p.name)
def test_guide_images(page):
    for target in IMAGE.findall(page.read_text()):
        image = (page.parent / target).resolve()
        assert image.is_file(), f"{page.name}: missing {target}"
        assert image.stat().st_size < 100_000, f"{target} is over 100 KB"
