"""A fixture's ``versions`` stays as committed when a run reproduces its data.

Every JSON file the generators write carries ``versions``: the library versions,
the script (``generator``) and the date (``generated_utc``) of the run that last
changed the file. A run whose output differs from the file only in ``generator``
and ``generated_utc`` keeps the file's ``versions``, so rerunning a generator with
``tools/requirements-hf.txt`` leaves every fixture byte for byte as it was; any
other difference (data, library versions) records this run's ``versions``.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository root
FIXTURES = ROOT / "tests" / "fixtures"

_VOLATILE = ("generator", "generated_utc")
_BEFORE: dict[Path, object] = {}  # each output as it was before this process wrote it


def _canonical(obj) -> str:
    obj = json.loads(json.dumps(obj))  # as it reads back: tuples are lists
    if isinstance(obj, dict) and isinstance(obj.get("versions"), dict):
        for key in _VOLATILE:
            obj["versions"].pop(key, None)
    return json.dumps(obj)


def remember(path: Path) -> None:
    """Keep ``path`` as it is now for ``settle`` (call before deleting it)."""
    path = Path(path).resolve()
    if path not in _BEFORE:
        _BEFORE[path] = json.loads(path.read_text()) if path.exists() else None


def settle(path: Path, obj: dict) -> dict:
    """``obj``, with the ``versions`` of ``path`` as it was before this run when
    nothing else differs (an output written several times in one run is compared
    with the file as the run found it)."""
    remember(path)
    before = _BEFORE[Path(path).resolve()]
    if (
        isinstance(before, dict)
        and "versions" in before
        and "versions" in obj
        and _canonical(before) == _canonical(obj)
    ):
        return {**obj, "versions": before["versions"]}
    return obj
