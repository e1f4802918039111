"""Time memo_caches' scan of a model's packages (graphmem/frontends/torch/memo_caches.py).

    python benchmarks/memo_cache_scan.py [TREE ...]

For each tree (default: this one), in a fresh process with that tree first on the path:
`caches_of` on a toy DINOv3 (transformers' modules loaded by then, the caches found), the
first scan and the median, least and most of 21 later ones (a trace scans twice, an
analysis twice more). Results: docs/zoo.md's sixth round.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_ONE_TREE = """
import sys, time
from transformers import DINOv3ViTConfig, DINOv3ViTModel
from graphmem.frontends.torch import memo_caches
model = DINOv3ViTModel(DINOv3ViTConfig(hidden_size=32, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=64))
modules = sum(name.partition(".")[0] == "transformers" for name in sys.modules)
start = time.perf_counter()
found = memo_caches.caches_of(model)
first_ms = (time.perf_counter() - start) * 1e3
later_ms = []
for _ in range(21):
    start = time.perf_counter()
    memo_caches.caches_of(model)
    later_ms.append((time.perf_counter() - start) * 1e3)
later_ms.sort()
print(f"{modules} | {len(found)} | {first_ms:.1f} | {later_ms[10]:.3f} | {later_ms[0]:.3f}"
      f" | {later_ms[-1]:.3f} |")
"""


def main(trees: list[str]) -> None:
    print("| tree | transformers modules | caches | first scan (ms) | later: median (ms) |"
          " least | most |\n|---|---:|---:|---:|---:|---:|---:|")
    for tree in trees or [str(Path(__file__).resolve().parent.parent)]:
        env = {**os.environ, "PYTHONPATH": tree}
        row = subprocess.run([sys.executable, "-c", _ONE_TREE], env=env, check=True,
                             capture_output=True, text=True).stdout.strip()
        print(f"| {tree} | {row}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
