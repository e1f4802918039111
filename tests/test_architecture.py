"""The architecture, enforced over graphmem/'s source (README "Layout", DESIGN.md).

Every import counts: top level, function-local and under `if TYPE_CHECKING:` (ast.walk sees them
all), so a lazy import cannot hide a module in the wrong layer. What the redesign has not fixed
yet is listed in the KNOWN_* allowlists below, each entry the import edge or the file; a second
test fails when an entry is no longer a violation, so the lists can only shrink.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "graphmem"
SOURCE = ROOT / PACKAGE

# Top to bottom: a module may import its own layer and the layers below it. Components are the
# first name under graphmem/ ("api" is graphmem/__init__.py and graphmem/api.py, "errors" is
# graphmem/errors.py); verify/runners is part of verify.
LAYERS: tuple[frozenset[str], ...] = (
    # __main__ (`python -m graphmem`) is the command line's second entry point: it must import cli
    frozenset({"cli", "__main__"}),
    frozenset({"api", "options"}),
    frozenset({"report"}),
    frozenset({"gate", "verify"}),
    frozenset({"pipeline"}),
    frozenset({"suggest"}),
    frozenset({"training", "runtime_models", "distributed"}),
    frozenset({"passes"}),
    frozenset({"frontends"}),
    frozenset({"ops"}),
    frozenset({"core", "devices", "errors"}),
)
# same layer, yet independent stages: these may import passes and below, never each other
APART = frozenset({"training", "runtime_models", "distributed"})
# only the front ends and verify's runners touch a framework (ruff's TID251 says it in the editor)
FRAMEWORKS = ("onnx", "onnxruntime", "torch", "transformers")
FRAMEWORK_FOLDERS = ("graphmem/frontends/", "graphmem/verify/runners/")
MAX_TOP_LEVEL_MODULES = 8
MAX_MODULE_LINES = 500
T = TypeVar("T")

# ----- what the redesign has not fixed yet: empty these, never add to them --------------------
# (importer, imported): an import against LAYERS
KNOWN_LAYER_VIOLATIONS: frozenset[tuple[str, str]] = frozenset()
# the modules of each import cycle (a strongly connected component), sorted
KNOWN_CYCLES: frozenset[tuple[str, ...]] = frozenset()
# (module, framework): a framework imported outside FRAMEWORK_FOLDERS; each module's file is
# also exempt from TID251 in pyproject.toml, and leaves both lists together
KNOWN_FRAMEWORK_IMPORTS: frozenset[tuple[str, str]] = frozenset()
# files over MAX_MODULE_LINES lines
KNOWN_LONG_MODULES: frozenset[str] = frozenset()
# (test module, test module or conftest it imports): shared code belongs in tests/helpers/
KNOWN_TEST_CROSS_IMPORTS: frozenset[tuple[str, str]] = frozenset()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of graphmem, dotted name -> file (packages by their __init__.py)."""
    return {module_name(path): path for path in sorted(SOURCE.rglob("*.py"))}


def absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The module a `from` import reads: `from ..passes import x` in graphmem.suggest.cards
    reads graphmem.passes."""
    if level == 0:
        return name or ""
    parts = module.split(".")
    base = parts[: len(parts) - level + is_package]
    return ".".join([*base, name] if name else base)


def imported_names(source: str, module: str, is_package: bool) -> Iterator[str]:
    """Every dotted name an import in `source` reads, wherever it sits (ast.walk: function
    bodies and `if TYPE_CHECKING:` blocks too); `from a import b` reads a.b."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = absolute(module, is_package, node.level, node.module)
            yield from (f"{base}.{alias.name}" for alias in node.names)


def graphmem_module(name: str) -> str:
    """The longest prefix of `name` that is a graphmem module: `graphmem.ops.find_rule` and
    `graphmem.ops` are graphmem.ops, `graphmem.core.ir` is graphmem.core.ir."""
    parts = name.split(".")
    while parts and ".".join(parts) not in modules():
        parts.pop()
    return ".".join(parts)


def imports_of(module: str) -> Iterator[tuple[str, str]]:
    """(module, what it imports): a graphmem module, or a framework's top-level package."""
    path = modules()[module]
    source = path.read_text(encoding="utf-8")
    for name in imported_names(source, module, path.name == "__init__.py"):
        top = name.split(".")[0]
        if top == PACKAGE:
            yield module, graphmem_module(name)
        elif top in FRAMEWORKS:
            yield module, top


