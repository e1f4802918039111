"""Everything graphmem knows about an op: cost, backward and traits, in one registry.

Importing this package loads every rule family (`load_all`), so the registry does not depend
on what else was imported first.
"""

from graphmem.ops.registry import (
    OpCost,
    OpSpec,
    ShapeUnknownError,
    find_backward_rule,
    find_rule,
    find_spec,
    load_all,
    op_name,
    registered_ops,
    spec_of,
    traits_of,
)
from graphmem.ops.traits import Autocast, Contraction, Traits

load_all()

__all__ = ["Autocast", "Contraction", "OpCost", "OpSpec", "ShapeUnknownError", "Traits",
           "find_backward_rule", "find_rule", "find_spec", "load_all", "op_name",
           "registered_ops", "spec_of", "traits_of"]
