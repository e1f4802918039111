"""torch.cond in a trace: both branches as graphs of their own.

make_fx traces `torch.cond(pred, true_fn, false_fn, operands)` as one call of the higher-order
op `torch.ops.higher_order.cond(pred, true_graph_0, false_graph_0, operands)`, each branch a
GraphModule attribute of the traced module (its placeholders are the operands; tensors the
branch closes over, such as the module's weights, are its constants). Each branch converts
like the step itself; the costs pass prices the node as its larger branch
(graphmem/passes/control_flow.py) and liveness sees that branch's own peak as the node's
transient (graphmem/ops/control_flow.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.fx

from graphmem.core.ir import DType, Graph, Role, Value
from graphmem.ops.control_flow import (
    BODY_SCRATCH_SUFFIX,
    ControlFlowNode,
    body_peak_bytes,
    largest_at_probe,
)

BRANCH_NAMES = ("true_branch", "false_branch")
# (a traced branch, its name) -> graphmem's graph of it (fx_convert's converter)
ConvertBranch = Callable[[torch.fx.GraphModule, str], Graph]


def is_cond(fx_node: torch.fx.Node) -> bool:
    return fx_node.op == "call_function" and fx_node.target is torch.ops.higher_order.cond


def is_branch_module(module: torch.fx.GraphModule, fx_node: torch.fx.Node) -> bool:
    """A get_attr of a traced branch (not a tensor constant)."""
    return isinstance(getattr(module, str(fx_node.target), None), torch.fx.GraphModule)


def attach_branches(node: ControlFlowNode, fx_node: torch.fx.Node,
                    module: torch.fx.GraphModule, convert: ConvertBranch,
                    values: dict[str, Value]) -> None:
    """Both branches on `node`, and their larger own peak as its transient output."""
    branches = []
    for label, attr in zip(BRANCH_NAMES, fx_node.args[1:3], strict=True):
        if not isinstance(attr, torch.fx.Node):
            return
        branch = getattr(module, str(attr.target), None)
        if not isinstance(branch, torch.fx.GraphModule):
            return
        branches.append((label, convert(branch, f"{node.name}.{label}")))
    node.bodies = tuple(branches)
    peak = largest_at_probe(body_peak_bytes(body) for _, body in node.bodies)
    if peak.is_constant and int(peak) == 0:
        return
    scratch = Value(node.name + BODY_SCRATCH_SUFFIX, DType.UINT8, (peak,), Role.TEMPORARY)
    values[scratch.name] = scratch
    node.add_output(scratch)
