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

import math
from collections.abc import Iterable, Mapping, Sequence

import onnx
from onnx import AttributeProto, numpy_helper

from graphmem.errors import GraphmemError
from graphmem.frontends.onnx.untrusted import (
    MAX_RANK,
    has_inline_data,
    node_label,
    quoted,
    subgraphs,
    tensor_numel,
)

# Nested function calls and bodies, together. Exporters nest functions as deep as the module
# tree (a transformer: under 10 levels); onnxruntime takes 0.04 s at 100 and crashes at 3,000.
MAX_NESTING_DEPTH = 64
# Local functions: onnx's shape inference takes time growing with the square of their count
# (onnx 1.23: 1,000 in 0.15 s, 3,000 in 1.1 s, 6,000 in 6.1 s, each inference of the model);
# exporters write one per module class, a few dozen.
MAX_LOCAL_FUNCTIONS = 4096
# Control-flow bodies (an If's two arms, a Loop's or Scan's body), in every scope: onnx's shape
# inference copies every outer value's type into each body it enters, so its time grows with
# the square of their count (onnx 1.23, a chain of If nodes: 2,000 in 0.25 s, 4,000 in 1.3 s,
# 8,000 in 5.1 s, each inference of the model, and the command runs several); exporters
# write a few per layer.
MAX_BODIES = 4096
_FIX = "re-export the model with its functions inlined (onnx.inliner.inline_local_functions)"

FunctionKey = tuple[str, str, str]  # domain, name, overload


def check_nesting(model: onnx.ModelProto, bodies: int | None = None) -> None:
    """Refuse a model with more than MAX_LOCAL_FUNCTIONS functions, whose functions call
    themselves, or whose function calls and bodies nest more than MAX_NESTING_DEPTH deep
    (module docstring). `bodies`: the model's control-flow bodies where an earlier walk
    counted them (validation.py), else counted here."""
    if len(model.functions) > MAX_LOCAL_FUNCTIONS:
        raise GraphmemError(
            f"the model has {len(model.functions):,} local functions, above graphmem's limit of"
            f" {MAX_LOCAL_FUNCTIONS:,} (onnx's shape inference grows with the square of their"
            f" count: 6,000 took 6 s): {_FIX}")
    if bodies is None:
        bodies = _body_count([model.graph.node, *(f.node for f in model.functions)])
    if bodies > MAX_BODIES:
        raise GraphmemError(
            f"the model has {bodies:,} control-flow bodies (If arms, Loop and Scan bodies),"
            f" above graphmem's limit of {MAX_BODIES:,} (onnx's shape inference grows with"
            " the square of their count: 16,000 took 5 s an inference): fold the control flow away"
            " (onnxruntime's optimizer or onnx-simplifier with the inputs fixed) or split the"
            " model")
    functions = {function_key(f): f for f in model.functions}
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


def _body_count(scopes: Iterable[Iterable[onnx.NodeProto]]) -> int:
    """The control-flow bodies among the nodes of `scopes` and inside them, by an explicit
    stack."""
    count, pending = 0, list(scopes)
    while pending:
        for node in pending.pop():
            if not node.attribute:  # only an attribute holds a body: most nodes have none
                continue
            bodies = subgraphs(node)
            count += len(bodies)
            pending.extend(body.node for body in bodies)
    return count


def function_key(function: onnx.FunctionProto) -> FunctionKey:
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
        for body in subgraphs(node) if node.attribute else ():
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


