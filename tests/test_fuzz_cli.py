"""Hostile and broken input through the CLI, from the generated corpus in tests/fuzz_corpus.py.

Every case runs `graphmem.cli.main.main(argv)` in its own folder (the cwd) and must end as the
README promises: exit 0 (1 for a broken `check` budget) or exit 2 with one line
`graphmem: error: ...` on stderr; never a traceback or an internal error; every input file
byte-for-byte as it was; no file written but the outputs the case asked for (temporary files
included); no payload executed, no external data read into the output, no raw control
character sent to the terminal. Cases that could hang or take the interpreter down run in a
forked child with a time and memory limit.

A failure lists every broken promise of its case, one per line; the failures are the to-do list.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import multiprocessing
import os
import re
import resource
import signal
import stat
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from graphmem.cli.main import main
from tests.fuzz_corpus import MARKER, Case, Run, all_groups, unique
from tests.helpers import fuzz_limits

pytestmark = pytest.mark.slow

CASES: dict[str, list[Case]] = {group: unique(make()) for group, make in all_groups().items()}
_IN_PROCESS_LIMIT_S = 30.0  # a safety net: cases that could hang are forked with their own limit
_EXTRA_MEMORY_BYTES = 4 * 2**30  # address space one case may add to the process's
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but \t and \n
_QUIET_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)
_HASHED_BYTES = 64 * 2**20  # larger files (the sparse ones) are compared by size and mtime


@dataclass(frozen=True)
class Outcome:
    code: int | str  # the exit code, or what happened instead ("hung ...", "killed ...")
    out: str
    err: str
    warnings: tuple[str, ...]  # Python warnings a real run would print on stderr


class _CaseTimeout(BaseException):
    """Raised by the alarm; a BaseException so main's `except Exception` cannot swallow it."""


# ----- running one case ---------------------------------------------------------------------


def _call_main(argv: tuple[str, ...]) -> tuple[int | str, tuple[str, ...]]:
    with warnings.catch_warnings(record=True) as caught:
        try:
            code: int | str = main(list(argv))
        except SystemExit as error:
            code = f"SystemExit({error.code!r}) escaped main"
        except _CaseTimeout:
            raise
        except BaseException as error:  # noqa: BLE001 - whatever escapes is the finding
            code = f"{type(error).__name__} escaped main"
    shown = tuple(f"{w.category.__name__}: {str(w.message)[:120]}" for w in caught
                  if not issubclass(w.category, _QUIET_WARNINGS))
    return code, shown


def _run_in_process(argv: tuple[str, ...], capfd: pytest.CaptureFixture[str]) -> Outcome:
    def expire(signum: int, frame: Any) -> None:
        raise _CaseTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, _IN_PROCESS_LIMIT_S)
    try:
        with _memory_limit():
            code, shown = _call_main(argv)
    except _CaseTimeout:
        code, shown = f"hung: no exit after {_IN_PROCESS_LIMIT_S:g} s", ()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    captured = capfd.readouterr()
    return Outcome(code, captured.out, captured.err, shown)


@contextlib.contextmanager
def _memory_limit() -> Iterator[None]:
    """Cap the address space while a case runs (the soft limit only, so it can be lifted): a
    case that allocates without bound gets MemoryError instead of the machine's OOM killer,
    on a machine other test runs share."""
    status = Path("/proc/self/status").read_text()
    match = re.search(r"VmSize:\s+(\d+) kB", status)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = int(match.group(1)) * 1024 + _EXTRA_MEMORY_BYTES if match else soft
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _child(argv: tuple[str, ...], sender: Connection) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _memory_limit():
        code, shown = _call_main(argv)
    sender.send((code, out.getvalue(), err.getvalue(), shown))
    sender.close()
    os._exit(0)  # no atexit, no pytest teardown in the child


