"""Memoized functions that a trace fills with fake tensors, emptied after it.

A model's code may memoize a function that returns a tensor with functools.lru_cache:
transformers' DINOv3 caches its patch centres' coordinates (`get_patches_center_coordinates`,
under `compile_compatible_method_lru_cache`, which keeps the lru_cache in a closure). Called
first under graphmem's trace, the cache keeps the FakeTensor it returned, and every later eager
call in the process computes on that fake tensor: the model's outputs are fake tensors, and a
profiled step sees no memory for them (DINOv3's inference step measured 30,464 B after an
analysis instead of its 53,320 B; a second trace would mix two fake modes). A cache is only a
cache: those the trace added entries to and that now hold a FakeTensor (`holds_fake_tensor`:
among the results it keeps, a few containers down) are emptied when it ends, and so are such
ones first seen after it (a module imported during the trace); a cache the trace filled with
flags or numbers (transformers' `is_..._available`) is left as it is. functools.lru_cache has no
per-key delete and does not show its entries (`cache_info`, `cache_clear`,
`cache_parameters` only), so a cache that held entries before the trace and gained some in it
loses the earlier ones too: recomputed at the next call, and said in the analysis's notes
(`cleared_note`); one that was empty before loses nothing of the user's.

The caches looked at are the module-level functions (and their closures' one level down) and
the class attributes of every loaded module in the packages that the model's modules' classes
come from, torch's own aside: the model's own code, and its library's. A module is scanned
again only when it is another object or its namespace changed in size (a function defined
since), and `__main__` (a script's, a notebook's: names rebound in place) at every trace. The
scan of a DINOv3 model (179 of transformers' modules loaded, 182 caches): 6 ms the first,
0.12 ms each after (benchmarks/memo_cache_scan.py, docs/zoo.md's sixth round); a trace scans
twice, and an analysis twice more around all its traces.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
import types
from collections.abc import Iterable, Iterator

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

Cache = functools._lru_cache_wrapper


@contextlib.contextmanager
def memo_caches_emptied(model: nn.Module) -> Iterator[list[str]]:
    """Empty, on exit, the model's packages' lru_caches that gained entries meanwhile. The
    list yielded gets the name of each one emptied that held entries from before (the
    user's), here or in a use of this nested in it (import_step.py's, over a trace each)."""
    before = {id(cache): (cache, cache.cache_info()) for cache in caches_of(model)}
    lost: list[str] = []
    _LISTENING.append(lost)
    try:
        yield lost
    finally:
        _LISTENING.pop()  # nested uses end first: this one is last
        for cache in caches_of(model):
            info = cache.cache_info()
            seen = before.get(id(cache))
            gained = (info.currsize > 0 if seen is None else info.misses > seen[1].misses)
            if gained and holds_fake_tensor(cache):
                cache.cache_clear()
                if seen is not None and seen[1].currsize > 0:
                    for listening in (lost, *_LISTENING):
                        listening.append(_name_of(cache))


# the lists of memo_caches_emptied's uses in progress, outermost first
_LISTENING: list[list[str]] = []


def cleared_note(lost: list[str]) -> str | None:
    """The analysis's note of the caches emptied with entries from before the trace."""
    if not lost:
        return None
    return (f"emptied {len(set(lost))} memoized function cache(s) that the trace added entries to"
            f" ({', '.join(sorted(set(lost)))}): an entry made of the trace's fake tensors would"
            " corrupt later eager calls, and functools.lru_cache cannot drop one entry, so the"
            " entries from before the analysis are recomputed at their next call")


def _name_of(cache: Cache) -> str:
    function = getattr(cache, "__wrapped__", cache)
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"


def holds_fake_tensor(cache: Cache, depth: int = 4, budget: int = 10_000) -> bool:
    """Whether a FakeTensor is among what `cache` keeps (its entries' results, `depth` levels
    of containers down, at most `budget` objects looked at): a cache the trace filled with
    numbers, strings or flags (transformers' `is_..._available`) is left as it is."""
    level, seen = [cache], {id(cache)}
    for _ in range(depth):
        below = []
        for thing in level:
            for referent in gc.get_referents(thing):
                if isinstance(referent, FakeTensor):
                    return True
                if (id(referent) in seen or isinstance(referent, _LEAVES)
                        or len(seen) >= budget):
                    continue
                seen.add(id(referent))
                below.append(referent)
        level = below
    return False


# what a cache's results are walked through: not into types, functions, modules or tensors
_LEAVES = (type, types.FunctionType, types.ModuleType, torch.Tensor, str, bytes, int, float)


# module name -> (the module's id, its namespace's size, its caches): a module is scanned once
# (its functions and classes are made when it is imported), again if it is another object or
# a name was added to it; a package's module names are listed again only when sys.modules
# changed in size (the time: the module's docstring)
_SCANNED: dict[str, tuple[int, int, tuple[Cache, ...]]] = {}
_PACKAGE_MODULES: dict[str, tuple[int, tuple[str, ...]]] = {}


def caches_of(model: nn.Module) -> list[Cache]:
    """The lru_caches reachable from the loaded modules of the model's classes' packages."""
    packages = {type(module).__module__.partition(".")[0] for module in model.modules()}
    packages.discard("torch")  # nn.Linear's: torch's caches hold no model's tensors
    found: dict[int, Cache] = {}
    for package in packages:
        for name in _modules_of(package):
            module = sys.modules.get(name)
            if module is not None:
                for cache in _module_caches(name, module):
                    found[id(cache)] = cache
    return list(found.values())


def _modules_of(package: str) -> tuple[str, ...]:
    known = _PACKAGE_MODULES.get(package)
    if known is None or known[0] != len(sys.modules):
        names = tuple(name for name in list(sys.modules) if name.partition(".")[0] == package)
        known = (len(sys.modules), names)
        _PACKAGE_MODULES[package] = known
    return known[1]


def _module_caches(name: str, module: object) -> tuple[Cache, ...]:
    namespace = vars(module)
    known = _SCANNED.get(name)
    if known is not None and known[:2] == (id(module), len(namespace)):
        return known[2]
    caches = tuple(candidate for value in list(namespace.values())
                   for candidate in _with_closures(_with_class_members(value, name))
                   if isinstance(candidate, Cache))
    if name != "__main__":  # a script's or notebook's names are rebound in place
        _SCANNED[name] = (id(module), len(namespace), caches)
    return caches


def _with_class_members(value: object, module_name: str) -> Iterable[object]:
    """The value, and a class's own attributes when the class is defined in this module (a
    static or class method's function: BEiT's cached relative position index)."""
    yield value
    if isinstance(value, type) and value.__module__ == module_name:
        for member in list(vars(value).values()):
            yield member.__func__ if isinstance(member, staticmethod | classmethod) else member


def _with_closures(values: Iterable[object]) -> Iterator[object]:
    """Each value, and the contents of a function's closure cells (a decorator's cache)."""
    for value in values:
        yield value
        if not isinstance(value, types.FunctionType):
            continue
        for cell in value.__closure__ or ():
            try:
                yield cell.cell_contents
            except ValueError:  # an empty cell
                continue
