"""Layers whose shape, not their schedule, decides the memory: big FC heads, grouped convs.

FC head: a fully connected layer on a flattened feature map ([N, C, H, W] -> [N, C*H*W],
VGG's fc6) holds C*H*W*out weights; global average pooling first ([N, C, H, W] -> [N, C],
Lin et al. 2014, "Network in Network"; ResNet's head) needs C*out, H*W times fewer. The
weight bytes it would remove are read off the graph: (1 - 1/(H*W)) of the weight.

Grouped and depthwise convs (MobileNet, ResNeXt): a conv with `groups` g does 1/g of the
dense conv's FLOPs but writes the same output, so its activation bytes per FLOP rise; with an
expand-depthwise-project block the expanded activation saved for backward is the memory cost.
Groups are read from the shapes: weight [Cout, Cin/g, kH, kW] against input [N, Cin, H, W].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from graphmem.core.ir import Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.ops import Contraction, traits_of
from graphmem.passes.costs import CostReport
from graphmem.passes.liveness import analyze_liveness

# tensors the size of a parameter: the weight, its gradient, optimizer state, update temporaries
_WEIGHT_LIKE_ROLES = frozenset({Role.PARAMETER, Role.GRADIENT, Role.OPTIMIZER_STATE,
                                Role.TEMPORARY})
FC_HEAD_SHARE = 0.25  # a layer holding at least this share of the parameters is flagged


@dataclass(frozen=True)
class FcHead:
    node: str
    module_path: str
    weight: str
    weight_count: int
    share_of_params: float  # weight_count / all parameters
    spatial_positions: int  # H*W of the flattened feature map
    removable_weight_bytes: int  # weight bytes GAP would remove: (1 - 1/(H*W)) of it


@dataclass(frozen=True)
class GroupedConv:
    node: str
    module_path: str
    groups: int
    flops: int
    output_bytes: int  # its output activation
    saved_for_backward: bool


def find_fc_heads(graph: Graph, total_params: int,
                  sizes: Mapping[str, SymInt | None]) -> list[FcHead]:
    heads = []
    for node in graph.nodes:
        if traits_of(node).contraction is not Contraction.MATMUL:
            continue
        weight = _weight(node)
        feature_map = _flattened_feature_map(node)
        if weight is None or feature_map is None or not total_params:
            continue
        count = int(weight.numel or 0)
        positions = _spatial(feature_map)
        share = count / total_params
        if share < FC_HEAD_SHARE or positions <= 1:
            continue
        weight_bytes = _int(sizes.get(weight.name))
        heads.append(FcHead(node.name, node.module_path, weight.name, count, share, positions,
                            weight_bytes - weight_bytes // positions))
    return heads


def peak_with_pooled_head(graph: Graph, sizes: Mapping[str, SymInt | None], head: FcHead,
                          dims: Mapping[str, int]) -> int:
    """The model-order peak with the head's weight H*W times smaller: liveness re-run with the
    weight and every tensor of its shape in a weight-like role (its gradient, optimizer state
    and update temporaries) at 1/(H*W) of their size. Activations are left as they are."""
    weight = graph.values[head.weight]
    shrunk = dict(sizes)
    for value in graph.values.values():
        if value.alias_of is None and value.role in _WEIGHT_LIKE_ROLES \
                and value.shape == weight.shape and value.dtype is weight.dtype:
            shrunk[value.name] = SymInt.const(_int(sizes.get(value.name)) // head.spatial_positions)
    peak = analyze_liveness(graph, shrunk, dims=dims).peak_bytes
    return int(peak) if peak.is_constant else int(peak.evaluate(dict(dims)))


def _weight(node: Node) -> Value | None:
    for value in node.present_inputs:
        storage = value.storage
        if storage.role is Role.PARAMETER and storage.shape is not None \
                and len(storage.shape) == 2:
            return storage
    return None


def _flattened_feature_map(node: Node) -> Value | None:
    """The 4-D tensor a matmul's activation input was flattened from, if it was."""
    for value in node.present_inputs:
        if value.storage.role in (Role.PARAMETER, Role.CONSTANT):
            continue
        source = value
        while source.alias_of is not None and source.shape is not None \
                and len(source.shape) < 4:
            source = source.alias_of
        producer = source.producer
        if source.shape is not None and len(source.shape) == 4:
            return source
        if producer is not None and traits_of(producer).reshape:
            data = producer.present_inputs[0] if producer.present_inputs else None
            if data is not None and data.shape is not None and len(data.shape) == 4:
                return data
    return None


def _spatial(value: Value) -> int:
    shape = value.shape or ()
    dims = [_int(d) for d in shape[2:]]
    return dims[0] * dims[1] if len(dims) == 2 else 1


def _int(value: SymInt | None) -> int:
    return int(value) if value is not None and value.is_constant else 0


def find_grouped_convs(graph: Graph, costs: CostReport, sizes: Mapping[str, SymInt | None],
                       nodes: Sequence[Node]) -> list[GroupedConv]:
    flops = {cost.name: _int(cost.flops) for cost in costs.nodes}
    convs = []
    for node in nodes:
        groups = _groups(node) if traits_of(node).contraction is Contraction.CONV else 1
        if groups <= 1 or not node.outputs:
            continue
        out = node.outputs[0]
        convs.append(GroupedConv(node.name, node.module_path, groups, flops.get(node.name, 0),
                                 _int(sizes.get(out.name)),
                                 out.role is Role.SAVED_ACTIVATION))
    return convs


def _groups(node: Node) -> int:
    data, weight = node.input(0), node.input(1)
    if data is None or weight is None or not data.shape_known or not weight.shape_known:
        return 1
    assert data.shape is not None and weight.shape is not None
    if len(data.shape) < 3 or len(weight.shape) < 3:
        return 1
    channels, per_group = _int(data.shape[1]), _int(weight.shape[1])
    return channels // per_group if per_group and channels % per_group == 0 else 1
