"""The PyTorch module each node of an exported ONNX graph came from (build.py reads it into
`Node.module_path`), from the exporters' name scopes or node names."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import onnx

from graphmem.frontends.onnx.read import NAME_SCOPES


def module_path_of(proto: onnx.NodeProto) -> str:
    """The PyTorch module a node was exported from, where the exporter recorded it.

    The dynamo exporter writes `pkg.torch.onnx.name_scopes`, e.g. `['', 'layer2',
    'layer2.2', 'layer2.2.bn1', '_native_batch_norm_...']`: the op's own name last, the full
    module path before it. The TorchScript exporter names nodes by scope,
    `/layer2/layer2.2/conv1/Conv`: each scope is an attribute name (`conv1`) or refines the
    scope before it (`layer2` -> `layer2.2`, `downsample` -> `downsample.0`); the op is last.
    Other producers: ''.
    """
    name = proto.name
    if proto.metadata_props:  # most producers write none
        return module_path(proto.metadata_props, name)
    return path_from_scopes(name.rpartition("/")[0]) if name.startswith("/") else ""


def module_path(metadata: Iterable[onnx.StringStringEntryProto], name: str) -> str:
    """module_path_of of a node with metadata: its name scopes, else its name's scopes."""
    for prop in metadata:
        if prop.key == NAME_SCOPES:
            return path_from_name_scopes(prop.value)
    return path_from_scopes(name.rpartition("/")[0]) if name.startswith("/") else ""


@lru_cache(maxsize=4096)  # the nodes of one module share their scopes: a few per layer
def path_from_scopes(scopes: str) -> str:
    """`/layer2/layer2.2/conv1` -> `layer2.2.conv1` (module_path_of)."""
    parent, previous = "", ""
    for scope in scopes.split("/")[1:]:
        if not (previous and scope.startswith(previous + ".")):  # a child, not a refinement
            parent = f"{parent}.{previous}" if parent and previous else parent or previous
        previous = scope
    return f"{parent}.{previous}" if parent and previous else parent or previous


@lru_cache(maxsize=4096)  # a few per layer, as above
def path_from_name_scopes(text: str) -> str:
    scopes = [s.strip().strip("'\"") for s in text.strip("[]").split(",")]
    modules = [s for s in scopes[:-1] if s and not s.startswith("_")]
    return modules[-1] if modules else ""
