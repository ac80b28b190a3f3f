"""The package's import graph: layered as DESIGN.md says, with no circle, counting
imports inside functions too; and what ``import flax_posenc`` loads.

Layers (each imports only its own and lower ones): 1 the functional core (``_core``,
``rope``, ``bias``, the absolute encodings, positions), 2 the Hugging Face reader, 3
attention and the Flax modules, 4 the assertions.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import pathlib
import subprocess
import sys

import pytest

# The package the tests import (the source tree, or the installed wheel in .ci/run),
# found without importing it.
PACKAGE = pathlib.Path(importlib.util.find_spec("flax_posenc").origin).parent
LAYERS = {
    "flax_posenc.hf": 2,
    "flax_posenc.attention": 3,
    "flax_posenc.linen": 3,
    "flax_posenc.nnx": 3,
    "flax_posenc._embed": 3,
    "flax_posenc.testing": 4,
}


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int:
    for prefix, value in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return value
    return 1


def is_module(name: str) -> bool:
    path = PACKAGE.parent / name.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports_of(path: pathlib.Path) -> set[str]:
    """Every flax_posenc module ``path`` imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(
            n
            for n in names
            if (
                n.startswith("flax_posenc")
                and (PACKAGE.parent / (n.replace(".", "/") + ".py")).exists()
            )
            or (PACKAGE.parent / n.replace(".", "/") / "__init__.py").exists()
        )
    return found


GRAPH = {
    module_name(path): imports_of(path) - {"flax_posenc"}
    for path in sorted(PACKAGE.rglob("*.py"))
    if module_name(path) != "flax_posenc"  # the namespace re-exports everything
}


def test_graph_was_read():
    assert "flax_posenc.rope" in GRAPH["flax_posenc.rope.cache_shift"]
    assert "flax_posenc.hf._reader" in GRAPH["flax_posenc.hf"]


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_import_from_a_higher_layer(module):
    higher = sorted(m for m in GRAPH[module] if layer(m) > layer(module))
    assert not higher, f"{module} (layer {layer(module)}) imports {higher}"


def test_no_circle():
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        if module in path:
            raise AssertionError(" -> ".join(path[path.index(module) :] + (module,)))
        if module in done:
            return
        for target in sorted(GRAPH.get(module, ())):
            if target != module and not module.startswith(target + "."):
                visit(target, (*path, module))
        done.add(module)

    for module in sorted(GRAPH):
        visit(module, ())


def test_import_loads_jax_alone_until_the_reader_and_assertions_are_used():
    """``import flax_posenc`` loads neither chex, Flax nor the HF table (they load on
    first use); RopeConfig and apply_rope never load the reader."""
    code = """
import sys
import jax.numpy as jnp
import flax_posenc as fp
heavy = ("chex", "flax", "flax_posenc.hf", "flax_posenc.testing")
fp.apply_rope(jnp.ones((4, 2, 8)), jnp.arange(4), fp.RopeConfig(head_dim=8))
print(sorted(m for m in heavy if m in sys.modules))
fp.read_hf_rope, fp.testing.assert_shift_invariance
print(sorted(m for m in heavy if m in sys.modules))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "['chex', 'flax_posenc.hf', 'flax_posenc.testing']"


def is_public(module: str) -> bool:
    return not any(part.startswith("_") for part in module.split(".")[1:])


def test_no_underscored_name_is_imported_from_a_public_module():
    """Private code is shared through private modules (``_validation``, ``_rope``,
    ...), never by reaching into a public one."""
    reached = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            if not node.module.startswith("flax_posenc") or not is_public(node.module):
                continue
            reached += [
                f"{module_name(path)}: from {node.module} import {a.name}"
                for a in node.names
                if a.name.startswith("_") and not is_module(f"{node.module}.{a.name}")
            ]
    assert not reached


def public_functions() -> set[str]:
    import flax_posenc as fp

    return {n for n in fp.__all__ if inspect.isfunction(getattr(fp, n))}


def test_public_functions_do_not_call_public_functions():
    """Each public function checks its inputs once and calls private code: a
    public function calling another re-validates (an nnx RotaryEmbedding call once
    checked its positions 5 times)."""
    names, calls = public_functions(), []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        exported = {
            name
            for node in tree.body
            if isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "__all__" for t in node.targets)
            for name in ast.literal_eval(node.value)
        }
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name not in exported:
                continue
            for call in ast.walk(node):
                if isinstance(call, ast.Call):
                    func = call.func
                    name = getattr(func, "id", None) or getattr(func, "attr", None)
                    if name in names and name != node.name:
                        calls.append(f"{module_name(path)}.{node.name} -> {name}")
    assert not calls


def _functions() -> dict[str, list[tuple[str, ast.FunctionDef]]]:
    """Every function and method of the package by its name: ``[(module, node)]``."""
    found: dict[str, list[tuple[str, ast.FunctionDef]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                found.setdefault(node.name, []).append((module_name(path), node))
    return found


def _called_names(node: ast.FunctionDef) -> set[str]:
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            name = getattr(func, "id", None) or getattr(func, "attr", None)
            if name:
                names.add(name)
    return names


def test_private_code_reached_from_a_public_function_calls_no_public_function():
    """Deeper than the test above: every private function reached from an exported
    one (by name, through any number of private calls) calls no public function, so
    no input is checked again below the edge (a ring call once reached the public
    ``apply_rope_qk`` through its private core)."""
    public, functions = public_functions(), _functions()
    calls, seen = [], set()
    todo = [(name, name) for name in public]
    while todo:
        name, root = todo.pop()
        for module, node in functions.get(name, []):
            if (module, node.name, node.lineno) in seen:
                continue
            seen.add((module, node.name, node.lineno))
            for called in _called_names(node) - {name}:
                if called in public and name not in public:
                    calls.append(f"{root} -> ... {module}.{name} -> {called}")
                elif called.startswith("_") and called in functions:
                    todo.append((called, root))
    assert not calls, "\n".join(sorted(set(calls)))
