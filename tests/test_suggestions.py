"""Suggestions: every saving re-analysed (checkpointing, AMP), in-place candidates that are
safe and save what liveness says, FC heads, grouped convs, the CLI and JSON fields."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
import torch
from torch import nn

from graphmem import analyze_onnx, analyze_torch
from graphmem.cli.main import main
from graphmem.core.ir import Role
from graphmem.frontends.torch.checkpoint import checkpointed
from graphmem.passes.dims import value_bytes
from graphmem.pipeline.analysis import Analysis
from graphmem.suggest.candidates import forward_nodes
from graphmem.suggest.cards import Suggestion, graph_report
from graphmem.suggest.inplace import find_inplace
from tests.builders import GraphBuilder, sizes_of
from tests.helpers.torch_nets import MLP
from tests.onnx_builders import mlp_model

MIB = 1 << 20


def kinds(analysis: Analysis, kind: str) -> list[Suggestion]:
    assert analysis.suggestions is not None
    return [s for s in analysis.suggestions.suggestions if s.kind == kind]


# ----- checkpointing and AMP: re-analysis consistency ----------------------------------------


@pytest.fixture(scope="module")
def mlp_suggested() -> tuple[MLP, Analysis, int]:
    model = MLP(width=64, depth=4)
    base = analyze_torch(model, [(1024, 64)], train=True, optimizer="adam", suggest=False)
    # each block saves 2 * 1024 * 256 * 4 = 2 MiB to a first order (GELU's and the second
    # Linear's inputs): a budget 5 MiB under the peak needs three blocks checkpointed
    budget = int(base.liveness.peak_bytes) - 5 * MIB
    suggested = analyze_torch(model, [(1024, 64)], train=True, optimizer="adam", suggest=True,
                              memory_budget_bytes=budget)
    return model, suggested, budget


@pytest.mark.slow
@pytest.mark.torch
def test_checkpoint_suggestion_matches_a_fresh_analysis(
        mlp_suggested: tuple[MLP, Analysis, int]) -> None:
    model, suggested, budget = mlp_suggested
    (card,) = kinds(suggested, "checkpoint")
    # equal FLOPs for any three blocks: the earliest three win the tie
    assert card.targets == ("blocks.0", "blocks.1", "blocks.2")
    with checkpointed(model, card.targets):
        fresh = analyze_torch(model, [(1024, 64)], train=True, optimizer="adam", suggest=False)
    base_peak = int(suggested.liveness.peak_bytes)
    assert card.new_peak_bytes == int(fresh.liveness.peak_bytes) <= budget
    assert card.saves_bytes == base_peak - card.new_peak_bytes
    # three blocks' 2 MiB each: the re-analysed drop is the first-order 6 MiB here
    assert card.saves_bytes == 6 * MIB
    assert card.extra_flops == int(fresh.costs.total_flops) - int(suggested.costs.total_flops)
    assert card.extra_flops > 0
    assert card.snippet is not None and "use_reentrant=False" in card.snippet
    assert '"blocks.2"' in card.snippet
    report = suggested.suggestions
    assert report is not None and report.budget_bytes == budget
    # the curve: the unchanged step first, peaks falling as recomputation grows
    curve = report.checkpoint_curve
    assert curve[0].modules == () and curve[0].peak_bytes == base_peak
    assert [p.peak_bytes for p in curve] == sorted((p.peak_bytes for p in curve), reverse=True)


@pytest.mark.torch
@pytest.mark.slow
def test_amp_suggestion_is_the_difference_of_two_analyses(
        mlp_suggested: tuple[MLP, Analysis, int]) -> None:
    model, suggested, _ = mlp_suggested
    (card,) = kinds(suggested, "amp")
    bf16 = analyze_torch(model, [(1024, 64)], train=True, optimizer="adam", amp="bf16",
                         suggest=False)
    assert card.new_peak_bytes == int(bf16.liveness.peak_bytes)
    assert card.saves_bytes == int(suggested.liveness.peak_bytes) - int(bf16.liveness.peak_bytes)
    assert card.saves_bytes > 0


@pytest.mark.torch
def test_batch_and_accumulation_cards_are_reanalysed(
        mlp_suggested: tuple[MLP, Analysis, int]) -> None:
    model, suggested, budget = mlp_suggested
    largest = next(s for s in kinds(suggested, "batch") if "autocast" not in s.title)
    batch = int(largest.title.rpartition(": ")[2])
    assert 0 < batch < 1024  # the budget is under today's peak
    assert largest.new_peak_bytes is not None and largest.new_peak_bytes <= budget
    over = analyze_torch(model, [(batch + 1, 64)], train=True, suggest=False)
    assert int(over.liveness.peak_bytes) > budget  # one more does not fit
    (accumulate,) = kinds(suggested, "grad_accum")
    micro = int(accumulate.title.split()[1])
    assert 1024 % micro == 0 and micro <= batch
    fresh = analyze_torch(model, [(micro, 64)], train=True, suggest=False)
    assert accumulate.new_peak_bytes == int(fresh.liveness.peak_bytes)


@pytest.mark.torch
def test_html_report_renders_the_cards_and_the_curve(
        mlp_suggested: tuple[MLP, Analysis, int], tmp_path: Path) -> None:
    _, suggested, _ = mlp_suggested
    path = tmp_path / "report.html"
    suggested.to_html(path)
    html = path.read_text()
    assert 'id="suggestions"' in html and 'id="checkpoint-table"' in html
    (card,) = kinds(suggested, "checkpoint")
    assert card.title in html and "use_reentrant=False" in html


# ----- in-place ------------------------------------------------------------------------------


def chain() -> GraphBuilder:
    """x (100 elems) -> Conv -> a (1000) -> Relu -> b (1000) -> Conv -> c (10) -> Relu -> d."""
    g = GraphBuilder()
    g.tensor("x", 100, Role.INPUT)
    g.node("conv1", ["x"], {"a": 1000}, "Conv")
    g.node("relu1", ["a"], {"b": 1000}, "Relu")
    g.node("conv2", ["b"], {"c": 10}, "Conv")
    g.node("relu2", ["c"], {"d": 10}, "Relu")
    return g


def test_inplace_saves_what_liveness_says_and_zero_off_the_peak() -> None:
    graph = chain().build(["d"])
    found = {c.node: c for c in find_inplace(graph, sizes_of(graph), graph.nodes)}
    # live bytes per step (x, 400 B, is resident): conv1 400 + 4000 = 4400; relu1 400 + 4000
    # + 4000 = 8400 (the peak); conv2 400 + 4000 + 40 = 4440; relu2 400 + 40 + 40 = 480.
    # relu1 in place: its step holds a once, 4400; the peak moves to conv2: 4440 (saves 3960)
    assert found["relu1"].input_name == "a"
    assert found["relu1"].new_peak_bytes == 4440
    assert found["relu1"].saves_bytes == 8400 - 4440
    # relu2 in place shrinks step relu2 only, which is not the peak: saves 0 at the peak
    assert found["relu2"].saves_bytes == 0 and found["relu2"].new_peak_bytes == 8400
    assert set(found) == {"relu1", "relu2"}  # convs have no in-place form


def test_inplace_ops_that_save_nothing_are_a_note_not_cards(tmp_path: Path) -> None:
    # tests/onnx_builders.mlp_model at batch 32: h, hb, r are 32*64*4 = 8192 B each; at the
    # Add h and hb are live, at the Relu hb and r: both steps hold 16384 B of activations. The
    # Add in place leaves the Relu's step at 16384, the Relu in place the Add's: each alone
    # saves 0 B at the 31,488 B peak, so neither is a card (a CNN listed 62 such Relus)
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    report = graph_report(analyze_onnx(path, batch=32), None)
    assert report.suggestions == ()
    assert report.notes == ("no in-place candidate saves memory here: 2 ops could run in place,"
                            " but running them so does not lower the peak",)


def test_inplace_refuses_inputs_read_later_saved_or_given() -> None:
    g = GraphBuilder()
    g.tensor("x", 100, Role.INPUT)
    g.node("relu0", ["x"], {"a": 100}, "Relu")  # x is a graph input: never overwritten
    g.node("relu1", ["a"], {"b": 100}, "Relu")  # a is read again by add: not in place
    g.node("sigmoid", ["b"], {"s": 100}, "Sigmoid")
    g.values["s"].role = Role.SAVED_ACTIVATION
    g.node("sub", ["s", "a"], {"c": 100}, "Sub")  # input 0 is saved for backward; a is
    g.node("add", ["a", "c"], {"e": 100}, "Add")  # operand 1 of Sub, which only writes input 0
    graph = g.build(["e"])
    found = {c.node: c.input_name for c in find_inplace(graph, sizes_of(graph), graph.nodes)}
    # sigmoid: b dies there; add: a and c both die there, a (operand 0) takes the result
    assert found == {"sigmoid": "b", "add": "a"}


class Gated(nn.Module):
    """ReLU/SiLU modules graphmem may flag, and one whose input is read again (`h * g`)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(32, 32)
        self.bn = nn.BatchNorm1d(32)
        self.act2 = nn.ReLU()
        self.gate = nn.ReLU()
        self.out = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act1(self.fc1(x))
        h = self.act2(self.bn(self.fc2(h)))
        g = self.gate(h)  # h is read again (and saved) by the product: not in place
        return self.out(h * g)


