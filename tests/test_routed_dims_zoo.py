"""One answer for the zoo's mixtures of experts exported to ONNX (Mixtral, Qwen2-MoE, Phi-MoE: 2
layers, top-2 of 4 experts, toy widths; the TorchScript exporter the zoo uses; Phi-MoE's sparse
mixer chooses with two ArgMax, no TopK): the experts' token
counts are bound once by --moe-routing (graphmem/passes/routed_dims.py) and the live-tensor
peak, the FLOPs, the ort-cuda and ort-cpu runtime models (as written and onnxruntime's
optimized graph), the verdict and the largest batch all read them; each agrees with the same
analysis where the counts were given by hand at the loads the policy gives
(tests/test_routed_dims.py does the same on a one-layer graph)."""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from graphmem.api import Result, analyze_onnx
from graphmem.devices.gpus import find_gpu
from graphmem.pipeline.runtime import runtime_estimate
from tests.helpers.moe_onnx import by_hand, numbers
from tests.zoo_models import ZOO

pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.ort]

MOE = ("mixtral", "qwen2_moe", "phimoe")
EXPERTS, TOP_K, TOKENS = 4, 2, 2 * 16  # the zoo's configs; input_ids 2x16: 32 tokens


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("moe_onnx")


@functools.cache
def exported(name: str, folder: Path, dynamic: bool) -> Path:
    """The zoo model at input_ids 2x16, its batch axis dynamic where asked."""
    import torch

    from tests.helpers.zoo import built
    from tests.helpers.zoo_onnx import FirstTensor

    path = folder / f"{name}{'.dynamic' if dynamic else ''}.onnx"
    torch.manual_seed(0)
    model = FirstTensor(built(next(entry for entry in ZOO if entry.name == name))).eval()
    ids = torch.randint(0, 128, (2, 16))
    axes = {"input_ids": {0: "batch"}} if dynamic else None
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the exporter's deprecation and tracer notices
        torch.onnx.export(model, (ids,), str(path), dynamo=False, opset_version=18,
                          input_names=["input_ids"], output_names=["out"],
                          dynamic_axes=axes, external_data=False)
    return path


def ort_cpu_peaks(result: Result) -> list[int]:
    return [runtime_estimate(result, "ort-cpu", None, threads=1,
                             ort_optimization=level).runtime_peak_bytes
            for level in ("disabled", "all")]


