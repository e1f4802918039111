"""The PyTorch front door: fake-tensor tracing, training steps, and real CPU measurements."""

from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from graphmem import analyze_torch
from graphmem.core.ir import Role
from graphmem.errors import GraphmemError
from graphmem.verify.runners.torch_runner import measure_step, random_inputs
from tests.torch_models.small import ConvNet, DataDependent, TinyGPT

MODELS_FILE = Path(__file__).parent / "torch_models" / "small.py"
CONV_INPUT = "16x3x32x32"
GPT_INPUT = "4x64:int64"
CONTRACTIONS = ("aten.convolution", "aten.mm", "aten.addmm", "aten.bmm",
                "aten.convolution_backward")


def role_bytes(analysis: object, role: Role) -> int:
    graph = analysis.graph  # type: ignore[attr-defined]
    return sum(int(v.nbytes) for v in graph.values.values()
               if v.role is role and v.alias_of is None)


@pytest.mark.torch
def test_parameter_counts_are_exact_and_tied_weights_count_once() -> None:
    for model, spec in ((ConvNet(), CONV_INPUT), (TinyGPT(), GPT_INPUT)):
        analysis = analyze_torch(model, [spec])
        # named_parameters() yields a shared tensor once, as torch counts parameters
        assert analysis.params.count == sum(p.numel() for p in model.parameters())
    gpt = TinyGPT()
    # 100*32 tokens (tied with the head) + 64*32 positions + 2 blocks + final norm
    assert analyze_torch(gpt, [GPT_INPUT]).params.count == 3200 + 2048 + 2 * 12704 + 64


@pytest.mark.torch
def test_nothing_is_materialized_for_a_model_built_from_a_spec() -> None:
    analysis = analyze_torch(f"{MODELS_FILE}:build_tiny_gpt", [GPT_INPUT])
    assert analysis.params.count == sum(p.numel() for p in TinyGPT().parameters())
    assert analysis.model.source_format == "torch.fx"


def torch_flops(model: torch.nn.Module, inputs: list[torch.Tensor], train: bool) -> int:
    counter = FlopCounterMode(display=False)
    with counter:
        if train:
            out = model(*inputs)
            out.float().pow(2).mean().backward()
        else:
            with torch.no_grad():
                model(*inputs)
    return counter.get_total_flops()


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize(("model_class", "spec"), [(ConvNet, CONV_INPUT), (TinyGPT, GPT_INPUT)])
@pytest.mark.slow
@pytest.mark.torch
def test_contraction_flops_match_flop_counter_mode(model_class: type, spec: str,
                                                   train: bool) -> None:
    torch.manual_seed(0)
    model = model_class()
    analysis = analyze_torch(model, [spec], train=train, optimizer="sgd" if train else None,
                             loss=lambda out: out.float().pow(2).mean())
    ours = sum(int(n.flops) for n in analysis.costs.nodes
               if n.op_type.rsplit(".", 1)[0] in CONTRACTIONS)
    from graphmem.frontends.torch.loader import parse_tensor_spec

    expected = torch_flops(model, random_inputs([parse_tensor_spec(spec)], "cpu"), train)
    # forward: convolution/addmm/bmm; training adds convolution_backward and the mm of
    # linear backward, exactly as FlopCounterMode counts them
    assert ours == pytest.approx(expected, rel=0.01)
    assert analysis.costs.unsupported_ops == {}