def inlined_counts(model: onnx.ModelProto) -> dict[FunctionKey, int]:
    """How many copies of each local function onnxruntime's inlining makes: its calls from the
    main graph, plus its calls from each function times that function's copies (the call
    graph has no cycle: check_nesting refused one). Functions never called: 0."""
    functions = {function_key(f): f for f in model.functions}
    callees = {key: [callee for _, callee in _calls(f.node, functions)]
               for key, f in functions.items()}
    callers = dict.fromkeys(functions, 0)
    for called in callees.values():
        for callee in called:
            callers[callee] += 1
    counts = dict.fromkeys(functions, 0)
    for _, callee in _calls(model.graph.node, functions):
        counts[callee] += 1
    ready = [key for key, number in callers.items() if number == 0]
    while ready:  # callers before callees (Kahn's order): a function's count is final
        key = ready.pop()
        for callee in callees[key]:
            counts[callee] += counts[key]
            callers[callee] -= 1
            if callers[callee] == 0:
                ready.append(callee)
    return counts


# ----- what onnxruntime's optimizer would build ------------------------------------------------
# Constant folding builds every value whose inputs are all constants: a ConstantOfShape of
# 10**8 floats summed to one number took 0.9 GB and 4.5 s at session creation. A folded value
# may be as large as the largest constant it comes from (a transposed weight), else at most
# this many elements.
MAX_FOLDED_ELEMENTS = 2**24
_NOT_FOLDED = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                         "RandomUniformLike", "Multinomial", "Bernoulli"})
PlanShapes = Mapping[str, "tuple[int | str | None, ...] | None"]


def largest_fold(model: onnx.ModelProto, shapes: PlanShapes) -> tuple[str, int] | None:
    """The value onnxruntime's constant folding would build that is over the budget (above
    MAX_FOLDED_ELEMENTS and above every constant the model holds), with its element count;
    None when there is none. `shapes`: onnx's inferred dims by value name (ort_plan_shapes);
    ConstantOfShape nodes in bodies and functions are judged by their shape's values."""
    graph = model.graph
    held = [tensor_numel(t) for t in graph.initializer]
    held.extend(tensor_numel(a.t) for n in graph.node for a in n.attribute
                if a.type == AttributeProto.TENSOR)
    budget = max([MAX_FOLDED_ELEMENTS, *held])
    declared = {value.name for value in graph.input}
    constant = {t.name for t in graph.initializer if t.name not in declared}
    for node in graph.node:
        if node.op_type in _NOT_FOLDED or any(a.type in _BODIES for a in node.attribute) \
                or not all(name in constant for name in node.input if name):
            continue
        constant.update(name for name in node.output if name)
        for name in node.output:
            elements = _known_elements(shapes.get(name))
            if elements is not None and elements > budget:
                return name, elements
    return _large_constant_of_shape(model, budget)


_BODIES = frozenset({AttributeProto.GRAPH, AttributeProto.GRAPHS})


def _known_elements(shape: tuple[int | str | None, ...] | None) -> int | None:
    dims = [d for d in shape or () if isinstance(d, int)]
    return math.prod(dims) if shape is not None and len(dims) == len(shape) else None


def _large_constant_of_shape(model: onnx.ModelProto, budget: int) -> tuple[str, int] | None:
    """A ConstantOfShape anywhere whose shape is a constant (an initializer or a Constant
    node of any scope, by name) of more than `budget` elements."""
    scopes = _graphs(model.graph)
    for function in model.functions:
        scopes.extend(_function_scopes(function))
    shapes = _constant_tensors(scopes)
    generators = [node for nodes, _ in scopes for node in nodes
                  if node.op_type == "ConstantOfShape" and node.input and node.output]
    for node in generators:
        tensor = shapes.get(node.input[0])
        if tensor is None or tensor.data_type != onnx.TensorProto.INT64 or len(tensor.dims) != 1 \
                or tensor.dims[0] > MAX_RANK or not has_inline_data(tensor):
            continue
        elements = math.prod(max(int(d), 0) for d in numpy_helper.to_array(tensor))
        if elements > budget:
            return node.output[0], elements
    return None


Scope = tuple[Sequence[onnx.NodeProto], Sequence[onnx.TensorProto]]  # nodes, initializers