def gradients(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    model(x).square().sum().backward()
    return [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]


@pytest.mark.slow
@pytest.mark.torch
def test_inplace_candidates_are_safe_in_a_real_training_step() -> None:
    torch.manual_seed(0)
    model = Gated()
    analysis = analyze_torch(model, [(8, 16)], train=True, optimizer="sgd", suggest=False)
    # every candidate, those that save nothing at the peak too (they are a note, not cards)
    graph = analysis.graph
    flagged = {c.node for c in find_inplace(graph, value_bytes(graph, analysis.dims),
                                            forward_nodes(graph), analysis.dims.bound)}
    by_node = {n.name: n.module_path for n in graph.nodes}
    modules = {by_node[name] for name in flagged}
    # act1's input (fc1's output) dies at act1; act2's input is BatchNorm's output, not saved
    # (BatchNorm saves its input): both flagged. gate's input h is read again by h * g
    assert {"act1", "act2"} <= modules and "gate" not in modules
    x = torch.randn(8, 16)
    reference = gradients(model, x)
    for path in ("act1", "act2"):
        model.get_submodule(path).inplace = True  # type: ignore[union-attr]
    # autograd's version counters would raise if a flagged op overwrote a saved tensor
    for got, want in zip(gradients(model, x), reference, strict=True):
        torch.testing.assert_close(got, want)
    model.gate.inplace = True  # the unflagged one: h * g saved h, which gate would overwrite
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        gradients(model, x)


# ----- layer hints: FC head, grouped convs ----------------------------------------------------


class VggLike(nn.Module):
    """conv features [N, 64, 7, 7] flattened into a 3136 -> 256 FC layer, as VGG's fc6."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(7))
        self.fc6 = nn.Linear(64 * 7 * 7, 256)
        self.fc7 = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc7(torch.relu(self.fc6(self.features(x).flatten(1))))


class VggPooled(VggLike):
    """VggLike rewritten as suggested: fc6 reads the global average of each channel."""

    def __init__(self) -> None:
        super().__init__()
        self.fc6 = nn.Linear(64, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.features(x).flatten(1).unflatten(-1, (-1, 49)).mean(-1)
        return self.fc7(torch.relu(self.fc6(pooled)))


@pytest.mark.torch
def test_fc_head_on_a_vgg_like_model_is_a_fresh_analysis_of_the_pooled_model() -> None:
    analysis = analyze_torch(VggLike(), [(2, 3, 14, 14)], train=True, optimizer="adam",
                             suggest=True)
    (card,) = kinds(analysis, "fc_head")
    assert card.targets == ("fc6",)
    # params: conv 3*64*9 + 64 = 1,792; fc6 3136*256 + 256 = 803,072; fc7 2,570: fc6's weight
    # is 802,816 / 807,434 = 99% of them
    assert card.title == "fc6: 99% of all parameters"
    pooled = analyze_torch(VggPooled(), [(2, 3, 14, 14)], train=True, optimizer="adam",
                           suggest=False)
    assert card.new_peak_bytes == int(pooled.liveness.peak_bytes)
    assert card.saves_bytes == int(analysis.liveness.peak_bytes) - card.new_peak_bytes
    # GAP divides the weight by 7*7: 3,211,264 B - 3,211,264 / 49 = 3,145,728 B less per
    # copy. The peak is in Adam's update, where the weight, its gradient, two states and
    # the update's temporaries of its size are live: 4 copies (12,582,912 B) and more; the
    # re-trace says 15,518,760 B on torch 2.13, under 5 copies (15,728,640 B)
    assert 4 * 3_145_728 <= card.saves_bytes <= 5 * 3_145_728
    assert card.extra_flops is not None and card.extra_flops < 0  # a smaller matmul


@pytest.mark.torch
def test_fc_head_saving_at_inference_is_the_weight_bytes() -> None:
    # inference: the weight is resident through the peak, so shrinking it 49 times lowers the
    # peak by exactly 3,211,264 - 3,211,264 / 49 = 3,145,728 bytes (liveness re-run)
    analysis = analyze_torch(VggLike(), [(2, 3, 14, 14)], suggest=True)
    (card,) = kinds(analysis, "fc_head")
    assert card.saves_bytes == 3_145_728


@pytest.mark.torch
def test_fc_head_not_flagged_after_global_pooling() -> None:
    # ConvNet-like head: mean over H, W then Linear(8 -> 10): nothing to shrink
    from tests.torch_models.small import ConvNet

    analysis = analyze_torch(ConvNet(), [(2, 3, 8, 8)], suggest=True)
    assert kinds(analysis, "fc_head") == []


class MobileLike(nn.Module):
    """Expand 1x1 -> depthwise 3x3 (groups = channels) -> project 1x1, twice."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(
            nn.Conv2d(16, 64, 1), nn.ReLU6(), nn.Conv2d(64, 64, 3, padding=1, groups=64),
            nn.ReLU6(), nn.Conv2d(64, 16, 1)) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x).mean((2, 3))


