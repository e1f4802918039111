"""Value sizes found once per (dtype, dim objects) (core/ir.py `Value._sizes`): the same
numel and bytes as the plain product of the dims, for random shapes that share dim objects,
equal dims in other objects, unknown dims and ranks, sub-byte and unsized dtypes, and after
the cache is cleared."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

import graphmem.core.ir as ir
from graphmem.core.ir import DType, Role, Value
from graphmem.core.symbolic import SymInt


def plain_sizes(shape: tuple[SymInt | None, ...] | None,
                dtype: DType) -> tuple[SymInt | None, SymInt | None]:
    """(numel, bytes) the plain way: every dim multiplied, times bits / 8."""
    if shape is None or any(d is None for d in shape):
        return None, None
    numel = SymInt.const(1)
    for dim in shape:
        assert dim is not None
        numel = numel * dim
    if not dtype.has_known_size:
        return numel, None
    return numel, numel * Fraction(dtype.bits, 8)


@pytest.mark.parametrize("seed", range(40))
def test_sizes_match_the_plain_product(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    batch, seq = SymInt.symbol("batch"), SymInt.symbol("seq")
    # a few dim objects reused by many shapes, and equal dims made anew each time
    shared = [SymInt.const(3), SymInt.const(64), batch, seq * 2, None]

    def dim() -> SymInt | None:
        if rng.random() < 0.7:
            return rng.choice(shared)
        fresh = [SymInt.const(64), SymInt.symbol("batch"), SymInt.const(rng.randint(1, 9))]
        return rng.choice(fresh)

    if seed % 4 == 0:  # a small cache: cleared while values are sized
        monkeypatch.setattr(ir, "_MAX_SHAPE_TEXTS", 3)
    dtypes = list(DType)
    for index in range(200):
        shape = None if rng.random() < 0.05 else tuple(dim() for _ in range(rng.randint(0, 4)))
        dtype = rng.choice(dtypes)
        value = Value(f"v{index}", dtype, shape, Role.ACTIVATION)
        numel, nbytes = plain_sizes(shape, dtype)
        assert value.numel == numel and value.nbytes == nbytes
        if nbytes is not None and nbytes.is_constant:  # 4-bit tensors round up to whole bytes
            assert int(value.nbytes or 0) == math.ceil(nbytes.constant_term)
        # a new shape on the same value is sized anew
        value.shape = (SymInt.const(5),) if shape is None else (*shape, SymInt.const(2))
        numel, nbytes = plain_sizes(value.shape, dtype)
        assert value.numel == numel and value.nbytes == nbytes
