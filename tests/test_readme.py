"""The README's Python snippets run, in order, as one script."""

import pathlib
import re

README = pathlib.Path(__file__).parent.parent / "README.md"


def test_readme_snippets_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 5
    namespace = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    assert namespace["y_t"].shape == (2, 1, 512)  # the KV-cache loop ran
