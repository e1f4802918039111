"""One generated case (or a few) for each of the 14 causes of issue 26, each a folder and a
command line, judged by one contract in tests/test_hostile_causes.py. The thorough tests of
each cause are elsewhere (docs/untrusted-input.md's table names them); these put every cause
through the same contract, run as `python -m graphmem` in a process of its own.

A case's `prepare(folder)` writes the model folder and returns the command line; `codes` are
the exits allowed, `outputs` the files the command may make, `says` a fragment of its output.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from tests import hostile_models as hostile
from tests.helpers.hostile_run import SECRET_FILE, SECRET_TEXT
from tests.helpers.llm_configs import TINY_LLAMA
from tests.hostile_unpacked import write_unpacked
from tests.onnx_builders import mlp_model

MODEL = "model.onnx"
REFUSED, RAN = frozenset({2}), frozenset({0, 1})


@dataclass(frozen=True)
class Cause:
    number: int  # issue 26's numbering
    prepare: Callable[[Path], list[str]]
    codes: frozenset[int] = RAN
    outputs: tuple[str, ...] = ()
    says: str = ""


def _mlp(folder: Path) -> None:
    onnx.save(mlp_model(), folder / MODEL)


def _report_link(make: Callable[[Path, Path], None]) -> Callable[[Path], list[str]]:
    """Cause 1: the folder ships its default report path as a link to the user's file."""
    def prepare(folder: Path) -> list[str]:
        _mlp(folder)
        (folder / SECRET_FILE).write_text(SECRET_TEXT)  # as run_cli writes it: linked to
        make(folder / SECRET_FILE, folder / "model.graphmem.html")
        return ["analyze", MODEL, "--batch", "2"]
    return prepare


def _symlink(target: Path, link: Path) -> None:
    link.symlink_to(target.name)


def _dangling(target: Path, link: Path) -> None:
    link.symlink_to("gone.txt")


def _hf(folder: Path, **changes: object) -> Path:
    (folder / "hf").mkdir()
    config = {**TINY_LLAMA, **changes}
    (folder / "hf" / "config.json").write_text(json.dumps(config))
    return folder / "hf"


def _config_link(folder: Path) -> list[str]:
    """Cause 2: check's JUnit output is a link to the config it reads."""
    config = _hf(folder) / "config.json"
    (folder / "j.xml").symlink_to(os.path.relpath(config, folder))
    return ["check", "hf", "--gpu", "t4", "--junit", "j.xml"]


def _bad_config(command: str, **changes: object) -> Callable[[Path], list[str]]:
    """Causes 3, 4, 6: a config value transformers rejects or would build for hours."""
    def prepare(folder: Path) -> list[str]:
        _hf(folder, **changes)
        if command == "check":
            return ["check", "hf", "--gpu", "t4", "--input", "1x8:int64"]
        return ["analyze", "hf", "--no-html", "--input", "1x8:int64"]
    return prepare


def _nested_config(folder: Path) -> list[str]:
    (folder / "hf").mkdir()
    vision = {"model_type": "clip_vision_model", "num_hidden_layers": 1, "hidden_size": 32,
              "intermediate_size": 64, "num_attention_heads": 2}
    config = {"model_type": "llava", "vision_config": vision,
              "text_config": {**TINY_LLAMA, "num_hidden_layers": 20_000}}
    (folder / "hf" / "config.json").write_text(json.dumps(config))
    return ["analyze", "hf", "--no-html", "--input", "1x8:int64"]


def _verify_folder(folder: Path) -> list[str]:
    _hf(folder)
    return ["verify", "hf"]


def _invalid_utf8(command: list[str]) -> Callable[[Path], list[str]]:
    """Cause 7: a node name that is not UTF-8 (the same length: no length to re-encode)."""
    def prepare(folder: Path) -> list[str]:
        model = mlp_model()
        model.graph.node[0].name = "MARKNODE"
        data = model.SerializeToString()
        (folder / MODEL).write_bytes(data.replace(b"MARKNODE", b"MARK\xff\xfeDE"))
        return [command[0], MODEL, "--batch", "2", *command[1:]]
    return prepare