def _run_isolated(argv: tuple[str, ...], timeout_s: float,
                  capfd: pytest.CaptureFixture[str]) -> Outcome:
    timeout_s = fuzz_limits.case_limit_s(timeout_s)
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(argv, sender), daemon=True)
    child.start()
    sender.close()
    result = None
    try:
        if receiver.poll(timeout_s):
            with contextlib.suppress(EOFError):
                result = receiver.recv()
            child.join(5)
    finally:
        hung = child.is_alive()
        if hung:
            child.kill()
            child.join()
        receiver.close()
    native = capfd.readouterr()  # what the child's libraries wrote to the file descriptors
    if result is None:
        code = _how_it_died(child.exitcode, hung, timeout_s)
        return Outcome(code, native.out, native.err, ())
    code, out, err, shown = result
    return Outcome(code, out + native.out, err + native.err, tuple(shown))


def _how_it_died(exitcode: int | None, hung: bool, timeout_s: float) -> str:
    if hung:
        return (f"hung: no exit after {timeout_s:.1f} s (the case's limit times this session's"
                f" load factor {fuzz_limits.load_factor():.1f}, at most"
                f" {fuzz_limits.CEILING_S:g} s)")
    if exitcode is not None and exitcode < 0:
        return f"killed by signal {signal.Signals(-exitcode).name}"
    return f"the process exited {exitcode} from inside main"


# ----- the folder before and after --------------------------------------------------------


def _snapshot(root: Path) -> dict[str, str]:
    """Every entry under root: content hash for files, target for links, kind otherwise.
    FIFOs and devices are never opened (that would block)."""
    entries: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            entries[str(path.relative_to(root))] = _digest(path)
    return entries


def _digest(path: Path) -> str:
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return f"link -> {os.readlink(path)}"
    if stat.S_ISDIR(info.st_mode):
        return "folder"
    if not stat.S_ISREG(info.st_mode):
        return f"special {stat.S_IFMT(info.st_mode):o}"
    if info.st_size > _HASHED_BYTES:
        return f"large {info.st_size} {info.st_mtime_ns}"
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----- the promises -------------------------------------------------------------------------


def _allowed_codes(run: Run) -> set[int]:
    command_codes = {0, 1, 2} if run.argv[0] == "check" else {0, 2}
    return set(run.codes) & command_codes


def _exit_problems(run: Run, outcome: Outcome) -> list[str]:
    """The exit code first; for exit 3 the internal error's own words say what broke."""
    allowed = _allowed_codes(run)
    if isinstance(outcome.code, str):
        return [outcome.code]
    internal = next((line for line in (outcome.out + outcome.err).splitlines()
                     if "internal error" in line), None)
    if internal is not None:
        cause = internal.split("internal error", 1)[1].split("; please report")[0]
        return [f"internal error (exit {outcome.code}): {_short(cause.strip(' ()'), 100)}"]
    if outcome.code not in allowed:
        return [f"exit {outcome.code}: want {' or '.join(map(str, sorted(allowed)))}"]
    return []


def _text_problems(run: Run, outcome: Outcome) -> list[str]:
    text = outcome.out + outcome.err
    problems = []
    if "Traceback" in text:
        problems.append("a traceback in the output")
    control = _CONTROL.search(text)
    if control:
        around = text[max(control.start() - 20, 0):control.end() + 30]
        problems.append(f"raw control character {control.group()!r} written to the terminal"
                        f" (in {_short(around, 60)})")
    if any(line.startswith("graphmem: error:") for line in outcome.out.splitlines()):
        problems.append("a 'graphmem: error:' line on stdout (forged by a name?)")
    return problems + _stderr_problems(run, outcome)


def _stderr_problems(run: Run, outcome: Outcome) -> list[str]:
    lines = [line for line in outcome.err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("graphmem: error:")]
    if outcome.code in (0, 1):
        return [f"'graphmem: error:' on stderr with exit {outcome.code}"] if errors else []
    if outcome.code != 2:
        return []  # the exit code is the problem already
    problems = []
    if len(errors) != 1:
        problems.append(f"exit 2 with {len(errors)} 'graphmem: error:' lines on stderr")
    others = [line for line in lines
              if not line.startswith(("graphmem: error:", "graphmem: warning:"))]
    if others and not run.summary_on_stderr:
        problems.append(f"exit 2 but stderr has other lines too: {_short(others[0])}")
    if outcome.warnings:
        problems.append(f"a Python warning would print on stderr: {outcome.warnings[0]}")
    return problems


