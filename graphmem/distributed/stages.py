"""A traced training step cut into pipeline chunks: which parameters and which activations
each chunk of consecutive layers holds, for one micro-batch.

The layers are the model's module repeats (`model.layers.0`, `model.layers.1`, ...: the
dotted prefix with the most integer-indexed children among the parameters' modules). Chunk c
of P x V holds a consecutive run of layers (graphmem/distributed/parallel.py `split_layers`);
what runs outside the layers goes by its place in the step: forward nodes before the first
layer (embeddings, rotary tables, masks) to the first chunk, after the last layer (final
norm, output layer, loss) to the last; backward nodes mirror that (the loss and output
layer's backward to the last chunk, the embedding's to the first).

A parameter is held by every chunk whose forward reads it: a layer's own by its chunk, an
output layer tied to the embedding by the first and the last chunk (Megatron-LM keeps a copy
on the last stage and all-reduces the two gradients). An activation buffer is held by the
chunk that makes it and by every chunk that uses it: a layer's input crosses from the chunk
before (kept there for its backward, as torch.distributed.pipelining keeps a stage's output)
to the chunk after (the received buffer); a table made once and read by every layer (rotary
cos/sin, the causal mask) is held by every chunk, each stage making its own. `saved` is what
a chunk keeps from its forward to its backward: buffers a forward node makes (or graph
inputs) that a backward node reads, the activations each in-flight micro-batch holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate

from graphmem.core.ir import Graph, Node, Phase, Value
from graphmem.core.symbolic import SymInt
from graphmem.distributed.comm_buffers import attention_kv_bytes
from graphmem.distributed.model_states import ParameterInfo, Part, value_parts
from graphmem.distributed.parallel import split_layers
from graphmem.errors import GraphmemError
from graphmem.passes.memory_model import find_buffers, step_events

_ACTIVATION_PARTS = (Part.ACTIVATIONS, Part.SPLIT_ACTIVATIONS)


@dataclass(frozen=True)
class Layers:
    """The repeated blocks: `{prefix}.0` .. `{prefix}.{count - 1}`."""

    prefix: str
    indices: tuple[int, ...]  # the integer names, in order

    @property
    def count(self) -> int:
        return len(self.indices)

    def position(self, module_path: str) -> int | None:
        """The layer (0-based position) a module path lies in, or None."""
        head = self.prefix + "." if self.prefix else ""
        if not module_path.startswith(head):
            return None
        name = module_path[len(head):].split(".", 1)[0]
        if not name.isdigit():
            return None
        return self._position.get(int(name))

    @property
    def _position(self) -> dict[int, int]:
        return {index: i for i, index in enumerate(self.indices)}


@dataclass(frozen=True)
class ChunkActivations:
    """One chunk's activation bytes for one micro-batch, at each step of the traced order."""

    layers: range  # layer positions in this chunk
    whole_steps: tuple[int, ...]  # live bytes of its unsplit activations
    split_steps: tuple[int, ...]  # live bytes of outputs of tensor-parallel matmuls
    saved_whole: int  # kept from the forward to the backward (not split)
    saved_split: int


@dataclass(frozen=True)
class StageCut:
    layers: Layers
    chunks: tuple[ChunkActivations, ...]
    parameter_chunks: Mapping[str, frozenset[int]]  # parameter -> the chunks holding it
    attention_kv_bytes: int = 0  # K + V of the largest fused attention (0: none found)

    def parameters_of(self, chunks: Iterable[int]) -> frozenset[str]:
        wanted = frozenset(chunks)
        return frozenset(name for name, held in self.parameter_chunks.items() if held & wanted)

    @property
    def tied(self) -> tuple[str, ...]:
        """Parameters held by more than one chunk (tied weights)."""
        return tuple(name for name, held in self.parameter_chunks.items() if len(held) > 1)


def find_layers(module_paths: Iterable[str]) -> Layers | None:
    """The dotted prefix with the most integer-indexed children (the first such prefix of a
    path: `model.layers` in `model.layers.3.mlp.experts.1`)."""
    indices: dict[str, dict[int, None]] = {}
    for path in module_paths:
        parts = path.split(".")
        for i, part in enumerate(parts):
            if part.isdigit():
                indices.setdefault(".".join(parts[:i]), {})[int(part)] = None
                break
    if not indices:
        return None
    prefix = max(indices, key=lambda key: len(indices[key]))  # first of the largest
    return Layers(prefix, tuple(sorted(indices[prefix])))


def cut_stages(graph: Graph, sizes: Mapping[str, SymInt | None],
               parameters: tuple[ParameterInfo, ...], chunks: int, flag: str) -> StageCut:
    """`graph` (a bound training step) cut into `chunks` consecutive runs of layers."""
    layers = find_layers(p.module for p in parameters)
    if layers is None or layers.count < chunks:
        found = (f"{layers.count} repeated layers ({layers.prefix}.N)" if layers
                 else "no repeated layers (modules named NAME.0, NAME.1, ...)")
        raise GraphmemError(f"{flag}: {chunks} pipeline chunks need as many layers and the"
                            f" model has {found}; give a smaller degree")
    chunk_of_layer = {layer: c for c, run in enumerate(split_layers(layers.count, chunks))
                      for layer in run}
    node_chunk = _node_chunks(graph.nodes, layers, chunk_of_layer, chunks - 1)
    return StageCut(layers, _activations(graph, sizes, parameters, node_chunk, chunks,
                                         split_layers(layers.count, chunks)),
                    _parameter_chunks(graph, parameters, node_chunk),
                    attention_kv_bytes(graph, sizes))



