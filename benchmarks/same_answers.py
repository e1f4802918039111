"""Every answer byte-identical to another tree's: JSON, HTML and terminal output of the samples
and the 22k-node decoders, run by this tree's graphmem and by BASE's (a `git archive` copy).

    git archive HEAD | tar -x -C /tmp/base      # before changing anything
    python benchmarks/same_answers.py /tmp/base [--quick] [--only NAME,...]

Each command runs twice in a fresh process (`python -m graphmem analyze ...`, PYTHONPATH set to
the tree), in its own empty folder with relative output names, so that the reports name the
same paths; the exit code, stdout, stderr and each written file are compared byte for byte.
Prints one line per command and exits 1 on the first difference set (all commands are run).
The decoders are benchmarks/.cache/*.onnx (copied from the main checkout, never exported here)
and /tmp/helper_22k.onnx (benchmarks/helper_llama.py writes it when missing).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE = HERE.parent
SAMPLES = TREE / "samples"
DECODER_OPTIONS = ["--batch", "1", "--dim", "seq=4096", "--gpu", "a100-80gb"]
HELPER = Path("/tmp/helper_22k.onnx")


def _sample_commands() -> list[tuple[str, list[str]]]:
    commands = []
    for model in sorted(SAMPLES.glob("*.onnx")):
        commands.append((model.stem, [str(model)]))
        commands.append((model.stem + "+gpu", [str(model), "--gpu", "a100-80gb", "--batch", "4",
                                               "--verbose"]))
        commands.append((model.stem + "+t4", [str(model), "--gpu", "t4", "--verbose"]))
    gpt = str(SAMPLES / "tiny_gpt.onnx")
    commands.append(("tiny_gpt+sweep", [gpt, "--gpu", "t4", "--sweep", "batch=1,2,8,64"]))
    commands.append(("tiny_gpt+cpu", [gpt, "--batch", "3", "--runtime", "ort-cpu", "--verbose"]))
    commands.append(("tiny_gpt+same", [gpt, "--gpu", "t4", "--ort-arena-extend",
                                       "same-as-requested", "--verbose"]))
    commands.append(("tiny_gpt+train", [gpt, "--batch", "2", "--gpu", "a100-80gb", "--train"]))
    return commands


def _decoder_commands() -> list[tuple[str, list[str]]]:
    if not HELPER.exists():
        sys.path.insert(0, str(HERE))
        import helper_llama

        helper_llama.write(HELPER, helper_llama.WIDTHS)
    models = [("helper_22k", HELPER)] + [
        (path.name.split("_")[1], path) for path in sorted((HERE / ".cache").glob("llama_*.onnx"))]
    return [(name, [str(path), *DECODER_OPTIONS, "--verbose"]) for name, path in models]


def _run(tree: Path, arguments: list[str], folder: Path) -> dict[str, bytes]:
    folder.mkdir(parents=True)
    command = [sys.executable, "-m", "graphmem", "analyze", *arguments,
               "--json", "out.json", "--html", "out.html"]
    environment = dict(os.environ, PYTHONPATH=str(tree), COLUMNS="120")
    done = subprocess.run(command, cwd=folder, env=environment, capture_output=True, check=False)
    result = {"exit": str(done.returncode).encode(), "stdout": done.stdout, "stderr": done.stderr}
    for written in sorted(folder.iterdir()):
        result[written.name] = written.read_bytes()
    return result


def _differences(base: dict[str, bytes], ours: dict[str, bytes]) -> list[str]:
    return [key for key in sorted(set(base) | set(ours)) if base.get(key) != ours.get(key)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="the other tree (a git archive copy)")
    parser.add_argument("--quick", action="store_true", help="samples only, no decoders")
    parser.add_argument("--only", default="", help="comma-separated command names")
    options = parser.parse_args()
    commands = _sample_commands() + ([] if options.quick else _decoder_commands())
    if options.only:
        wanted = set(options.only.split(","))
        commands = [command for command in commands if command[0] in wanted]
    failed = 0
    with tempfile.TemporaryDirectory() as scratch:
        for index, (name, arguments) in enumerate(commands):
            base = _run(options.base, arguments, Path(scratch) / f"{index}base")
            ours = _run(TREE, arguments, Path(scratch) / f"{index}ours")
            differ = _differences(base, ours)
            failed += bool(differ)
            status = "DIFFERS: " + ", ".join(differ) if differ else "same"
            print(f"{name:28} exit {ours['exit'].decode():>2}  {status}", flush=True)
    print(f"{len(commands) - failed} of {len(commands)} commands byte-identical")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
