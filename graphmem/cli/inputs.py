"""Every command-line input checked at the boundary, before any work (analyze, check, verify,
gpus --fits share these): output paths, outputs that would overwrite an input, numbers.

graphmem runs in CI on untrusted models and flags, so a bad path or number must end in one
GraphmemError line (exit 2) before the analysis runs, never in a traceback (exit 3) after it.
No file is created here: outputs are written only once the analysis has succeeded.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from graphmem.core.output_files import link_kind
from graphmem.errors import GraphmemError
from graphmem.passes.dims import check_dim_value

if TYPE_CHECKING:
    from rich.console import Console

NAME_MAX_BYTES = 255  # the file name limit when the file system does not say (ext4, APFS, NTFS)
MAX_SEED = 2**32 - 1  # numpy's legacy seeding and every runtime take a 32-bit unsigned seed


@dataclass(frozen=True)
class OutputFile:
    """A file an output flag will write once the work has succeeded."""

    flag: str  # "--json", for messages
    path: Path


# ----- what the model argument is (a PyTorch spec or not: graphmem/cli/common.py) -------------
def check_model_argument(text: str, onnx_only: str | None = None) -> None:
    """The MODEL argument names something: no NUL byte, and a .py file names its function.
    `onnx_only`: the command, when it takes ONNX files alone (`graphmem gpus --fits`)."""
    if not text.strip() or "\0" in text:
        raise GraphmemError(f"model {text!r}: give an .onnx file or a PyTorch model as"
                            " file.py:function")
    if text.lower().endswith(".py") and ":" not in text:
        if onnx_only:
            raise GraphmemError(f"'{text}' is a Python file: {onnx_only} takes an .onnx model;"
                                " export the PyTorch model with torch.onnx.export")
        raise GraphmemError(f"'{text}' is a Python file: name the function that builds the"
                            f" model, as {text}:build_model (FILE.py:FUNCTION)")


# ----- output files ----------------------------------------------------------------------------
def output_file(flag: str, text: str | None, *, stdout_ok: bool = False) -> OutputFile | None:
    """The file `flag TEXT` will write, checked now: None when not given, or `-` (stdout)
    where the flag takes it. Its folder exists and is writable; it is not a directory, FIFO,
    socket or block device (writing one hangs or fails; a character device such as /dev/null
    is written in place); its name fits the file system. Nothing is created."""
    if text is None or (text == "-" and stdout_ok):
        return None
    fix = "give a file path" + (" (or - for stdout)" if stdout_ok else "")
    if text == "-":
        raise GraphmemError(f"{flag} -: this output is written to a file, not stdout: {fix}")
    if not text.strip() or "\0" in text:
        raise GraphmemError(f"{flag} {text!r} is not a file name: {fix}")
    if text.endswith(("/", os.sep)):
        raise GraphmemError(f"{flag} {text} names a folder: {fix} inside it")
    path = Path(text)
    _check_name_length(flag, path)
    info = _stat(flag, path)
    if info is None:
        _check_folder(flag, path)
    elif stat.S_ISDIR(info.st_mode):
        raise GraphmemError(f"'{path}' is a directory: give a file path for the output ({flag})")
    elif not stat.S_ISREG(info.st_mode) and not stat.S_ISCHR(info.st_mode):
        raise GraphmemError(f"{flag} {path} is not a regular file (a FIFO, block device or"
                            f" socket): {fix}")
    elif not os.access(path, os.W_OK):
        raise GraphmemError(f"{flag} {path} is not writable: {fix} you may write")
    return OutputFile(flag, path)


def _check_name_length(flag: str, path: Path) -> None:
    folder = path.parent
    try:
        name_max = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = NAME_MAX_BYTES
    length = len(os.fsencode(path.name))
    if length > name_max:
        raise GraphmemError(f"{flag}: the file name is {length} bytes long and the file system"
                            f" allows {name_max}: choose a shorter name")


def _stat(flag: str, path: Path) -> os.stat_result | None:
    """The output's stat (following symlinks); None when it does not exist yet."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise GraphmemError(f"{flag} {path}: a file in that path is used as a folder:"
                            " give a path in an existing folder") from None
    except OSError as error:
        raise GraphmemError(f"{flag} {path}: {error.strerror}: choose another path") from None


