"""The serving rules' KV cache (graphmem/core/kv_layers.py, `--serve`) against what
transformers' own cache holds, for each decoder, mixture of experts and hybrid of the zoo
(tests/zoo_models.py) that keeps one.

`python benchmarks/zoo_kv.py [name ...]` prints a markdown row per architecture: the layer
groups graphmem reads from the config (graphmem/frontends/torch/kv.py), graphmem's bytes for
one contiguous sequence (`KvLayout.contiguous_bytes`: a sliding layer keeps its window, a
state layer its state), and the bytes of every tensor in the cache transformers returns
(`past_key_values`, DynamicCache or the model's own, and the states a model keeps on its
modules) after one forward of that many tokens, batch 1, fp32, and again after 3 decode steps
of one token (a state stays, a full layer grows by 3 tokens in both). Qwen3-Next, Llama-4
and MiniMax are built at toy widths by tests/helpers/kv_models.py. The context is longer
than every window (the zoo's are 8 tokens), so windows and full layers differ. graphmem
sizes vLLM's cache; where transformers keeps another layout (a window's last token, a
convolution's last input) the rows differ by design, docs/zoo.md says each.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.kv_models import KV_MODELS, kv_entry
from tests.helpers.zoo import built
from tests.helpers.zoo_kv import cache_bytes, graphmem_bytes
from tests.zoo_models import MEASURED_ONCE, ZOO

CONTEXT = 24
DECODE = 3
FAMILIES = ("decoder", "moe", "ssm")
HEADER = ("| architecture | family | graphmem's layer groups | graphmem B | transformers' cache B"
          " | ratio | after 3 decode steps | cache |\n|---|---|---|---:|---:|---:|---:|---|")


def row(name: str) -> str:
    entry = kv_entry(name)
    model = built(entry).eval()
    groups, predicted = graphmem_bytes(model, CONTEXT)
    cache_type, measured = cache_bytes(model, CONTEXT)
    decoded = graphmem_bytes(model, CONTEXT + DECODE)[1], cache_bytes(model, CONTEXT, DECODE)[1]
    labels = ", ".join(f"{g.layers} {g.label}" for g in groups)
    return (f"| {name} | {entry.family} | {labels} | {predicted:,} | {measured:,} |"
            f" {predicted / measured:.3f} | {decoded[0]:,} / {decoded[1]:,} | {cache_type} |")


def main(names: list[str]) -> None:
    warnings.filterwarnings("ignore")
    print(HEADER, flush=True)
    for entry in ZOO + MEASURED_ONCE + KV_MODELS:
        if entry.family in FAMILIES and (not names or entry.name in names):
            try:
                print(row(entry.name), flush=True)
            except Exception as error:  # noqa: BLE001 (a failure is a row, with its message)
                message = f"{type(error).__name__}: {error}".splitlines()[0][:160]
                print(f"| {entry.name} | {entry.family} | **fails**: {message} | | | | | |",
                      flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
