"""What onnxruntime's CPU kernels do with memory: views, in-place writes, scratch.

The planner (graphmem/runtime_models/ort_cpu.py) needs, per kernel, what onnxruntime's
KernelDefBuilder declares (`Alias`, `MayInplace`) and what the kernel takes from the arena
while it runs. Measured on onnxruntime 1.31.1 CPU by running each op on an input that dies
there (the output took no new memory, or it did), and read in its source:
core/mlas/lib/convolve.cpp (MlasConvPrepare), core/providers/cpu/tensor/where_op.cc,
contrib_ops/cpu/bert/bias_gelu.cc.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from graphmem.core.ir import Graph, Node, Role, Value
from graphmem.ops.control_flow import ControlFlowNode
from graphmem.runtime_models.bfc_arena import ArenaEvent
from graphmem.runtime_models.graph_cache import cached_per_graph
from graphmem.runtime_models.ort_einsum import einsum_temps
from graphmem.runtime_models.ort_rnn import RNN_OPS, is_rnn, rnn_packs, rnn_scratch_bytes

# CPU kernels whose output 0 is a view of input 0 (KernelDefBuilder::Alias(0, 0)).
ALIAS_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
# CPU kernels that may write output 0 over input 0 (MayInplace(0, 0)). Measured not in place:
# Add, Sub, Mul, Div, Pow, Max, Min, Sum, Where, Abs, Neg, Exp, Log, Sqrt, Reciprocal, Floor,
# Ceil, Erf, Sign, Round, Dropout, Hardmax, Gelu, Transpose, Expand (tests/test_runtime_ort.py).
INPLACE_OPS = frozenset({
    "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "Tanh", "Softplus",
    "ThresholdedRelu", "Shrink", "Clip", "Softmax", "LogSoftmax", "Cast",
})

# Contrib kernels that may write output 0 over another input: (domain, op) -> input index.
# com.microsoft.nchwc Conv adds its fused residual (input 3, "Sum") into the output buffer
# (KernelDefBuilder().MayInplace(3, 0) in contrib_ops/cpu/nchwc_ops.cc; measured: the ResNet-50
# samples at ORT_ENABLE_ALL are exact with it, 5% (batch 1) to 9% (batch 8) above without; the
# residual block of tests/test_runtime_ort_optimized.py).
CONTRIB_INPLACE_INPUT = {("com.microsoft.nchwc", "Conv"): 3}

CONV_BUFFER_FLOATS_PER_THREAD = 128 * 128  # MLAS_SGEMM_STRIDEN * MLAS_SGEMM_STRIDEK
CONV_THREAD_COMPLEXITY = 64 * 1024  # MLAS_SGEMM_THREAD_COMPLEXITY (multiply-adds per thread)
CONV_MAX_THREADS = 16  # MLAS_MAXIMUM_THREAD_COUNT
CONV_STRIDE_N_ALIGN = 16  # MLAS_SGEMM_STRIDEN_THREAD_ALIGN


@dataclass(frozen=True)
class KernelScratch:
    """Arena allocations a kernel makes and frees while it runs."""

    sizes_bytes: tuple[int, ...] = ()
    before_outputs: bool = False  # allocated before the kernel's outputs
    outputs_at: int | None = None  # else: how many are allocated before the outputs
    # per allocation, the earlier ones freed right after it (Einsum's replaced operands);
    # the rest are freed when the kernel returns
    frees_after: tuple[tuple[int, ...], ...] = ()
    # the node's `::body_scratch` output stands for these allocations (a Loop's iterations,
    # ort_loop.py): the estimate sizes that output 0
    replaces_body: bool = False

    @property
    def held_bytes(self) -> int:
        """The most of these held at once."""
        held = peak = 0
        for i, size in enumerate(self.sizes_bytes):
            held += size
            peak = max(peak, held)
            if i < len(self.frees_after):
                held -= sum(self.sizes_bytes[j] for j in self.frees_after[i])
        return peak

    def events(self, prefix: str, outputs: Sequence[ArenaEvent]
               ) -> tuple[list[ArenaEvent], list[str]]:
        """The kernel's allocations: its scratch (keys `prefix` and the index) with the frees
        made between them and its `outputs` in their place; the keys freed on return."""
        at = self.outputs_at
        at = at if at is not None else len(self.sizes_bytes) if self.before_outputs else 0
        events: list[ArenaEvent] = []
        held: dict[str, None] = {}  # in allocation order (a Loop's: 10^5 of them, freed by key)
        for i, size in enumerate(self.sizes_bytes):
            if i == at:
                events.extend(outputs)
            events.append(ArenaEvent(f"{prefix} {i}", size))
            held[f"{prefix} {i}"] = None
            for j in self.frees_after[i] if i < len(self.frees_after) else ():
                events.append(ArenaEvent(f"{prefix} {j}", None))
                del held[f"{prefix} {j}"]
        return events + (list(outputs) if at >= len(self.sizes_bytes) else []), list(held)


# the scratch of a kernel that takes none: one shared instance (frozen), as most of a graph's
# nodes, probed at every batch a largest-batch search tries, have none
NO_SCRATCH = KernelScratch()


# the ONNX-domain kernels that take scratch (the CUDA model's only one, Einsum, among them)
# (and the control-flow kernels, whose allocations are ort_loop.py's)
SCRATCH_OPS = frozenset({"Conv", "Where", "ConvTranspose", "Einsum", "Loop", "Scan",
                         "If"}) | RNN_OPS


# The kernels measured to take nothing from the arena but their outputs: every op of the
# models whose runs graphmem's plan matches to the byte (benchmarks/results/accuracy.md: the
# samples, the CNN zoo's exports, ResNet-18, MobileNetV2, BERT and GPT-2, as written and as
# onnxruntime optimizes them at every level; the Loop, Scan and If bodies of
# benchmarks/results/ort_loops.md). An op of neither these nor the modelled ones
# (`may_take_scratch`) is counted without scratch too, but as not known: the runtime's notes
# name it (`unmeasured_scratch_ops`), as they name a tensor of unknown size.
NO_SCRATCH_OPS = frozenset({
    "Abs", "Add", "And", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat",
    "Constant", "ConstantOfShape", "Div", "Equal", "Erf", "Expand", "Flatten", "Gather",
    "GatherElements", "Gemm", "GlobalAveragePool", "Greater", "GreaterOrEqual", "Identity",
    "IsNaN", "LayerNormalization", "Less", "LessOrEqual", "MatMul", "MaxPool", "Mod", "Mul",
    "Neg", "Not", "Pow", "Range", "Reciprocal", "ReduceMean", "ReduceSum", "Relu", "Reshape",
    "Shape", "Sigmoid", "SimplifiedLayerNormalization", "Slice", "Softmax", "Split", "Sqrt",
    "Squeeze", "Tanh", "Tile", "Transpose", "Trilu", "Unsqueeze",
})
NO_SCRATCH_CONTRIB_OPS = frozenset({
    ("com.microsoft", "FusedGemm"), ("com.microsoft", "FusedMatMul"),
    ("com.microsoft", "QuickGelu"), ("com.microsoft", "SkipLayerNormalization"),
    *(("com.microsoft.nchwc", op) for op in ("AveragePool", "Conv", "GlobalAveragePool",
                                             "MaxPool", "ReorderInput", "ReorderOutput")),
})
# the com.microsoft kernels whose scratch `contrib_scratch` models
CONTRIB_SCRATCH_OPS = frozenset({"FusedConv", "BiasGelu", "FastGelu"})


def scratch_known(node: Node) -> bool:
    """Whether graphmem knows what the node's CPU kernel takes from the arena: a rule of
    this module or ort_loop.py's, or measured none (NO_SCRATCH_OPS)."""
    if node.domain in ("", "ai.onnx"):
        return node.op_type in SCRATCH_OPS or node.op_type in NO_SCRATCH_OPS
    if node.domain == "com.microsoft" and node.op_type in CONTRIB_SCRATCH_OPS:
        return True
    return (node.domain, node.op_type) in NO_SCRATCH_CONTRIB_OPS


