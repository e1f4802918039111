"""Control flow in the IR: a node that runs bodies (ONNX If/Loop/Scan, torch.cond), and the
memory a body needs while it runs.

An importer builds each body as its own Graph (the outer tensors it reads are the body's inputs)
and says how many times a loop body runs: `trip_count`, a number, a formula in the model's dims,
or None when only the data decides (a `cond`-driven Loop). The costs pass
(graphmem/passes/control_flow.py) prices the bodies; liveness sees the body's own peak as one
transient output of the node, made and freed at its step (`BODY_SCRATCH_SUFFIX`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from graphmem.core.conventions import PROBE_DIM_VALUE
from graphmem.core.ir import Graph, Node, Value
from graphmem.core.symbolic import SymInt, sum_sizes, symint_max

# the transient output a control-flow node makes for its bodies' intermediates
BODY_SCRATCH_SUFFIX = "::body_scratch"
BRANCH_OPS = frozenset({"If", "cond"})


@dataclass(eq=False, slots=True)
class ControlFlowNode(Node):
    """A node that runs subgraphs: If / torch.cond (one of two branches), Loop and Scan (a
    body per step)."""

    bodies: tuple[tuple[str, Graph], ...] = ()  # (attribute name, body), e.g. ("then_branch", g)
    # Loop/Scan: iterations (None: decided by the data at run time); If: None
    trip_count: SymInt | None = None
    trip_note: str = ""  # how the trip count was found, or why it is unknown
    notes: list[str] = field(default_factory=list)

    @property
    def is_branch(self) -> bool:
        """Runs one of its bodies: ONNX If, torch.cond (the traced op is named `cond`)."""
        return self.op_type in BRANCH_OPS


def body_peak_bytes(body: Graph) -> SymInt:
    """The largest total of the body's own intermediates live at one step, in the body's order.

    What the body reads (its inputs: the outer tensors, loop state) is counted outside; its
    outputs become the node's outputs, counted there too. An intermediate is live from its
    producer to its last reader, inclusive (graphmem/passes/liveness.py's convention). With
    free dims the step largest at PROBE_DIM_VALUE is taken.
    """
    outputs = {id(v) for v in body.outputs}
    last_use: dict[int, int] = {}
    for step, node in enumerate(body.nodes):
        for value in node.present_inputs:
            last_use[id(value.storage)] = step
    live: dict[int, SymInt] = {}
    steps: list[SymInt] = [SymInt.const(0)]
    for step, node in enumerate(body.nodes):
        for value in _owned_outputs(node, outputs):
            live[id(value)] = value.nbytes or SymInt.const(0)
        steps.append(sum_sizes(live.values()))
        for key in [k for k in live if last_use.get(k, step) <= step]:
            del live[key]
    return largest_at_probe(steps)


def _owned_outputs(node: Node, outputs: set[int]) -> Iterable[Value]:
    return (v for v in node.outputs if v.alias_of is None and id(v) not in outputs)


def largest_at_probe(values: Iterable[SymInt]) -> SymInt:
    """The largest value for every dim value when one is; otherwise the largest at the probe."""
    candidates = symint_max(values)
    if not candidates:
        return SymInt.const(0)
    probe = {name: PROBE_DIM_VALUE for c in candidates for name in c.free_symbols()}
    return max(candidates, key=lambda c: c.evaluate(probe))


def own_input_count(node: Node, body: Graph) -> int:
    """The body's own inputs (not the outer values it reads, which are the node's inputs
    too): a Loop's iteration number, condition and loop-carried values; a Scan's state and
    scanned slices."""
    outer = {v.name for v in node.inputs if v is not None}
    return sum(1 for v in body.inputs if v.name not in outer)
