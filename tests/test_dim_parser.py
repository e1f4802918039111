"""Dim names are names, dim expressions go through graphmem's own grammar: nothing runs, hangs
or overflows whatever a model's dims say (issue: a dim_param reached sympy.sympify)."""

from __future__ import annotations

import time
from pathlib import Path

import onnx
import pytest
import sympy
from onnx import TensorProto, helper

from graphmem.cli.main import main
from graphmem.core.dim_parser import DimParseError, dim_symbol, parse_dim_expression
from graphmem.core.symbolic import SymInt, parse_dim
from graphmem.frontends.onnx.importer import import_onnx

SEQ = dim_symbol("seq")


def code_payloads(marker: Path) -> list[str]:
    """Texts that ran a shell command (or would) when sympify evaluated them."""
    command = f'touch {marker}'
    return [
        f'(1).evalf.__globals__["__builtins__"]["__import__"]("os").system("{command}")',
        f'__import__("os").system("{command}")',
        f'Symbol("x").__class__.__init__.__globals__["os"].system("{command}")',
        f'exec("import os; os.system(\'{command}\')")',
        f'(lambda: __import__("os").system("{command}"))()',
        f'eval("__import__(\'os\').system(\'{command}\')")',
        f'[c for c in ().__class__.__base__.__subclasses__()][0]("{command}")',
    ]


# Each is refused by the grammar: it stays one opaque name.
REFUSED = [
    "9**9**9", "9**99", "2**-2", "batch**-1", "Mod(batch, 0)", "x.y", "1/0", "floor(seq/0)",
    "1e999", "1.5", "0", "-4", "seq[0]", "'a'*9", "Max(seq)",
    "Piecewise((1, seq > 2))", "sqrt(seq)", "seq if 1 else 2", "seq,", "()", "",
    "+".join(["seq"] * 3000), "(" * 200 + "seq" + ")" * 200, "9" * 40, "seq\x00", "seq;1",
    "Mod(seq, 2 - 2)",
]


@pytest.mark.parametrize("index", range(7))
def test_code_in_a_dim_name_never_runs(tmp_path: Path, index: int) -> None:
    marker = tmp_path / "PWNED"
    payload = code_payloads(marker)[index]
    symbol = parse_dim(payload)
    assert not marker.exists()
    assert symbol == dim_symbol(payload)  # the text is one name


@pytest.mark.parametrize("text", REFUSED, ids=lambda t: repr(t[:20]))
def test_refused_texts_stay_one_opaque_name_quickly(text: str) -> None:
    started = time.perf_counter()
    with pytest.raises(DimParseError):
        parse_dim_expression(text)
    assert parse_dim(text) == dim_symbol(text)
    assert time.perf_counter() - started < 2.0  # generous: it is microseconds; a hang is not


@pytest.mark.parametrize(("text", "value"), [
    # the shapes onnxruntime's symbolic inference prints, evaluated at seq=7
    ("2*seq", 14), ("seq + 1", 8), ("-seq + 10", 3), ("floor(seq/2)", 3), ("seq//2", 3),
    ("ceiling(seq/2)", 4), ("Max(4096, seq)", 4096), ("Min(4096, seq)", 7), ("Mod(seq, 4)", 3),
    ("seq % 4", 3), ("floor(1.5*seq)", 10), ("seq**2", 49), ("(seq + 1)*(seq - 1)", 48),
    ("Max(1, seq, 3)", 7), ("4096", 4096),
])
def test_inference_expressions_parse_exactly(text: str, value: int) -> None:
    # e.g. floor(1.5*seq) at seq=7: floor(10.5) = 10 (Resize scales are parsed as exact 3/2)
    expr = parse_dim_expression(text)
    assert int(expr.subs(SEQ, 7)) == value


@pytest.mark.parametrize("name", ["nan", "oo", "zoo", "pi", "E", "I", "S", "N", "floor"])
def test_names_of_sympy_constants_are_plain_dims(name: str) -> None:
    # sympify turned `pi` into 3.14159... and `I` into the imaginary unit; here a name is a dim
    assert parse_dim_expression(f"2*{name}") == 2 * dim_symbol(name)


def test_aliases_map_back_to_the_models_names() -> None:
    # the importer hands inference `gm__dim0` for a dim the model calls `a+b`
    expr = parse_dim_expression("2*gm__dim0 + 1", {"gm__dim0": "a+b"})
    assert expr == 2 * dim_symbol("a+b") + 1
    assert SymInt.from_sympy(expr).evaluate({"a+b": 5}) == 11


def test_from_sympy_refuses_text() -> None:
    with pytest.raises(TypeError):
        SymInt.from_sympy("__import__('os')")  # type: ignore[arg-type]
    assert SymInt.from_sympy(sympy.Integer(3)) == 3


def _concat_model(dim_name: str) -> onnx.ModelProto:
    # x[<dim_name>, 3] ++ x along axis 0 -> y[2*<dim_name>, 3]: inference writes an expression
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim_name, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Concat", ["x", "x"], ["y"], axis=0, name="cat")
    graph = helper.make_graph([node], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dim_name", ["a+b", "N.1", "floor", "pi", "[/b]", "2**-2"])
def test_odd_dim_names_stay_names_through_inference(tmp_path: Path, dim_name: str) -> None:
    path = tmp_path / "cat.onnx"
    onnx.save(_concat_model(dim_name), path)
    graph = import_onnx(path).graph
    # [d, 3] float32 twice along axis 0: 2*d*3*4 = 24*d bytes, d bound by its own name
    (rows, cols) = graph.values["y"].shape
    assert cols == 3
    assert rows.free_symbols() == {dim_name}
    assert rows.evaluate({dim_name: 5}) == 10


@pytest.mark.parametrize("index", range(7))
def test_analyze_and_check_run_no_code_from_a_model(tmp_path: Path, index: int,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "PWNED"
    path = tmp_path / "hostile.onnx"
    onnx.save(_concat_model(code_payloads(marker)[index]), path)
    for argv in (["analyze", str(path), "--no-html", "--json", str(tmp_path / "r.json")],
                 ["analyze", str(path), "--no-html", "--gpu", "t4"],
                 ["check", str(path), "--max-params", "10"]):
        code = main(argv)
        err = capsys.readouterr().err
        assert code in (0, 1, 2), err
        assert "internal error" not in err and "Traceback" not in err
    assert not marker.exists()