@pytest.mark.parametrize(("routing", "load"), [
    ("balanced", TOKENS * TOP_K // EXPERTS),  # 32 tokens x top-2 over 4 experts: 16 each
    ("worst", TOKENS)])  # every expert at every token: 32 each
@pytest.mark.parametrize("name", MOE)
def test_every_number_reads_the_routed_counts(folder: Path, name: str, routing: str,
                                              load: int) -> None:
    path = exported(name, folder, False)
    routed = analyze_onnx(path, moe_routing=routing, gpu="t4")
    # 2 layers x 4 experts, each its router's i-th NonZero
    assert [(r.expert, r.size) for r in routed.dims.routed] == [
        (e, load) for _ in range(2) for e in range(EXPERTS)]
    assert routed.liveness.peak_bytes.is_constant
    given = by_hand(path, routed, [load] * EXPERTS * 2)
    assert numbers(routed) == numbers(given)
    assert ort_cpu_peaks(routed) == ort_cpu_peaks(given)


# one export here (the search re-runs the passes per probed batch, on the one imported graph);
# the other routers' counts are checked above and, for the search, on the one-layer graph of
# tests/test_routed_dims.py. All but 2 MiB of the T4 is reserved, so the largest batch is 65
# and the two searches (live tensors, device) re-run the passes 24 times
SMALL_T4 = {"gpu": "t4", "cuda_reserve_bytes": find_gpu("t4").capacity_bytes - 2 * 2**20}


@pytest.mark.parametrize("name", ["mixtral"])
def test_the_largest_batch_is_the_verdict_at_that_batch(folder: Path, name: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # batch dynamic: the counts follow it (batch x 16 tokens x 2 / 4 each). The model is
    # imported once, symbolic in the batch: every probe binds the counts again on that graph
    # (the experts' Flatten and OneHot are shaped symbolically, graphmem/frontends/onnx/
    # ort_rules.py; a NonZero count is no shape gap, passes/dims.py): 67 imports before
    from graphmem.frontends.onnx import runtime_inputs

    imports: list[object] = []
    real_import = runtime_inputs.import_onnx
    monkeypatch.setattr(runtime_inputs, "import_onnx", lambda path, input_dims=None, source=None: (
        imports.append(dict(input_dims or {})) or real_import(path, input_dims, source)))
    path = exported(name, folder, True)
    found = analyze_onnx(path, batch=2, **SMALL_T4).max_batch
    assert imports == [{}]
    assert found is not None and found.max_batch, found
    batch = found.max_batch
    at_max, at_next = (analyze_onnx(path, batch=b, **SMALL_T4) for b in (batch, batch + 1))
    base, extra = divmod(batch * 16 * TOP_K, EXPERTS)
    loads = [base + (e < extra) for e in range(EXPERTS)] * 2
    assert [r.size for r in at_max.dims.routed] == loads
    assert at_max.fit is not None and at_next.fit is not None
    assert (int(at_max.fit.required_bytes), int(at_next.fit.required_bytes)) == (
        found.peak_at_max_bytes, found.peak_at_next_bytes)
    assert at_max.fit.fits and not at_next.fit.fits
    assert at_max.liveness.peak_bytes.is_constant
    assert at_max.fit.live_peak_bytes == at_max.liveness.peak_bytes


def switch_encoder(folder: Path) -> Path:
    """Switch Transformers' encoder (2 sparse layers, top-1 ArgMax of 4 experts, a capacity
    mask on the one-hot: one-hot x (cumsum <= capacity)) at input_ids 2x16, TorchScript."""
    import torch
    import transformers

    from tests.helpers.zoo_onnx import FirstTensor

    path = folder / "switch.onnx"
    if path.exists():
        return path
    config = transformers.SwitchTransformersConfig(
        vocab_size=128, d_model=32, d_kv=8, d_ff=32, num_layers=2, num_sparse_encoder_layers=2,
        num_heads=4, num_experts=4, expert_capacity=64, decoder_start_token_id=0)
    torch.manual_seed(0)
    model = FirstTensor(transformers.SwitchTransformersEncoderModel(config)).eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randint(0, 128, (2, 16)),), str(path), dynamo=False,
                          opset_version=18, input_names=["input_ids"], output_names=["out"],
                          external_data=False)
    return path


@pytest.mark.parametrize("name", [*MOE, "switch"])
def test_at_the_runs_counts_the_prediction_is_onnxruntimes(folder: Path, name: str) -> None:
    # the routing is data: one onnxruntime run's NonZero counts (what its router chose for
    # verify's inputs, seed 0), given by --dim, make the ort-cpu prediction onnxruntime's
    # measured mem_in_use_peak to the byte, as written and optimized: what is left of the
    # balanced prediction's error is the routing, not a sizing rule (docs/zoo.md). Switch
    # (top-1 ArgMax, its capacity mask a Mul) was not looked at while the router was
    # generalized: 2 layers x 4 experts, 32 tokens x 1 / 4 = 8 each balanced
    from graphmem.passes.dims import count_dim
    from graphmem.verify.onnx_run import input_specs
    from graphmem.verify.runners.onnxruntime_runner import run_onnx
    from tests.helpers.zoo_onnx import run_counts

    path = switch_encoder(folder) if name == "switch" else exported(name, folder, False)
    balanced = analyze_onnx(path, plan=False)
    top_k = 1 if name == "switch" else TOP_K
    assert [(r.top_k, r.size) for r in balanced.dims.routed] == [
        (top_k, TOKENS * top_k // EXPERTS)] * 2 * EXPERTS  # the router is found
    counts = run_counts(path, folder)
    dims = {dim: counts[node.outputs[0].name] for node in balanced.graph.nodes
            if node.op_type == "NonZero" and (dim := count_dim(node.outputs[0]))}
    given = analyze_onnx(path, dims=dims, plan=False)
    runs = [run_onnx(path, input_specs(balanced), "cpu", level, 1).peak_bytes
            for level in ("disabled", "all")]
    assert ort_cpu_peaks(given) == runs
