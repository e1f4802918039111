"""The fuzz corpus's time limit (tests/helpers/fuzz_limits.py): scaled by the load measured in
the session, bounded by a ceiling (a case that never ends is still reported as hung:
tests/test_fuzz_cli.py)."""

from __future__ import annotations

import pytest

from tests.helpers import fuzz_limits


def test_the_limit_scales_with_the_load_up_to_the_ceiling(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fuzz_limits, "load_factor", lambda: 4.0)  # 8 busy processes, 2 cores
    assert fuzz_limits.case_limit_s(6.0) == 24.0  # 6 s x 4
    assert fuzz_limits.case_limit_s(20.0) == 60.0  # 80 s, above the ceiling
    monkeypatch.setattr(fuzz_limits, "load_factor", lambda: 1.0)
    assert fuzz_limits.case_limit_s(6.0) == 6.0


@pytest.mark.slow
def test_the_measured_load_factor_is_at_least_one() -> None:
    factor = fuzz_limits.load_factor()  # a trivial analyze in a forked child: wall / CPU
    assert 1.0 <= factor <= fuzz_limits.CEILING_S
