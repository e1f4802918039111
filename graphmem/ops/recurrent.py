"""Recurrent layers: ONNX RNN, GRU and LSTM (opset 22), G = 1, 3 and 4 gates.

Shapes (layout 0; layout 1 swaps seq and batch in X, Y and the states):
    X [seq, batch, input], W [dirs, G*hidden, input], R [dirs, G*hidden, hidden],
    B [dirs, 2*G*hidden] (Wb and Rb), initial states [dirs, batch, hidden],
    Y [seq, dirs, batch, hidden], Y_h (and LSTM's Y_c) [dirs, batch, hidden].
Every step of every direction multiplies X_t by W^T and H_{t-1} by R^T for all G gates:
    MACs = dirs * seq * batch * G*hidden * (input + hidden)
Then, per step, per direction, per batch row, per hidden unit (FLOPs, elementwise.py's
convention: one per primitive, an activation its formula's count):
- each gate: X_t W^T + H_{t-1} R^T (1 add), + Wb + Rb (2 adds, when B is given), clipped to
  [-clip, clip] (2, when `clip` is set);
- RNN:  H_t = f(gate)                                           f
- GRU:  z, r = f(.), f(.); h~ = g(. + r (.) ...) (the reset gate's multiply, 1, with either
        linear_before_reset); H_t = (1 - z) h~ + z H_{t-1} (4)  2f + g + 5
- LSTM: i, f, o = f(.) x 3; c~ = g(.); C_t = f C_{t-1} + i c~ (3); H_t = o h(C_t) (h + 1);
        peepholes P (input 7): P_i C_{t-1}, P_f C_{t-1}, P_o C_t, each a multiply-add (6)
                                                                3f + g + h + 4 (+ 6)
`sequence_lens` may stop a row early: the count is for the full seq (an upper bound then).
Memory: what the kernels keep between steps is the outputs and the states, whose sizes shape
inference gives; onnxruntime's gate buffer ([batch, G*hidden] per step) is not modelled.
"""

from __future__ import annotations

from graphmem.core.ir import Node
from graphmem.ops.elementwise import BACKWARD_TABLE, FLOPS_PER_ELEMENT
from graphmem.ops.registry import OpCost, ShapeUnknownError, known_dim, register

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"),
                       "LSTM": ("Sigmoid", "Tanh", "Tanh")}
# the activations ONNX recurrent ops accept; those of elementwise.py cost the same here
ACTIVATION_FLOPS = {name: FLOPS_PER_ELEMENT[name] for name in (
    "Relu", "Tanh", "Sigmoid", "LeakyRelu", "ThresholdedRelu", "HardSigmoid", "Elu",
    "Softsign", "Softplus")} | {
    "Affine": 2,  # alpha * x + beta
    "ScaledTanh": 3,  # alpha * tanh(beta * x)
}
GATE_SUM_FLOPS = 1  # X_t W^T + H_{t-1} R^T
BIAS_FLOPS = 2  # + Wb + Rb
CLIP_FLOPS = 2  # min, max
GRU_UPDATE_FLOPS = 5  # r (.) H (1); (1 - z) h~ + z H (4)
LSTM_CELL_FLOPS = 4  # f C + i c~ (3); o * h(C) (1)
PEEPHOLE_FLOPS = 6  # three multiply-adds


def activation_flops(node: Node, name: str) -> int:
    flops = ACTIVATION_FLOPS.get(name)
    if flops is None:
        raise ShapeUnknownError(f"{node.describe()}: activation {name!r} is not known")
    return flops


def direction_activations(node: Node, direction: int) -> tuple[str, ...]:
    """The activation names of one direction (a bidirectional op lists forward's first)."""
    defaults = DEFAULT_ACTIVATIONS[node.op_type]
    given = node.attributes.get("activations")
    if not given:
        return defaults
    if not isinstance(given, tuple):
        raise ShapeUnknownError(f"{node.describe()}: activations is not a list of names")
    names = tuple(v.decode(errors="replace") if isinstance(v, bytes) else str(v) for v in given)
    count = len(defaults)
    return names[direction * count:(direction + 1) * count] or names[:count]


def cell_flops(node: Node, activations: tuple[str, ...]) -> int:
    """FLOPs per step per hidden unit of one direction (module docstring)."""
    gates = GATES[node.op_type]
    per_gate = GATE_SUM_FLOPS + BIAS_FLOPS * (node.input(3) is not None)
    per_gate += CLIP_FLOPS * ("clip" in node.attributes)
    act = [activation_flops(node, name) for name in activations]
    cell = _cell_flops(gates, act)
    if node.op_type == "LSTM":
        cell += PEEPHOLE_FLOPS * (node.input(7) is not None)
    return gates * per_gate + cell