def _node_chunks(nodes: list[Node], layers: Layers, chunk_of_layer: dict[int, int],
                 last: int) -> list[int]:
    """Each node's chunk: its layer's, else by its place before or after the layers."""
    chunk: list[int] = []
    seen = {Phase.FORWARD: False, Phase.BACKWARD: False}
    for node in nodes:
        phase = Phase.BACKWARD if node.phase is Phase.BACKWARD else Phase.FORWARD
        layer = layers.position(node.module_path)
        if node.phase is Phase.OPTIMIZER:
            chunk.append(last)
        elif layer is not None:
            seen[phase] = True
            chunk.append(chunk_of_layer[layer])
        elif phase is Phase.FORWARD:
            chunk.append(last if seen[phase] else 0)
        else:  # backward runs the layers in reverse
            chunk.append(0 if seen[phase] else last)
    return chunk


def _parameter_chunks(graph: Graph, parameters: tuple[ParameterInfo, ...],
                      node_chunk: list[int]) -> dict[str, frozenset[int]]:
    readers: dict[str, set[int]] = {}
    for node, chunk in zip(graph.nodes, node_chunk, strict=True):
        if node.phase in (Phase.OPTIMIZER, Phase.BACKWARD):
            continue
        for value in node.present_inputs:
            readers.setdefault(value.storage.name, set()).add(chunk)
    return {p.name: frozenset(readers.get(p.name) or {0}) for p in parameters}


def _activations(graph: Graph, sizes: Mapping[str, SymInt | None],
                 parameters: tuple[ParameterInfo, ...], node_chunk: list[int], chunks: int,
                 runs: tuple[range, ...]) -> tuple[ChunkActivations, ...]:
    """Per chunk: live activation bytes at each step (a difference array per chunk over
    each buffer's [made, last use] steps) and the bytes saved for the backward."""
    part_of = value_parts(graph, parameters)
    buffers = find_buffers(graph)
    steps = len(buffers.nodes)
    events = step_events(buffers, range(steps))
    holders: list[set[int]] = [{node_chunk[p]} for p in buffers.producer]
    read_backward = [False] * len(buffers.storages)
    for index, used in enumerate(buffers.uses):
        for buffer in used:
            holders[buffer].add(node_chunk[index])
            if buffers.nodes[index].phase is Phase.BACKWARD:
                read_backward[buffer] = True
    diff = {(c, part): [0] * (steps + 1) for c in range(chunks) for part in _ACTIVATION_PARTS}
    saved = dict.fromkeys(diff, 0)
    for buffer, storage in enumerate(buffers.storages):
        part = part_of[storage.name]
        size = _int(sizes.get(storage.name))
        if part not in _ACTIVATION_PARTS or not size:
            continue
        first, last = buffers.producer[buffer], events.last_step[buffer]
        forward = buffers.nodes[first].phase is not Phase.BACKWARD
        for chunk in holders[buffer]:
            diff[chunk, part][first] += size
            diff[chunk, part][last + 1] -= size
            if forward and read_backward[buffer]:
                saved[chunk, part] += size
    _add_residents(buffers.residents, sizes, part_of, graph, node_chunk, diff, saved)
    return tuple(ChunkActivations(
        runs[c], tuple(accumulate(diff[c, Part.ACTIVATIONS][:steps])),
        tuple(accumulate(diff[c, Part.SPLIT_ACTIVATIONS][:steps])),
        saved[c, Part.ACTIVATIONS], saved[c, Part.SPLIT_ACTIVATIONS]) for c in range(chunks))


def _add_residents(residents: tuple[Value, ...], sizes: Mapping[str, SymInt | None],
                   part_of: Mapping[str, Part], graph: Graph, node_chunk: list[int],
                   diff: dict[tuple[int, Part], list[int]],
                   saved: dict[tuple[int, Part], int]) -> None:
    """Inputs (token ids, labels), module buffers and constants are live the whole step on
    each chunk that reads them."""
    chunk_of = {node.name: chunk for node, chunk in zip(graph.nodes, node_chunk, strict=True)}
    for value in residents:
        part, size = part_of.get(value.name), _int(sizes.get(value.name))
        if part not in _ACTIVATION_PARTS or not size:
            continue
        for chunk in {chunk_of[node.name] for node in value.consumers} or {0}:
            diff[chunk, part][0] += size
            diff[chunk, part][-1] -= size
            if any(node.phase is Phase.BACKWARD for node in value.consumers):
                saved[chunk, part] += size


def _int(size: SymInt | None) -> int:
    return int(size) if size is not None and size.is_constant else 0
