"""The commands' names and one-line summaries, known without importing the commands.

`graphmem --help` (and a mistyped command) needs only these: each command's module imports
the pipeline it runs, which `--help` must not pay for (tests/test_speed_imports.py).
"""

from __future__ import annotations

# name -> (module, the summary `graphmem --help` shows), in the order --help lists them
COMMAND_TABLE: dict[str, tuple[str, str]] = {
    "analyze": ("graphmem.cli.analyze", "analyze a model (ONNX file or PyTorch file.py:fn):"
                " memory, FLOPs, fit"),
    "gpus": ("graphmem.cli.gpus", "list the GPUs graphmem knows, with their datasheet figures"),
    "check": ("graphmem.cli.check", "gate a model in CI: exit 0 when every budget holds, 1 when"
              " one is broken"),
    "verify": ("graphmem.cli.verify", "run an ONNX model on onnxruntime and compare graphmem's"
               " prediction"),
}


def summary(name: str) -> str:
    return COMMAND_TABLE[name][1]
