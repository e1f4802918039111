"""A trace's memoized fake tensors emptied without losing more of the user's than it must
(graphmem/frontends/torch/memo_caches.py): a cache that gained entries in the trace is
emptied; if it held the user's entries from before, the analysis's notes say so; a module
whose namespace grew (a function defined since) and `__main__` are scanned again."""

from __future__ import annotations

import functools
import sys
import types

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

from graphmem import analyze_torch
from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.frontends.torch.memo_caches import caches_of

pytestmark = pytest.mark.torch


@functools.lru_cache(maxsize=4)
def ramp(width: int) -> torch.Tensor:
    return torch.arange(width, dtype=torch.float32)


class Ramped(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * ramp(x.shape[-1])


def _analyze(model: nn.Module, spec: str = "2x8"):  # type: ignore[no-untyped-def]
    return analyze_torch(model, [parse_tensor_spec(spec)], plan=False, suggest=False)


def _cache_notes(analysis) -> list[str]:  # type: ignore[no-untyped-def]
    return [note for note in analysis.model.notes if "memoized function cache" in note]


def test_a_cache_empty_before_is_emptied_silently() -> None:
    ramp.cache_clear()
    analysis = _analyze(Ramped())
    assert ramp.cache_info().currsize == 0 and _cache_notes(analysis) == []
    assert not isinstance(ramp(8), FakeTensor)


def test_the_users_entries_lost_are_said() -> None:
    ramp.cache_clear()
    ramp(3)  # the user's entry, before the analysis
    analysis = _analyze(Ramped())  # the trace adds ramp(8), a fake tensor
    assert ramp.cache_info().currsize == 0
    notes = _cache_notes(analysis)
    assert len(notes) == 1 and f"{__name__}.ramp" in notes[0]
    ramp(8)  # the entry the trace used already, before: nothing added, nothing lost
    analysis = _analyze(Ramped())
    assert ramp.cache_info().currsize == 1 and _cache_notes(analysis) == []
    assert not isinstance(ramp(8), FakeTensor)


def test_functions_defined_after_a_first_analysis_are_found() -> None:
    # a notebook: a model analysed, then a memoized table defined in the same module and a
    # second model using it (the module was scanned once, by identity, and the table missed:
    # table(16) stayed a FakeTensor)
    notebook = types.ModuleType("graphmem_test_notebook")
    sys.modules[notebook.__name__] = notebook
    try:
        exec("from torch import nn\nclass A(nn.Linear): pass\n", vars(notebook))
        _analyze(notebook.A(16, 16), "2x16")
        exec("import functools, torch\nfrom torch import nn\n"
             "@functools.lru_cache\ndef table(n): return torch.arange(n) * 1.0\n"
             "class B(nn.Module):\n"
             "    def forward(self, x): return x * table(x.shape[-1])\n", vars(notebook))
        _analyze(notebook.B(), "2x16")
        assert not isinstance(notebook.table(16), FakeTensor)
    finally:
        del sys.modules[notebook.__name__]


def test_main_is_scanned_at_every_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    # a script's or notebook's cell run again rebinds a name: the namespace keeps its size
    main = sys.modules["__main__"]
    model = type("Scripted", (nn.Module,), {"__module__": "__main__"})()
    first, second = functools.lru_cache(ramp.__wrapped__), functools.lru_cache(ramp.__wrapped__)
    monkeypatch.setattr(main, "graphmem_test_table", first, raising=False)
    assert first in caches_of(model)
    monkeypatch.setattr(main, "graphmem_test_table", second)
    assert second in caches_of(model)


@functools.lru_cache(maxsize=4)
def wide(width: int) -> bool:
    return width > 4


@functools.cache
def ramps(width: int) -> tuple[torch.Tensor, ...]:
    return (torch.zeros(1), torch.arange(width, dtype=torch.float32))


class Flagged(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if wide(x.shape[-1]) else x * ramps(x.shape[-1])[1]


def test_a_cache_the_trace_filled_with_no_tensor_is_left_as_it_is() -> None:
    # `wide` (a flag, as transformers' is_..._available) gained an entry in the trace: no fake
    # tensor in it, so it keeps the user's entry and the trace's, and no note says otherwise
    wide.cache_clear()
    wide(3)
    analysis = _analyze(Flagged())
    assert wide.cache_info().currsize == 2 and _cache_notes(analysis) == []


def test_a_fake_tensor_inside_a_cached_tuple_is_found() -> None:
    ramps.cache_clear()
    ramps(2)  # the user's entry
    analysis = _analyze(Flagged(), "2x3")  # not wide: the trace adds ramps(3), fake tensors
    assert ramps.cache_info().currsize == 0 and len(_cache_notes(analysis)) == 1
    assert not isinstance(ramps(3)[1], FakeTensor)