def unmeasured_scratch_ops(graph: Graph) -> tuple[str, ...]:
    """The ops of the graph's nodes, those of its Loop, Scan and If bodies too (nested ones
    recursively: onnxruntime runs their kernels), whose kernel's scratch is not known
    (`scratch_known`), sorted, each once (`Conv`; `com.microsoft.Attention` outside the ONNX
    domain); found once per graph."""
    return cached_per_graph(graph, (_UNMEASURED,),
                            lambda: tuple(sorted(_unmeasured_in(graph))))


def _unmeasured_in(graph: Graph) -> set[str]:
    found = {node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
             for node in graph.nodes if not scratch_known(node)}
    for node in graph.nodes:
        if isinstance(node, ControlFlowNode):
            for _, body in node.bodies:
                found |= _unmeasured_in(body)
    return found


_UNMEASURED = object()  # graph_cache's key for `unmeasured_scratch_ops`


def may_take_scratch(node: Node) -> bool:
    """Whether the node's CPU or CUDA kernel may take scratch: for any other node both
    `kernel_scratch` and the CUDA model's `cuda_kernel_scratch` are NO_SCRATCH at any dims
    (a probe sizes only these)."""
    return node.domain == "com.microsoft" or (node.domain in ("", "ai.onnx")
                                              and node.op_type in SCRATCH_OPS)


