"""The ONNX importer: shapes, roles, external data never read, bad files, control flow."""

from pathlib import Path

import onnx
import pytest

from graphmem.core.ir import Role
from graphmem.core.symbolic import SymInt
from graphmem.errors import GraphmemError
from graphmem.frontends.onnx.importer import import_onnx, load_onnx
from graphmem.passes.params import count_params
from tests.onnx_builders import if_model, mlp_model, save_with_external_data

BATCH = SymInt.symbol("batch")


@pytest.mark.parametrize("opset", [11, 13, 15, 17, 19, 21])
def test_mlp_imports_with_symbolic_shapes_across_opsets(tmp_path: Path, opset: int) -> None:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(opset), path)
    graph = load_onnx(path)
    assert [n.op_type for n in graph.nodes] == ["MatMul", "Add", "Relu", "MatMul"]
    assert graph.opset == opset
    assert graph.values["h"].shape == (BATCH, SymInt.const(64))
    assert graph.values["y"].role is Role.OUTPUT
    assert graph.values["w1"].role is Role.PARAMETER
    # 32*64 + 64 + 64*10 = 2048 + 64 + 640 = 2752 parameters
    assert count_params(graph).count == 2752


def test_external_data_is_never_read_and_may_be_missing(tmp_path: Path) -> None:
    path = tmp_path / "mlp_ext.onnx"
    data = save_with_external_data(mlp_model(), path)
    assert data.exists() and path.stat().st_size < data.stat().st_size
    data.unlink()  # the weights are gone: analysis only needs dims and dtypes
    graph = load_onnx(path)
    assert count_params(graph).count == 2752
    assert count_params(graph).bytes == 2752 * 4


def test_unnamed_dynamic_input_dims_get_bindable_names(tmp_path: Path) -> None:
    model = mlp_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].Clear()  # neither value nor name
    path = tmp_path / "anon.onnx"
    onnx.save(model, path)
    graph = load_onnx(path)
    assert graph.input_dims_in_order() == ["x_d0"]


def test_if_subgraph_is_flagged_and_its_outer_reads_stay_live(tmp_path: Path) -> None:
    path = tmp_path / "if.onnx"
    onnx.save(if_model(), path)
    graph = load_onnx(path)
    branch = next(n for n in graph.nodes if n.op_type == "If")
    assert branch.subgraph_node_count == 2
    # the bodies read x (made by `pre`) and c: both become inputs of the If node
    assert {v.name for v in branch.present_inputs} == {"cond", "x", "c"}


def test_symbolic_inference_writes_nothing_into_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.onnx_builders import custom_op_model

    path = tmp_path / "custom.onnx"
    onnx.save(custom_op_model(), path)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    imported = import_onnx(path)
    assert list(workdir.iterdir()) == []
    assert imported.graph.values["b"].shape is None or not imported.graph.values["b"].shape_known


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "is empty"),
        (b"this is not a model at all\n" * 10, "not a valid ONNX model"),
    ],
)
def test_bad_files_give_one_clear_error(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(GraphmemError, match=expected):
        load_onnx(path)


def test_truncated_model_is_refused(tmp_path: Path) -> None:
    whole = mlp_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(GraphmemError, match=r"not a valid ONNX model|holds no ONNX graph"):
        load_onnx(path)


def test_missing_path_and_directory(tmp_path: Path) -> None:
    with pytest.raises(GraphmemError, match="no such file"):
        load_onnx(tmp_path / "nope.onnx")
    with pytest.raises(GraphmemError, match="is a directory"):
        load_onnx(tmp_path)


def test_inference_that_rewrites_declared_input_dims_is_discarded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # onnxruntime 1.30's symbolic rules turn a dynamo export's [batch, seq] input into
    # [16, 16]; graphmem must keep the model's own dims and fall back to onnx's inference.
    from graphmem.frontends.onnx import infer as onnx_importer

    def rewriting(model: onnx.ModelProto, failed_ops: list[str]) -> onnx.ModelProto:
        broken = onnx.ModelProto()
        broken.CopyFrom(model)
        dim = broken.graph.input[0].type.tensor_type.shape.dim[0]
        dim.ClearField("dim_param")
        dim.dim_value = 16
        return broken

    monkeypatch.setattr(onnx_importer, "_ort_symbolic_inference", rewriting)
    # onnx types this MLP whole, so the rules would not run (value_types.typed_by_onnx): as
    # for a model onnx leaves partly unknown, they run here
    monkeypatch.setattr(onnx_importer, "typed_by_onnx",
                        lambda graph, inputs, made=None, known_infos=None: False)
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    imported = import_onnx(path)
    assert imported.graph.values["h"].shape == (BATCH, SymInt.const(64))
    assert imported.shape_inference == "onnx shape inference"
    assert any("changed the input dims (x: ['batch', 32] became [16, 32])" in w
               for w in imported.warnings)


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2", "tiny_cnn", "tiny_gpt"])
def test_onnxruntime_rules_run_only_where_they_add_a_type(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A CNN's every value is typed by onnx, its outputs in the input's own dims: the rules
    # (and sympy, which they import) are skipped. Run anyway, they give every value the same
    # shape. A decoder leaves onnx values it cannot type (its reshapes read shapes): they run.
    from graphmem.frontends.onnx import infer

    path = Path(__file__).resolve().parent.parent / "samples" / f"{name}.onnx"
    skipped = import_onnx(path)
    monkeypatch.setattr(infer, "typed_by_onnx",
                        lambda graph, inputs, made=None, known_infos=None: False)
    ran = import_onnx(path)
    assert "onnxruntime" in ran.shape_inference
    if name == "tiny_gpt":
        assert skipped.shape_inference == ran.shape_inference
    else:
        assert skipped.shape_inference == "onnx shape inference"
    assert ({n: v.shape for n, v in skipped.graph.values.items()}
            == {n: v.shape for n, v in ran.graph.values.items()})