@pytest.mark.parametrize(
    ("train", "optimizer", "amp"),
    [(False, "adam", None), (True, "sgd", None), (True, "momentum", None), (True, "adam", None),
     (True, "adamw", None), (True, "adam", "bf16")],
)
@pytest.mark.parametrize(("model_class", "spec"), [(ConvNet, CONV_INPUT), (TinyGPT, GPT_INPUT)])
@pytest.mark.slow
@pytest.mark.torch
def test_predicted_peak_matches_a_real_cpu_step(model_class: type, spec: str, train: bool,
                                                optimizer: str, amp: str | None) -> None:
    if amp == "bf16" and model_class is ConvNet and not _cpu_has_native_bf16():
        pytest.skip("this CPU has no native bf16: oneDNN runs bf16 convolutions through fp32"
                    " scratch copies that are kernel internals, not graph tensors")
    # Measured: a real step of the same model on CPU, torch.profiler's memory deltas
    # replayed in time order, above what was allocated before the step (parameters,
    # optimizer state and inputs), so it compares with graphmem's activation peak.
    torch.manual_seed(0)
    analysis = analyze_torch(model_class(), [spec], train=train, optimizer=optimizer, amp=amp,
                             amp_policy="cpu")
    from graphmem.frontends.torch.loader import parse_tensor_spec

    measured = measure_step(model_class(), [parse_tensor_spec(spec)], train, optimizer, amp)
    predicted = int(analysis.liveness.activation_peak_bytes)
    # Tolerance 3%: CPU kernels' small scratch buffers (e.g. BatchNorm's per-channel
    # statistics in float64 on some paths) are not in the graph.
    assert predicted == pytest.approx(measured.peak_bytes, rel=0.03), (predicted, measured)


def _cpu_has_native_bf16() -> bool:
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@pytest.mark.parametrize(("optimizer", "state_copies"),
                         [("sgd", 0), ("momentum", 1), ("adam", 2), ("adamw", 2)])
@pytest.mark.torch
def test_the_seed_rules_hold_for_gradients_and_optimizer_state(optimizer: str,
                                                               state_copies: int) -> None:
    analysis = analyze_torch(ConvNet(), [CONV_INPUT], train=True, optimizer=optimizer)
    param_bytes = analysis.params.bytes
    # gradients = 1x parameters; SGD keeps no state, momentum 1x, Adam/AdamW 2x (fp32)
    assert role_bytes(analysis, Role.GRADIENT) == param_bytes
    assert role_bytes(analysis, Role.OPTIMIZER_STATE) == state_copies * param_bytes
    assert role_bytes(analysis, Role.SAVED_ACTIVATION) > 0


@pytest.mark.torch
def test_amp_keeps_fp32_masters_and_halves_saved_activations() -> None:
    fp32 = analyze_torch(ConvNet(), [CONV_INPUT], train=True)
    bf16 = analyze_torch(ConvNet(), [CONV_INPUT], train=True, amp="bf16")
    assert bf16.params.bytes == fp32.params.bytes  # master weights stay fp32
    assert role_bytes(bf16, Role.SAVED_ACTIVATION) < role_bytes(fp32, Role.SAVED_ACTIVATION)


@pytest.mark.torch
def test_nodes_carry_module_paths() -> None:
    analysis = analyze_torch(TinyGPT(), [GPT_INPUT])
    paths = {n.module_path for n in analysis.graph.nodes}
    assert {"blocks.0.qkv", "blocks.1.mlp.0", "lm_head"} <= paths


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("missing.py:build", "no such file"),
        (f"{MODELS_FILE}:nope", "has no 'nope'"),
        (f"{MODELS_FILE}:build_broken", "this builder always fails"),
        (f"{MODELS_FILE}:not_a_model", "not a torch.nn.Module"),
        ("no_such_package_xyz.models:build", "cannot import"),
    ],
)
def test_bad_model_specs_give_one_clear_error(spec: str, message: str) -> None:
    with pytest.raises(GraphmemError, match=message):
        analyze_torch(spec, ["2x3x8x8"])


@pytest.mark.torch
def test_data_dependent_control_flow_is_a_clear_error() -> None:
    with pytest.raises(GraphmemError, match="branches on tensor values"):
        analyze_torch(DataDependent(), ["2x4"])


@pytest.mark.torch
def test_an_input_the_model_rejects_is_a_clear_error() -> None:
    with pytest.raises(GraphmemError, match="rejected the example inputs"):
        analyze_torch(ConvNet(), ["2x5x8x8"])  # 5 channels into a 3-channel conv


