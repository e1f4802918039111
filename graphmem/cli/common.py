"""What every command shares: the flag types, the --dim list, the model-kind test, and emit().

One copy each; the boundary checks of paths and numbers are in graphmem/cli/inputs.py.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from rich.console import Console

from graphmem.cli.inputs import OutputFile, print_written, writing
from graphmem.core.collector import collector_paused
from graphmem.core.conventions import closed
from graphmem.errors import SpecError
from graphmem.frontends.torch.spec import is_model_spec
from graphmem.options.text import dim_binding, dims_dict, size_bytes

__all__ = ["Output", "argtype", "dims_dict", "emit", "is_model_spec", "parse_dim_binding",
           "parse_size_bytes", "stderr_console", "word_choice"]


def word_choice(vocabulary: type[StrEnum], flag: str) -> dict[str, Any]:
    """argparse keywords for a flag taking a word of a closed vocabulary: the enum's words are
    the choices, the value is the enum member, and a wrong word is graphmem's one line (the
    Request's check says the same)."""
    return {"type": lambda text: closed(vocabulary, text, flag), "choices": tuple(vocabulary)}


def argtype(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A parser raising SpecError as an argparse type: its message becomes the usage error."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except SpecError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    convert.__name__ = parse.__name__
    return convert


# `512MiB`, `1.5GiB`, `800000000` -> bytes (finite, at most 4 EiB)
parse_size_bytes = argtype(size_bytes)
# `--dim batch=8` -> ("batch", 8)
parse_dim_binding = argtype(dim_binding)


def stderr_console() -> Console:
    # emoji=False: a model's names are shown as written (':warning:' stays text)
    return Console(stderr=True, highlight=False, emoji=False)


@dataclass(frozen=True)
class Output:
    """A file an output flag writes once the work has succeeded."""

    file: OutputFile | None  # None: not asked for (or `-`, stdout)
    what: str  # "JSON", "HTML report": how the "written to" line names it
    write: Callable[[Path], None]


def emit(console: Console, render: Callable[[Console], None], outputs: Sequence[Output],
         stdout_text: Callable[[], str] | None = None) -> None:
    """`stdout_text` (`--json -`) on stdout, the console moved to stderr; then the terminal
    rendering; then each output file, one error line if writing fails, and where it went.
    The writers build many small objects and free few: the cyclic collector is paused
    (graphmem/core/collector.py): its passes were a third of the writing time at 22k nodes;
    the last stage of a command, after which the console script's process ends."""
    with collector_paused(last=True):
        if stdout_text is not None:
            sys.stdout.write(stdout_text())
            console = stderr_console()
        render(console)
        for output in outputs:
            if output.file is None:
                continue
            with writing(output.file):
                output.write(output.file.path)
            print_written(console, output.what, output.file)
