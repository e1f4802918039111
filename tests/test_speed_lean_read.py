"""Reading an ONNX file without its large weights' bytes (graphmem/frontends/onnx/lean_read.py):
the model read is the one the whole-file read gives, the weights' bytes are never handed to
protobuf, and every file the whole-file read refuses is refused the same way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.errors import GraphmemError
from graphmem.frontends.onnx import read
from graphmem.frontends.onnx.lean_read import KEEP_BYTES, read_lean_model_bytes

ROOT = Path(__file__).resolve().parent.parent


def _weighted_model(rows: int = 256, typed: bool = False, raw_rows: int | None = None
                    ) -> onnx.ModelProto:
    """x[1, rows] @ w[rows, rows] + b: w is 256 KiB of float32 at the default size (above
    KEEP_BYTES), b is small. `typed` stores w in float_data instead of raw_data;
    `raw_rows` stores that many rows of bytes (a size that does not match the dims)."""
    weight = numpy_helper.from_array(np.ones((rows, rows), np.float32), "w")
    if typed:
        weight.ClearField("raw_data")
        weight.float_data.extend([1.0] * rows * rows)
    if raw_rows is not None:
        weight.raw_data = bytes(raw_rows * rows * 4)
    bias = numpy_helper.from_array(np.zeros(rows, np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Add", ["y", "b"], ["z"])],
        "weighted", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, rows])], [weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.metadata_props.add(key="after", value="the graph")  # a field after field 7
    return model


def _read_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[onnx.ModelProto,
                                                                       onnx.ModelProto]:
    monkeypatch.setattr(read, "LEAN_READ_FROM_BYTES", 0)
    lean = read.read_model(path)
    monkeypatch.setattr(read, "LEAN_READ_FROM_BYTES", 2**62)
    return lean, read.read_model(path)


def test_the_lean_read_is_the_whole_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_weighted_model(), path)
    lean, whole = _read_both(path, monkeypatch)
    assert lean == whole
    assert not lean.graph.initializer[0].HasField("raw_data")  # dropped either way
    assert [t.name for t in lean.graph.initializer] == ["w", "b"]


def test_the_weights_bytes_are_left_out(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_weighted_model(rows=512), path)  # 1 MiB of weights
    data = read_lean_model_bytes(path)
    assert data is not None
    # file size less w's 512 * 512 * 4 bytes (and a few bytes of its length prefix)
    assert len(data) < path.stat().st_size - 512 * 512 * 4 + 16
    parsed = onnx.load_model_from_string(data)
    assert list(parsed.graph.initializer[0].dims) == [512, 512]
    assert parsed.metadata_props[0].value == "the graph"


def test_typed_data_is_left_out_as_raw_data_is(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # w's 65,536 floats in float_data (packed: 256 KiB), not raw_data: a hostile file's
    # int64_data of zero bytes is 8 bytes an entry once parsed (issue 26)
    path = tmp_path / "m.onnx"
    onnx.save(_weighted_model(typed=True), path)
    data = read_lean_model_bytes(path)
    assert data is not None and len(data) < path.stat().st_size - 256 * 256 * 4 + 16
    lean, whole = _read_both(path, monkeypatch)
    assert lean == whole and not lean.graph.initializer[0].float_data


def test_typed_data_of_the_wrong_count_keeps_its_bytes(tmp_path: Path) -> None:
    model = _weighted_model(typed=True)
    model.graph.initializer[0].float_data.append(2.0)  # 65,537 entries for 65,536 elements
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert read_lean_model_bytes(path) == path.read_bytes()  # validate_graph names it


@pytest.mark.parametrize("model", [_weighted_model(rows=16)], ids=["small weights"])
def test_tensors_it_does_not_strip_keep_their_bytes(model: onnx.ModelProto,
                                                     tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert read_lean_model_bytes(path) == path.read_bytes()


def test_a_wrong_sized_weight_is_refused_as_before(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # 200 rows of bytes for 256 rows of dims: the lean reader keeps the tensor, so the
    # validation names it exactly as the whole-file read does
    path = tmp_path / "m.onnx"
    onnx.save(_weighted_model(raw_rows=200), path)
    messages = []
    for threshold in (0, 2**62):
        monkeypatch.setattr(read, "LEAN_READ_FROM_BYTES", threshold)
        with pytest.raises(GraphmemError) as error:
            read.read_model(path)
        messages.append(str(error.value))
    assert messages[0] == messages[1] and "raw_data" in messages[0]


def test_a_truncated_file_gets_the_whole_reads_error(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_weighted_model(), path)
    path.write_bytes(path.read_bytes()[:-100_000])  # cut inside w's raw_data
    assert read_lean_model_bytes(path) is None
    monkeypatch.setattr(read, "LEAN_READ_FROM_BYTES", 0)
    with pytest.raises(GraphmemError, match="not a valid ONNX model"):
        read.read_model(path)


def test_keep_bytes_is_the_readers_drop_bound() -> None:
    # what lean_read leaves out is exactly what read.py drops after parsing
    assert KEEP_BYTES == read._KEEP_INITIALIZER_BYTES


@pytest.mark.slow
def test_memory_does_not_grow_with_inline_weights(tmp_path: Path) -> None:
    # 64 MiB of float32 weights inside the file (2 x 4096 x 2048); reading it whole held
    # the file's bytes and a parsed copy: about 2 x 64 MiB above the interpreter's baseline
    weights = [numpy_helper.from_array(np.zeros((4096, 2048), np.float32), f"w{i}")
               for i in range(2)]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w0"], ["y"]), helper.make_node("MatMul", ["y", "w1"],
                                                                        ["z"])],
        "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4096])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2048])], weights)
    path = tmp_path / "big.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    weight_bytes = 2 * 4096 * 2048 * 4
    script = (
        "import json, sys\nfrom pathlib import Path\n"
        "def hwm():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmHWM:'):\n"
        "            return int(line.split()[1]) * 1024\n"
        "from graphmem.frontends.onnx import read\n"
        "before = hwm()\n"
        "read.LEAN_READ_FROM_BYTES = int(sys.argv[2])\n"
        "model = read.read_model(Path(sys.argv[1]))\n"
        "print(json.dumps(hwm() - before))\n"
    )
    growth = {}
    for label, threshold in (("lean", 0), ("whole", 2**62)):
        done = subprocess.run([sys.executable, "-c", script, str(path), str(threshold)],
                              capture_output=True, text=True, cwd=ROOT, check=True, timeout=120)
        growth[label] = json.loads(done.stdout.strip().splitlines()[-1])
    assert growth["whole"] > weight_bytes  # the check can see the weights' memory
    assert growth["lean"] < weight_bytes / 8
