"""Random number generation: RandomUniform, RandomNormal (and their *Like forms), Bernoulli,
Multinomial.

Convention: drawing the random bits is integer work (a counter-based generator, Philox, or a
Mersenne twister), not floating-point arithmetic, and is not counted; what turns the bits
into the distribution is, per output element:
- RandomUniform: u * (high - low) + low: 2 (multiply, add);
- RandomNormal: Box-Muller makes two normals from two uniforms with log, multiply by -2,
  sqrt, multiply by 2 pi, cos and sin, and two multiplies: 8 per pair, 4 per element; then
  * scale + mean: 2; so 6;
- Bernoulli: u < p: 2 (the uniform's scaling to [0, 1), the compare);
- Multinomial: [batch, classes] unnormalised log-probabilities -> [batch, samples]: each row's
  cumulative distribution once, exp and a running add per class (2), then per sample a uniform
  (1) and a binary search over the classes (ceil(log2 classes) compares).
"""

from __future__ import annotations

from graphmem.core.ir import Node
from graphmem.ops.elementwise import per_element_rule
from graphmem.ops.registry import (
    OpCost,
    ShapeUnknownError,
    input_numel,
    known_dim,
    output_numel,
    register,
)

UNIFORM_FLOPS = 2
NORMAL_FLOPS = 6
BERNOULLI_FLOPS = 2
CDF_FLOPS_PER_CLASS = 2  # exp, running add
DRAW_FLOPS = 1

register("RandomUniform", "RandomUniformLike")(per_element_rule(UNIFORM_FLOPS))
register("RandomNormal", "RandomNormalLike")(per_element_rule(NORMAL_FLOPS))
register("Bernoulli")(per_element_rule(BERNOULLI_FLOPS))


def binary_search_compares(slots: int) -> int:
    """One compare per halving of `slots` (at least 1) to one: ceil(log2(slots)), e.g.
    8 slots: 3, 9 slots: 4 (a search among 8 boundaries), 1 slot: 0."""
    return (slots - 1).bit_length()


@register("Multinomial")
def multinomial(node: Node) -> OpCost:
    classes = known_dim(node.input(0), 1, node)
    if not classes.is_constant:
        raise ShapeUnknownError(f"{node.describe()}: class count {classes} is not a constant")
    search = max(binary_search_compares(int(classes)), 1)
    cdf = input_numel(node, 0) * CDF_FLOPS_PER_CLASS
    return OpCost.from_flops(cdf + output_numel(node) * (DRAW_FLOPS + search))