@pytest.mark.torch
def test_grouped_convs_on_a_mobilenet_like_model() -> None:
    analysis = analyze_torch(MobileLike(), [(2, 16, 8, 8)], train=True, optimizer="sgd",
                             suggest=True)
    (card,) = kinds(analysis, "grouped_conv")
    assert card.targets == ("blocks.0.2", "blocks.1.2")  # the depthwise ones only
    # depthwise FLOPs: 2 * (N*C*H*W*9) = 2 * 2*64*8*8*9 = 147,456 each; the 1x1 convs:
    # 2 * 2*64*8*8*16 = 262,144 each (expand and project): 2 * 147,456 / total FLOPs
    share = 2 * 147_456 / int(analysis.costs.total_flops)
    assert card.title.startswith(f"2 grouped/depthwise convs: {share:.1%} of FLOPs")
    # each depthwise output, [2, 64, 8, 8] fp32 = 32 KiB, is saved for backward (ReLU6's
    # input is saved: hardtanh's backward reads it)
    assert card.title.endswith("64.0 KiB saved for backward")


# ----- CLI and JSON --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.torch
def test_cli_suggest_writes_the_json_fields(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", "tests/torch_models/small.py:ConvNet", "--input", "16x3x32x32",
                 "--train", "--memory-budget", "1MiB", "--no-html", "--json", "-"])
    assert code == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["suggestion_budget"]["budget_bytes"] == MIB
    assert data["suggestion_budget"]["base_peak_bytes"] == data["memory"]["peak_bytes"]
    fields = {"kind", "title", "targets", "saves_bytes", "new_peak_bytes", "extra_flops",
              "extra_time_s", "snippet", "note"}
    assert data["suggestions"] and all(set(s) == fields for s in data["suggestions"])
    assert {"checkpoint", "amp", "batch"} <= {s["kind"] for s in data["suggestions"]}
    assert data["checkpoint_curve"][0]["modules"] == []
    assert "largest saving: " in captured.err  # the summary's advice; the table: --verbose


