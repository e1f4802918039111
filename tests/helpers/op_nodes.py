"""Hand-built nodes for cost-rule tests: float tensors of given dims, a node, its cost."""

from __future__ import annotations

from collections.abc import Sequence

import graphmem.ops  # noqa: F401 - fills the registry
from graphmem.core.ir import DType, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.ops import OpCost, find_rule

DimSpec = int | str | None  # a size, a dynamic dim's name, or unknown
AttributeValue = int | float | str | tuple[int, ...] | tuple[float, ...] | tuple[bytes, ...]


def tensor(*shape: DimSpec, dtype: DType = DType.FLOAT32, rank_known: bool = True) -> Value:
    """A tensor (float unless said); str dims are symbolic, None dims are unknown;
    `rank_known=False`: not even the rank is known."""
    dims = tuple(
        None if d is None else SymInt.symbol(d) if isinstance(d, str) else SymInt.const(d)
        for d in shape
    )
    return Value("t", dtype, dims if rank_known else None, Role.ACTIVATION)


def node(op_type: str, inputs: Sequence[Value | None], outputs: Sequence[Value],
         domain: str = "", **attributes: AttributeValue) -> Node:
    return Node(f"/test/{op_type}", op_type, list(inputs), list(outputs), attributes, domain)


def cost(n: Node) -> OpCost:
    rule = find_rule(n.op_type, n.domain)
    assert rule is not None, f"no rule for {n.describe()}"
    return rule(n)


def assert_cost(n: Node, macs: SymInt | int, flops: SymInt | int) -> None:
    result = cost(n)
    assert result.macs == macs, f"macs {result.macs} != {macs}"
    assert result.flops == flops, f"flops {result.flops} != {flops}"
