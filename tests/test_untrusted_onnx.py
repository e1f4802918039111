"""Untrusted ONNX files: a model never makes graphmem read another file, and broken graphs get
one error line (graphmem/frontends/onnx/untrusted.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.errors import GraphmemError
from graphmem.frontends.onnx.fold import fold_constants
from graphmem.frontends.onnx.read import read_model
from graphmem.frontends.onnx.untrusted import (
    has_inline_data,
    model_tensors,
    strip_external_data,
)
from graphmem.frontends.onnx.validation import validate_graph
from tests.helpers.cli import run_cli_with_deadline as run_cli
from tests.helpers.untrusted import external, opened
from tests.onnx_builders import mlp_model

SECRET = b"QZXJKVWQ"  # 81 90 88 74 75 86 87 81: would come out as output shapes


# ----- the one-error-line contract ------------------------------------------------------------
def one_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphmem: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# ----- models ----------------------------------------------------------------------------------
def exfiltration_model(location: str, as_initializer: bool = False) -> onnx.ModelProto:
    """leak (uint8[8], data in `location`) -> Cast -> Gather(i) -> ConstantOfShape: each
    output's shape would be one byte of the file."""
    leak = external(TensorProto(name="leak", data_type=TensorProto.UINT8, dims=[len(SECRET)]),
                    location, len(SECRET))
    nodes = [] if as_initializer else [helper.make_node("Constant", [], ["leak"], value=leak,
                                                        name="c")]
    initializers = [leak] if as_initializer else []
    nodes.append(helper.make_node("Cast", ["leak"], ["leak_i"], to=TensorProto.INT64,
                                  name="cast"))
    outputs = []
    for i in range(len(SECRET)):
        initializers.append(numpy_helper.from_array(np.array([i], np.int64), f"i{i}"))
        nodes += [helper.make_node("Gather", ["leak_i", f"i{i}"], [f"g{i}"], axis=0,
                                   name=f"gather{i}"),
                  helper.make_node("ConstantOfShape", [f"g{i}"], [f"leak{i}"], name=f"cos{i}")]
        outputs.append(helper.make_tensor_value_info(f"leak{i}", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes, "exfil", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], outputs,
        initializer=initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


@pytest.fixture
def beside_and_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder the model goes in; the secret file is there and in the current directory."""
    folder, cwd = tmp_path / "model", tmp_path / "cwd"
    folder.mkdir()
    cwd.mkdir()
    (folder / "secret.txt").write_bytes(SECRET)
    (cwd / "secret.txt").write_bytes(SECRET)
    monkeypatch.chdir(cwd)
    return folder


def assert_no_leak(result: dict, texts: list[str]) -> None:
    """Neither the bytes nor their values as shape numbers come out."""
    for text in texts:
        assert SECRET.decode() not in text
    leaked = [n for n in result["nodes"] if n["name"].startswith("cos")
              and n["output_shapes"] == [f"[{SECRET[int(n['name'][3:])]}]"]]
    assert leaked == []


# ----- a model never makes graphmem read another file ------------------------------------------
@pytest.mark.parametrize("as_initializer", [False, True], ids=["constant", "initializer"])
def test_external_constant_is_never_read(beside_and_cwd: Path, tmp_path: Path,
                                         as_initializer: bool, opened_paths: list[str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = save(exfiltration_model("secret.txt", as_initializer), beside_and_cwd / "m.onnx")
    out = tmp_path / "out.json"
    code, stdout, stderr = run_cli(["analyze", str(path), "--json", str(out), "--no-html"],
                                   capsys)
    assert code in (0, 2), stderr
    assert opened(opened_paths, "secret.txt") == []
    if code == 0:
        text = out.read_text()
        assert_no_leak(json.loads(text), [text, stdout, stderr])
    assert SECRET.decode() not in stdout + stderr


def test_before_the_fix_the_same_model_leaked_through_numpy_helper(beside_and_cwd: Path) -> None:
    # the hole itself, so the test above is known to test it: onnx reads the file for the value
    model = exfiltration_model("secret.txt")
    assert bytes(numpy_helper.to_array(model.graph.node[0].attribute[0].t)) == SECRET


def _fifo(folder: Path) -> str:
    os.mkfifo(folder / "pipe")
    return "pipe"


LOCATIONS: dict[str, Callable[[Path], str]] = {
    "absolute": lambda folder: str(folder / "secret.txt"),
    "dev-zero": lambda folder: "/dev/zero",
    "fifo-absolute": lambda folder: str(folder / _fifo(folder)),
    "fifo": _fifo,
    "dotdot": lambda folder: "../cwd/secret.txt",
    "symlink-out": lambda folder: (os.symlink("/dev/zero", folder / "link") or "link"),
    "ort-memory-address": lambda folder: _ort_memory_tag(folder),
}


def _ort_memory_tag(folder: Path) -> str:
    """onnxruntime reads `*/_ORT_MEM_ADDR_/*` from the memory address in `offset`, even when a
    file of that name ships with the model."""
    (folder / "*" / "_ORT_MEM_ADDR_").mkdir(parents=True)
    (folder / "*" / "_ORT_MEM_ADDR_" / "*").write_bytes(bytes(32 * 64 * 4))
    return "*/_ORT_MEM_ADDR_/*"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
@pytest.mark.parametrize("kind", list(LOCATIONS))
def test_hostile_locations_never_end_in_exit_3_nor_hang(
        beside_and_cwd: Path, tmp_path: Path, kind: str, opened_paths: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    location = LOCATIONS[kind](beside_and_cwd)
    opened_paths.clear()  # what the test itself wrote
    path = save(exfiltration_model(location), beside_and_cwd / "m.onnx")
    code, stdout, stderr = run_cli(
        ["analyze", str(path), "--json", str(tmp_path / "o.json"), "--no-html"], capsys)
    assert code in (0, 2), stderr
    assert opened(opened_paths, Path(location).name) == []
    assert SECRET.decode() not in stdout + stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
@pytest.mark.parametrize(("kind", "fragment"), [
    ("absolute", "not a relative path"), ("dev-zero", "not a relative path"),
    ("fifo-absolute", "not a relative path"), ("fifo", "not a regular file"),
    ("dotdot", "not a relative path"), ("symlink-out", "resolves outside"),
    ("ort-memory-address", "memory address"),
])
def test_verify_refuses_external_data_outside_the_models_folder(
        beside_and_cwd: Path, kind: str, fragment: str, opened_paths: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    # verify loads weights: a model naming /dev/zero, a FIFO or a file elsewhere is refused
    location = LOCATIONS[kind](beside_and_cwd)
    opened_paths.clear()  # what the test itself wrote
    _verify_refuses_weights_at(beside_and_cwd, location, fragment, capsys)
    assert opened(opened_paths, Path(location).name) == []


def _verify_refuses_weights_at(folder: Path, location: str, fragment: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """The MLP with its first weight stored at `location`: verify refuses it in one line."""
    model = mlp_model()
    weights = model.graph.initializer[0]
    weights.ClearField("raw_data")
    external(weights, location, 32 * 64 * 4)
    path = save(model, folder / "m.onnx")
    code, _, err = run_cli(["verify", str(path), "--batch", "2", "--no-optimized-run"], capsys)
    one_error(code, err, "initializer 'w1'", fragment)


# ----- the file itself -------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_model_path_must_be_a_regular_file(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "model.onnx")
    code, _, err = run_cli(["analyze", str(tmp_path / "model.onnx"), "--no-html"], capsys)
    one_error(code, err, "not a regular file")
    if Path("/dev/zero").exists():
        code, _, err = run_cli(["analyze", "/dev/zero", "--no-html"], capsys)
        one_error(code, err, "not a regular file")


def test_files_protobuf_cannot_parse_are_refused_before_reading(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "huge.onnx"
    with path.open("wb") as file:
        file.truncate(3 << 30)  # sparse: 3 GiB on paper, no disk
    code, _, err = run_cli(["analyze", str(path), "--no-html"], capsys)
    one_error(code, err, "3,221,225,472 bytes", "2 GiB")


# ----- broken graphs ---------------------------------------------------------------------------
def _graph(nodes: list[onnx.NodeProto], initializers: list[TensorProto] | None = None,
           x_type: int = TensorProto.FLOAT, rank: int = 2) -> onnx.ModelProto:
    dims = [2, 3] if rank == 2 else [1] * rank
    graph = helper.make_graph(
        nodes, "broken", [helper.make_tensor_value_info("x", x_type, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
        initializer=initializers or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _add_w(w: TensorProto) -> onnx.ModelProto:
    return _graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [w])


BROKEN: dict[str, tuple[Callable[[], onnx.ModelProto], tuple[str, ...]]] = {
    "two-writers": (lambda: _graph([helper.make_node("Relu", ["x"], ["y"], name="a"),
                                    helper.make_node("Sigmoid", ["x"], ["y"], name="b")]),
                    ("tensor 'y'", "Sigmoid node 'b'", "Relu node 'a'")),
    "writes-an-input": (lambda: _graph([helper.make_node("Relu", ["x"], ["x"], name="r"),
                                        helper.make_node("Relu", ["x"], ["y"], name="r2")]),
                        ("tensor 'x'", "graph input")),
    "writes-an-initializer": (
        lambda: _graph([helper.make_node("Relu", ["x"], ["y"], name="r")],
                       [numpy_helper.from_array(np.zeros((2, 3), np.float32), "y")]),
        ("tensor 'y'", "initializer")),
    "raw-size": (lambda: _add_w(TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3],
                                            raw_data=b"\0" * 8)),
                 ("initializer 'w'", "8 bytes", "24")),
    "typed-size": (lambda: _add_w(TensorProto(name="w", data_type=TensorProto.FLOAT,
                                              dims=[2, 3], float_data=[1.0] * 5)),
                   ("initializer 'w'", "5 entries of float_data", "6")),
    "dtype-999": (lambda: _add_w(TensorProto(name="w", data_type=999, dims=[2, 3],
                                             raw_data=b"\0" * 24)),
                  ("initializer 'w'", "element type 999")),
    "input-dtype-999": (lambda: _graph([helper.make_node("Relu", ["x"], ["y"], name="r")],
                                       x_type=999), ("value 'x'", "element type 999")),
    "rank-300": (lambda: _graph([helper.make_node("Relu", ["x"], ["y"], name="r")], rank=300),
                 ("value 'x'", "rank 300")),
    "initializer-rank-300": (
        lambda: _add_w(TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1] * 300,
                                   raw_data=b"\0" * 4)), ("initializer 'w'", "rank 300")),
    "negative-dim": (lambda: _add_w(TensorProto(name="w", data_type=TensorProto.FLOAT,
                                                dims=[-3, 2])),
                     ("initializer 'w'", "negative dim")),
    "2**63-bytes": (lambda: _add_w(TensorProto(name="w", data_type=TensorProto.FLOAT,
                                               dims=[2**40, 2**40])),
                    ("initializer 'w'", "2**63")),
}


@pytest.mark.parametrize("case", list(BROKEN))
@pytest.mark.parametrize("gpu", [[], ["--gpu", "t4"]], ids=["cpu", "t4"])
def test_broken_graphs_are_one_error_line(tmp_path: Path, case: str, gpu: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    build, fragments = BROKEN[case]
    path = save(build(), tmp_path / "broken.onnx")
    code, _, err = run_cli(["analyze", str(path), "--no-html", *gpu], capsys)
    one_error(code, err, *fragments)


def test_verify_refuses_broken_graphs_too(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    build, fragments = BROKEN["two-writers"]
    path = save(build(), tmp_path / "broken.onnx")
    code, _, err = run_cli(["verify", str(path), "--no-optimized-run"], capsys)
    one_error(code, err, *fragments)


# ----- the helpers -----------------------------------------------------------------------------
def _external_everywhere() -> onnx.ModelProto:
    """External tensors in a Constant inside an If branch, a TENSORS attribute of a custom
    node, a sparse initializer and a function body."""
    def ext(name: str) -> TensorProto:
        return external(TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[2]),
                        "w.bin", 8)

    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["t"], value=ext("in_branch"))], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    listing = helper.make_node("Custom", ["x"], ["z"], domain="example", name="custom")
    listing.attribute.append(helper.make_attribute("tables", [ext("in_list")]))
    sparse = helper.make_sparse_tensor(
        ext("sparse_values"),
        external(TensorProto(name="sparse_idx", data_type=TensorProto.INT64, dims=[2]),
                 "w.bin", 16), [4])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch,
                          name="if"), listing],
        "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        sparse_initializer=[sparse])
    function = helper.make_function(
        "local", "F", ["a"], ["b"],
        [helper.make_node("Constant", [], ["b"], value=ext("in_function"))],
        [helper.make_opsetid("", 17)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("local", 1)],
                             functions=[function])


def test_strip_reaches_subgraphs_lists_sparse_tensors_and_functions() -> None:
    model = _external_everywhere()
    stripped = strip_external_data(model)
    # both branches, the list, the sparse values and indices, the function body
    assert len(stripped) == 6
    assert "attribute 'tables' of Custom node 'custom'" in stripped
    assert "initializer 'in_branch'" not in stripped  # a Constant's value, named by its node
    for _, tensor in model_tensors(model):
        assert not tensor.external_data and tensor.data_location == TensorProto.DEFAULT
        assert list(tensor.dims) == [2]  # dims and dtype kept: known shape, unknown value
        assert not has_inline_data(tensor)


def test_inline_data_of_the_right_size_only() -> None:
    good = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "good")
    typed = helper.make_tensor("typed", TensorProto.INT64, [3], [1, 2, 3])
    short = TensorProto(name="short", data_type=TensorProto.FLOAT, dims=[2, 3],
                        raw_data=b"\0" * 8)
    dataless = TensorProto(name="none", data_type=TensorProto.FLOAT, dims=[2, 3])
    empty = TensorProto(name="empty", data_type=TensorProto.FLOAT, dims=[0, 3])
    int4 = TensorProto(name="int4", data_type=TensorProto.INT4, dims=[3], raw_data=b"\0\0")
    ext = external(TensorProto(name="ext", data_type=TensorProto.UINT8, dims=[2]), "x", 2)
    assert [has_inline_data(t) for t in (good, typed, empty, int4)] == [True] * 4
    assert [has_inline_data(t) for t in (short, dataless, ext)] == [False] * 3


def test_folding_treats_data_less_constants_as_unknown_values() -> None:
    model = exfiltration_model("secret.txt")
    strip_external_data(model)
    validate_graph(model)  # a data-less tensor is not a broken one
    folded = fold_constants(model)
    # the Cast of an unknown value stays a Cast: nothing downstream gets a number
    assert "leak_i" not in folded
    assert not any(n.op_type == "Constant" and n.output[0].startswith("g")
                   for n in model.graph.node)


def test_validate_accepts_initializers_listed_as_inputs() -> None:
    model = mlp_model()
    for tensor in model.graph.initializer:  # IR < 4 lists every initializer among the inputs
        model.graph.input.append(helper.make_tensor_value_info(
            tensor.name, tensor.data_type, list(tensor.dims)))
    validate_graph(model)
    model.graph.initializer.append(model.graph.initializer[0])
    with pytest.raises(GraphmemError, match="initializer 'w1' is defined twice"):
        validate_graph(model)


def test_model_names_in_error_lines_are_escaped(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    # a name is untrusted text: a newline must not forge a second error line, nor an escape
    # sequence reach the terminal
    forged = "a\ngraphmem: error: forged \x1b[2J\u202e"
    model = _graph([helper.make_node("Relu", ["x"], ["y"], name=forged),
                    helper.make_node("Sigmoid", ["x"], ["y"], name="b")])
    code, _, err = run_cli(["analyze", str(save(model, tmp_path / "m.onnx")), "--no-html"],
                           capsys)
    one_error(code, err, "Relu node 'a\\ngraphmem: error: forged \\x1b[2J\\u202e'")
    assert "\x1b" not in err and "\u202e" not in err


@pytest.mark.parametrize(("location", "fragment"), [
    ("d" * 5000, "cannot"),  # a name too long for the file system
    ("a\x00b", "'a\\x00b', which is not a relative path"),
    ("loop", "cannot be resolved"),  # a symlink to itself
])
def test_verify_refuses_unreadable_locations_in_one_line(
        beside_and_cwd: Path, location: str, fragment: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    if location == "loop":
        os.symlink("loop", beside_and_cwd / "loop")
    _verify_refuses_weights_at(beside_and_cwd, location, fragment, capsys)


def test_graphs_nothing_runs_in_and_stray_function_references_are_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    only_constants = helper.make_graph(
        [helper.make_node("Constant", [], ["y"], value=helper.make_tensor(
            "v", TensorProto.INT64, [2], [1, 2]))], "c", [],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2])])
    model = helper.make_model(only_constants, opset_imports=[helper.make_opsetid("", 17)])
    code, _, err = run_cli(["analyze", str(save(model, tmp_path / "c.onnx")), "--no-html"],
                           capsys)
    one_error(code, err, "only Constant nodes")
    softmax = helper.make_node("Softmax", ["x"], ["y"], name="s")
    axis = softmax.attribute.add()
    axis.name, axis.type, axis.ref_attr_name = "axis", onnx.AttributeProto.INT, "missing"
    code, _, err = run_cli(["analyze", str(save(_graph([softmax]), tmp_path / "r.onnx")),
                            "--no-html"], capsys)
    one_error(code, err, "attribute 'axis' of Softmax node 's'", "'missing'", "outside")


@pytest.mark.parametrize("elem_type, refused", [(99, "element type 99"), (1, "rank 70")])
def test_a_value_type_is_refused_at_its_first_value(elem_type: int, refused: str) -> None:
    """Types are checked once per distinct type: the error still names the first value of
    the bad type, in inputs, outputs, value_info order, after good values of other types
    (MAX_RANK is 64)."""
    good = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])
    bad_dims = [1] * (70 if refused.startswith("rank") else 2)
    bad = [helper.make_tensor_value_info(name, elem_type, bad_dims) for name in ("o", "v")]
    graph = helper.make_graph([helper.make_node("Relu", ["a"], ["o"])], "g", [good],
                              [bad[0]], value_info=[bad[1]])
    with pytest.raises(GraphmemError, match=f"value 'o' has {refused}"):
        validate_graph(helper.make_model(graph))
    graph.output[0].CopyFrom(helper.make_tensor_value_info("o", TensorProto.FLOAT, [2]))
    with pytest.raises(GraphmemError, match=f"value 'v' has {refused}"):
        validate_graph(helper.make_model(graph))


def test_an_output_no_node_makes_is_refused_when_the_model_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The builder's refusal, made by validation before any copy or inference (a file of
    10**6 empty nodes took 1,084 MiB and 13 CPU s to reach the builder's): 10**5 empty nodes
    and a graph output none of them makes are refused by read_model, onnx's inference never
    called. An output that is an input or an initializer is made; a body's output may be an
    outer value (validated as before)."""
    graph = helper.make_graph([onnx.NodeProto() for _ in range(10**5)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = save(helper.make_model(graph), tmp_path / "empty.onnx")
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", None)  # would fail if called
    with pytest.raises(GraphmemError, match=r"^graph output 'y' is produced by no node: the"
                                            r" model is broken; re-export it"):
        read_model(path)
    for made in ("x", "w"):
        graph = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["r"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info(made, TensorProto.FLOAT, [2])],
            [numpy_helper.from_array(np.zeros(2, np.float32), "w")])
        validate_graph(helper.make_model(graph))
    outer = helper.make_graph([], "arm", [], [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2])])
    branch = helper.make_node("If", ["c"], ["y"], then_branch=outer, else_branch=outer)
    graph = helper.make_graph([branch], "g", [
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    validate_graph(helper.make_model(graph))
