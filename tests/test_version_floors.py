"""The declared version floors are the ones CI tests: pyproject.toml's ``>=`` floors
equal .ci/constraints-min.txt's pins, and the docs state pyproject's Python floor."""

import pathlib
import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = pathlib.Path(__file__).parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _floors(requirements: list[str]) -> dict[str, Version]:
    floors = {}
    for line in requirements:
        req = Requirement(line)
        (floor,) = [s.version for s in req.specifier if s.operator == ">="]
        floors[canonicalize_name(req.name)] = Version(floor)
    return floors


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / ".ci" / "constraints-min.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_pyproject_floors_equal_the_min_constraints():
    extras = PROJECT["optional-dependencies"]
    pins = _pins()
    for group in (PROJECT["dependencies"], extras["test"], extras["examples"]):
        floors = _floors(group)
        assert floors == {name: pins.get(name) for name in floors}


def test_docs_state_the_python_floor():
    (floor,) = re.fullmatch(r">=(\d+\.\d+)", PROJECT["requires-python"]).groups()
    for doc in ("README.md", "docs/index.md"):
        assert f"Python >= {floor})" in (ROOT / doc).read_text(), doc
