"""Issue 26's done-when: each of the 14 causes has generated cases, and all pass one contract:
exit 0, 1 or 2 (the exits the case allows), an error as one line, no traceback, done within
60 s, peak RSS under 1 GiB, no file touched or made outside the requested outputs (the
model's folder, an empty HOME and TMPDIR), and the decoy secret beside the model unchanged
and shown in no output (tests/helpers/hostile_run.py). The cases: tests/hostile_causes.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.hostile_run import broken_promises, run_cli
from tests.hostile_causes import CAUSES

pytestmark = [pytest.mark.slow, pytest.mark.ort]
# what torch makes while tracing unless told otherwise (torch._inductor's cache_dir(), on
# importing its compiler bisector and dynamo's package cache); the CLI points it at a private
# folder it removes (graphmem/core/scratch.py PrivateFolders)
TORCH_CACHE = "tmp/torchinductor_"


def test_every_cause_has_a_case() -> None:
    assert {cause.number for cause in CAUSES.values()} == set(range(1, 15))


def _snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every file the case prepared: its bytes (a link: where it points)."""
    files: dict[str, bytes | str] = {}
    for path in folder.rglob("*"):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            files[name] = str(path.readlink())
        elif path.is_file() and path.stat().st_size <= 2**20:
            files[name] = path.read_bytes()
    return files


@pytest.mark.parametrize("case", CAUSES)
def test_a_cause_passes_the_contract(tmp_path: Path, case: str) -> None:
    cause = CAUSES[case]
    argv = cause.prepare(tmp_path)
    before = _snapshot(tmp_path)
    outcome = run_cli(tmp_path, *argv)
    assert broken_promises(outcome, cause.codes, cause.outputs) == [], case
    assert cause.says in outcome.out + outcome.err, outcome.out[-500:] + outcome.err
    after = _snapshot(tmp_path)
    touched = [name for name, content in before.items() if after.get(name) != content]
    assert touched == [], f"{case}: changed {touched}"
    assert not (tmp_path / "gone.txt").exists()  # a dangling link's target is never made


def test_tracing_a_pytorch_model_makes_no_folder_in_temp(tmp_path: Path) -> None:
    cause = CAUSES["5 verify of a folder"]
    argv = ["analyze", "hf", "--no-html", "--input", "1x8:int64"]
    cause.prepare(tmp_path)
    outcome = run_cli(tmp_path, *argv)
    assert outcome.code == 0, outcome.err
    assert not [p for p in outcome.left_behind if p.startswith(TORCH_CACHE)]
    assert not outcome.left_behind  # nor the private folder it went to instead