def _file_problems(run: Run, root: Path, before: dict[str, str],
                   after: dict[str, str]) -> list[str]:
    outputs = {f"work/{output}" for output in run.outputs}
    marker = f"work/{MARKER}"
    problems = []
    if marker in after:
        problems.append("a code-execution payload ran: it created the marker file")
    for rel, digest in before.items():
        if rel in outputs:
            continue
        if rel not in after:
            problems.append(f"input {rel} was deleted")
        elif after[rel] != digest:
            problems.append(f"input {rel} was changed")
    stray = sorted(set(after) - set(before) - outputs - {marker})
    if stray:
        problems.append(f"stray file(s) left: {', '.join(_short(s, 60) for s in stray[:3])}")
    return problems


def _output_texts(run: Run, folder: Path) -> dict[str, str]:
    texts = {}
    for output in run.outputs:
        path = folder / output
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 64 * 2**20:
            texts[output] = path.read_text(errors="replace")
    return texts


def _secret_problems(run: Run, outcome: Outcome, outputs: dict[str, str]) -> list[str]:
    places = {"stdout": outcome.out, "stderr": outcome.err, **outputs}
    return [f"external data the model points at was read: it shows in {where}"
            for pattern in run.secrets for where, text in places.items()
            if re.search(pattern, text)][:1]


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _format_problems(outcome: Outcome, outputs: dict[str, str]) -> list[str]:
    if outcome.code not in (0, 1):
        return []
    problems = []
    for name, text in outputs.items():
        if name.endswith(".json"):
            try:
                json.loads(text, parse_constant=_reject_constant)
            except ValueError as error:
                problems.append(f"{name} is not valid JSON ({_short(str(error))})")
        if name.endswith(".xml"):
            try:
                ElementTree.fromstring(text)
            except ElementTree.ParseError as error:
                problems.append(f"{name} is not well-formed XML ({_short(str(error))})")
    return problems


def _expectation_problems(run: Run, outcome: Outcome, outputs: dict[str, str]) -> list[str]:
    """The per-case promises: a hostile dim name stays one name, markup is shown as given."""
    if outcome.code not in (0, 1):
        return []
    problems = []
    dims = _json_dims(outputs.get("out.json"))
    if run.free_dim is not None and dims is not None and (
            dims.get("free") != [run.free_dim] or dims.get("bound")):
        problems.append(f"the dim name is not kept as one free dim: free {_short(dims.get('free'))}"
                        f", bound {_short(dims.get('bound'))}")
    if run.bound_dim is not None and dims is not None and (
            dims.get("bound") != {run.bound_dim: 3} or dims.get("free")):
        problems.append(f"--batch 3 does not bind the dim by its name: bound"
                        f" {_short(dims.get('bound'))}, free {_short(dims.get('free'))}")
    if run.verbatim is not None and run.verbatim not in outcome.out:
        problems.append(f"stdout does not show the name {run.verbatim!r} as given (markup?)")
    html = outputs.get("report.html", "")
    if run.html_payload is not None and run.html_payload in html:
        problems.append(f"the HTML report holds {run.html_payload!r} unescaped")
    return problems


