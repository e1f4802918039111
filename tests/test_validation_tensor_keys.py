"""validation.py checks each distinct tensor key once (`_check_tensors`: dtype, dims, data
location, raw or typed, how much is held) and labels a tensor only for an error. The answer
must be the per-tensor check's: on random models of repeated and broken tensors (external,
raw, typed, data-less, unknown dtypes, negative and huge dims, sparse, Constant values),
strip_and_validate and validate_graph refuse with the same line, or pass, as the old walk
(strip_external_data, then _check_tensor on every tensor model_tensors lists, in order), and
strip_and_validate leaves the same bytes as strip_external_data."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.errors import GraphmemError
from graphmem.frontends.onnx import validation
from graphmem.frontends.onnx.untrusted import model_tensors, strip_external_data
from graphmem.frontends.onnx.validation import strip_and_validate, validate_graph

_TYPES = [TensorProto.FLOAT, TensorProto.INT64, TensorProto.FLOAT16, TensorProto.STRING,
          TensorProto.INT4, TensorProto.COMPLEX64, TensorProto.BOOL, 0, 999]
_BYTES: dict[int, int] = {TensorProto.FLOAT: 4, TensorProto.INT64: 8, TensorProto.FLOAT16: 2,
          TensorProto.BOOL: 1, TensorProto.COMPLEX64: 8}
_DIMS = [(), (3,), (2, 3), (0, 4), (1, 1, 1), (-1, 2), (2**40, 2**30), tuple([1] * 65)]


def _tensor(rng: np.random.Generator, name: str) -> TensorProto:
    """A tensor of a few common dtypes and dims, its data right, wrong, absent or external."""
    data_type = _TYPES[int(rng.integers(len(_TYPES)))] if rng.random() < 0.05 else (
        [TensorProto.FLOAT, TensorProto.INT64][int(rng.integers(2))])
    dims = _DIMS[int(rng.integers(len(_DIMS)))] if rng.random() < 0.05 else (
        _DIMS[int(rng.integers(1, 3))])
    tensor = TensorProto(name=name, data_type=data_type, dims=dims)
    numel = int(np.prod(dims)) if all(d >= 0 for d in dims) and len(dims) < 8 else 0
    numel = min(numel, 64)
    off = int(rng.choice([1, -1])) if rng.random() < 0.03 else 0
    form = rng.integers(5)
    if form == 1:  # raw, of the right size or off by one
        tensor.raw_data = b"\0" * max(numel * _BYTES.get(data_type, 4) + off, 0)
    elif form == 2 and data_type in (TensorProto.FLOAT, TensorProto.COMPLEX64):
        tensor.float_data.extend([0.0] * max(numel + off, 0))
    elif form == 2 and data_type == TensorProto.INT64:
        tensor.int64_data.extend([0] * max(numel + off, 0))
    elif form == 2 and data_type == TensorProto.STRING:
        tensor.string_data.extend([b"a"] * max(numel + off, 0))
    elif form == 3:  # external: cut off by strip_and_validate, judged as external otherwise
        tensor.data_location = TensorProto.EXTERNAL
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", "weights.bin"
        if rng.random() < 0.5:
            tensor.raw_data = b"\0" * 3
    elif form == 4 and rng.random() < 0.3:  # external entries without the location flag
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", "w.bin"
    return tensor


def _model(seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    count = int(rng.integers(1, 20))
    initializers = [_tensor(rng, f"w{i}") for i in range(count)]
    nodes, inputs = [], ["x"]
    for i in range(int(rng.integers(0, 10))):
        if rng.random() < 0.5:
            nodes.append(helper.make_node("Constant", [], [f"c{i}"],
                                          value=_tensor(rng, f"c{i}"), name=f"k{i}"))
        else:
            nodes.append(helper.make_node("Relu", [inputs[-1]], [f"r{i}"],
                                          name="" if rng.random() < 0.3 else f"r{i}"))
            inputs.append(f"r{i}")
    nodes.append(helper.make_node("Identity", [inputs[-1]], ["y"]))
    sparse = []
    if rng.random() < 0.2:
        values = _tensor(rng, "s")
        indices = TensorProto(name="si", data_type=TensorProto.INT64, dims=[1], int64_data=[0])
        sparse.append(helper.make_sparse_tensor(values, indices, [4]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], initializers,
        sparse_initializer=sparse)
    return helper.make_model(graph)


def _old_answer(model: onnx.ModelProto, strip: bool) -> str | None:
    """The per-tensor walk: every tensor checked, in model_tensors' order, with its label."""
    try:
        if strip:
            strip_external_data(model)
        for label, tensor in model_tensors(model):
            validation._check_tensor(label, tensor)
    except GraphmemError as error:
        return str(error)
    return None


def _new_answer(model: onnx.ModelProto, strip: bool) -> str | None:
    try:
        (strip_and_validate if strip else validate_graph)(model)
    except GraphmemError as error:
        return str(error)
    return None


@pytest.mark.parametrize("seed", range(300))
@pytest.mark.parametrize("strip", [True, False])
def test_one_check_per_key_refuses_as_each_tensor_checked(seed: int, strip: bool) -> None:
    old, new = _model(seed), _model(seed)
    expected = _old_answer(old, strip)
    answer = _new_answer(new, strip)
    if expected is not None:
        assert answer == expected
    else:  # the tensors pass: the graph's own checks may refuse (not these tensors)
        assert answer is None or "initializer" not in answer.split(" has ")[0]
        if strip and answer is None:
            assert new.SerializeToString() == old.SerializeToString()


def test_the_random_models_are_refused_and_passed() -> None:
    # the property above is not vacuous: both answers occur, each kind of refusal too
    answers = [_old_answer(_model(seed), True) for seed in range(300)]
    refused = [a for a in answers if a is not None]
    assert 30 < len(refused) < 270
    for phrase in ("which ONNX does not define", "bytes of raw_data", "entries of",
                   "has rank 65", "negative dim", "beyond 2**63", "attribute 'value'"):
        assert any(phrase in a for a in refused), phrase


def test_a_tensor_after_one_of_its_key_that_passed_is_not_checked_again() -> None:
    # the check runs once per key: 1,000 equal weights, one _check_tensor call
    weights = [TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[2, 3])
               for i in range(1000)]
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], weights)
    calls: list[str] = []
    check = validation._check_tensor

    def counted(label: str, tensor: TensorProto) -> None:
        calls.append(label)
        check(label, tensor)

    try:
        validation._check_tensor = counted
        strip_and_validate(helper.make_model(graph))
    finally:
        validation._check_tensor = check
    assert calls == ["initializer 'w0'"]
