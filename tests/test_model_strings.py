"""Model strings are bytes until proven text (graphmem/frontends/onnx/model_text.py).

protobuf hands an ONNX string field holding invalid UTF-8 over as `bytes`; before, a byte
flipped in a node name ended in exit 3 (`startswith first arg must be bytes` in the module-path
logic, `'bytes' object has no attribute 'isprintable'` in an error label, a UnicodeDecodeError
copying the graph's name). The cases are generated: for each kind of string field a model
holds (message type and field: node names, value names, op types, domains, dim params,
attribute names, function names, producer, doc strings...), one of its values gets an invalid
byte at every place it is written, so references stay consistent. Each case must end as any
other input does: exit 0, 1 or 2, one error line, no traceback, the invalid byte shown
escaped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from onnx import TensorProto, helper

from graphmem.frontends.onnx.model_text import model_string, parse_model, repair_text_fields
from tests.helpers.cli import Run
from tests.helpers.samples import SAMPLES_DIR as SAMPLES
from tests.onnx_builders import if_model

MARK = "gmq{:05d}z"  # a text no model holds, made invalid by its last byte


def function_model() -> onnx.ModelProto:
    """A model calling a local function (FunctionProto: name, domain, inputs, attributes)."""
    body = [helper.make_node("Relu", ["fx"], ["fr"]), helper.make_node("Neg", ["fr"], ["fy"])]
    function = helper.make_function("local.fn", "ReluNeg", ["fx"], ["fy"], body,
                                    [helper.make_opsetid("", 17)])
    graph = helper.make_graph(
        [helper.make_node("ReluNeg", ["x"], ["y"], domain="local.fn", name="call")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
    return helper.make_model(graph, functions=[function], producer_name="maker",
                             opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("local.fn", 1)])


def _string_fields(message: Message, path: str) -> Iterator[tuple[str, Message, str, int]]:
    """(kind, message, field name, index or -1) of every non-empty string field."""
    for field, value in message.ListFields():
        kind = f"{message.DESCRIPTOR.name}.{field.name}"
        repeated = (field.is_repeated if hasattr(field, "is_repeated")  # protobuf >= 5.28
                    else field.label == field.LABEL_REPEATED)
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            for child in (value if repeated else [value]):
                yield from _string_fields(child, path)
        elif field.type == FieldDescriptor.TYPE_STRING:
            for index, text in (enumerate(value) if repeated else [(-1, value)]):
                if text:
                    yield kind, message, field.name, index


def _set(message: Message, name: str, index: int, text: str) -> None:
    if index < 0:
        setattr(message, name, text)
    else:
        getattr(message, name)[index] = text


def mutated_models(model: onnx.ModelProto) -> Iterator[tuple[str, bytes]]:
    """One copy per kind of string field: its first value, wherever written, made invalid."""
    seen: set[str] = set()
    for number, (kind, message, name, index) in enumerate(_string_fields(model, "")):
        if kind in seen:
            continue
        seen.add(kind)
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        value = getattr(message, name) if index < 0 else getattr(message, name)[index]
        mark = MARK.format(number)
        for _, other, other_name, other_index in list(_string_fields(copy, "")):
            current = getattr(other, other_name)
            text = current if other_index < 0 else current[other_index]
            if text == value:
                _set(other, other_name, other_index, mark)
        data = copy.SerializeToString()
        assert mark.encode() in data
        yield kind, data.replace(mark.encode(), mark.encode()[:-1] + b"\xff")


def _models() -> dict[str, onnx.ModelProto]:
    return {"tiny_cnn": onnx.load(SAMPLES / "tiny_cnn.onnx"),
            "tiny_gpt.dynamo": onnx.load(SAMPLES / "tiny_gpt.dynamo.onnx"),
            "if": if_model(), "function": function_model()}


CASES = [(f"{name}:{kind}", data) for name, model in _models().items()
         for kind, data in mutated_models(model)]


def test_the_cases_cover_the_kinds_of_string() -> None:
    kinds = {case.split(":")[1] for case, _ in CASES}
    assert {"NodeProto.name", "NodeProto.input", "NodeProto.output", "NodeProto.op_type",
            "ValueInfoProto.name", "TensorProto.name", "GraphProto.name",
            "ModelProto.producer_name", "Dimension.dim_param", "AttributeProto.name",
            "FunctionProto.name",
            "OperatorSetIdProto.domain"} <= kinds, sorted(kinds)


@pytest.mark.parametrize(("case", "data"), CASES, ids=[case for case, _ in CASES])
def test_a_model_string_with_invalid_utf8_is_read_as_escaped_text(case: str, data: bytes
                                                                  ) -> None:
    model = parse_model(data)
    assert repair_text_fields(model) == 0  # parse_model left no bytes behind
    texts = [getattr(m, name) if index < 0 else getattr(m, name)[index]
             for _, m, name, index in _string_fields(model, "")]
    assert all(isinstance(text, str) for text in texts)
    marked = [text for text in texts if "gmq" in text]
    assert marked and all(text.endswith("\\xff") for text in marked), marked  # escaped


@pytest.mark.parametrize(("case", "data"), CASES, ids=[case for case, _ in CASES])
@pytest.mark.parametrize("command", ["analyze", "check", "verify"])
def test_every_command_ends_cleanly_on_a_byte_mutated_model(
        tmp_path: Path, run: Run, case: str, data: bytes, command: str) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    args = {"analyze": ["analyze", path, "--batch", "2", "--no-html", "--dim", "batch=2"],
            "check": ["check", path, "--batch", "2", "--max-params", "1G"],
            "verify": ["verify", path, "--batch", "2", "--no-optimized-run"]}[command]
    code, _, err = run(*args)
    assert code in (0, 1, 2), (case, code, err)
    assert "Traceback" not in err and "internal error" not in err, (case, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err


def test_model_string_escapes_only_invalid_bytes() -> None:
    assert model_string("conv") == "conv"
    assert model_string("c\u00e9".encode()) == "c\u00e9"  # valid UTF-8 kept
    assert model_string(b"conv\xff") == "conv\\xff"


def test_a_valid_model_is_parsed_as_onnx_parses_it() -> None:
    data = (SAMPLES / "tiny_gpt.onnx").read_bytes()
    assert parse_model(data) == onnx.load_model_from_string(data)
