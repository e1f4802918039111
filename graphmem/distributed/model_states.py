"""A training graph's memory, step by step, split into the parts parallel training treats apart.

Data parallelism (DDP, ZeRO, FSDP) shards parameters, gradients and optimizer state, and tensor
parallelism (Megatron) splits matmul weights and the outputs of those matmuls. This pass reads
the roles the importers put on the graph (PARAMETER, GRADIENT, OPTIMIZER_STATE, TEMPORARY, the
rest) and returns, for every step of the model's schedule, the live bytes of each part, plus a
table of the parameters (size, owning module, whether a tensor-parallel split applies). It
knows no framework: a torch.fx training graph and an ONNX training graph with the same roles
give the same kind of profile.

The per-part timelines come from the liveness pass itself, run once per part with the sizes of
every other value masked to 0: lifetimes do not depend on sizes, so the parts add up, at every
step, to the single-GPU live total.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from graphmem.core.ir import Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.errors import GraphmemError
from graphmem.ops import Contraction, traits_of
from graphmem.passes.liveness import analyze_liveness
from graphmem.passes.modules import parameter_module


class Part(StrEnum):
    PARAMETERS = "parameters"
    GRADIENTS = "gradients"
    OPTIMIZER_STATE = "optimizer_state"
    TEMPORARIES = "temporaries"  # optimizer-step intermediates (foreach Adam's sqrt copy)
    SPLIT_ACTIVATIONS = "split_activations"  # what tensor parallel splits (split_activations)
    ACTIVATIONS = "activations"  # everything else: inputs, activations, saved, their grads


_SPLITTABLE_ROLES = (Role.ACTIVATION, Role.SAVED_ACTIVATION, Role.ACTIVATION_GRADIENT)
_PART_OF_ROLE = {
    Role.PARAMETER: Part.PARAMETERS,
    Role.GRADIENT: Part.GRADIENTS,
    Role.OPTIMIZER_STATE: Part.OPTIMIZER_STATE,
    Role.TEMPORARY: Part.TEMPORARIES,
}



@dataclass(frozen=True)
class ParameterInfo:
    name: str
    shape: tuple[int, ...]
    numel: int
    nbytes: int
    module: str  # the module that owns it ('' at top level)
    splittable: bool  # a 2-D weight of a matmul or embedding: Megatron splits it


@dataclass(frozen=True)
class TrainingProfile:
    """Live bytes of each part at each step of the model's order, and the parameter table."""

    order: tuple[str, ...]
    part_bytes: dict[Part, tuple[int, ...]]  # part -> live bytes at each step
    parameters: tuple[ParameterInfo, ...]
    single_gpu_peak_bytes: int  # the liveness peak of the whole graph (all parts)

    @property
    def parameter_count(self) -> int:
        return sum(p.numel for p in self.parameters)

    @property
    def parameter_bytes(self) -> int:
        return sum(p.nbytes for p in self.parameters)

    @property
    def gradient_bytes(self) -> int:
        """All parameter gradients: the largest number of gradient bytes live at once."""
        return max(self.part_bytes[Part.GRADIENTS])

    def step_total(self, step: int) -> int:
        return sum(timeline[step] for timeline in self.part_bytes.values())


def profile_training(graph: Graph, sizes: Mapping[str, SymInt | None]) -> TrainingProfile:
    """The per-part timelines of a training graph whose dims are all bound."""
    if not any(True for _ in graph.values_with_role(Role.GRADIENT)):
        raise GraphmemError(f"{graph.name}: --gpus/--strategy need a training graph (parameter"
                            " gradients and optimizer state): analyze it with --train")
    _require_bound(graph, sizes)
    parameters = _parameter_table(graph)
    part_of = value_parts(graph, parameters)
    part_bytes: dict[Part, tuple[int, ...]] = {}
    order: tuple[str, ...] = ()
    for part in Part:
        masked = {name: (size if part_of[name] is part else SymInt())
                  for name, size in sizes.items()}
        liveness = analyze_liveness(graph, masked)
        part_bytes[part] = tuple(int(step) for step in liveness.live_bytes_per_step)
        order = liveness.order
    peak = max(sum(t[s] for t in part_bytes.values()) for s in range(len(order)))
    return TrainingProfile(order, part_bytes, parameters, peak)


def value_parts(graph: Graph, parameters: tuple[ParameterInfo, ...]) -> dict[str, Part]:
    """Value name -> the part parallel training treats it as."""
    split = split_activations(graph, frozenset(p.name for p in parameters if p.splittable))
    return {value.name: _part(value, split) for value in graph.values.values()}


def split_activations(graph: Graph, splittable: frozenset[str]) -> frozenset[str]:
    """The values tensor parallelism splits, followed through the graph (Megatron-LM's
    column- then row-parallel pairs): a matmul with a split weight splits its output when
    its activation input is whole (column parallel: q, k, v, fc1, the vocabulary's logits)
    and makes it whole when the input is split (row parallel: o, fc2, after their
    all-reduce); any other op's output is split when one of its inputs is (attention over
    each rank's heads, the activation between fc1 and fc2, their gradients)."""
    split: set[str] = set()
    for node in graph.nodes:
        from_split = any(v.storage.name in split for v in node.present_inputs)
        weighted = _is_matmul(node) and any(v.storage.name in splittable
                                            for v in node.present_inputs)
        if from_split != weighted:
            split.update(value.name for value in node.outputs)
    return frozenset(split)


def _require_bound(graph: Graph, sizes: Mapping[str, SymInt | None]) -> None:
    free = sorted({d for size in sizes.values() if size is not None for d in size.free_symbols()})
    if free:
        raise GraphmemError(f"{graph.name}: per-GPU memory needs every dim bound; free: "
                            f"{', '.join(free)} (give --batch / --dim NAME=VALUE)")


def _part(value: Value, split: frozenset[str]) -> Part:
    if value.role in _PART_OF_ROLE:
        return _PART_OF_ROLE[value.role]
    if value.role in _SPLITTABLE_ROLES and value.name in split:
        return Part.SPLIT_ACTIVATIONS
    return Part.ACTIVATIONS


def _parameter_table(graph: Graph) -> tuple[ParameterInfo, ...]:
    readers = _storage_readers(graph)
    rows = []
    for value in graph.values_with_role(Role.PARAMETER):
        if value.alias_of is not None or value.numel is None:
            continue
        shape = tuple(int(d) for d in value.shape or () if d is not None)
        # a matmul's weight, or an embedding's table (read by rows: Megatron splits the
        # vocabulary, VocabParallelEmbedding)
        splittable = (len(shape) == 2 and value.dtype.is_float
                      and any(_is_matmul(node) or traits_of(node).row_gather
                              for node in readers.get(value.name, ())))
        rows.append(ParameterInfo(
            name=value.name, shape=shape, numel=int(value.numel), nbytes=int(value.nbytes or 0),
            module=_owner(value), splittable=splittable))
    return tuple(rows)


def _is_matmul(node: Node) -> bool:
    """Its output is x @ W for a weight W, which Megatron splits."""
    return traits_of(node).contraction is Contraction.MATMUL


def _storage_readers(graph: Graph) -> dict[str, list[Node]]:
    """Storage name -> nodes that read it directly or through a view (`t(weight)`)."""
    readers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for value in node.present_inputs:
            readers.setdefault(value.storage.name, []).append(node)
    return readers


def _owner(parameter: Value) -> str:
    """By its dotted name (`h.0.attn.c_attn.weight`), else the first reader's module."""
    by_name = parameter_module(parameter.name)
    if by_name or not parameter.consumers:
        return by_name
    return parameter.consumers[0].module_path