@cache
def all_imports() -> frozenset[tuple[str, str]]:
    return frozenset(edge for module in modules() for edge in imports_of(module))


def internal_imports() -> set[tuple[str, str]]:
    return {(a, b) for a, b in all_imports() if b.split(".")[0] == PACKAGE}


def component(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "api":
        return "api"
    return parts[1]


def layer(module: str) -> int | None:
    return next((i for i, names in enumerate(LAYERS) if component(module) in names), None)


def breaks_layering(importer: str, imported: str) -> bool:
    mine, theirs = component(importer), component(imported)
    if mine == theirs:
        return False
    if mine in APART and theirs in APART:
        return True
    importer_layer, imported_layer = layer(importer), layer(imported)
    if importer_layer is None or imported_layer is None:
        return False  # test_every_module_has_a_layer names it
    return imported_layer < importer_layer  # a smaller index is a higher layer


def layer_violations() -> set[tuple[str, str]]:
    return {(a, b) for a, b in internal_imports() if breaks_layering(a, b)}


def cycles_in(edges: set[tuple[str, str]]) -> set[tuple[str, ...]]:
    """The modules of each cycle: every strongly connected component of two or more."""
    graph = nx.DiGraph(edges)
    return {tuple(sorted(component)) for component in nx.strongly_connected_components(graph)
            if len(component) > 1}


def cycles() -> set[tuple[str, ...]]:
    return cycles_in(internal_imports())


def framework_imports() -> set[tuple[str, str]]:
    return {(a, b) for a, b in all_imports()
            if b in FRAMEWORKS and not relative(modules()[a]).startswith(FRAMEWORK_FOLDERS)}


def cross_test_imports() -> set[tuple[str, str]]:
    """Imports of a test module (tests/test_*.py) or of conftest.py, from any file in tests/."""
    found = set()
    for path in sorted((ROOT / "tests").rglob("*.py")):
        module = module_name(path)
        for name in imported_names(path.read_text(encoding="utf-8"), module,
                                   path.name == "__init__.py"):
            parts = name.split(".")
            if parts[0] == "tests" and len(parts) > 1 and (
                    parts[1].startswith("test_") or parts[1] == "conftest"):
                found.add((module, ".".join(parts[:2])))
    return found


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def long_modules() -> set[str]:
    return {relative(path) for path in modules().values()
            if len(path.read_text(encoding="utf-8").splitlines()) > MAX_MODULE_LINES}


def check(found: set[T], known: frozenset[T], what: str) -> None:
    if new := sorted(found - known):  # the entries, ready to paste (or, better, to fix)
        pytest.fail(f"{what}: {len(new)} new, fix them (the allowlist only shrinks):\n"
                    + "\n".join(f"    {entry!r}," for entry in new), pytrace=False)


def check_fixed(found: set[T], known: frozenset[T], what: str) -> None:
    if fixed := sorted(known - found):
        pytest.fail(f"{what}: {len(fixed)} fixed, remove them from the allowlist:\n"
                    + "\n".join(f"    {entry!r}," for entry in fixed), pytrace=False)


# ----- the checker itself ------------------------------------------------------------------------


def test_the_scanner_sees_lazy_type_checking_and_relative_imports() -> None:
    source = """
from __future__ import annotations
from typing import TYPE_CHECKING
import graphmem.core.ir
from . import cards
from ..passes import liveness
if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis
def build():
    import torch.nn
"""
    names = set(imported_names(source, "graphmem.suggest.driver", is_package=False))
    assert names >= {"graphmem.core.ir", "graphmem.suggest.cards", "graphmem.passes.liveness",
                     "graphmem.pipeline.analysis.Analysis", "torch.nn"}
    # in a package's __init__.py, `.` is the package itself
    assert set(imported_names("from .registry import find_rule", "graphmem.ops", True)) == {
        "graphmem.ops.registry.find_rule"}


@pytest.mark.parametrize(("importer", "imported", "breaks"), [
    ("graphmem.cli.main", "graphmem.pipeline.run", False),  # down
    ("graphmem.report.json.report", "graphmem", True),  # up: graphmem/__init__.py is the API
    ("graphmem.gate.check", "graphmem.verify.onnx_run", False),  # the same layer
    ("graphmem.verify.runners.torch_runner", "graphmem.verify.torch_run", False),  # verify
    ("graphmem.training.expand", "graphmem.distributed.strategies", True),  # apart
    ("graphmem.training.expand", "graphmem.passes.liveness", False),
    ("graphmem.frontends.onnx.read", "graphmem.passes.dims", True),  # above the front ends
    ("graphmem.frontends.onnx.read", "graphmem.errors", False),
    ("graphmem.__main__", "graphmem.cli.main", False),
    ("graphmem.core.ir", "graphmem.devices.gpus", False),  # one layer: core, devices, errors
])
def test_layer_rules(importer: str, imported: str, breaks: bool) -> None:
    assert breaks_layering(importer, imported) is breaks


def test_a_cycle_is_its_modules() -> None:
    edges = {("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "d")}
    assert cycles_in(edges) == {("a", "b", "c")}  # d only imports itself


# ----- the rules ---------------------------------------------------------------------------------


def test_the_package_is_where_the_test_looks() -> None:
    # guards the other tests against passing on nothing
    assert {"graphmem", "graphmem.errors", "graphmem.core.ir", "graphmem.cli.main"} <= set(
        modules())
    assert len(internal_imports()) > 300


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in modules() if layer(m) is None)
    assert not unplaced, f"add their folders to LAYERS: {unplaced}"


def test_each_module_imports_only_its_own_layer_or_below() -> None:
    check(layer_violations(), KNOWN_LAYER_VIOLATIONS, "imports against the layers")


def test_no_import_cycles() -> None:
    check(cycles(), KNOWN_CYCLES, "import cycles")


def test_only_the_front_ends_and_the_runners_import_frameworks() -> None:
    check(framework_imports(), KNOWN_FRAMEWORK_IMPORTS, "framework imports outside "
          + " and ".join(FRAMEWORK_FOLDERS))


def test_no_module_is_over_500_lines() -> None:
    check(long_modules(), KNOWN_LONG_MODULES, f"modules over {MAX_MODULE_LINES} lines")


def test_few_modules_directly_in_graphmem() -> None:
    top_level = sorted(path.name for path in SOURCE.glob("*.py"))
    assert len(top_level) <= MAX_TOP_LEVEL_MODULES, top_level


def test_test_modules_do_not_import_each_other() -> None:
    check(cross_test_imports(), KNOWN_TEST_CROSS_IMPORTS,
          "tests importing a test module or conftest.py (use tests/helpers/ and fixtures)")


@pytest.mark.parametrize(("found", "known", "what"), [
    (layer_violations, KNOWN_LAYER_VIOLATIONS, "KNOWN_LAYER_VIOLATIONS"),
    (cycles, KNOWN_CYCLES, "KNOWN_CYCLES"),
    (framework_imports, KNOWN_FRAMEWORK_IMPORTS, "KNOWN_FRAMEWORK_IMPORTS"),
    (long_modules, KNOWN_LONG_MODULES, "KNOWN_LONG_MODULES"),
    (cross_test_imports, KNOWN_TEST_CROSS_IMPORTS, "KNOWN_TEST_CROSS_IMPORTS"),
], ids=["layers", "cycles", "frameworks", "long", "tests"])
def test_the_allowlists_only_shrink(found: Callable[[], set[Any]], known: frozenset[Any],
                                    what: str) -> None:
    check_fixed(found(), known, what)


# ----- ruff says the same in the editor -----------------------------------------------------------


def ruff_lint() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"][
        "lint"]


def test_ruff_bans_the_frameworks_outside_their_folders() -> None:
    lint = ruff_lint()
    assert "TID251" in lint["select"]
    assert set(lint["flake8-tidy-imports"]["banned-api"]) == set(FRAMEWORKS)
    exempt = {pattern for pattern, rules in lint["per-file-ignores"].items() if "TID251" in rules}
    # the two folders, the code outside the package, and each file still on the allowlist
    expected = {f"{folder}**" for folder in FRAMEWORK_FOLDERS} | {
        "tests/**", "benchmarks/**", "samples/**"} | {
        relative(modules()[module]) for module, _ in KNOWN_FRAMEWORK_IMPORTS}
    assert exempt == expected
