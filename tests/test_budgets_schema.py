"""The budgets file and the baseline JSON are untrusted input, checked against a schema.

Each malformed file ends in one line `graphmem: error: ...` naming the file, the key path and
the fix, with exit code 2 (never 3, the internal error); a FIFO, a device or a directory is
refused before it is opened, and the size read and the nesting are bounded.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import onnx
import pytest

from graphmem import analyze_onnx
from graphmem.cli.main import main
from graphmem.core.json_schema import ANALYSIS_KEYS, CHECK_KEYS, DIMS_KEYS, MODEL_KEYS
from graphmem.errors import GraphmemError
from graphmem.gate import baseline as baseline_module
from graphmem.gate.baseline import load_baseline, read_input_file
from graphmem.gate.budgets import MemoryLimit
from graphmem.gate.budgets_file import MAX_BUDGETS_BYTES, MAX_KEY_DEPTH, load_budgets_file
from graphmem.gate.check import run_check
from graphmem.report.json.gate import check_to_dict
from graphmem.report.json.report import to_dict
from tests.onnx_builders import mlp_model


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder with models/small.onnx (mlp_model: x[batch, 32] -> y[batch, 10])."""
    (tmp_path / "models").mkdir()
    onnx.save(mlp_model(), tmp_path / "models" / "small.onnx")
    return tmp_path


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error(code: int, err: str, *fragments: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphmem: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def check_budgets(folder: Path, text: str, capsys: pytest.CaptureFixture[str]
                  ) -> tuple[int, str, str]:
    path = folder / "graphmem.toml"
    path.write_text(text)
    return run(["check", "--budgets", str(path)], capsys)


MODEL = "[[model]]\npath = 'models/small.onnx'\n"


# ----- the budgets file: keys, types, ranges ----------------------------------------------------


@pytest.mark.parametrize(("text", "fragments"), [
    # unknown keys, named with the closest known one, where they are
    ("[defaults]\nbtach = 8\n" + MODEL,
     ("[defaults]: unknown key 'btach'", "did you mean 'batch'")),
    (MODEL + "dimz = { seq = 8 }\n", ("[[model]] #1", "unknown key 'dimz'", "'dims'")),
    ("[default]\nbatch = 8\n" + MODEL, ("unknown key 'default'", "did you mean 'defaults'")),
    ("[defaults]\npath = 'x.onnx'\n" + MODEL, ("[defaults] cannot hold 'path'",)),
    # the shape of the tables
    ("[model]\npath = 'models/small.onnx'\n", ("model = ", "write [[model]], not [model]")),
    ("model = 5\n", ("model = 5 should be an array of tables",)),
    ("model = [1]\n", ("[[model]] #1 = 1 should be a table",)),
    ("defaults = 3\n" + MODEL, ("defaults = 3 should be a table",)),
    # types, with the key path
    ("[defaults]\ndims = 5\n" + MODEL, ("defaults.dims = 5 should be a table of integers",)),
    (MODEL + "dims = { seq = 'x' }\n", ("(models/small.onnx) dims.seq = 'x' should be a int",)),
    (MODEL + "dims = { seq = { a = { b = 1 } } }\n", ("dims.seq = {'a': {'b': 1}} should be",)),
    (MODEL + "batch = true\n", ("batch = true should be a int",)),
    (MODEL + "batch = 1979-05-27\n", ("batch = datetime.date(1979, 5, 27) should be a int",)),
    (MODEL + "gpu = 4\n", ("gpu = 4 should be a string",)),
    (MODEL + "name = ['a']\n", ("name = ['a'] should be a string",)),
    ("[[model]]\npath = 5\n", ("[[model]] #1 path = 5 should be a string",)),
    ("[[model]]\npath = ''\n", ("path = '' should not be empty",)),
    (MODEL + "fail_on_unsupported = 'yes'\n", ("fail_on_unsupported = 'yes' should be a boolean",)),
    (MODEL + "max_latency = 20\n", ("max_latency = 20 should be a string such as '20ms'",)),
    (MODEL + "max_params = [1]\n", ("max_params = [1] should be a string such as '25M'",)),
    (MODEL + "cuda_reserve = true\n", ("cuda_reserve = true should be a size",)),
    # ranges
    (MODEL + "batch = 0\n", ("batch = 0 should be from 1 to 16777216",)),
    (MODEL + "batch = " + "9" * 60 + "\n", ("should be from 1 to 16777216",)),
    ("[defaults]\ndims = { seq = -1 }\n" + MODEL, ("defaults.dims.seq = -1 should be from 1",)),
    (MODEL + "max_params = inf\n", ("max_params: 'inf' is not a count",)),
    (MODEL + "max_params = nan\n", ("max_params: 'nan' is not a count",)),
    # strings a report or a path could not carry
    ('[[model]]\npath = "a\\u0000b.onnx"\n', ("path = 'a\\x00b.onnx' should be printable text",)),
    (MODEL + 'name = "\\u001b[31mred"\n', ("name = '\\x1b[31mred' should be printable text",)),
    (MODEL + "dims = { \"a\\nb\" = 2 }\n", ("dims.a\\nb = 2 names a dim by printable text",)),
    (MODEL + "gpu = '" + "t" * 5000 + "'\n", ("gpu = 'tttt", "at most 4096 characters")),
])
def test_budgets_file_schema_errors_exit_2(folder: Path, text: str, fragments: tuple[str, ...],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = check_budgets(folder, text, capsys)
    line = one_error(code, err, "graphmem.toml", *fragments)
    assert len(line) < 1000


def test_an_unknown_key_of_a_megabyte_is_shown_short(folder: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = check_budgets(folder, MODEL + '"' + "k" * 500_000 + '" = 1\n', capsys)
    line = one_error(code, err, "unknown key 'kkkk")
    assert len(line) < 1000


def test_a_valid_file_still_loads_with_its_meaning(folder: Path) -> None:
    path = folder / "graphmem.toml"
    path.write_text("[defaults]\nbatch = 8\nmax_memory = '90%'\ngpu = 't4'\n"
                    "dims = { batch = 8 }\nfail_on_unsupported = true\n"
                    "[[model]]\npath = 'models/small.onnx'\nmax_params = 3000\n"
                    "[[model]]\nname = 'second'\npath = 'models/small.onnx'\nmax_memory = false\n"
                    "fail_on_unsupported = false\nmax_flops = 4.1e9\ncuda_reserve = '700MiB'\n"
                    "baseline = 'b.json'\nmax_growth = '5%'\n")
    first, second = load_budgets_file(path)
    assert first.label == "models/small.onnx" and second.label == "second"  # the stem repeats
    assert first.model_path == folder / "models" / "small.onnx"
    assert first.batch == 8 and first.dims == {"batch": 8} and first.gpu == "t4"
    assert first.budgets.max_memory == MemoryLimit("90%", fraction=0.9)
    assert first.budgets.max_params == 3000 and first.budgets.fail_on_unsupported
    assert second.budgets.max_memory is None  # false removes the default
    assert not second.budgets.fail_on_unsupported
    assert second.budgets.max_flops == 4_100_000_000
    assert second.cuda_reserve_bytes == 700 * 2**20
    assert second.baseline_path == folder / "b.json" and second.budgets.max_growth == 0.05


# ----- the budgets file: what is read, and how much ---------------------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A FIFO with no writer: opening it for reading blocks. Should a reader block anyway, a
    writer opens it after 10 s, so the test fails instead of hanging."""
    path = tmp_path / "budgets.fifo"
    os.mkfifo(path)
    done = threading.Event()

    def unblock() -> None:
        if not done.wait(10):
            with open(path, "w"):
                pass

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    yield path
    done.set()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_is_refused_before_it_is_opened(fifo: Path) -> None:
    started = time.perf_counter()
    with pytest.raises(GraphmemError, match="is a FIFO"):
        load_budgets_file(fifo)
    with pytest.raises(GraphmemError, match="is a FIFO"):
        load_baseline(fifo)
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize(("path", "kind"), [("/dev/null", "a device"), (".", "a directory")])
def test_devices_and_directories_are_refused(path: str, kind: str) -> None:
    if not Path(path).exists():
        pytest.skip(f"no {path} here")
    with pytest.raises(GraphmemError, match=f"is {kind}: give the path of a regular file"):
        load_budgets_file(Path(path))
    with pytest.raises(GraphmemError, match=f"is {kind}"):
        read_input_file(Path(path), "baseline", 100)


def test_the_size_read_is_bounded(folder: Path) -> None:
    path = folder / "graphmem.toml"
    path.write_text(MODEL + "# " + "x" * MAX_BUDGETS_BYTES + "\n")
    with pytest.raises(GraphmemError, match=r"larger than 1\.0 MiB"):
        load_budgets_file(path)


def test_a_file_that_is_not_utf8_is_refused(folder: Path) -> None:
    path = folder / "graphmem.toml"
    path.write_bytes(b"\xff\xfe[[model]]")
    with pytest.raises(GraphmemError, match="is not UTF-8 text"):
        load_budgets_file(path)


@pytest.mark.parametrize("text", [
    "a" + ".a" * 30_000 + " = 1\n",  # quadratic in tomllib: 12 s for these 60 KB
    '"a"' + '."a"' * 20_000 + " = 1\n",
    "[" + "a." * 30_000 + "a]\n",
    "x = {" + "a." * 30_000 + "a = 1}\n",
])
def test_deep_dotted_keys_are_refused_fast(folder: Path, text: str) -> None:
    path = folder / "graphmem.toml"
    path.write_text(text)
    started = time.perf_counter()
    with pytest.raises(GraphmemError, match=f"nests more than {MAX_KEY_DEPTH} deep"):
        load_budgets_file(path)
    assert time.perf_counter() - started < 1


def test_usual_dotted_keys_and_dotted_strings_pass(folder: Path) -> None:
    path = folder / "graphmem.toml"
    path.write_text("defaults.dims.batch = 4\n[[model]]\npath = 'models/small.onnx'\n"
                    "name = 'a.b.c.d.e.f.g.h.i.j'  # not a key\nmax_params = '1.5k'\n")
    (spec,) = load_budgets_file(path)
    assert spec.dims == {"batch": 4} and spec.label == "a.b.c.d.e.f.g.h.i.j"


@pytest.mark.parametrize(("text", "fragment"), [
    ("x = " + "[" * 5000 + "]" * 5000 + "\n", "nest too deeply"),
    ("x = " + "{a=" * 5000 + "1" + "}" * 5000 + "\n", "nest too deeply"),
    (MODEL + "batch = " + "9" * 5000 + "\n", "a number too long to read"),
])
def test_deep_nesting_and_huge_numbers_exit_2(folder: Path, text: str, fragment: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = check_budgets(folder, text, capsys)
    one_error(code, err, fragment)


# ----- the baseline JSON ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def analysis_json(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("baseline") / "mlp.onnx"
    onnx.save(mlp_model(), path)
    return to_dict(analyze_onnx(path, batch=32))


@pytest.fixture(scope="module")
def check_json(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from graphmem.gate.budgets import Budgets
    from graphmem.gate.check import CheckSpec

    path = tmp_path_factory.mktemp("check") / "mlp.onnx"
    onnx.save(mlp_model(), path)
    spec = CheckSpec(model_path=path, label="mlp", budgets=Budgets(max_params=10**6), batch=32)
    return check_to_dict(run_check([spec]))


def test_the_schema_knows_every_key_graphmem_writes(analysis_json: dict[str, Any],
                                                    check_json: dict[str, Any]) -> None:
    """A key added to the JSON must be added to the schema, or baselines are refused."""
    assert set(analysis_json) == ANALYSIS_KEYS
    assert set(analysis_json["dims"]) == DIMS_KEYS
    assert set(check_json) == CHECK_KEYS
    assert set(check_json["models"][0]) == MODEL_KEYS


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit of the JSON: set `a.b[0].c` to `value`."""

    def edit(data: dict[str, Any]) -> None:
        keys = path.replace("[", ".").replace("]", "").split(".")
        target: Any = data
        for key in keys[:-1]:
            target = target[int(key)] if key.isdigit() else target[key]
        target[keys[-1]] = value

    return edit


@pytest.mark.parametrize(("edit", "fragments"), [
    (_set("memory.peak_bytes", -5), ("memory.peak_bytes = -5 should be an integer from 0",)),
    (_set("memory.peak_bytes", True), ("memory.peak_bytes = True should be an integer",)),
    (_set("memory.peak_bytes", 1.5), ("memory.peak_bytes = 1.5 should be an integer",)),
    (_set("params.count", None), ("params.count = None should be an integer",)),
    (_set("memory", [1]), ("memory = [1] should be an object, not an array",)),
    (_set("flops", 3), ("flops = 3 should be an object, not an integer",)),
    (_set("dims.bound", [1]), ("dims.bound = [1] should be an object",)),
    (_set("dims.bound", {"batch": "x"}), ("dims.bound.batch = 'x' should be a dim value",)),
    (_set("dims.bound", {"batch": 0}), ("dims.bound.batch = 0 should be a dim value",)),
    (_set("dims.free", 5), ("dims.free = 5 should be an array of dim names",)),
    (_set("dims.free", [1]), ("dims.free = [1] should be an array of dim names",)),
    (_set("dims.fre", []), ("unknown key 'dims.fre' (did you mean 'dims.free'?)",)),
    (_set("config.mode", 5), ("config.mode = 5 should be a string",)),
    (_set("config.mode", "x"), ("config.mode = 'x' should be one of inference, training",)),
    (_set("memroy", {}), ("unknown key 'memroy' (did you mean 'memory'?)",)),
    (_set("schema_version", True), ("schema_version True",)),
    (lambda d: d.pop("params"), ("lacks the field 'params'",)),
    (lambda d: d["config"].pop("mode"), ("lacks the field 'config.mode'",)),
])
def test_baseline_of_the_wrong_shape_exit_2(analysis_json: dict[str, Any], tmp_path: Path,
                                            edit: Callable[[dict[str, Any]], None],
                                            fragments: tuple[str, ...],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    data = copy.deepcopy(analysis_json)
    edit(data)
    _check_with_baseline(data, tmp_path, capsys, "baseline.json", *fragments)


@pytest.mark.parametrize(("edit", "fragments"), [
    (_set("models", [5]), ("models[0] = 5 should be an object, not an integer",)),  # was exit 3
    (_set("models", 5), ("models = 5 should be an array",)),
    (_set("models", []), ("models = [] should list the models checked",)),
    (_set("models[0].analysis", 5), ("models[0].analysis = 5 should be an object",)),
    (_set("models[0].name", 5), ("models[0].name = 5 should be a string",)),
    (_set("models[0].analysis.memory.peak_bytes", "x"), ("unbound dims",)),
    (_set("models[0].analysis.params.count", -1),
     ("models[0].analysis.params.count = -1 should be an integer",)),
    (_set("models[0].analyis", {}), ("unknown key 'models[0].analyis'", "'models[0].analysis'")),
    (_set("kind", "graphmem verify"), ("kind = 'graphmem verify' should be 'graphmem check'",)),
    (lambda d: d["models"].append(copy.deepcopy(d["models"][0])),
     ("holds 2 models (mlp, mlp) and 2 are named 'mlp'",)),
])
def test_check_json_baseline_of_the_wrong_shape_exit_2(
        check_json: dict[str, Any], tmp_path: Path, edit: Callable[[dict[str, Any]], None],
        fragments: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    data = copy.deepcopy(check_json)
    edit(data)
    _check_with_baseline(data, tmp_path, capsys, *fragments)


def _check_with_baseline(data: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                         *fragments: str, raw: str | None = None) -> None:
    model = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), model)
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(data) if raw is None else raw)
    code, _, err = run(["check", str(model), "--batch", "32", "--baseline", str(path),
                        "--max-growth", "5%"], capsys)
    one_error(code, err, *fragments)


@pytest.mark.parametrize(("raw", "fragment"), [
    ("5", "not an object but an integer"),
    ("[1, 2]", "not an object but an array"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply to read"),
    ('{"schema_version": ' + "1" * 5000 + "}", "a number of more than 4300 digits"),
    ("{not json", "is not a graphmem JSON file"),
])
def test_baseline_that_is_not_a_graphmem_json_exit_2(raw: str, fragment: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    _check_with_baseline(None, tmp_path, capsys, fragment, raw=raw)


def test_the_baseline_size_read_is_bounded(analysis_json: dict[str, Any], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(baseline_module, "MAX_BASELINE_BYTES", 1000)
    _check_with_baseline(analysis_json, tmp_path, capsys, "larger than 1000 B")


def test_valid_baselines_still_read(analysis_json: dict[str, Any], check_json: dict[str, Any],
                                    tmp_path: Path) -> None:
    for name, data in (("analysis.json", analysis_json), ("check.json", check_json)):
        path = tmp_path / name
        path.write_text(json.dumps(data))
        baseline = load_baseline(path, "mlp")
        assert baseline.dims == {"batch": 32} and baseline.mode == "inference"
        assert baseline.peak_bytes == 31488 and baseline.params == 2752  # tests/test_check.py