def _json_dims(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        dims = json.loads(text).get("dims")
    except (ValueError, AttributeError):
        return None
    return dims if isinstance(dims, dict) else None


def _short(value: object, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text[:limit] + ("..." if len(text) > limit else ""))


# ----- the test ---------------------------------------------------------------------------


def check_case(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               capfd: pytest.CaptureFixture[str]) -> None:
    folder, scratch = tmp_path / "work", tmp_path / "tmp"
    folder.mkdir()
    scratch.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.delenv("GRAPHMEM_DEBUG", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # temp files must be cleaned up
    run = case.make(folder)
    capfd.readouterr()
    before = _snapshot(tmp_path)
    outcome = (_run_isolated(run.argv, case.timeout_s, capfd) if case.isolate
               else _run_in_process(run.argv, capfd))
    outputs = _output_texts(run, folder)
    problems = [*_exit_problems(run, outcome), *_text_problems(run, outcome),
                *_file_problems(run, tmp_path, before, _snapshot(tmp_path)),
                *_secret_problems(run, outcome, outputs), *_format_problems(outcome, outputs),
                *_expectation_problems(run, outcome, outputs)]
    assert not problems, _report(problems, run, outcome)


def _report(problems: list[str], run: Run, outcome: Outcome) -> str:
    argv = " ".join(_short(word, 60) for word in run.argv)
    return "\n".join([*problems, f"argv: {argv}", f"stderr: {_short(outcome.err, 400)}",
                      f"stdout: {_short(outcome.out[-400:], 400)}"])


def _ids(case: Case) -> str:
    return case.id


def _parametrize(group: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return pytest.mark.parametrize("case", CASES[group], ids=_ids)


@_parametrize("file")
def test_broken_file(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                     capfd: pytest.CaptureFixture[str]) -> None:
    check_case(case, tmp_path, monkeypatch, capfd)


@_parametrize("graph")
@pytest.mark.ort
def test_broken_graph(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capfd: pytest.CaptureFixture[str]) -> None:
    check_case(case, tmp_path, monkeypatch, capfd)


@_parametrize("dim")
@pytest.mark.ort
def test_hostile_dim_name(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          capfd: pytest.CaptureFixture[str]) -> None:
    check_case(case, tmp_path, monkeypatch, capfd)


@_parametrize("name")
@pytest.mark.ort
def test_hostile_name(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capfd: pytest.CaptureFixture[str]) -> None:
    check_case(case, tmp_path, monkeypatch, capfd)


@_parametrize("external")
@pytest.mark.ort
def test_hostile_external_data(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capfd: pytest.CaptureFixture[str]) -> None:
    check_case(case, tmp_path, monkeypatch, capfd)


@_parametrize("flag")
@pytest.mark.ort
def test_bad_flag(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                  capfd: pytest.CaptureFixture[str]) -> None:
    check_case(case, tmp_path, monkeypatch, capfd)


@_parametrize("output")
@pytest.mark.ort
def test_bad_output_path(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capfd: pytest.CaptureFixture[str]) -> None:
    check_case(case, tmp_path, monkeypatch, capfd)


@_parametrize("budgets")
def test_bad_budgets_file(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          capfd: pytest.CaptureFixture[str]) -> None:
    check_case(case, tmp_path, monkeypatch, capfd)


@_parametrize("baseline")
def test_bad_baseline(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capfd: pytest.CaptureFixture[str]) -> None:
    check_case(case, tmp_path, monkeypatch, capfd)


@pytest.fixture(scope="module")
def warm_torch(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Trace one good model here, so each forked case starts with torch imported and warm
    (a cold import and first trace take over a second per case)."""
    folder = tmp_path_factory.mktemp("warm")
    (folder / "good.py").write_text("from torch import nn\n\ndef build():\n"
                                    "    return nn.ReLU()\n")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["analyze", f"{folder / 'good.py'}:build", "--no-html", "--input", "2x4"])


@_parametrize("torch")
@pytest.mark.torch
def test_broken_pytorch_file(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capfd: pytest.CaptureFixture[str], warm_torch: None) -> None:
    check_case(case, tmp_path, monkeypatch, capfd)


def test_a_case_that_never_ends_is_still_hung(monkeypatch: pytest.MonkeyPatch,
                                              capfd: pytest.CaptureFixture[str]) -> None:
    """The load-scaled limit (tests/helpers/fuzz_limits.py) still ends a case that never
    does, and says so."""
    monkeypatch.setattr(fuzz_limits, "load_factor", lambda: 2.0)
    monkeypatch.setitem(globals(), "main", lambda argv: signal.pause())
    outcome = _run_isolated(("analyze",), 0.25, capfd)  # killed after 0.25 s x 2
    assert str(outcome.code).startswith("hung: no exit after 0.5 s")
