"""Check that two source trees give byte-identical answers: JSON, HTML and terminal output.

    python benchmarks/same_answers.py BASE_TREE [--only NAME,..] [--refresh-base]
    git archive HEAD | tar -x -C /tmp/base && python benchmarks/same_answers.py /tmp/base

Runs `python -m graphmem analyze` on every samples/*.onnx (`--batch 2 --gpu a100-80gb`, and
one `--train`), and on the three 22k-node decoders (`--batch 1 --dim seq=4096 --gpu
a100-80gb`: benchmarks/.cache and the onnx.helper one built into the output folder), once
with each tree on PYTHONPATH, and compares the files byte for byte. The base tree's outputs
are kept under its folder (`.same_answers/`) and reused until `--refresh-base`. Prints one
line per command and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
_DECODER = ["--batch", "1", "--dim", "seq=4096", "--gpu", "a100-80gb"]
_SMALL = ["--batch", "2", "--gpu", "a100-80gb"]


def _helper_decoder(folder: Path) -> Path:
    path = folder / "helper_22k.onnx"
    if not path.exists():
        sys.path.insert(0, str(_ROOT / "benchmarks"))
        import helper_llama

        folder.mkdir(parents=True, exist_ok=True)
        helper_llama.write(path, helper_llama.WIDTHS)
    return path


def _commands(folder: Path) -> dict[str, list[str]]:
    commands = {p.stem: [str(p), *_SMALL] for p in sorted((_ROOT / "samples").glob("*.onnx"))}
    commands["tiny_gpt.train"] = [str(_ROOT / "samples" / "tiny_gpt.onnx"), *_SMALL, "--train"]
    commands["tiny_cnn.verbose"] = [str(_ROOT / "samples" / "tiny_cnn.onnx"), *_SMALL, "--verbose"]
    for path in sorted((_ROOT / "benchmarks" / ".cache").glob("llama_*.onnx")):
        commands[path.name.split("_")[1]] = [str(path), *_DECODER]
    commands["helper"] = [str(_helper_decoder(folder)), *_DECODER]
    return commands


def _run(tree: Path, name: str, options: list[str], out: Path) -> None:
    """The reports are written to one folder for both trees (the terminal names them)."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "120"}
    with tempfile.TemporaryDirectory() as folder:
        written = Path(folder)
        argv = [sys.executable, "-m", "graphmem", "analyze", *options,
                "--json", str(written / "r.json"), "--html", str(written / "r.html")]
        done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, check=False)
        shown = (done.stdout + b"\n--stderr--\n" + done.stderr).replace(
            folder.encode(), b"OUT")
        (out / f"{name}.out").write_bytes(shown + f"\n--exit {done.returncode}--\n".encode())
        for suffix in (".json", ".html"):
            report = written / f"r{suffix}"
            (out / f"{name}{suffix}").write_bytes(report.read_bytes() if report.exists() else b"")


def _same(a: Path, b: Path, name: str) -> list[str]:
    differ = []
    for suffix in (".json", ".html", ".out"):
        left, right = a / f"{name}{suffix}", b / f"{name}{suffix}"
        if not left.exists() or not right.exists() or left.read_bytes() != right.read_bytes():
            differ.append(suffix)
    return differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("--only", default="")
    parser.add_argument("--refresh-base", action="store_true")
    args = parser.parse_args()
    base_out = args.base / ".same_answers"
    here_out = args.base / ".same_answers_new"
    commands = _commands(base_out)
    only = [n for n in args.only.split(",") if n]
    bad = 0
    for name, options in commands.items():
        if only and name not in only:
            continue
        if args.refresh_base or not (base_out / f"{name}.out").exists():
            _run(args.base.resolve(), name, options, base_out)
        _run(_ROOT, name, options, here_out)
        differ = _same(base_out, here_out, name)
        bad += bool(differ)
        print(f"{name:24} {'DIFFERS ' + ' '.join(differ) if differ else 'identical'}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