def test_cli_suggest_on_an_onnx_training_graph(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", "samples/tiny_cnn.onnx", "--batch", "4", "--train", "--suggest",
                 "--no-html", "--json", "-"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    # no budget: checkpointing only draws its curve (tests/test_onnx_checkpoint.py has cards)
    assert all(s["kind"] in ("amp", "inplace", "fc_head", "grouped_conv")
               for s in data["suggestions"])
    assert data["checkpoint_curve"][0]["extra_flops"] == 0
    # AMP: the training graph rebuilt under autocast and analysed again
    (amp,) = [s for s in data["suggestions"] if s["kind"] == "amp"]
    bf16 = analyze_onnx("samples/tiny_cnn.onnx", batch=4, train=True, amp="bf16")
    assert amp["new_peak_bytes"] == int(bf16.liveness.peak_bytes)
    assert amp["saves_bytes"] == data["memory"]["peak_bytes"] - amp["new_peak_bytes"] > 0


def test_cli_budget_share_needs_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", "samples/tiny_cnn.onnx", "--batch", "4", "--memory-budget", "80%",
                 "--no-html"])
    assert code == 2
    assert "add --gpu NAME" in capsys.readouterr().err


# ----- measured: the suggested checkpointing applied to a real model on the CPU ---------------


def skip_batch_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch cards re-trace a dozen batch sizes; these tests only need the checkpoint."""
    import graphmem.suggest.driver

    monkeypatch.setattr(graphmem.suggest.driver, "batch_suggestions", lambda *_: [])


@pytest.mark.slow
@pytest.mark.torch
def test_checkpoint_snippet_measured_saving_matches_the_prediction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Predicted vs measured drop of the training step's peak, CPU profiler memory tracking.

    MLP(width 128, depth 4) at batch 1024 with Adam, budget 7 MiB under the peak. On torch
    2.13 CPU graphmem checkpoints blocks.0 and blocks.1 and predicts an 8,388,608 B drop
    (4 MiB each: GELU's and the second Linear's [1024, 512] fp32 inputs); the profiler
    measured 21,280,304 -> 12,901,808 B, a drop of 8,378,496 B: 0.12% apart. Tolerance: 2% of
    the predicted saving (the allocator's and profiler's bookkeeping of small tensors).
    """
    from torch.utils.checkpoint import checkpoint

    from graphmem.frontends.torch.loader import TensorSpec
    from graphmem.verify.runners.torch_runner import measure_step

    skip_batch_search(monkeypatch)
    specs = [TensorSpec((1024, 128), torch.float32)]
    torch.manual_seed(0)
    model = MLP(width=128, depth=4)
    base = analyze_torch(model, specs, train=True, optimizer="adam", suggest=False)
    budget = int(base.liveness.peak_bytes) - 7 * MIB
    suggested = analyze_torch(model, specs, train=True, optimizer="adam", suggest=True,
                              memory_budget_bytes=budget)
    (card,) = kinds(suggested, "checkpoint")
    assert card.saves_bytes is not None and card.new_peak_bytes is not None
    assert card.new_peak_bytes <= budget

    before = measure_step(model, specs, train=True, optimizer="adam").peak_bytes
    for path in card.targets:  # the snippet's change, on the real model
        module = model.get_submodule(path)
        module.forward = functools.partial(checkpoint, module.forward, use_reentrant=False)
    after = measure_step(model, specs, train=True, optimizer="adam").peak_bytes
    measured_saving = before - after
    assert measured_saving == pytest.approx(card.saves_bytes, rel=0.02)


