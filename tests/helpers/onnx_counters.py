"""Counters on the ONNX importer's repeated work, for the speed tests that check it is done
fewer times: onnxruntime's one-node inference calls, and the Constant nodes fold.py decodes."""

from __future__ import annotations

import onnx
import pytest

from graphmem.frontends.onnx import fold, infer


def count_one_node_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """[calls]: how often onnxruntime's engine runs onnx's inference on one node."""
    engine_module = infer._symbolic_shape_infer_module()
    calls = [0]
    one_node = engine_module.shape_inference.infer_shapes

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return one_node(*args, **kwargs)

    monkeypatch.setattr(engine_module.shape_inference, "infer_shapes", counted)
    return calls


def record_decoded_constants(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The output names of the Constant nodes fold.py decodes, in order."""
    decoded: list[str] = []
    original = fold._constant_node_value

    def counted(node: onnx.NodeProto) -> object:
        decoded.append(node.output[0])
        return original(node)

    monkeypatch.setattr(fold, "_constant_node_value", counted)
    return decoded
