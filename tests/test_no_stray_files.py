"""graphmem writes no file but the outputs asked for: importing onnxruntime would create
`~/.cache/Microsoft/DeveloperTools/.onnxruntime/{deviceid,onnxruntime.db}` and `$TMPDIR/.ses`
on every run (graphmem/frontends/onnx/ort_import.py points them at a scratch folder it
removes). Each command runs as the console script does, in a fresh process whose home and
temp folder are empty folders; after it both are still empty."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.samples import SAMPLES_DIR

COMMANDS = {
    "analyze --gpu": ["analyze", str(SAMPLES_DIR / "tiny_gpt.onnx"), "--gpu", "t4", "--batch",
                      "2", "--dim", "seq=16", "--no-html"],
    "verify": ["verify", str(SAMPLES_DIR / "tiny_cnn.onnx"), "--batch", "2"],
}


@pytest.mark.slow
@pytest.mark.ort
@pytest.mark.parametrize("command", COMMANDS)
def test_a_run_leaves_nothing_in_home_or_temp(tmp_path: Path, command: str) -> None:
    home, temp = tmp_path / "home", tmp_path / "temp"
    home.mkdir()
    temp.mkdir()
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("XDG_CACHE_HOME", "TMPDIR", "HOME")}
    environment.update(HOME=str(home), TMPDIR=str(temp))
    done = subprocess.run([sys.executable, "-m", "graphmem", *COMMANDS[command]],
                          env=environment, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(home.rglob("*")) == [] and sorted(temp.rglob("*")) == []


@pytest.mark.ort
def test_the_scratch_import_restores_the_environment(tmp_path: Path) -> None:
    """The variables pointed at the scratch folder while onnxruntime loads are the user's
    again afterwards (an unset one unset), and the scratch folder is gone."""
    script = ("import os, sys; from graphmem.frontends.onnx.ort_import import ort;"
              " print(ort.__name__, os.environ.get('XDG_CACHE_HOME'), os.environ['TMPDIR'])")
    environment = {key: value for key, value in os.environ.items() if key != "XDG_CACHE_HOME"}
    environment["TMPDIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True,
                          text=True, timeout=120, check=True, cwd=Path(__file__).parent.parent)
    assert done.stdout.split() == ["onnxruntime", "None", str(tmp_path)]
    assert list(tmp_path.iterdir()) == []
