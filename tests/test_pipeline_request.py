"""One Request: its checks refuse bad options before any model is read, and the vocabularies
and training conventions are defined once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from graphmem.core import conventions
from graphmem.core.conventions import Amp, Optimizer, Strategy, TrainingOptions
from graphmem.distributed.strategies import STRATEGIES, DistributedConfig, ZeroSettings
from graphmem.errors import GraphmemError
from graphmem.pipeline.request import (
    KvCacheOptions,
    PooledHead,
    Request,
    RuntimeOptions,
    SuggestOptions,
    SweepRequest,
    rerun_request,
)
from graphmem.runtime_models.base import RUNTIMES, Runtime
from graphmem.suggest.cards import SuggestionKind

# no such file: a check that needed the model would fail on the path, not on the option
MISSING = Path("no/such/model.onnx")
SPEC = "tests/torch_models/small.py:build_convnet"
TRAIN = TrainingOptions()


@pytest.mark.parametrize(("request_", "message"), [
    (Request(MISSING, module_depth=0), "--depth 0: give 1 or more"),
    (Request(MISSING, training=TrainingOptions(grad_accum=0)), "--grad-accum 0: give a whole"),
    (Request(MISSING, training=TrainingOptions(optimizer="lion")),  # type: ignore[arg-type]
     "--optimizer lion: choose one of sgd, momentum, adam, adamw"),
    (Request(MISSING, training=TrainingOptions(amp="fp8")),  # type: ignore[arg-type]
     "--amp fp8: choose fp16 or bf16"),
    (Request(MISSING, batch=0), "--batch 0"),
    (Request(MISSING, dims={"seq": 1 << 30}), "--dim seq=1073741824"),
    (Request(MISSING, inputs=("2x3",)), "--input apply to PyTorch models"),
    (Request(MISSING, training=TrainingOptions(loss="l.py:f")), "--loss apply to PyTorch"),
    (Request(MISSING, gpu="t5"), "t5"),
    (Request(MISSING, runtime=RuntimeOptions(Runtime.ORT_CUDA)), "needs a GPU"),
    (Request(MISSING, training=TRAIN, runtime=RuntimeOptions(Runtime.ORT_CPU)),
     "--runtime ort-cpu models inference"),
    (Request(MISSING, runtime=RuntimeOptions(ort_optimization="max")),
     "--ort-optimization max: choose one of"),
    (Request(MISSING, runtime=RuntimeOptions(threads=0)), "--threads 0"),
    (Request(MISSING, distributed=DistributedConfig("ddp", 2)), "add --train"),
    (Request(MISSING, training=TRAIN, distributed=DistributedConfig("zero4", 2)),
     "--strategy zero4"),
    (Request(MISSING, training=TRAIN, distributed=DistributedConfig(
        "zero2", 2, zero=ZeroSettings(reduce_bucket_size=0))), "--reduce-bucket-size 0"),
    (Request(MISSING, training=TRAIN, kv_cache=KvCacheOptions(auto=True)),
     "--kv-cache is for inference"),
    (Request(MISSING, kv_cache=KvCacheOptions(shape=(2, 2, 1 << 30))), "implausibly large"),
    (Request(MISSING, kv_cache=KvCacheOptions(dtype="complex64")), "--kv-dtype complex64"),
    (Request(MISSING, suggest=SuggestOptions(True, budget_bytes=0, budget_text="0B")),
     "--memory-budget 0B: give a size above 0"),
    (Request(MISSING, suggest=SuggestOptions(True, budget_share=0.8, budget_text="80%")),
     "add --gpu NAME"),
    (Request(MISSING, pooled_heads=(PooledHead("fc", 49),)), "pooled_heads rewrite"),
    (Request(SPEC, batch=4), "--batch/--dim bind ONNX dims"),
    (Request(SPEC, sweep=SweepRequest("batch", (1, 2))), "--sweep varies a dynamic dim"),
    (Request(SPEC, inputs=("2x3",), example_inputs="x.py:f"), "either with --input"),
    (Request(SPEC, inputs=("2x0",)), "every dim must be 1 or more"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_options_are_refused_before_the_model_is_read(request_: Request, message: str) -> None:
    with pytest.raises(GraphmemError, match=None) as raised:
        request_.check()
    assert message in str(raised.value)


def test_a_good_request_passes_its_check_without_the_model() -> None:
    Request(MISSING, batch=8, dims={"seq": 64}, gpu="t4", training=TRAIN,
            runtime=RuntimeOptions(Runtime.TORCH_CUDA), distributed=DistributedConfig("fsdp", 8),
            suggest=SuggestOptions(True, budget_share=0.8)).check()


@pytest.mark.parametrize(("model", "torch"), [
    (MISSING, False), ("model.onnx", False), ("samples/tiny_cnn.onnx", False),
    (SPEC, True), ("pkg.mod:build", True), (object(), True)])
def test_is_torch(model: object, torch: bool) -> None:
    assert Request(model).is_torch is torch


def test_a_rerun_is_the_bare_analysis_with_the_change() -> None:
    full = Request(MISSING, gpu="t4", runtime=RuntimeOptions(), kv_cache=KvCacheOptions(),
                   distributed=DistributedConfig("ddp", 2), sweep=SweepRequest("batch", (1,)),
                   suggest=SuggestOptions(True), training=TRAIN)
    rerun = rerun_request(full, batch=4)
    assert rerun == replace(full, batch=4, plan=False, runtime=None, kv_cache=None,
                            distributed=None, sweep=None, suggest=SuggestOptions(False))


def test_closed_vocabularies_are_enums_equal_to_their_words() -> None:
    assert tuple(Strategy) == STRATEGIES
    assert tuple(Runtime) == RUNTIMES
    assert conventions.OPTIMIZERS == ("sgd", "momentum", "adam", "adamw") == tuple(Optimizer)
    assert tuple(Amp) == ("fp16", "bf16") == tuple(conventions.AMP_DTYPES)
    assert {kind.value for kind in SuggestionKind} == {
        "checkpoint", "inplace", "amp", "batch", "grad_accum", "fc_head", "grouped_conv"}


def test_training_conventions_are_defined_once() -> None:
    # the torch trace and the ONNX expansion use the very objects of core/conventions.py
    torch = pytest.importorskip("torch")
    from graphmem.frontends.torch import trace
    from graphmem.training import steps

    assert trace.STATE_SLOTS is conventions.STATE_SLOTS is steps.STATE_SLOTS
    assert steps.OPTIMIZERS is conventions.OPTIMIZERS
    assert {"fp16": torch.float16, "bf16": torch.bfloat16} == trace.AMP_DTYPES
    assert not hasattr(trace, "TrainConfig") and not hasattr(trace, "OPTIMIZERS")
