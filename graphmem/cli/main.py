"""The `graphmem` command line: the command table, the parser, the exit-code policy.

Each command is a module with `add_parser(commands)` and `run(args, console) -> int`
(graphmem/cli/analyze.py, gpus.py, check.py, verify.py). Every user-facing error is one line
`graphmem: error: <what is wrong and what to do>` on stderr with exit code 2; a bug is exit 3;
nothing the user gave is modified.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from graphmem.cli.commands import COMMAND_TABLE, summary
from graphmem.core.collector import (
    collector_paused,
    end_process,
    freeze_before_exit,
    freeze_start_up_objects,
)
from graphmem.core.progress import Reporter, reporting
from graphmem.core.scratch import PRIVATE_FOLDERS, TORCH_CACHE_VARIABLE
from graphmem.core.version import __version__
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.spec import is_hf_config, is_model_spec

if TYPE_CHECKING:
    from rich.console import Console

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a writer whose reader went away


class Command(Protocol):
    """A command module (graphmem/cli/<name>.py)."""

    def add_parser(self, commands: Any) -> None: ...

    def run(self, args: argparse.Namespace, console: Console) -> int: ...


class _LazyCommand:
    """A command's module, imported when its parser or its run is first asked for: `graphmem
    --help` and one command's run import no other command's pipeline."""

    def __init__(self, module: str) -> None:
        self.module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module(self.module), name)


# the order of `graphmem --help`
COMMANDS: dict[str, Command] = {
    name: _LazyCommand(module) for name, (module, _) in COMMAND_TABLE.items()}


class _Parser(argparse.ArgumentParser):
    """argparse with graphmem's one-line error format."""

    def error(self, message: str) -> NoReturn:
        raise GraphmemError(f"{message} (see '{self.prog} --help')")


def build_parser(words: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; given the command line, only the command it names gets its flags
    (the others are listed by name and summary, their modules not imported)."""
    parser = _Parser(prog="graphmem", description=(
        "Static GPU memory and compute analysis of deep-learning models, before any GPU time."))
    parser.add_argument("--version", action="version", version=f"graphmem {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback behind an error (anywhere on the line)")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    named = None if words is None else _command_named(words)
    for name, command in COMMANDS.items():
        if words is None or name == named:
            command.add_parser(commands)
        else:
            commands.add_parser(name, help=summary(name))
    return parser


def _command_named(words: Sequence[str]) -> str | None:
    """The command a command line runs: its first word that is not an option (the options
    before a command, --debug, --help and --version, take no value)."""
    first = next((word for word in words if not word.startswith("-")), None)
    return first if first in COMMANDS else None


def _progress_reporter() -> Reporter | None:
    """Progress on stderr when it is a terminal (never in pipes, CI logs or tests)."""
    from graphmem.report.terminal.progress import stderr_reporter

    return stderr_reporter()


def console_script() -> NoReturn:
    """The `graphmem` console script (pyproject.toml) and `python -m graphmem`: one command,
    then the process ends without tearing down its heap (core/collector.py `end_process`)."""
    end_process(run_command())


def run_command() -> int:
    """One command as the console script runs it, in a process that ends after it."""
    start_command(sys.argv[1:])
    code = main()
    freeze_before_exit()  # the command is over: its objects need no last collection
    return code


def start_command(words: Sequence[str]) -> None:
    """The module of the command `words` name imported with the cyclic collector paused, then
    every object alive moved out of its generations (core/collector.py): the modules live to
    the end of the process, and the 90-odd collections their import set off (onnx's and
    numpy's with them) walked a growing heap to free nothing, about 0.015 CPU s of a
    ResNet-18 analysis. Only for a process that runs one command (the console script)."""
    named = _command_named(words)
    with collector_paused():
        if named is not None:
            importlib.import_module(COMMAND_TABLE[named][0])
        # frozen before the collector is back: freezing zeroes the allocation counts, which
        # would otherwise set off a collection of everything just imported at once
        freeze_start_up_objects()


def main(argv: Sequence[str] | None = None) -> int:
    # libraries' caches go to folders of the command's own, gone at its end (core/scratch.py);
    # from the start: parsing the command line may load the PyTorch front end already
    with PRIVATE_FOLDERS.command():
        return _run(argv)


def _claim_torch_caches(model: object) -> None:
    """A command on a PyTorch model (a spec, a Hugging Face config) gives torch's caches a
    private folder before anything loads torch; a budgets file's models get theirs when
    their analysis starts (pipeline/run.py `analyze`)."""
    if isinstance(model, str) and (is_model_spec(model) or is_hf_config(model)):
        PRIVATE_FOLDERS.claim(TORCH_CACHE_VARIABLE)


def _run(argv: Sequence[str] | None) -> int:
    try:
        words = [w for w in (sys.argv[1:] if argv is None else argv) if w != "--debug"]
        # --help and --version exit here (SystemExit 0); usage errors are GraphmemError
        args = build_parser(words).parse_args(words)
    except GraphmemError as error:
        return _usage_error(error, argv)
    _claim_torch_caches(getattr(args, "model", None))
    from rich.console import Console

    # emoji=False: a model's names are shown as written (':warning:' stays text)
    stdout = Console(highlight=False, emoji=False)
    try:
        with reporting(_progress_reporter()):
            return COMMANDS[args.command].run(args, stdout)
    except GraphmemError as error:
        return _usage_error(error, argv)
    except KeyboardInterrupt:
        print("graphmem: error: interrupted", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:  # noqa: BLE001 - a bug must still end in one clear line
        if _debug(argv):
            _print_traceback()
        _print_error(f"internal error ({type(error).__name__}: {error}); please report it with"
                     " the model (--debug shows the traceback)")
        return EXIT_INTERNAL
    except BaseException as error:  # noqa: BLE001 - SystemExit from the model's own code
        if isinstance(error, SystemExit) and stdout.quiet:
            # rich's answer to a closed stdout (`graphmem ... | head`): it silences the
            # console and raises SystemExit(1); nothing went wrong that a message could fix
            return EXIT_BROKEN_PIPE
        # graphmem never exits mid-command: the user's file.py (its forward, loss or inputs
        # function, run by tracing) did; its exit code must not become graphmem's.
        if _debug(argv):
            _print_traceback()
        _print_error(f"the model's code raised {error!r}: a model file must not exit or raise"
                     " BaseException while graphmem imports, builds or traces it")
        return EXIT_USAGE


def _usage_error(error: GraphmemError, argv: Sequence[str] | None) -> int:
    if _debug(argv) and error.__cause__ is not None:
        _print_traceback(error.__cause__)
    _print_error(str(error))
    return EXIT_USAGE


def _print_traceback(error: BaseException | None = None) -> None:
    """--debug's traceback: the exception being handled, or `error`. traceback (and its
    imports) is loaded only here, for a failing command run with --debug."""
    import traceback

    if error is None:
        traceback.print_exc()
    else:
        traceback.print_exception(error)


def _print_error(message: str) -> None:
    """One line, whatever the message quotes: a flag's value, a path or the user's exception
    text may hold newlines (a forged second error line) or terminal escapes; each is shown
    as a visible escape (graphmem/core/safe_text.py), long names shortened."""
    from graphmem.core.safe_text import printable_text

    print(f"graphmem: error: {printable_text(message)}", file=sys.stderr)


def _debug(argv: Sequence[str] | None) -> bool:
    """`--debug` anywhere on the command line, or GRAPHMEM_DEBUG=1: show tracebacks."""
    words = sys.argv[1:] if argv is None else argv
    return "--debug" in words or bool(os.environ.get("GRAPHMEM_DEBUG"))


if __name__ == "__main__":
    sys.exit(main())