def kernel_scratch(node: Node, threads: int, bound: Mapping[str, int]) -> KernelScratch:
    """What the node's CPU kernel takes from the arena while it runs, at the bound dims."""
    if node.domain == "com.microsoft":
        return contrib_scratch(node, threads, bound)
    if not may_take_scratch(node):
        return NO_SCRATCH  # measured none, or not known (`scratch_known`: the notes say it)
    if node.op_type == "Conv":
        size = conv_scratch_bytes(node, threads, bound)
        return KernelScratch((size,) if size else ())
    if node.op_type == "Where":
        return where_scratch(node, bound)
    if node.op_type == "ConvTranspose":
        return conv_transpose_scratch(node, bound)
    if node.op_type == "Einsum":
        return einsum_scratch(node, bound)
    if node.op_type in RNN_OPS:
        return KernelScratch(rnn_scratch_bytes(node, bound))  # GRU, LSTM, RNN: ort_rnn.py
    return NO_SCRATCH  # a Loop, Scan or If: what it holds is ort_loop.py's


def einsum_scratch(node: Node, bound: Mapping[str, int]) -> KernelScratch:
    """Einsum's transposes, partial sums and products; its output is allocated before the
    final transpose (ort_einsum.py)."""
    shapes = [_ints(v, bound) for v in node.inputs]
    out = node.outputs[0]
    if any(s is None for s in shapes) or not out.dtype.has_known_size:
        return KernelScratch()
    temps = einsum_temps(node.attr_str("equation", ""), [s for s in shapes if s is not None],
                         out.dtype.bits // 8)
    if temps is None:
        return KernelScratch()
    return KernelScratch(tuple(temps.sizes_bytes), outputs_at=temps.outputs_at,
                         frees_after=tuple(temps.frees_after))


def conv_transpose_scratch(node: Node, bound: Mapping[str, int]) -> KernelScratch:
    """ConvTranspose's column buffer, taken after its output (conv_transpose.cc
    DoConvTranspose): F/group * prod(kernel) rows by the input's pixels, one image and group
    at a time: X [N, C, *in], W [C, F/group, *kernel] -> 4 * W[1] * prod(W[2:]) * prod(in)."""
    x, w = _ints(node.input(0), bound), _ints(node.input(1), bound)
    float32 = node.outputs[0].dtype.label == "float32"
    if x is None or w is None or len(x) < 3 or len(w) < 3 or not float32:
        return KernelScratch()
    size = 4 * _product(w[1:]) * _product(x[2:])
    return KernelScratch((size,) if size else ())


def contrib_scratch(node: Node, threads: int, bound: Mapping[str, int]) -> KernelScratch:
    """com.microsoft kernels' temporaries: FusedConv (a Conv with its activation, what
    ORT_ENABLE_ALL makes of a Conv the NCHWc layout does not take, such as a grouped one) is
    Conv's kernel (contrib_ops/cpu/fused_conv.cc: `Conv<float>` with an activation), the same
    working buffer; BiasGelu, and FastGelu given a bias, keep (x + bias) / 2 in a buffer of the
    input's size while they run, taken after the output (contrib_ops/cpu/bert/bias_gelu.cc)."""
    if node.op_type == "FusedConv":
        size = conv_scratch_bytes(node, threads, bound)
        return KernelScratch((size,) if size else ())
    if node.op_type in ("BiasGelu", "FastGelu") and node.input(1) is not None:
        size = _bytes(node.input(0), bound)
        return KernelScratch((size,) if size else ())
    return KernelScratch()


def _bytes(value: Value | None, bound: Mapping[str, int]) -> int:
    """The value's bytes at the bound dims; 0 where its shape or dtype is unknown."""
    shape = _ints(value, bound)
    if value is None or shape is None or not value.dtype.has_known_size:
        return 0
    return _product(shape) * value.dtype.bits // 8


def where_scratch(node: Node, bound: Mapping[str, int]) -> KernelScratch:
    """Where broadcasts two inputs at a time (core/providers/cpu/tensor/where_op.cc):
    X_selection = cond ? X : 0 and Y_selection = cond ? 0 : Y, each of the broadcast shape
    of (cond, value), then merges them into the output."""
    cond, x, y, out = node.input(0), node.input(1), node.input(2), node.outputs[0]
    shapes = [s for s in (_ints(v, bound) for v in (cond, x, y)) if s is not None]
    if len(shapes) < 3 or not out.dtype.has_known_size:
        return KernelScratch()
    c, xs, ys = shapes
    element = out.dtype.bits // 8
    sizes = tuple(element * _product(_broadcast(c, v)) for v in (xs, ys))
    return KernelScratch(sizes, before_outputs=True)


def _broadcast(a: Sequence[int], b: Sequence[int]) -> list[int]:
    """numpy broadcasting of two shapes: [64, 64] with [1, 4, 64, 64] -> [1, 4, 64, 64]."""
    rank = max(len(a), len(b))
    a = [1] * (rank - len(a)) + list(a)
    b = [1] * (rank - len(b)) + list(b)
    return [max(x, y) if 1 in (x, y) else x for x, y in zip(a, b, strict=True)]


def conv_scratch_bytes(node: Node, threads: int, bound: Mapping[str, int]) -> int:
    """Conv's working buffer (MlasConvPrepare), from the bound shapes of its tensors."""
    x, w = node.input(0), node.input(1)
    y = node.outputs[0] if node.outputs else None
    dims = [d for d in (_ints(v, bound) for v in (x, w, y)) if d is not None and len(d) >= 3]
    if len(dims) < 3:
        return 0
    x_shape, w_shape, y_shape = dims  # [N, C, *in], [F, C/group, *kernel], [N, F, *out]
    group = node.attr_int("group", 1)
    spatial = len(x_shape) - 2
    kernel = _product(w_shape[2:])
    k = w_shape[1] * kernel  # K = C/group * prod(kernel)
    output_pixels = _product(y_shape[2:])
    filters = w_shape[0] // max(group, 1)  # per group
    pads = node.attr_ints("pads", (0,) * 2 * spatial)
    strides = node.attr_ints("strides", (1,) * spatial)
    if all(s == 1 for s in strides) and not any(pads) and kernel == 1:
        return 0  # pointwise: the GEMM reads the input directly
    if filters > output_pixels:
        return 4 * output_pixels * k  # the full im2col matrix
    batch_groups = x_shape[0] * group
    used = min(threads, batch_groups) if batch_groups > 1 else _conv_threads(
        filters * output_pixels * k, output_pixels, threads)
    return 4 * used * CONV_BUFFER_FLOATS_PER_THREAD


def _conv_threads(multiply_adds: int, output_pixels: int, threads: int) -> int:
    """MlasConvPrepare: one thread per 64K multiply-adds, at most 16 and the pool's size,
    then fewer where slicing the output pixels in 16-aligned strides leaves a thread idle."""
    target = min(multiply_adds // CONV_THREAD_COMPLEXITY + 1, CONV_MAX_THREADS, threads)
    stride = -(-output_pixels // target)
    if target > 1:
        stride = -(-stride // CONV_STRIDE_N_ALIGN) * CONV_STRIDE_N_ALIGN
        if stride >= output_pixels:
            target = 1
        elif stride * (target - 1) >= output_pixels:
            target -= 1
    return max(target, 1)


def _ints(value: Value | None, bound: Mapping[str, int]) -> list[int] | None:
    if value is None or value.shape is None or any(d is None for d in value.shape):
        return None
    dims = [d.bind(bound) for d in value.shape if d is not None]
    return [int(d) for d in dims] if all(d.is_constant for d in dims) else None


def _product(values: Sequence[int]) -> int:
    result = 1
    for v in values:
        result *= v
    return result


# ----- what is in the arena before the first kernel ----------------------------------------------

SGEMM_PACKED_N_ALIGN = 16  # MlasGemmPackBSize: N rounded up to the packed panel width
PACKED_BUFFER_ALIGN = 64  # MlasGetPreferredBufferAlignment
SMALL_INITIALIZER_BYTES = 127  # kSmallTensorExternalDataThreshold: larger ones are used in place


# kernels whose PrePack packs B: MatMul<float>, Gemm<float>, contrib FusedGemm (a Gemm<float>
# with an activation, what ORT_ENABLE_EXTENDED makes of MatMul + Add + Relu) and contrib
# FusedMatMul (a MatMul<float> with alpha and transposes: contrib_ops/cpu/fusedmatmul.h; its
# PrePack is MatMul's, B read transposed when transB)
_PREPACKING_KERNELS = frozenset({("", "MatMul"), ("ai.onnx", "MatMul"), ("", "Gemm"),
                                 ("ai.onnx", "Gemm"), ("com.microsoft", "FusedGemm"),
                                 ("com.microsoft", "FusedMatMul")})


@dataclass(frozen=True)
class Prepack:
    """One kernel's PrePack of its constant B: `key` says which packs are the same buffer
    (onnxruntime keys its prepacked-weights container by op type + the packed bytes: the same
    weight packed by the same kernel with the same transB)."""

    key: tuple[str, str, int]  # (op type, weight name, transB)
    weight: str
    size_bytes: int


def prepacks(nodes: Sequence[Node]) -> list[Prepack]:
    """The packs of constant float32 weights kernels make at session creation, into the
    arena, once per use, in `nodes`' order: MatMul, Gemm and FusedMatMul pack a 2-D B for
    MLAS's SGEMM (N rounded up to 16 columns, 64-byte aligned); ConvTranspose its filter
    (`conv_transpose_pack`); GRU and LSTM their W and R (ort_rnn.py `rnn_packs`)."""
    packed: list[Prepack] = []
    for node in nodes:
        if (node.domain, node.op_type) in _PREPACKING_KERNELS:
            pack = _gemm_pack(node)
        elif node.domain in ("", "ai.onnx") and node.op_type == "ConvTranspose":
            pack = conv_transpose_pack(node)
        elif is_rnn(node):
            packed.extend(_rnn_pack(node, index, size)
                          for index, size in rnn_packs(node, _constant_float32))
            continue
        else:
            continue
        if pack is not None:
            packed.append(pack)
    return packed


def _rnn_pack(node: Node, index: int, size_bytes: int) -> Prepack:
    weight = node.inputs[index]
    assert weight is not None  # rnn_packs found it
    return Prepack((node.op_type, weight.name, index), weight.name, size_bytes)


def _gemm_pack(node: Node) -> Prepack | None:
    b = _constant_float32(node.input(1))
    if b is None or len(b) != 2:
        return None
    trans_b = node.attr_int("transB", 0)
    k, n = (b[1], b[0]) if trans_b else (b[0], b[1])  # [K, N]; transB: [N, K]
    size = -(-n // SGEMM_PACKED_N_ALIGN) * SGEMM_PACKED_N_ALIGN * k * 4
    weight = node.inputs[1]
    assert weight is not None  # _constant_float32 found it
    return Prepack((node.op_type, weight.name, trans_b), weight.name,
                   -(-size // PACKED_BUFFER_ALIGN) * PACKED_BUFFER_ALIGN)


def conv_transpose_pack(node: Node) -> Prepack | None:
    """ConvTranspose<float>::PrePack (core/providers/cpu/nn/conv_transpose.cc) keeps its
    filter [C, F/group, *kernel] transposed per group, K = C/group rows by N = F/group *
    kernel columns: K * N * group floats, the filter's own bytes; not for a filter of rank 2
    or less, nor where K or N is 1."""
    w = _constant_float32(node.input(1))
    group = max(node.attr_int("group", 1), 1)
    if w is None or len(w) <= 2:
        return None
    k, n = w[0] // group, _product(w[1:])
    if k <= 1 or n <= 1:
        return None
    weight = node.inputs[1]
    assert weight is not None  # _constant_float32 found it
    return Prepack((node.op_type, weight.name, 0), weight.name, k * n * group * 4)


def _constant_float32(value: Value | None) -> list[int] | None:
    """The dims of an initializer of float32 with numeric dims; None for anything else."""
    if value is None or value.producer is not None or value.shape is None:
        return None
    if value.dtype.label != "float32" or not all(d is not None and d.is_constant
                                                 for d in value.shape):
        return None
    return [int(d) for d in value.shape if d is not None]


def prepacked_weights(nodes: Sequence[Node]) -> list[tuple[str, int]]:
    """The packed buffers onnxruntime keeps: (weight name, bytes), one per distinct pack. A
    weight several kernels read is packed once and shared (ALBERT's layers share one layer's
    weights: three uses, one buffer)."""
    kept: dict[tuple[str, str, int], Prepack] = {}
    for pack in prepacks(nodes):
        kept.setdefault(pack.key, pack)
    return [(pack.weight, pack.size_bytes) for pack in kept.values()]


def prepack_peak_bytes(nodes: Sequence[Node]) -> int:
    """The in-use peak while onnxruntime prepacks at session creation. Each later use of a
    shared weight packs it again and only then finds the same bytes in the container
    (SessionState::PrepackConstantInitializedTensors: PrePack first, then the lookup), so its
    pack is a temporary freed at once, on top of the packs kept so far. Measured with one
    256x256 weight read by 2 and 3 MatMuls: 2 packs' worth at creation (524,288 B), 1 kept."""
    kept: set[tuple[str, str, int]] = set()
    held = peak = 0
    for pack in prepacks(nodes):
        if pack.key in kept:
            peak = max(peak, held + pack.size_bytes)
            continue
        kept.add(pack.key)
        held += pack.size_bytes
        peak = max(peak, held)
    return peak


def small_initializer_bytes(initializers: Sequence[Value]) -> int:
    """Initializers (and Constant-node values) of at most 127 bytes, which onnxruntime copies
    into memory it counts as in use; larger ones it uses in place, uncounted."""
    return sum(int(v.nbytes) for v in initializers
               if v.nbytes is not None and v.nbytes.is_constant
               and int(v.nbytes) <= SMALL_INITIALIZER_BYTES)


def arena_weights_bytes(graph: Graph, order: Sequence[Node]) -> int:
    """What onnxruntime CPU holds in use before the first kernel: the prepacked MatMul/Gemm
    weights and the small initializers it copies (unused initializers are dropped)."""
    initializers = [v for v in graph.values.values()
                    if v.producer is None and v.role is not Role.INPUT and v.consumers]
    packed = sum(size for _, size in prepacked_weights(order))
    bodies = cached_per_graph(graph, (_BODY_CONSTANTS,), lambda: _body_constant_bytes(graph))
    return packed + small_initializer_bytes(initializers) + bodies


_BODY_CONSTANTS = object()  # graph_cache's key for `_body_constant_bytes`


def _body_constant_bytes(graph: Graph) -> int:
    """The small initializers and Constant values of the control-flow bodies, nested ones too:
    each body's session state copies its own into the arena as the graph's are (measured: a
    Loop body's four 8-byte slice bounds are 32 bytes in use before the first kernel)."""
    total = 0
    for node in graph.nodes:
        for _, body in node.bodies if isinstance(node, ControlFlowNode) else ():
            outputs = {id(v) for v in body.outputs}  # a constant the body returns is held too
            total += small_initializer_bytes([
                v for v in body.values.values() if v.producer is None
                and v.role is not Role.INPUT and (v.consumers or id(v) in outputs)])
            total += _body_constant_bytes(body)
    return total


def session_creation_peak_bytes(graph: Graph, order: Sequence[Node]) -> int:
    """The in-use peak before the first run: the small initializers and the prepacking's own
    peak (`prepack_peak_bytes`), the kernels packed in `order` (onnxruntime's node index
    order: the file's, or the optimized graph's as saved); mem_in_use_peak is the larger of
    this and the run's."""
    return arena_weights_bytes(graph, order) - sum(
        size for _, size in prepacked_weights(order)) + prepack_peak_bytes(order)


def creation_peak_note(creation_bytes: int) -> str:
    return (f"the peak is at session creation: {creation_bytes:,} bytes while weights several"
            " kernels share are prepacked (each later use packs a temporary copy, the"
            " allocator overhead here); no tensor is allocated yet")
