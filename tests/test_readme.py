"""Each of the README's Python snippets runs alone, as a reader would paste it."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)

# What a snippet computes, checked after it ran: {text only that snippet has: check}.
RESULTS = {
    "attention.init_cache(": lambda ns: ns["y_t"].shape == (2, 1, 512),  # KV cache
    "jax.make_mesh(": lambda ns: ns["mesh"].devices.size == 8,  # on 8 devices
}


def blocks() -> list[str]:
    return BLOCK.findall(README.read_text())


def test_readme_has_snippets():
    assert len(blocks()) >= 6
    for marker in RESULTS:
        assert sum(marker in block for block in blocks()) == 1, marker


@pytest.mark.parametrize("index", range(len(blocks())), ids=lambda i: f"block{i}")
def test_readme_snippet_runs_alone(index):
    """In a fresh namespace: a name from an earlier snippet is a ``NameError``."""
    match = list(BLOCK.finditer(README.read_text()))[index]
    line = README.read_text().count("\n", 0, match.start(1))
    source = "\n" * line + match.group(1)  # tracebacks point at README lines
    namespace = {}
    exec(compile(source, str(README), "exec"), namespace)
    for marker, check in RESULTS.items():
        if marker in match.group(1):
            assert check(namespace), marker


def test_readme_sharding_snippet_runs_on_one_device():
    """tests/conftest.py gives the suite 8 CPU devices; a reader's machine may have
    one. A fresh process with one device runs the sharding snippet alone."""
    (block,) = [b for b in blocks() if "jax.make_mesh" in b]
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=1",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    script = block + "\nassert jax.device_count() == 1, jax.devices()\n"
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
