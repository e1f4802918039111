"""Per-op cost formulas. Importing this package fills the registry with every rule family."""

from graphmem.ops import (  # noqa: F401 - imported to register their rules
    attention,
    elementwise,
    linear,
    movement,
    normalization,
    pooling,
    reduction,
)
from graphmem.ops.registry import OpCost, ShapeUnknownError, find_rule, registered_ops

__all__ = ["OpCost", "ShapeUnknownError", "find_rule", "registered_ops"]
