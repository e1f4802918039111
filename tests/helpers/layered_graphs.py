"""Random graphs of repeated layers for the tests of the layers inferred once
(plan_layers.py, layer_types.py): shape arithmetic on Shape outputs, Reshapes to constant and
computed targets, Tiles, weights as initializers or TorchScript's Identity copies of them, a
mask made before the layers, reads from two layers back, layers that differ, declared value
infos and per-layer graph outputs, nodes after the layers reading the last or an earlier
layer, a Dropout's mask output named in one layer or skipped in all."""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPS = ("add_weight", "matmul", "reshape_constant", "reshape_shape", "relu", "transpose",
       "concat_slice", "tile", "add_before", "add_two_back", "add_mask", "dropout")


class _Writer:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0

    def op(self, op_type: str, inputs: list[str], **attributes: object) -> str:
        self.count += 1
        name = f"n{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [name], **attributes))
        return name

    def weight(self, dims: list[int], seed: int | None = None, ints: bool = False) -> str:
        self.count += 1
        name = f"w{self.count}"
        rng = np.random.default_rng(seed if seed is not None else self.count)
        value = (np.array(dims, np.int64) if ints
                 else rng.standard_normal(dims).astype(np.float32))
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def constant(self, values: list[int]) -> str:
        return self.op("Constant", [], value=numpy_helper.from_array(np.array(values, np.int64)))


def _layer(w: _Writer, ops: list[str], x: str, layer: int, before: dict[str, str],
           history: list[str], varied: bool, flags: dict[str, bool]) -> str:
    t = x
    for op in ops:
        if op == "add_weight":
            seed = None if flags["distinct_weights"] else 7
            if flags["identity_weights"]:
                t = w.op("Add", [t, before[f"copy{layer}"]])
            else:
                t = w.op("Add", [t, w.weight([16], seed)])
        elif op == "matmul":
            t = w.op("MatMul", [t, w.weight([16, 16], None if flags["distinct_weights"] else 3)])
        elif op == "reshape_constant":
            target = [0, 0, 8, 2] if not varied else [0, 0, 4, 4]
            t = w.op("Reshape", [t, w.constant(target)])
            t = w.op("Reshape", [t, w.constant([0, 0, 16])])
        elif op == "reshape_shape":
            t = w.op("Reshape", [t, w.op("Shape", [t])])
        elif op == "relu":
            t = w.op("Relu", [t])
        elif op == "transpose":
            t = w.op("Transpose", [w.op("Transpose", [t], perm=[0, 2, 1])], perm=[0, 2, 1])
        elif op == "concat_slice":
            wide = w.op("Concat", [t, t], axis=-1)
            t = w.op("Slice", [wide, w.constant([0]), w.constant([16]), w.constant([-1])])
        elif op == "tile":
            grown = w.op("Tile", [w.op("Unsqueeze", [t, w.constant([2])]),
                                  w.constant([1, 1, 2, 1])])
            t = w.op("Reshape", [w.op("ReduceMax", [grown, w.constant([2])], keepdims=0),
                                 w.constant([0, 0, 16])])
        elif op == "add_before":
            t = w.op("Add", [t, before["relu"]])
        elif op == "add_two_back" and len(history) >= 2:
            t = w.op("Add", [t, history[-2]])
        elif op == "add_mask":
            t = w.op("Add", [t, before["mask"]])
        elif op == "dropout":  # its mask output named in one layer, or skipped ('') in all
            w.count += 1
            outputs = [f"n{w.count}"]
            if varied:
                outputs.append(f"n{w.count}_mask")
            elif flags["empty_output"]:
                outputs.append("")
            w.nodes.append(helper.make_node("Dropout", [t], outputs))
            t = outputs[0]
    return t


def random_layers(seed: int) -> onnx.ModelProto:
    rng = random.Random(seed)
    flags = {key: rng.random() < 0.5 for key in
             ("identity_weights", "declared", "layer_outputs", "named_batch")}
    flags |= {key: rng.random() < 0.2 for key in
              ("distinct_weights", "declared_alternately", "suffix_reads_earlier", "vary_one",
               "empty_output")}
    w = _Writer(rng)
    batch = "batch" if flags["named_batch"] else 2
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, "seq", 16])
    layers = rng.randint(6, 12)
    before = {"relu": w.op("Relu", ["x"])}
    seq = w.op("Slice", [w.op("Shape", ["x"]), w.constant([1]), w.constant([2])])
    square = w.op("Concat", [w.constant([1]), seq, w.constant([16])], axis=0)
    before["mask"] = w.op("ConstantOfShape", [square],
                          value=numpy_helper.from_array(np.zeros([1], np.float32)))
    shared = w.weight([16], 11)
    for layer in range(layers):
        before[f"copy{layer}"] = w.op("Identity", [shared])
    ops = [rng.choice(OPS) for _ in range(rng.randint(2, 6))]
    varied = rng.randrange(layers) if flags["vary_one"] else -1
    history: list[str] = []
    t = before["relu"]
    outputs = []
    for layer in range(layers):
        t = _layer(w, ops, t, layer, before, history, layer == varied, flags)
        history.append(t)
        if flags["layer_outputs"]:
            outputs.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, None))
    tail = w.op("Relu", [t])
    if flags["suffix_reads_earlier"]:
        tail = w.op("Add", [tail, history[1]])
    outputs.append(helper.make_tensor_value_info(tail, TensorProto.FLOAT, [batch, "seq", 16]))
    declared = []
    if flags["declared"]:
        declared = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, "seq", 16])
                    for name in history[::2 if flags["declared_alternately"] else 1]]
    graph = helper.make_graph(w.nodes, "layers", [x], outputs, w.initializers,
                              value_info=declared)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
