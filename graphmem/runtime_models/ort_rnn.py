"""onnxruntime CPU's GRU, LSTM and RNN kernels: their working buffers and packed weights.

Read in onnxruntime's source (core/providers/cpu/rnn/deep_cpu_gru.cc, deep_cpu_lstm.cc,
lstm_base.cc, uni_directional_lstm.cc, rnn.cc, rnn_helpers.h) and checked against its measured
`mem_in_use_peak` on hand-built nodes and exported models (tests/test_ort_rnn_scratch.py).

Notation: S = seq_length (X's dim 0), B = batch (X's dim 1), I = input_size (X's dim 2),
H = hidden_size, D = 2 for a bidirectional node else 1; float32 throughout (the kernels
refuse double). Every buffer is taken from the kernel's temp-space allocator (the arena) after
its outputs and held until the kernel returns (`rnn::detail::Allocate`: count elements).

- GRU (`DeepCpuGruOp::ComputeImpl`): Y_h's buffer when Y_h is not an output (D*B*H); then
  per direction, forward first (`UniDirectionalGru::AllocateBuffers`, then `Compute`):
  cur_h and batched_hidden0 (B*H each); with a bias B, the z and r biases summed and
  repeated per batch row (B*H each) and for the h gate one such buffer, or two (Wbh and Rbh
  apart) and linear_output (B*H) with linear_before_reset; linear_output also without a
  bias; outputZRH, X times W for all steps (3H*B*S); a reverse direction also reverses its
  input (S*B*I) and its output sequence (S*B*H); and without sequence_lens the lengths
  (B int32). A bidirectional node holds both directions' buffers (both objects live until
  it returns).
- LSTM (`LSTMBase::ComputeImpl`): Y_h's and Y_c's buffers when not outputs (D*B*H each);
  per direction (`UniDirectionalLstm::AllocateBuffers`): hidden0 and internal_memory_prev
  (H each), batched_hidden0, batched_internal_memory_prev and _clipped (B*H each),
  output_iofc (4H*B*S), with a bias four summed gate biases (H each), the reverse
  direction's input and output sequences as GRU's (peepholes P are read in place: the
  build defines LSTM_NO_PEEPHOLE_COPY; measured, no copies); then each direction's
  lengths (B int32) where sequence_lens is absent.
- RNN (`RNN<float>::Compute`): X times W for one direction at a time (S*B*H), and Y's
  buffer when Y is not an output (S*D*B*H).

Packed weights (`PrePack`, at session creation, for float32 initializers): GRU packs W
[D, 3H, I] as D panels of MlasGemmPackBSize(3H, I) and R [D, 3H, H] as two buffers, the z
and r rows (D x MlasGemmPackBSize(2H, H)) and the h rows (D x MlasGemmPackBSize(H, H));
LSTM packs W [D, 4H, I] and R [D, 4H, H] the same way (D x MlasGemmPackBSize(4H, K)). The
kernel then reads the packed copies; the RNN kernel packs nothing.

Not modelled: a `sequence_lens` of all zeros, on which the GRU and LSTM kernels return before
taking any buffer (data, not shape: the buffers are counted); com.microsoft's
DynamicQuantizeLSTM (its quantized input and gate buffers).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from graphmem.core.ir import Node, Role, Value

RNN_OPS = frozenset({"GRU", "LSTM", "RNN"})
FLOAT_BYTES = 4
INT32_BYTES = 4
SGEMM_PACKED_N_ALIGN = 16  # MlasGemmPackBSize: N rounded up to the packed panel width
PACKED_BUFFER_ALIGN = 64  # MlasGetPreferredBufferAlignment


def pack_b_bytes(n: int, k: int) -> int:
    """MlasGemmPackBSize(N, K): N rounded up to 16 columns by K rows of floats, the bytes
    rounded up to 64: (60, 4) -> 64 * 4 * 4 = 1,024."""
    size = -(-n // SGEMM_PACKED_N_ALIGN) * SGEMM_PACKED_N_ALIGN * k * FLOAT_BYTES
    return -(-size // PACKED_BUFFER_ALIGN) * PACKED_BUFFER_ALIGN


def is_rnn(node: Node) -> bool:
    return node.op_type in RNN_OPS and node.domain in ("", "ai.onnx")


def _directions(node: Node) -> int:
    return 2 if node.attr_str("direction", "forward") == "bidirectional" else 1


def _ints(value: Value | None, bound: Mapping[str, int]) -> list[int] | None:
    if value is None or value.shape is None or any(d is None for d in value.shape):
        return None
    dims = [d.bind(bound) for d in value.shape if d is not None]
    return [int(d) for d in dims] if all(d.is_constant for d in dims) else None


def _missing_states(node: Node, states: int) -> int:
    """How many of the node's `states` final states (Y_h; LSTM's Y_h and Y_c) it does not
    output. The importer keeps only the outputs a node names, so they are told apart by
    rank: Y is [S, D, B, H], a final state [D, B, H]."""
    ranks = [len(v.shape) if v.shape is not None else None for v in node.outputs]
    if None in ranks:  # unknown ranks: by position, the first outputs named
        return max(states + 1 - len(node.outputs), 0)
    return states - sum(rank == 3 for rank in ranks)


def _outputs_sequence(node: Node) -> bool:
    ranks = [len(v.shape) if v.shape is not None else None for v in node.outputs]
    return 4 in ranks or (None in ranks and bool(node.outputs))


def rnn_scratch_bytes(node: Node, bound: Mapping[str, int]) -> tuple[int, ...]:
    """The node's working buffers in the order its kernel takes them, as requested (the arena
    rounds each); none where X's shape or the hidden size is not known at `bound`, nor for
    `layout` 1 (batch first), which the CPU kernels refuse when the session is created."""
    x = _ints(node.input(0), bound)
    hidden = node.attr_int("hidden_size", 0)
    if x is None or len(x) != 3 or hidden <= 0 or node.attr_int("layout", 0) != 0:
        return ()
    seq, batch, width = x
    if node.op_type == "GRU":
        return _gru(node, seq, batch, width, hidden)
    if node.op_type == "LSTM":
        return _lstm(node, seq, batch, width, hidden)
    return _rnn(node, seq, batch, hidden)


def _reversed_sequences(seq: int, batch: int, width: int, hidden: int) -> list[int]:
    """A reverse direction's copies: its input reversed [S, B, I] and its output sequence
    before it is reversed into Y [S, B, H]."""
    return [FLOAT_BYTES * seq * batch * width, FLOAT_BYTES * seq * batch * hidden]


def _direction_names(node: Node) -> list[str]:
    direction = node.attr_str("direction", "forward")
    return ["forward", "reverse"] if direction == "bidirectional" else [direction]


def _gru(node: Node, seq: int, batch: int, width: int, hidden: int) -> tuple[int, ...]:
    row = FLOAT_BYTES * batch * hidden  # one [B, H] float buffer
    d = _directions(node)
    sizes = [d * row] * _missing_states(node, 1)  # local_hidden_output
    bias = node.input(3) is not None
    linear = node.attr_int("linear_before_reset", 0) != 0
    for direction in _direction_names(node):
        sizes += [row, row]  # cur_h, batched_hidden0
        if bias:  # WRz, WRr; Wh and Rh apart with linear_before_reset, else WRh
            sizes += [row] * (4 if linear else 3)
        if linear:
            sizes.append(row)  # linear_output
        sizes.append(FLOAT_BYTES * 3 * hidden * batch * seq)  # outputZRH
        if direction == "reverse":
            sizes += _reversed_sequences(seq, batch, width, hidden)
        if node.input(4) is None:
            sizes.append(INT32_BYTES * batch)  # sequence_lengths_, in Compute
    return tuple(sizes)


def _lstm(node: Node, seq: int, batch: int, width: int, hidden: int) -> tuple[int, ...]:
    row = FLOAT_BYTES * batch * hidden
    vector = FLOAT_BYTES * hidden  # one [H] float buffer
    d = _directions(node)
    sizes = [d * row] * _missing_states(node, 2)  # local_hidden_output, local_last_cell
    directions = _direction_names(node)
    for direction in directions:
        # hidden0, internal_memory_prev; batched_hidden0, _internal_memory_prev, _clipped
        sizes += [vector, vector, row, row, row]
        sizes.append(FLOAT_BYTES * 4 * hidden * batch * seq)  # output_iofc
        if node.input(3) is not None:
            sizes += [vector] * 4  # bias_WRi, WRf, WRo, WRc
        if direction == "reverse":
            sizes += _reversed_sequences(seq, batch, width, hidden)
    if node.input(4) is None:  # each direction's Compute: sequence_lengths_
        sizes += [INT32_BYTES * batch] * len(directions)
    return tuple(sizes)


def _rnn(node: Node, seq: int, batch: int, hidden: int) -> tuple[int, ...]:
    sizes = [FLOAT_BYTES * seq * batch * hidden]  # x_matmul: X * W^T, one direction's
    if not _outputs_sequence(node):  # Y's buffer
        sizes.append(FLOAT_BYTES * seq * _directions(node) * batch * hidden)
    return tuple(sizes)


def rnn_packs(node: Node, constant_dims: Callable[[Value | None], list[int] | None]
              ) -> list[tuple[int, int]]:
    """(input index, bytes) of each weight the node's kernel packs at session creation: W
    (input 1) and R (input 2) where `constant_dims` finds them float32 initializers (their
    dims), of the shape the kernel expects."""
    if node.op_type not in ("GRU", "LSTM"):
        return []
    hidden = node.attr_int("hidden_size", 0)
    gates = 3 if node.op_type == "GRU" else 4
    d = _directions(node)
    packs = []
    for index in (1, 2):
        weight = node.input(index)  # a graph input is fed at run time: never packed
        dims = None if weight is None or weight.role is Role.INPUT else constant_dims(weight)
        if dims is None or len(dims) != 3 or dims[0] != d or dims[1] != gates * hidden:
            continue
        k = dims[2]
        if node.op_type == "GRU" and index == 2:
            if k != hidden:
                continue
            # TryPackRecurrentWeights: the z and r rows, then the h rows, D panels each
            size = d * (pack_b_bytes(2 * hidden, k) + pack_b_bytes(hidden, k))
        else:
            size = d * pack_b_bytes(gates * hidden, k)
        packs.append((index, size))
    return packs

