"""A Llama-shaped decoder written in PyTorch and exported by torch.onnx, dynamo or TorchScript.

    python benchmarks/exported_llama.py {dynamo,torchscript} out.onnx [--layers 360]

The module is a plain Llama decoder (RMSNorm, rotary embeddings from cos/sin tables sliced to
the sequence, grouped-query attention by `repeat_interleave`, a causal mask from `triu`, a
SiLU MLP), written here rather than taken from transformers so that both exporters take it:
transformers' mask code uses `aten::diff`, which the TorchScript exporter lacks. `input_ids`
[batch, seq] int64 is the input, both dims dynamic. The widths are small (hidden 256, 8 heads,
2 key/value heads, MLP 688, vocab 1000): the exporters hold real weights, and what a
speed benchmark measures is the node count, which the layers set (dynamo 147 nodes a layer,
TorchScript 164: 150 and 134 layers make about 22,100 and 22,000 nodes).

The dynamo export is written with `optimize=False`: the exporter's own graph, before
onnxscript's optimizer, whose pattern rewriter is quadratic in the graph (60% of a 60-layer
export's 137 CPU s; 30 layers 40 s; 335 layers had not finished after 78 minutes). Unoptimized,
the export is linear (about 0.9 CPU s a layer) and keeps what the rewriter would fold: 372
Constant nodes and 125 Casts at 10 layers (66 nodes a layer optimized). Exporting some
22,000 nodes still takes minutes, so `cached_export` keeps each file under benchmarks/.cache/
(gitignored), keyed by exporter, layers and torch version.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import torch
from torch import nn

CACHE = Path(__file__).resolve().parent / ".cache"
HIDDEN, HEADS, KV_HEADS, MLP, VOCAB, POSITIONS = 256, 8, 2, 688, 1000, 4096


class _RmsNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.float()
        return self.weight * (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + 1e-5))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class _Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        d = HIDDEN // HEADS
        self.norm1, self.norm2 = _RmsNorm(), _RmsNorm()
        self.q = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k = nn.Linear(HIDDEN, KV_HEADS * d, bias=False)
        self.v = nn.Linear(HIDDEN, KV_HEADS * d, bias=False)
        self.o = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.gate = nn.Linear(HIDDEN, MLP, bias=False)
        self.up = nn.Linear(HIDDEN, MLP, bias=False)
        self.down = nn.Linear(MLP, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        d = HIDDEN // HEADS
        h = self.norm1(x)
        q = self.q(h).view(batch, seq, HEADS, d).transpose(1, 2)
        k = self.k(h).view(batch, seq, KV_HEADS, d).transpose(1, 2)
        v = self.v(h).view(batch, seq, KV_HEADS, d).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        scores = q @ k.transpose(-1, -2) / d ** 0.5 + mask
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, HIDDEN)
        x = x + self.o(attended)
        h = self.norm2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class Decoder(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        d = HIDDEN // HEADS
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(_Layer() for _ in range(layers))
        self.norm = _RmsNorm()
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
        angles = torch.outer(torch.arange(POSITIONS).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq = input_ids.shape[1]
        x = self.embed(input_ids)
        cos, sin = self.cos[:seq], self.sin[:seq]
        mask = torch.full((seq, seq), float("-inf"), device=x.device).triu(1)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.head(self.norm(x))


def export(exporter: str, path: Path, layers: int) -> Path:
    """Export the decoder with `exporter` (dynamo or torchscript) to `path`."""
    model = Decoder(layers).eval()
    ids = torch.ones(2, 16, dtype=torch.long)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            batch = torch.export.Dim("batch", min=1, max=4096)
            seq = torch.export.Dim("seq", min=2, max=POSITIONS)
            torch.onnx.export(model, (ids,), str(path), dynamo=True, input_names=["input_ids"],
                              dynamic_shapes={"input_ids": {0: batch, 1: seq}},
                              external_data=False, verbose=False, optimize=False)
        else:
            torch.onnx.export(model, (ids,), str(path), dynamo=False, opset_version=17,
                              input_names=["input_ids"],
                              dynamic_axes={"input_ids": {0: "batch", 1: "seq"}})
    return path


def cached_export(exporter: str, layers: int) -> tuple[Path, float | None]:
    """The export, from benchmarks/.cache/ when made before (seconds None), else made now
    and the wall seconds it took."""
    kind = "dynamo_unoptimized" if exporter == "dynamo" else exporter
    path = CACHE / f"llama_{kind}_{layers}_torch{torch.__version__}.onnx"
    if path.exists():
        return path, None
    start = time.perf_counter()
    partial = path.with_suffix(".partial.onnx")
    export(exporter, partial, layers).rename(path)
    return path, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exporter", choices=("dynamo", "torchscript"))
    parser.add_argument("output", type=Path)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args()
    start = time.perf_counter()
    export(args.exporter, args.output, args.layers)
    import onnx

    nodes = len(onnx.load(str(args.output), load_external_data=False).graph.node)
    print(f"{args.output}: {nodes:,} nodes in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
