"""The README's Python examples run as written, and the hook example changes what it says it changes."""

from __future__ import annotations

import re
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) >= 2
    namespace: dict = {}
    torch.manual_seed(0)
    for block in blocks[:2]:  # "Using it": the memory, a backbone, a recording, then a hook
        exec(compile(block, "README.md", "exec"), namespace)
    rec, moved, out = namespace["rec"], namespace["moved"], namespace["out"]
    assert rec.layers["blocks.0.memory"].mu_write.shape == (2, 24, 3)
    assert moved.shape == out.shape and not torch.allclose(moved, out)  # the moved writes reach the outputs
