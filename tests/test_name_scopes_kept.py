"""read.py `keep_only_name_scopes` deletes around the first name-scopes entry in place: the
model serializes to the bytes of the plain rule (every entry cleared, the first name scopes
added back, doc strings cleared) on random metadata."""

from __future__ import annotations

import random

import onnx
import pytest
from onnx import helper

from graphmem.frontends.onnx.read import NAME_SCOPES, keep_only_name_scopes

KEYS = (NAME_SCOPES, "namespace", "pkg.torch.onnx.stack_trace", "pkg.torch.onnx.fx_node", "")


def _plain_rule(graph: onnx.GraphProto) -> None:
    for node in graph.node:
        node.ClearField("doc_string")
        scopes = [p.value for p in node.metadata_props if p.key == NAME_SCOPES]
        node.ClearField("metadata_props")
        if scopes:
            node.metadata_props.add(key=NAME_SCOPES, value=scopes[0])


def _graph(seed: int) -> onnx.GraphProto:
    pick = random.Random(seed)
    nodes = []
    for i in range(200):
        node = helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"n{i}",
                                doc_string=pick.choice(("", "trace")))
        for j in range(pick.randrange(6)):
            node.metadata_props.add(key=pick.choice(KEYS), value=f"{i}.{j}")
        nodes.append(node)
    return helper.make_graph(nodes, "g", [], [])


@pytest.mark.parametrize("seed", range(5))
def test_same_bytes_as_the_plain_rule(seed: int) -> None:
    fast, plain = _graph(seed), _graph(seed)
    keep_only_name_scopes(fast)
    _plain_rule(plain)
    assert fast.SerializeToString() == plain.SerializeToString()
    kept = [p for n in fast.node for p in n.metadata_props]
    assert kept and all(p.key == NAME_SCOPES for p in kept)