@pytest.mark.torch
def test_a_tracing_error_is_one_line_and_debug_shows_the_cause(
        capsys: pytest.CaptureFixture[str]) -> None:
    from graphmem.cli.main import main

    argv = ["analyze", "tests/torch_models/small.py:ConvNet", "--input", "2x5x8x8", "--no-html"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("graphmem: error: tracing the model failed")
    assert "Traceback" not in err  # not even torch's own fake-tensor log
    assert main([*argv, "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("spec", "message"),
    [("2x0x3", "1 or more"), ("axb", "expected a shape"), ("2x3:float7", "unknown dtype")],
)
def test_bad_input_specs(spec: str, message: str) -> None:
    with pytest.raises(GraphmemError, match=message):
        analyze_torch(ConvNet(), [spec])


@pytest.mark.torch
def test_module_table_adds_up_and_attributes_parameters() -> None:
    model = ConvNet()
    analysis = analyze_torch(model, [CONV_INPUT], train=True, module_depth=1)
    assert analysis.modules is not None
    rows = {row.module: row for row in analysis.modules.rows}
    for name, module in model.named_children():
        assert rows[name].params == sum(p.numel() for p in module.parameters())
    assert sum(row.params for row in rows.values()) == analysis.params.count
    assert sum(int(row.flops) for row in rows.values()) == int(analysis.costs.total_flops)
    # backward convolutions are attributed to the conv whose weight they read
    assert int(rows["stem"].flops) > 0 and int(rows["conv"].flops) > int(rows["stem"].flops)


@pytest.mark.torch
def test_cli_analyzes_a_training_step_from_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from graphmem.cli.main import main

    code = main(["analyze", f"{MODELS_FILE}:build_convnet", "--input", "2x3x16x16", "--train",
                 "--optimizer", "momentum", "--amp", "bf16", "--grad-accum", "4", "--json", "-",
                 "--no-html"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["config"] == {"mode": "training", "schedule": "model order",
                                "optimizer": "momentum", "amp": "bf16", "grad_accum": 4,
                                "micro_batch": 2, "effective_batch": 8}
    assert {"saved_activations", "parameters"} <= set(result["memory"]["breakdown"])
    assert result["modules"]["rows"][0]["module"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "2x3x16x16", "--optimizer", "lion", "--train"], "choose one of"),
        (["--input", "2x3x16x16", "--grad-accum", "0", "--train"], "--grad-accum 0"),
        (["--batch", "4"], "--batch/--dim bind ONNX dims"),
        ([], "no example inputs"),
    ],
)
def test_cli_torch_usage_errors(args: list[str], message: str,
                                capsys: pytest.CaptureFixture[str]) -> None:
    from graphmem.cli.main import main

    code = main(["analyze", f"{MODELS_FILE}:build_convnet", "--no-html", *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


@pytest.mark.torch
def test_python_api(tmp_path: Path) -> None:
    import graphmem

    result = graphmem.analyze(ConvNet(), [torch.randn(2, 3, 16, 16)], train=True,
                              optimizer="adam")
    assert result.peak_bytes == int(result.liveness.peak_bytes)
    assert result.breakdown["optimizer_state"] == 2 * result.params.bytes
    result.to_json(tmp_path / "r.json")
    assert (tmp_path / "r.json").read_text().startswith("{")


@pytest.mark.torch
def test_a_failed_trace_leaves_no_annotation_behind() -> None:
    # The conv rejects 5 channels inside module `features.0`: the phase annotation unwinds
    # before the module hook's, which used to leave {phase: forward, module: ...} set in fx's
    # global metadata, labelling every node of the next trace.
    import torch.fx.traceback as fx_traceback

    def labels() -> tuple[dict, list[str]]:
        analysis = analyze_torch(ConvNet(), [CONV_INPUT], train=True, plan=False, suggest=False)
        return analysis.breakdown, [n.module_path for n in analysis.graph.nodes]

    before = labels()
    with pytest.raises(GraphmemError):
        analyze_torch(ConvNet(), ["2x5x8x8"], train=True)
    assert "custom" not in fx_traceback.current_meta
    assert labels() == before