def raw_profiler_peak(step: Callable[[], None]) -> int:
    """Peak of every allocation and free the CPU profiler recorded, each at its own time.

    measure_step replays memory per op, placing the frees inside an op at its end; where
    backward recomputes a checkpointed module its transient frees fall inside one autograd
    node, which overstates that peak. The raw events have no such attribution.
    """
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as profile:
        step()
    events = sorted((e.start_ns(), e.nbytes())
                    for e in profile.profiler.kineto_results.events()  # type: ignore[union-attr]
                    if e.name() == "[memory]")
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


@pytest.mark.slow
@pytest.mark.torch
def test_checkpoint_saving_measured_on_an_attention_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """TinyGPT (2 pre-LN attention blocks) at 32 x 64 tokens, Adam, budget 12 MiB.

    On torch 2.13 CPU graphmem checkpoints blocks.0 and predicts a 6,066,176 B drop; the raw
    profiler events measured 16,474,648 -> 10,413,528 B, a drop of 6,061,120 B: 0.08% apart.
    Tolerance: 2% of the predicted saving.
    """
    from torch.utils.checkpoint import checkpoint

    from graphmem.frontends.torch.loader import TensorSpec
    from graphmem.frontends.torch.trace import cross_entropy_loss
    from tests.torch_models.small import TinyGPT

    skip_batch_search(monkeypatch)
    torch.manual_seed(0)
    model = TinyGPT()
    specs = [TensorSpec((32, 64), torch.int64)]
    suggested = analyze_torch(model, specs, train=True, optimizer="adam", suggest=True,
                              memory_budget_bytes=12 * MIB)
    (card,) = kinds(suggested, "checkpoint")
    ids = torch.randint(0, 100, (32, 64))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)

    def step() -> None:
        output = model(ids)  # held through backward, as graphmem traces the step
        cross_entropy_loss(output).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up: Adam's state exists from now on
    before = raw_profiler_peak(step)
    for path in card.targets:
        module = model.get_submodule(path)
        module.forward = functools.partial(checkpoint, module.forward, use_reentrant=False)
    after = raw_profiler_peak(step)
    assert before - after == pytest.approx(card.saves_bytes, rel=0.02)
