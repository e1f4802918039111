"""House rule: the code is ruff clean (the configuration is in pyproject.toml)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_clean() -> None:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    folders = [f for f in ("graphmem", "tests", "benchmarks", "samples") if (ROOT / f).is_dir()]
    done = subprocess.run([ruff, "check", *folders], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