def _cell_flops(gates: int, act: list[int]) -> int:
    """The cell's own FLOPs per step per hidden unit, after the gates' sums (docstring)."""
    if gates == 1:
        return act[0]
    if gates == 3:
        return 2 * act[0] + act[1] + GRU_UPDATE_FLOPS
    return 3 * act[0] + act[1] + act[2] + LSTM_CELL_FLOPS


def lstm_layer_costs(rows: int, inputs: int, hidden: int, biases: bool) -> tuple[int, int]:
    """(MACs, FLOPs) of one direction of one LSTM layer (default activations) over `rows`
    = seq x batch steps, as PyTorch's CPU kernel runs it (aten.mkldnn_rnn_layer): the ONNX
    op's count above with G = 4, B given as two biases. e.g. rows 64, input 32, hidden 64,
    biases: MACs 64 x 256 x (32 + 64) = 1,572,864; per unit-step 4 x (1 + 2) + 3 x 4
    (sigmoid) + 1 + 1 (tanh) + 4 = 30 FLOPs: 2 x MACs + 64 x 64 x 30 = 3,268,608."""
    gates = GATES["LSTM"]
    macs = rows * gates * hidden * (inputs + hidden)
    act = [ACTIVATION_FLOPS[name] for name in DEFAULT_ACTIVATIONS["LSTM"]]
    per_gate = GATE_SUM_FLOPS + BIAS_FLOPS * biases
    return macs, 2 * macs + rows * hidden * (gates * per_gate + _cell_flops(gates, act))


# The gradient of one LSTM step per hidden unit, from c = f c' + i g, h = o tanh(c): the
# products dh tanh(c), dh o, dc f, dc c', dc i, dc g (6 multiplies), the carried dc + dh o
# tanh'(c) (tanh's backward and 1 add), each gate's activation backward (3 sigmoid, 1 tanh),
# and per gate the two biases' gradient sums (2 adds each, when there are biases)
LSTM_CELL_BACKWARD_FLOPS = 6 + 1


def lstm_layer_backward_costs(rows: int, inputs: int, hidden: int, biases: bool
                              ) -> tuple[int, int]:
    """(MACs, FLOPs) of one LSTM layer's backward (aten.mkldnn_rnn_layer_backward): the
    gates' gradient times W and R (the input's and the previous state's gradients) and
    its products with X and H (the weights' gradients): twice the forward's MACs; per
    unit-step LSTM_CELL_BACKWARD_FLOPS + 2 tanh and 3 sigmoid backwards (3 FLOPs each,
    elementwise.py's BACKWARD_TABLE) + 4 x 2 bias sums. e.g. rows 64, input 32, hidden 64,
    biases: MACs 3,145,728; per unit-step 7 + 2 x 3 + 3 x 3 + 8 = 30:
    6,291,456 + 4,096 x 30 = 6,414,336."""
    gates = GATES["LSTM"]
    macs = 2 * rows * gates * hidden * (inputs + hidden)
    cell = (LSTM_CELL_BACKWARD_FLOPS + 2 * BACKWARD_TABLE["Tanh"][1]
            + 3 * BACKWARD_TABLE["Sigmoid"][1] + gates * BIAS_FLOPS * biases)
    return macs, 2 * macs + rows * hidden * cell


@register("RNN", "GRU", "LSTM")
def recurrent(node: Node) -> OpCost:
    x = node.input(0)
    batch_first = node.attr_int("layout", 0) == 1
    seq = known_dim(x, 1 if batch_first else 0, node)
    batch = known_dim(x, 0 if batch_first else 1, node)
    input_size = known_dim(x, 2, node)
    directions = known_dim(node.input(1), 0, node)  # W [dirs, G*hidden, input]
    hidden = known_dim(node.input(2), 2, node)  # R [dirs, G*hidden, hidden]
    gate_rows = known_dim(node.input(1), 1, node)  # G * hidden
    macs = directions * seq * batch * gate_rows * (input_size + hidden)
    if not directions.is_constant:
        raise ShapeUnknownError(f"{node.describe()}: the direction count {directions} is unknown")
    flops = sum(cell_flops(node, direction_activations(node, d)) for d in range(int(directions)))
    steps_units = seq * batch * hidden
    cost = OpCost.from_macs(macs) + OpCost.from_flops(steps_units * flops)
    if node.input(4) is not None:
        cost = cost.noted("counted for the full seq: rows that sequence_lens stops early cost"
                          " less")
    return cost
