"""Expert parallelism: a mixture of experts' routed experts sharded over E ranks.

Routed experts are found in the parameter table, by shape, inside the model's layers:
- a stack: a 3-D parameter whose dims are all above 1 ([experts, out, in]: transformers'
  grouped experts `mlp.experts.gate_up_proj`), split along its first dim;
- a repeat: modules `...experts.0`, `...experts.1` inside a layer whose parameters have the
  same names and shapes (a ModuleList of expert MLPs), the first experts / E kept.
Everything else (attention, the router, shared experts, norms) is replicated on every
expert-parallel rank, as Megatron-LM's MoE layer replicates it. The expert count must
divide by E, as Megatron-LM and DeepSpeed-MoE require.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from graphmem.core.routing import MoeRouting, expert_loads
from graphmem.distributed.model_states import ParameterInfo
from graphmem.distributed.stages import Layers
from graphmem.errors import GraphmemError


@dataclass(frozen=True)
class ExpertShard:
    degree: int  # E
    experts: int  # routed experts per MoE layer
    stacked: frozenset[str]  # [experts, ...] parameters, cut along dim 0
    kept: frozenset[str]  # per-expert parameters on rank 0 (the first experts / E)
    dropped: frozenset[str]  # per-expert parameters of the other ranks' experts
    expert_elements: int  # routed-expert elements in the whole model
    modules: frozenset[str] = frozenset()  # the routed experts' module paths

    def holds(self, module_path: str) -> bool:
        """Whether a node of `module_path` runs inside the routed experts."""
        return any(module_path == m or module_path.startswith(m + ".") for m in self.modules)

    def on_rank(self, parameters: tuple[ParameterInfo, ...]) -> tuple[ParameterInfo, ...]:
        rows = []
        for p in parameters:
            if p.name in self.dropped:
                continue
            if p.name in self.stacked:
                rows.append(_cut(p, self.degree))
            else:
                rows.append(p)
        return tuple(rows)


def shard_experts(parameters: tuple[ParameterInfo, ...], layers: Layers,
                  degree: int) -> ExpertShard | None:
    if degree == 1:
        return None
    stacked = [p for p in parameters if layers.position(p.module) is not None
               and len(p.shape) == 3 and min(p.shape) > 1]
    repeats = _repeated_experts(parameters, layers)
    counts = {p.shape[0] for p in stacked} | {len(group) for group in repeats.values()}
    if not counts:
        raise GraphmemError(f"--expert-parallel {degree}: the model has no routed experts"
                            " (stacked [experts, out, in] weights or repeated expert modules"
                            " inside its layers); drop --expert-parallel")
    bad = sorted(c for c in counts if c % degree)
    if bad:
        raise GraphmemError(f"--expert-parallel {degree}: {bad[0]} experts per layer do not"
                            f" split over {degree} ranks; give a divisor of {bad[0]}")
    kept: set[str] = set()
    dropped: set[str] = set()
    for group in repeats.values():
        for position, members in enumerate(group):
            (kept if position < len(group) // degree else dropped).update(members)
    elements = sum(p.numel for p in stacked) + sum(
        p.numel for p in parameters if p.name in kept | dropped)
    modules = {p.module for p in stacked} | set(repeats)
    return ExpertShard(degree, max(counts), frozenset(p.name for p in stacked),
                       frozenset(kept), frozenset(dropped), elements, frozenset(modules))


def busiest_rank_factor(routing: MoeRouting, tokens: int, experts: int, top_k: int,
                        degree: int) -> Fraction:
    """The routed-expert tokens of the busiest of E expert-parallel ranks over the traced
    step's (every token's top_k choices on one GPU).

    Each EP rank routes its own micro-batch by the same policy and sends every choice to the
    rank holding that expert (experts / E consecutive experts per rank, as Megatron-LM lays
    them out), so rank r receives E x (its experts' loads in one micro-batch):
    balanced 1, capacity=F about F, worst E (top_k <= experts / E)."""
    loads = expert_loads(routing, tokens, experts, top_k)
    width = experts // degree
    busiest = max(sum(loads[r * width:(r + 1) * width]) for r in range(degree))
    return Fraction(degree * busiest, tokens * top_k)


def _repeated_experts(parameters: tuple[ParameterInfo, ...],
                      layers: Layers) -> dict[str, list[tuple[str, ...]]]:
    """container path -> [parameter names of expert 0, of expert 1, ...], for containers
    inside a layer whose integer-indexed children have identical parameters."""
    children: dict[str, dict[int, list[ParameterInfo]]] = {}
    head = layers.prefix + "." if layers.prefix else ""
    for p in parameters:
        if layers.position(p.module) is None:
            continue
        rest = p.module[len(head):].split(".")[1:]  # after the layer index
        for i, part in enumerate(rest):
            if part.isdigit():
                container = head + ".".join(p.module[len(head):].split(".")[:1] + rest[:i])
                children.setdefault(container, {}).setdefault(int(part), []).append(p)
                break
    groups = {}
    for container, by_index in children.items():
        signatures = {tuple(sorted((_tail(p.name, container), p.shape) for p in members))
                      for members in by_index.values()}
        if len(by_index) > 1 and len(signatures) == 1:
            groups[container] = [tuple(p.name for p in by_index[i]) for i in sorted(by_index)]
    return groups


def _tail(name: str, container: str) -> str:
    """`c.3.w1.weight` under container `c` -> `w1.weight` (the name within its expert)."""
    return name[len(container) + 1:].split(".", 1)[-1]


def _cut(parameter: ParameterInfo, degree: int) -> ParameterInfo:
    first, *rest = parameter.shape
    shape = (first // degree, *rest)
    return replace(parameter, shape=shape, numel=parameter.numel // degree,
                   nbytes=parameter.nbytes // degree)
