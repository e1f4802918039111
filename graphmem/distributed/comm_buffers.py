"""Communication buffers beside the traced tensors: ring attention's K/V blocks under context
parallel, and NCCL's own buffers for each communicator a rank belongs to.

Ring attention (context parallel C). TransformerEngine's AttnFuncWithCPAndKVP2P
(transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py, the
attention Megatron-LM's context parallel calls) packs the rank's K and V into one buffer
(`p2p_comm_buffers[0] = cat(k, v)`, a copy) and at each of the C steps receives the next
rank's block into a new `empty_like` buffer; the list keeps every step's block until the
forward returns: C blocks of the local K + V at once. Its backward exchanges K/V and their
gradients in two buffers of `(2, *kv.shape)`: 4 blocks. One attention runs at a time, so a
rank holds max(C, 4) blocks of one layer's local K + V for as long as that attention runs:

    ring_bytes = max(C, 4) x (K + V bytes of the largest attention) / (C x T)

(the local K and V are 1/C of the sequence, their heads split by tensor parallel T). It is
added to the rank's peak whatever step that is: an upper bound where the peak lies outside
attention.

NCCL (an estimate). NCCL_BUFFSIZE (default 4 MiB, NCCL's documented default: "the size of
the buffer used by NCCL when communicating data between pairs of GPUs",
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html) is allocated per channel
for each peer a rank connects to, outside PyTorch's allocator. A rank joins one communicator
per parallel group larger than one: data parallel N, tensor parallel T, pipeline P, context
C (rings: at most 2 peers, the previous and the next rank; 1 in a group of 2), expert
parallel E (all-to-all: E - 1 peers). Channels depend on the topology (NCCL_MIN_NCHANNELS ..
NCCL_MAX_NCHANNELS, more on NVLink); the estimate takes 2, the fewest a ring uses, so it is
a floor, and it leaves out the LL and LL128 protocols' smaller buffers:

    nccl_bytes = sum over communicators of NCCL_BUFFSIZE x channels x peers
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import ceil

from graphmem.core.ir import Graph, Phase, Value
from graphmem.core.symbolic import SymInt
from graphmem.distributed.parallel import ParallelLayout
from graphmem.ops.aten import FUSED_ATTENTION
from graphmem.ops.registry import op_name

NCCL_BUFFSIZE = 4 << 20  # bytes per channel per peer (NCCL's default)
NCCL_CHANNELS = 2  # the fewest channels of a ring: the estimate is a floor
BACKWARD_BLOCKS = 4  # two buffers of (K/V, their gradients)
# ops that only reshape, repeat or copy a tensor: grouped-query attention's K and V reach the
# kernel repeated to every query head (transformers' repeat_kv: unsqueeze, expand, clone,
# view); the ring sends them before that, so a K/V block is the smallest tensor on this chain
_SAME_DATA = frozenset({"_unsafe_view", "view", "reshape", "_reshape_alias", "clone",
                        "contiguous", "expand", "unsqueeze"})
_MAX_HOPS = 8


def ring_attention_bytes(kv_bytes: int, context: int, tensor_parallel: int) -> int:
    """The ring's K/V blocks one rank holds while its largest attention runs (0 without
    context parallel). `kv_bytes`: that attention's K + V in the traced (unsplit) step."""
    if context == 1 or kv_bytes == 0:
        return 0
    blocks = max(context, BACKWARD_BLOCKS)  # the forward's C, the backward's 4
    return blocks * ceil(kv_bytes / (context * tensor_parallel))


def attention_kv_bytes(graph: Graph, sizes: Mapping[str, SymInt | None]) -> int:
    """K + V bytes of the largest fused attention forward of a traced step (a scaled-dot-
    product kernel: graphmem/ops/aten.py FUSED_ATTENTION says where its Q, K and V are);
    0 when the step has none (attention written as matmul and softmax)."""
    largest = 0
    for node in graph.nodes:
        spec = FUSED_ATTENTION.get(op_name(node))
        if spec is None or spec.backward or node.phase is Phase.BACKWARD:
            continue
        first = spec.query_argument + 1
        pair = [value for value in node.inputs[first:first + 2] if value is not None]
        largest = max(largest, sum(_block_bytes(value, sizes) for value in pair))
    return largest


def _block_bytes(value: Value, sizes: Mapping[str, SymInt | None]) -> int:
    """The smallest size along `value`'s chain of reshapes, repeats and copies."""
    smallest = _int(sizes.get(value.name))
    for _ in range(_MAX_HOPS):
        node = value.producer
        if node is None or op_name(node) not in _SAME_DATA or not node.present_inputs:
            break
        value = node.present_inputs[0]
        size = _int(sizes.get(value.name))
        smallest = min(smallest, size) if size else smallest
    return smallest


def _int(size: SymInt | None) -> int:
    return int(size) if size is not None and size.is_constant else 0


@dataclass(frozen=True)
class Communicator:
    group: str  # "data parallel", "tensor parallel", ...
    size: int  # ranks in the group
    peers: int  # ranks this one keeps NCCL buffers for

    @property
    def nccl_bytes(self) -> int:
        return NCCL_BUFFSIZE * NCCL_CHANNELS * self.peers


@dataclass(frozen=True)
class NcclEstimate:
    communicators: tuple[Communicator, ...]  # the groups larger than one rank

    @property
    def total_bytes(self) -> int:
        return sum(c.nccl_bytes for c in self.communicators)


def nccl_estimate(gpus: int, tensor_parallel: int, layout: ParallelLayout) -> NcclEstimate:
    """One communicator per parallel group of more than one rank."""
    rings = (("data parallel", gpus), ("tensor parallel", tensor_parallel),
             ("pipeline parallel", layout.pipeline), ("context parallel", layout.context))
    groups = [Communicator(name, size, min(size - 1, 2)) for name, size in rings if size > 1]
    if layout.expert > 1:
        groups.append(Communicator("expert parallel", layout.expert, layout.expert - 1))
    return NcclEstimate(tuple(groups))
