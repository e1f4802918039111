"""How a mixture of experts' router is assumed to choose: the routing policy.

A router's choice is data (which experts score highest for each token), so a static analysis
cannot know it; memory and FLOPs follow from how many tokens each expert receives. The
policy says that number, per expert, for `tokens` rows each choosing `top_k` of `experts`:

- balanced (the default): the tokens x top_k choices spread evenly over the experts;
- worst: the same top_k experts take every token (the bound for per-expert temporaries);
- capacity=F: the most skewed routing a capacity factor F lets through (GShard, Switch):
  each expert receives at most ceil(F x tokens x top_k / experts) tokens, filled in order.
  capacity=1 is balanced; F >= experts / top_k is worst.

The torch front end lays the choices out (graphmem/frontends/torch/routing.py); on an ONNX
graph the passes bind each expert's token count by it (graphmem/passes/routed_dims.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from graphmem.errors import GraphmemError

BALANCED, WORST, CAPACITY = "balanced", "worst", "capacity"


@dataclass(frozen=True)
class MoeRouting:
    kind: str = BALANCED
    capacity_factor: float = 1.0  # only for kind "capacity"

    def __post_init__(self) -> None:
        if self.kind not in (BALANCED, WORST, CAPACITY) or not (
                math.isfinite(self.capacity_factor) and self.capacity_factor >= 1):
            raise GraphmemError(f"moe routing {self.kind!r} (capacity factor"
                                f" {self.capacity_factor}): give balanced, worst or capacity=F"
                                " with F >= 1")

    def __str__(self) -> str:
        return f"{CAPACITY}={self.capacity_factor:g}" if self.kind == CAPACITY else self.kind

    def describe(self) -> str:
        """One phrase for the outputs: what the policy assumes."""
        if self.kind == WORST:
            return "worst: the same top_k experts take every token"
        if self.kind == CAPACITY:
            return (f"capacity={self.capacity_factor:g}: experts filled in order up to"
                    f" {self.capacity_factor:g} x tokens x top_k / experts tokens each")
        return "balanced: tokens x top_k spread evenly over the experts"


DEFAULT_ROUTING = MoeRouting()


def parse_moe_routing(text: str) -> MoeRouting:
    """`balanced`, `worst` or `capacity=F` (F >= 1)."""
    name, _, value = text.strip().partition("=")
    if name in (BALANCED, WORST) and not value:
        return MoeRouting(name)
    if name == CAPACITY:
        try:
            factor = float(value)
        except ValueError:
            factor = math.nan
        if math.isfinite(factor) and factor >= 1:
            return MoeRouting(CAPACITY, factor)
    raise GraphmemError(f"--moe-routing {text!r}: give balanced, worst or capacity=F with a"
                        " capacity factor F >= 1 (e.g. capacity=1.25)")


def expert_loads(routing: MoeRouting, tokens: int, experts: int, top_k: int) -> list[int]:
    """Tokens each expert receives, expert 0 first; they sum to tokens x top_k and none
    exceeds `tokens` (a token chooses an expert once)."""
    choices = tokens * top_k
    if routing.kind == BALANCED:
        # 10 tokens x 2 of 4 experts: 20 = 5 + 5 + 5 + 5; 9 x 2 of 4: 18 = 5 + 5 + 4 + 4
        base, extra = divmod(choices, experts)
        return [base + (e < extra) for e in range(experts)]
    if routing.kind == WORST:
        cap = tokens
    else:
        cap = min(tokens, math.ceil(routing.capacity_factor * choices / experts))
    # full experts at `cap`, the remainder to the next, the rest idle
    full, rest = divmod(choices, cap) if cap else (0, 0)
    return [cap] * full + [rest] * (rest > 0) + [0] * (experts - full - (rest > 0))



@dataclass(frozen=True)
class RoutedDim:
    """One expert's token count in a graph: a dim the data sizes (an exported expert loop's
    NonZero over the router's one-hot choices), bound by the policy (graphmem/passes/
    routed_dims.py finds them)."""

    dim: str  # the dim the count is (NonZero's output [2, dim])
    router: str  # the node that makes the router's choices (TopK, ArgMax, their Concat)
    expert: int  # which of the router's experts (the router's i-th NonZero in graph order)
    tokens: int
    experts: int
    top_k: int
    size: int  # the expert's tokens under the policy
