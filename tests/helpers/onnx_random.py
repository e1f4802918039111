"""Random ONNX models shared by the reading stage's property tests: onnx.helper decoders of
random widths (benchmarks/helper_llama.py) and small graphs of typed value infos (names given
twice, unnamed outputs, Constants, split nodes, onnx's `unk__N` dims)."""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path

import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]


def random_decoder(seed: int, tmp_path: Path) -> Path:
    """benchmarks/helper_llama.py's decoder at random widths."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import helper_llama  # benchmarks/ is not a package: found through sys.path

    rng = random.Random(seed)
    kv_heads = rng.choice([1, 2, 4])
    heads = kv_heads * rng.choice([1, 2, 4])
    head_dim = rng.choice([8, 16])
    widths = replace(helper_llama.WIDTHS, layers=rng.randint(1, 3), heads=heads,
                     kv_heads=kv_heads, hidden=heads * head_dim,
                     intermediate=rng.choice([32, 48]), vocab=rng.choice([50, 64]))
    return helper_llama.write(tmp_path / f"decoder_{seed}.onnx", widths)


_DIMS = [2, 3, "seq", "batch", "unk__3", "unk__12", None]


def _info(name: str, rng: random.Random) -> onnx.ValueInfoProto:
    if rng.random() < 0.1:  # rank unknown
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
    dims = [rng.choice(_DIMS) for _ in range(rng.randint(0, 3))]
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def random_typed_model(rng: random.Random) -> onnx.ModelProto:
    names = ["x"]
    nodes = []
    for index in range(rng.randint(1, 12)):
        out = f"v{index}" if rng.random() > 0.05 else ""
        if rng.random() < 0.05 and len(names) > 1:  # a name made twice: the walk's case
            out = rng.choice(names[1:])
        if rng.random() < 0.2:
            nodes.append(helper.make_node("Constant", [], [out or f"c{index}"],
                                          value=helper.make_tensor("t", TensorProto.INT64,
                                                                   [1], [2])))
            names.append(out or f"c{index}")
            continue
        extra = [f"w{index}"] if rng.random() < 0.3 else []
        nodes.append(helper.make_node("Split" if extra else "Relu", [rng.choice(names)],
                                      [out, *extra], **({"num_outputs": 2} if extra else {})))
        names.extend(n for n in (out, *extra) if n)
    made = [n for node in nodes for n in node.output if n]
    infos = [_info(rng.choice(made), rng) for _ in range(rng.randint(0, 2 * len(made)))]
    outputs = [_info(name, rng) for name in rng.sample(made, min(len(made), rng.randint(1, 2)))]
    graph = helper.make_graph(nodes, "g", [_info("x", rng)], outputs, value_info=infos)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
