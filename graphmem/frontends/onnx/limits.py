"""How deep a model may nest before graphmem hands it to a library that recurses in C.

onnxruntime inlines a model's local functions, and builds each control-flow body, by
recursion on the native stack: a chain of 3,000 local functions, each calling the next,
crashes its session creation with a segmentation fault (nothing printed, exit 139), and 2,500
take 34 s (its inlining is quadratic in the depth). onnx's shape inference recurses the same
way. So the nesting is measured here, in Python and without recursion, before any engine
sees the model, and refused past MAX_NESTING_DEPTH with one line.

The depth counts every level a library descends: a function call (a node whose op is a
function of the model) is one level, a control-flow body (If, Loop, Scan) is one. Bodies
alone are also bounded by protobuf itself, which refuses messages nested more than 100 deep
(about 33 levels of If).
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx
from onnx import AttributeProto

from graphmem.errors import GraphmemError
from graphmem.frontends.onnx.untrusted import quoted

# Nested function calls and bodies, together. Exporters nest functions as deep as the module
# tree (a transformer: under 10 levels); onnxruntime takes 0.04 s at 100 and crashes at 3,000.
MAX_NESTING_DEPTH = 64
_FIX = "re-export the model with its functions inlined (onnx.inliner.inline_local_functions)"

FunctionKey = tuple[str, str, str]  # domain, name, overload


def check_nesting(model: onnx.ModelProto) -> None:
    """Refuse a model whose functions call themselves, or whose function calls and bodies
    nest more than MAX_NESTING_DEPTH deep (module docstring)."""
    functions = {_function_key(f): f for f in model.functions}
    if not functions:
        return  # bodies alone: bounded by protobuf's own nesting limit
    calls = {key: _calls(function.node, functions) for key, function in functions.items()}
    heights = _heights(calls)
    depth = max((level + 1 + heights[key] for level, key in _calls(model.graph.node, functions)),
                default=0)
    if depth > MAX_NESTING_DEPTH:
        raise GraphmemError(
            f"the model nests function calls and control-flow bodies {depth} deep, above"
            f" graphmem's limit of {MAX_NESTING_DEPTH} (onnxruntime crashes on deep nesting):"
            f" {_FIX}")


def _function_key(function: onnx.FunctionProto) -> FunctionKey:
    return function.domain, function.name, getattr(function, "overload", "")


def _calls(nodes: Iterable[onnx.NodeProto], functions: dict[FunctionKey, onnx.FunctionProto],
           level: int = 0) -> list[tuple[int, FunctionKey]]:
    """(body level, function) for each call among `nodes` and inside their bodies: level 0
    for the nodes themselves, 1 inside a body of theirs... (bodies nest at most about 33
    deep: protobuf refuses more, so this recursion is bounded)."""
    found: list[tuple[int, FunctionKey]] = []
    for node in nodes:
        key = (node.domain, node.op_type, getattr(node, "overload", ""))
        if key in functions:
            found.append((level, key))
        for attribute in node.attribute:
            if attribute.type == AttributeProto.GRAPH:
                found.extend(_calls(attribute.g.node, functions, level + 1))
            elif attribute.type == AttributeProto.GRAPHS:
                for body in attribute.graphs:
                    found.extend(_calls(body.node, functions, level + 1))
    return found


def _heights(calls: dict[FunctionKey, list[tuple[int, FunctionKey]]]) -> dict[FunctionKey, int]:
    """How deep each function's calls nest below it (0: it calls none), found by an explicit
    stack (a chain of thousands of functions would overflow Python's); a function that calls
    itself, directly or not, is refused."""
    heights: dict[FunctionKey, int] = {}
    on_path: set[FunctionKey] = set()
    for root in calls:
        stack: list[tuple[FunctionKey, int]] = [(root, 0)]
        while stack:
            key, next_call = stack.pop()
            if next_call == 0:
                if key in heights:
                    continue
                on_path.add(key)
            callees = calls[key]
            if next_call < len(callees):
                stack.append((key, next_call + 1))
                callee = callees[next_call][1]
                if callee in on_path:
                    raise GraphmemError(
                        f"function {quoted(callee[1])} of domain {quoted(callee[0])} calls"
                        f" itself (directly or through other functions): ONNX functions"
                        f" cannot recurse; {_FIX}")
                if callee not in heights:
                    stack.append((callee, 0))
                continue
            on_path.discard(key)
            heights[key] = max((level + 1 + heights[callee] for level, callee in callees),
                               default=0)
    return heights