def _check_folder(flag: str, path: Path) -> None:
    folder = path.parent
    try:
        info = os.stat(folder)
    except FileNotFoundError:
        raise GraphmemError(f"{flag} {path}: folder '{folder}' does not exist: create it or"
                            " choose another path") from None
    except OSError as error:  # ENOTDIR: a file is used as a folder
        raise GraphmemError(f"{flag} {path}: folder '{folder}' cannot be used"
                            f" ({error.strerror}): choose another path") from None
    if not stat.S_ISDIR(info.st_mode):
        raise GraphmemError(f"{flag} {path}: '{folder}' is a file, not a folder: choose"
                            " another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise GraphmemError(f"{flag} {path}: folder '{folder}' is not writable (read-only or"
                            " no permission): choose another path")


def print_written(console: Console, what: str, output: OutputFile) -> None:
    """`JSON written to PATH`: the path as given, shown inert (no rich markup or emoji codes,
    control characters as visible escapes: a file name must not forge a line)."""
    from graphmem.core.safe_text import printable

    console.print(f"{what} written to {printable(output.path, None)}", markup=False,
                  emoji=False, highlight=False, soft_wrap=True)


@contextmanager
def writing(output: OutputFile) -> Iterator[None]:
    """A write that fails at the end (disk full, folder removed) is one error line too."""
    try:
        yield
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise GraphmemError(f"writing {output.flag} {output.path} failed ({reason}): free"
                            " space or choose another path") from None


# ----- inputs an output must not overwrite -----------------------------------------------------
def check_input_file(flag: str, path: Path) -> None:
    """An input file that exists must be a regular file: reading a FIFO waits for a writer
    forever. A missing file is left to its reader, which names it with the fix."""
    text = str(path)
    if "\0" in text:
        raise GraphmemError(f"{flag} {text!r} is not a file name")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as error:
        raise GraphmemError(f"{flag} {path}: {error.strerror}: check the path") from None
    if not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode):
        raise GraphmemError(f"{flag} {path} is not a regular file (a FIFO, device or socket):"
                            " save it to a file first")


def refuse_overwrites(outputs: Sequence[OutputFile], inputs: Sequence[tuple[str, Path]]) -> None:
    """No output is an input or another output: the same file by (device, inode), so a hard
    link or a symlink to an input is refused too; outputs not written yet by their path. No
    output is a link (symbolic, dangling or hard) to any other file.
    `inputs`: (what it is, e.g. "the model itself", path)."""
    existing = [(what, identity) for what, path in inputs
                if (identity := _identity(path)) is not None]
    seen: dict[object, OutputFile] = {}
    for output in outputs:
        identity = _identity(output.path)
        for what, input_identity in existing:
            if identity == input_identity:
                raise GraphmemError(f"'{output.path}' is {what}: choose another output path"
                                    f" ({output.flag})")
        _refuse_link(output)
        key = identity if identity is not None else os.path.realpath(output.path)
        if key in seen:
            raise GraphmemError(f"{seen[key].flag} and {output.flag} name the same file"
                                f" '{output.path}': give each output its own path")
        seen[key] = output


def _refuse_link(output: OutputFile) -> None:
    """An output is never a link: a downloaded model folder can ship `model.graphmem.html ->
    ~/.bashrc`, and writing the default report would overwrite the file it names
    (graphmem/core/output_files.py writes through a rename, which replaces a link anyway)."""
    kind = link_kind(output.path)
    if kind is not None:
        raise GraphmemError(f"{output.flag} {output.path} is {kind}: graphmem never"
                            " writes through a link (it could name any file); remove the link or"
                            " choose another path")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return (info.st_dev, info.st_ino)


def onnx_inputs(model: Path, outputs: Sequence[OutputFile], what: str = "the model itself"
                ) -> list[tuple[str, Path]]:
    """The model and, when an output file already exists (only then can one be overwritten),
    its external data files: each external tensor's `location` in the model's folder."""
    inputs = [(what, model)]
    if any(_identity(output.path) is not None for output in outputs):
        inputs += [(f"external data of {model}", data) for data in onnx_data_files(model)]
    return inputs


def onnx_data_files(model: Path) -> list[Path]:
    """The files the model's external tensors name, resolved in its folder (never read)."""
    from graphmem.frontends.onnx.read import external_data_files

    return external_data_files(model)


def spec_files(specs: Iterable[str | None]) -> list[tuple[str, Path]]:
    """The .py files of `file.py:fn` specs (model, --loss, --example-inputs)."""
    files = []
    for spec in specs:
        location = (spec or "").rpartition(":")[0]
        if location.endswith(".py"):
            files.append(("a Python file graphmem imports", Path(location)))
    return files


# ----- numbers ---------------------------------------------------------------------------------
def check_dims(batch: int | None, dims: Iterable[tuple[str, int]]) -> None:
    """--batch and every --dim value from 1 to MAX_DIM_VALUE, checked before the model is read
    (passes/dims.py checks them again against the graph)."""
    if batch is not None:
        check_dim_value(f"--batch {batch}", batch)
    for name, value in dims:
        check_dim_value(f"--dim {name}={value}", value)


def check_int_range(flag: str, value: int | None, low: int, high: int) -> None:
    if value is not None and not low <= value <= high:
        raise GraphmemError(f"{flag} {value}: give a whole number from {low} to {high}")