def _saved(build: str, count: int, *argv: str) -> Callable[[Path], list[str]]:
    def prepare(folder: Path) -> list[str]:
        onnx.save(hostile.BUILDERS[build](count), folder / MODEL)
        return [argv[0], MODEL, *argv[1:]]
    return prepare


def _sparse_doc_string(folder: Path) -> list[str]:
    hostile.write_sparse_doc_string(folder / MODEL, 2 * 10**9)
    return ["analyze", MODEL, "--batch", "2", "--no-html"]


def _unpacked_ints(folder: Path) -> list[str]:
    write_unpacked(folder / MODEL, "constant-value-ints", 4 * 10**6)
    return ["analyze", MODEL, "--batch", "2", "--no-html"]


def _mlp_command(*argv: str) -> Callable[[Path], list[str]]:
    def prepare(folder: Path) -> list[str]:
        _mlp(folder)
        return [argv[0], MODEL, *argv[1:]]
    return prepare


CAUSES: dict[str, Cause] = {
    "1 default report is a symlink": Cause(1, _report_link(_symlink), REFUSED, says="link"),
    "1 default report is a hard link": Cause(1, _report_link(os.link),
                                             REFUSED, says="link"),
    "1 default report is a dangling link": Cause(1, _report_link(_dangling), REFUSED,
                                                 says="link"),
    "2 check's junit links to the config": Cause(2, _config_link, REFUSED,
                                                 says="the model's config"),
    "3 layers null (analyze)": Cause(3, _bad_config("analyze", num_hidden_layers=None),
                                     REFUSED, says="num_hidden_layers"),
    "3 heads zero (check)": Cause(3, _bad_config("check", num_attention_heads=0), REFUSED,
                                  says="num_attention_heads is 0"),
    "4 abstract architecture": Cause(4, _bad_config("analyze",
                                                    architectures=["PreTrainedModel"]),
                                     REFUSED, says="concrete class"),
    "5 verify of a folder": Cause(5, _verify_folder, REFUSED),
    "6 nested 20,000 layers": Cause(6, _nested_config, REFUSED,
                                    says="text_config.num_hidden_layers is 20,000"),
    "7 invalid UTF-8 (analyze)": Cause(7, _invalid_utf8(["analyze", "--html", "out.html"]),
                                       outputs=("out.html",)),
    "7 invalid UTF-8 (check)": Cause(7, _invalid_utf8(["check", "--max-params", "1G",
                                                       "--junit", "out.xml"]),
                                     outputs=("out.xml",)),
    "7 invalid UTF-8 (verify)": Cause(7, _invalid_utf8(["verify", "--json", "out.json"]),
                                      outputs=("out.json",)),
    "8 3,000 nested functions (analyze)": Cause(8, _saved("nested-functions", 3000,
                                                          "analyze", "--batch", "2"),
                                                REFUSED, says="3000 deep"),
    "8 3,000 nested functions (verify)": Cause(8, _saved("nested-functions", 3000, "verify",
                                                         "--batch", "2"), REFUSED,
                                               says="3000 deep"),
    "9 int64 ConstantOfShape of 10**9 beside an If": Cause(
        9, _saved("cos-with-if", 10**9, "analyze", "--batch", "2", "--no-html")),
    "10 sparse 2 GB doc string": Cause(10, _sparse_doc_string),
    "10 4x10**6 unpacked value_ints": Cause(10, _unpacked_ints),
    "11 Sum of 10**4 inputs": Cause(11, _saved("sum-inputs", 10**4, "analyze", "--batch", "2",
                                               "--no-html")),
    "12 Loop trip count 10**12 (verify)": Cause(12, _saved("loop-trips", 10**12, "verify",
                                                           "--batch", "2"), REFUSED,
                                                says="a constant trip count"),
    "12 Loop without end (verify)": Cause(12, _saved("loop-forever", 0, "verify", "--batch",
                                                     "2", "--time-limit", "3"), REFUSED,
                                          says="time limit of 3 s"),
    "13 verify --threads 1024": Cause(13, _mlp_command("verify", "--batch", "2", "--threads",
                                                       "1024"), REFUSED, says="--threads"),
    "14 onnxruntime's import (verify)": Cause(14, _mlp_command("verify", "--batch", "2")),
}
