"""The README's Python snippets run, in order, as one script."""

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).parent.parent
README = ROOT / "README.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_snippets_run():
    assert len(blocks()) >= 5
    namespace = {}
    for block in blocks():
        exec(compile(block, str(README), "exec"), namespace)
    assert namespace["y_t"].shape == (2, 1, 512)  # the KV-cache loop ran
    assert namespace["mesh"].devices.size == 8  # the sharding snippet, on 8 devices


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
