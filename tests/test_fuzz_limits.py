"""The fuzz corpus's time limit (tests/test_fuzz_cli.py): scaled by the load measured in the
session, bounded by a ceiling, and a case that never ends is still reported as hung."""

from __future__ import annotations

import time

import pytest

from tests import test_fuzz_cli as fuzz

pytestmark = pytest.mark.slow  # importing the corpus takes seconds


def test_the_limit_scales_with_the_load_up_to_the_ceiling(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fuzz, "load_factor", lambda: 4.0)  # 8 busy processes on 2 cores
    assert fuzz.case_limit_s(6.0) == 24.0  # 6 s x 4
    assert fuzz.case_limit_s(20.0) == 60.0  # 80 s, above the ceiling
    monkeypatch.setattr(fuzz, "load_factor", lambda: 1.0)
    assert fuzz.case_limit_s(6.0) == 6.0


def test_the_measured_load_factor_is_at_least_one() -> None:
    factor = fuzz.load_factor()  # a trivial analyze in a forked child: wall over CPU seconds
    assert 1.0 <= factor <= fuzz._CEILING_S


def test_a_case_that_never_ends_is_still_hung(monkeypatch: pytest.MonkeyPatch,
                                              capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(fuzz, "load_factor", lambda: 2.0)
    monkeypatch.setattr(fuzz, "main", lambda argv: time.sleep(600))
    outcome = fuzz._run_isolated(("analyze",), 0.25, capfd)  # killed after 0.5 s
    assert str(outcome.code).startswith("hung: no exit after 0.5 s")