def _graphs(graph: onnx.GraphProto) -> list[Scope]:
    """The graph's scope and every body's in it (bodies nest at most about 33 deep: protobuf
    refuses more)."""
    found: list[Scope] = [(graph.node, graph.initializer)]
    for node in graph.node:
        for body in subgraphs(node):
            found.extend(_graphs(body))
    return found


def _function_scopes(function: onnx.FunctionProto) -> list[Scope]:
    scopes: list[Scope] = [(function.node, ())]
    for node in function.node:
        for body in subgraphs(node):
            scopes.extend(_graphs(body))
    return scopes


# ----- what onnxruntime's session set-up is quadratic in ------------------------------------------
# onnxruntime's session creation takes time growing with the square of the graph's outputs
# (1.31, one thread: 2,000 outputs 1.9 s, 4,000 8.2 s, 10,000 about 50 s optimized; 0.8 s at
# 4,000 unoptimized) and of its inputs (a chain of Adds each reading an input of its own: 2,000
# inputs 0.09 s, 4,000 0.24 s, 8,000 0.8 s; a Sum of 10^5 inputs took minutes). Real models have
# a few hundred at most (a decoder's KV cache: two a layer).
MAX_SESSION_OUTPUTS = 2048
MAX_SESSION_INPUTS = 2048


def session_outputs_refusal(model: onnx.ModelProto) -> str | None:
    """Why onnxruntime should not get the model (its graph outputs above MAX_SESSION_OUTPUTS or
    its fed inputs, initializers not counted as older IR versions list them, above
    MAX_SESSION_INPUTS), or None."""
    weights = {tensor.name for tensor in model.graph.initializer}
    fed = sum(info.name not in weights for info in model.graph.input)
    for kind, count, limit, example in (
            ("outputs", len(model.graph.output), MAX_SESSION_OUTPUTS, "10,000 took about 50 s"),
            ("inputs", fed, MAX_SESSION_INPUTS, "8,000 took 0.8 s")):
        if count > limit:
            return (f"the model has {count:,} graph {kind}, above the {limit:,} graphmem hands"
                    f" onnxruntime (its session set-up grows with their square: {example})")
    return None


# ----- what verify would run --------------------------------------------------------------------
# A Loop's constant trip count above this is refused before verify runs it (10**12 iterations
# of an Add would run for days); trip counts computed at run time meet verify's time limit.
MAX_LOOP_TRIPS = 10**6


def check_loop_trips(model: onnx.ModelProto) -> None:
    """Refuse a Loop, in any scope, whose trip count is a constant (an initializer or Constant
    node of any scope, by name) above MAX_LOOP_TRIPS."""
    scopes = _graphs(model.graph)
    for function in model.functions:
        scopes.extend(_function_scopes(function))
    constants = _constant_tensors(scopes)
    for nodes, _ in scopes:
        for node in nodes:
            if node.op_type != "Loop" or not node.input or not node.input[0]:
                continue
            tensor = constants.get(node.input[0])
            if tensor is None or tensor_numel(tensor) != 1 or not has_inline_data(tensor) \
                    or tensor.data_type not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
                continue
            trips = int(numpy_helper.to_array(tensor).reshape(()))
            if trips > MAX_LOOP_TRIPS:
                raise GraphmemError(
                    f"{node_label(node)} runs {trips:,} iterations (a constant trip count),"
                    f" above verify's limit of {MAX_LOOP_TRIPS:,}: verify runs the model for"
                    " real; analyze and check read such a model without running it")


def _constant_tensors(scopes: Sequence[Scope]) -> dict[str, onnx.TensorProto]:
    """The initializers and Constant node values of every scope, by name."""
    tensors: dict[str, onnx.TensorProto] = {}
    for nodes, initializers in scopes:
        tensors.update((t.name, t) for t in initializers)
        for node in nodes:
            if node.op_type == "Constant" and node.output and len(node.attribute) == 1 \
                    and node.attribute[0].type == AttributeProto.TENSOR:
                tensors[node.output[0]] = node.attribute[0].t
    return tensors
