"""mypy in CI: the package type-checks under pyproject.toml's [tool.mypy], strict on core/,
passes/ and pipeline/, so a type error fails `python -m pytest` (and .ci/run) as a failing
test does.

mypy's `strict = true` cannot be set per module (python/mypy#11401: in an override it turns
strict on everywhere), so the override spells out the flags; the first test checks that they
are exactly what `mypy --strict` turns on, for the mypy installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy.main import process_options
from mypy.options import Options

from tests.helpers import mypy_run

ROOT = Path(__file__).resolve().parents[1]
STRICT_PACKAGES = ("graphmem.core", "graphmem.passes", "graphmem.pipeline")
# from a clean cache (CI's clone) mypy reads torch's stubs too: 66 s on this 2-core machine
# quiet, 370 s while other tests ran (1.8 GB); with its cache (.mypy_cache/) about 10 s. The
# session starts it when it collects the test below, so it runs while the tests before do
MYPY_TIMEOUT_S = 900


def _options(tmp_path: Path, *argv: str) -> Options:
    empty = tmp_path / "empty.ini"
    empty.write_text("[mypy]\n")
    return process_options(["--config-file", str(empty), *argv, "-c", "pass"])[1]


def _strict_flags(tmp_path: Path) -> dict[str, bool]:
    """The boolean options `mypy --strict` changes, and the values it gives them."""
    strict, plain = _options(tmp_path, "--strict"), _options(tmp_path)
    names = [name for name in dir(Options()) if not name.startswith("_")]
    return {name: getattr(strict, name) for name in names
            if isinstance(getattr(strict, name), bool)
            and getattr(strict, name) != getattr(plain, name)}


def test_core_passes_and_pipeline_are_strict_and_only_they(tmp_path: Path) -> None:
    flags = _strict_flags(tmp_path)
    assert {"disallow_untyped_defs", "warn_return_any", "disallow_any_generics"} <= set(flags)
    _, ours = process_options(["--config-file", str(ROOT / "pyproject.toml")])
    for package in STRICT_PACKAGES:
        module = ours.clone_for_module(f"{package}.any_module")
        missing = sorted(name for name, value in flags.items()
                         if getattr(module, name) != value)
        assert not missing, f"{package} is not checked with {missing}: add them to pyproject.toml"
    # the rest of the package is checked, not strict (the override did not leak)
    other = ours.clone_for_module("graphmem.frontends.torch.trace")
    assert not other.disallow_untyped_calls and not other.warn_return_any


@pytest.mark.slow
def test_the_package_type_checks() -> None:
    code, output = mypy_run.result(MYPY_TIMEOUT_S)
    assert code == 0, output[-6000:]
    assert "Success: no issues found" in output
