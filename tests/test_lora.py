"""LoRA as peft builds it, frozen base weights, and Hugging Face's gradient checkpointing.

The adapters are checked three ways: trainable parameters by hand (and against peft itself
where it is installed), graphmem's trace of its own substitution against its trace of peft's
model, and a real CPU training step measured with PyTorch's profiler.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytest.importorskip("transformers")

import torch
from torch import nn

from graphmem import analyze
from graphmem.core.conventions import TrainingOptions
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.finetune import (
    FinetuneOptions,
    LoraOptions,
    parse_lora_spec,
)
from graphmem.frontends.torch.hf_config import build_hf_model
from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.frontends.torch.peft import fine_tuned
from graphmem.pipeline.request import Request
from graphmem.verify.runners.torch_runner import measure_step
from tests.helpers.cli import Run, assert_one_error_line
from tests.helpers.llm_configs import TINY_LLAMA

pytestmark = pytest.mark.torch

SPEC = [parse_tensor_spec("4x64:int64")]


def gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000,
                                      n_positions=256, use_cache=False))


def llama() -> nn.Module:
    return build_hf_model(TINY_LLAMA).module


def materialized(model: nn.Module) -> nn.Module:
    """The adapters fine_tuned made on the meta device, as real (random) parameters."""
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is not None and param.is_meta:
                module._parameters[name] = nn.Parameter(
                    torch.randn(param.shape, dtype=param.dtype) * 0.01,
                    requires_grad=param.requires_grad)
    return model


def test_trainable_parameters_by_hand() -> None:
    # peft's defaults for GPT-2: r=8 on c_attn (128 -> 384) in each of 2 layers:
    # 2 x 8 x (128 + 384) = 8,192 trainable; every base weight frozen
    model = gpt2()
    base = sum(p.numel() for p in model.parameters())
    with fine_tuned(model, FinetuneOptions(lora=LoraOptions()), "adam") as report:
        assert report is not None and report.lora is not None
        assert report.params.trainable == report.lora.adapter_params == 8_192
        assert report.params.total == base + 8_192
        assert report.params.frozen == base
        assert report.lora.targets == ("c_attn",)
        # Adam's two fp32 states of the adapters, all a paged optimizer could move
        assert report.pageable_optimizer_bytes == 2 * 8_192 * 4
        names = {name for name, p in model.named_parameters() if p.requires_grad}
    assert names == {f"transformer.h.{i}.attn.c_attn.lora_{ab}.default.weight"
                     for i in range(2) for ab in "AB"}


def test_llama_targets_by_hand() -> None:
    # r=16 on q_proj (128 -> 128) and v_proj (128 -> 64: 2 kv heads of 32) in 2 layers:
    # 2 x 16 x ((128 + 128) + (128 + 64)) = 14,336
    options = FinetuneOptions(lora=LoraOptions(rank=16, alpha=32, targets=("q_proj",
                                                                             "v_proj")))
    with fine_tuned(llama(), options, None) as report:
        assert report is not None and report.lora is not None
        assert report.params.trainable == 14_336
        assert report.lora.modules == 4 and report.lora.scaling == 2.0


def test_the_model_is_restored_after_the_trace() -> None:
    model = gpt2()
    before = [(name, p, p.requires_grad) for name, p in model.named_parameters()]
    layer = model.transformer.h[0].attn.c_attn
    with fine_tuned(model, FinetuneOptions(lora=LoraOptions(dropout=0.1)), "adam"):
        assert model.transformer.h[0].attn.c_attn is not layer
    assert model.transformer.h[0].attn.c_attn is layer
    assert [(name, p, p.requires_grad) for name, p in model.named_parameters()] == before


@pytest.mark.parametrize(("options", "fragment"), [
    (LoraOptions(targets=("no_such",)), "no module of the model has that name"),
    (LoraOptions(targets=("wte",)), "wte is a Embedding; graphmem models LoRA on Linear"),
])
def test_targets_that_cannot_be_adapted(options: LoraOptions, fragment: str) -> None:
    with pytest.raises(GraphmemError, match=fragment), fine_tuned(
            gpt2(), FinetuneOptions(lora=options), None):
        pass


def test_a_model_without_peft_defaults_needs_targets() -> None:
    model = nn.Sequential(nn.Linear(8, 8))
    with pytest.raises(GraphmemError, match="peft has no default target modules"), \
            fine_tuned(model, FinetuneOptions(lora=LoraOptions()), None):
        pass
    with fine_tuned(model, FinetuneOptions(lora=LoraOptions(targets=("0",))), None) as report:
        assert report is not None and report.params.trainable == 8 * (8 + 8)


@pytest.mark.parametrize(("text", "expected"), [
    ("", LoraOptions()),
    ("r=16,alpha=32,targets=q_proj,v_proj", LoraOptions(16, 32.0, 0.0, ("q_proj", "v_proj"))),
    ("targets=q_proj,k_proj,dropout=0.05", LoraOptions(targets=("q_proj", "k_proj"),
                                                      dropout=0.05)),
])
def test_the_lora_spec(text: str, expected: LoraOptions) -> None:
    assert parse_lora_spec(text) == expected


@pytest.mark.parametrize(("args", "fragment"), [
    (["--lora", "r=0"], "--lora r 0: give a whole number from 1"),
    (["--lora", "alpha=0"], "--lora alpha=0.0: give a number above 0"),
    (["--lora", "dropout=1"], "--lora dropout=1.0: give a probability"),
    (["--lora", "rank=two"], "--lora r=two: give a whole number"),
    (["--lora", "size=3"], "unknown key 'size'"),
    (["--lora", "q_proj"], "expected KEY=VALUE items"),
    (["--gradient-checkpointing"], "--gradient-checkpointing recomputes activations"),
])
def test_bad_lora_flags_are_one_error_line(run: Run, args: list[str], fragment: str) -> None:
    code, _, err = run("analyze", "tests/torch_models/small.py:mlp", "--no-html", *args)
    assert_one_error_line(code, err, fragment)


def test_onnx_models_take_no_lora(run: Run, mlp: object) -> None:
    code, _, err = run("analyze", str(mlp), "--no-html", "--lora")
    assert_one_error_line(code, err, "--lora/--qlora/--gradient-checkpointing change a PyTorch")


def test_the_api_and_the_command_line_build_the_same_request() -> None:
    from graphmem.api import build_request
    from graphmem.cli.analyze import request_from_args
    from graphmem.cli.main import build_parser

    args = build_parser().parse_args(["analyze", "cfg.py:fn", "--train", "--lora",
                                      "r=4,targets=q_proj", "--gradient-checkpointing"])
    assert request_from_args(args).finetune == build_request(
        "cfg.py:fn", train=True, lora="r=4,targets=q_proj",
        gradient_checkpointing=True).finetune == FinetuneOptions(
        LoraOptions(rank=4, targets=("q_proj",)), None, True)


@pytest.mark.slow
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_a_lora_step_matches_a_real_cpu_step(dropout: float) -> None:
    # GPT-2 (2 layers) with LoRA on c_attn, c_proj and c_fc, Adam: the frozen base has no
    # gradients and no optimizer state; the adapters' inputs (and dropout masks) are saved.
    # Measured on this CPU (PyTorch's profiler): within 0.01% of graphmem; tolerance 5%.
    options = FinetuneOptions(lora=LoraOptions(rank=16, alpha=32, dropout=dropout,
                                               targets=("c_attn", "c_proj", "c_fc")))
    result = analyze(Request(gpt2(), tuple(SPEC), training=TrainingOptions(),
                             finetune=options, plan=False))
    adapters = result.breakdown["optimizer_state"]
    # r x (in + out) per layer: c_attn 16 x (128 + 384), attn.c_proj and mlp.c_fc/c_proj
    # 16 x (128 + 128) / 16 x (128 + 512) x 2: 65,536 fp32 parameters, 2 Adam states each
    assert adapters == 2 * 65_536 * 4
    real = gpt2()
    with fine_tuned(real, options, "adam"):
        measured = measure_step(materialized(real), SPEC, True, "adam")
    assert int(result.liveness.activation_peak_bytes) == pytest.approx(measured.peak_bytes,
                                                                        rel=0.05)


def _tiny_llama_fp32() -> tuple[dict[str, object], nn.Module]:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = {**TINY_LLAMA, "torch_dtype": "float32", "use_cache": False}
    settings = {k: v for k, v in config.items() if k not in ("model_type", "architectures")}
    torch.manual_seed(0)
    return config, LlamaForCausalLM(LlamaConfig(**settings))


@pytest.mark.slow
def test_gradient_checkpointing_wraps_what_hugging_face_wraps() -> None:
    # Hugging Face's gradient_checkpointing_enable(use_reentrant=False) and graphmem's
    # checkpointing of the layers it names run the same step: equal to the byte on this CPU.
    from graphmem.frontends.torch.checkpoint import checkpointed

    config, real = _tiny_llama_fp32()
    result = analyze(Request(config, tuple(SPEC), training=TrainingOptions(),
                             finetune=FinetuneOptions(gradient_checkpointing=True),
                             plan=False))
    assert result.training is not None
    paths = result.training.options.checkpoints
    assert paths == ("model.layers.0", "model.layers.1")
    with checkpointed(real, paths):
        ours = measure_step(real, SPEC, True, "adam")
    _, real = _tiny_llama_fp32()
    real.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert measure_step(real, SPEC, True, "adam").peak_bytes == ours.peak_bytes
    plain = analyze(Request(config, tuple(SPEC), training=TrainingOptions(), plan=False))
    assert result.breakdown.get("saved_activations", 0) < plain.breakdown["saved_activations"]


@pytest.mark.slow
def test_gradient_checkpointing_predicts_a_real_cpu_step() -> None:
    # Against the allocator's own peak (every allocation and free in time order): 5,436,428 B
    # measured on this CPU, in the optimizer step; the trace predicts 5,436,420 B there.
    # measure_step's tensor replay reads 6,190,024 B: it places the frees of a layer's
    # recomputation at the end of the autograd node whose saved tensor triggered it (they
    # happen inside that node's event), so it counts every recomputed tensor live at once.
    config, real = _tiny_llama_fp32()
    result = analyze(Request(config, tuple(SPEC), training=TrainingOptions(),
                             finetune=FinetuneOptions(gradient_checkpointing=True),
                             plan=False))
    real.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    measured = _allocator_peak_of_adam_step(real)
    assert int(result.liveness.activation_peak_bytes) == pytest.approx(measured, rel=0.05)


def _allocator_peak_of_adam_step(model: nn.Module) -> int:
    """Bytes above the step's start at the CPU allocator's peak over one Adam step (the
    profiler's raw allocation events), after a warm-up step made the optimizer state; the
    step as measure_step runs it (cross-entropy on zero targets, the logits held to the end).
    """
    from torch._C._profiler import _EventType

    from graphmem.frontends.torch.train_step import cross_entropy_loss

    ids = torch.randint(0, 1000, (4, 64))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)

    def step() -> None:
        output = model(ids)
        cross_entropy_loss(output).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del output

    step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as profile:
        step()
    sizes: list[tuple[int, int]] = []
    pending = list(profile.profiler.kineto_results.experimental_event_tree())
    while pending:
        node = pending.pop()
        if node.typed[0] == _EventType.Allocation:
            sizes.append((node.start_time_ns, node.typed[1].alloc_size))
        pending.extend(node.children)
    live = peak = 0
    for _, size in sorted(sizes, key=lambda event: event[0]):  # stable: tree order on ties
        live += size
        peak = max(peak, live)
    return peak


@pytest.fixture
def peft_model() -> Callable[[nn.Module, LoraOptions], nn.Module]:
    peft = pytest.importorskip("peft")

    def build(model: nn.Module, options: LoraOptions) -> nn.Module:
        config = peft.LoraConfig(r=options.rank, lora_alpha=options.alpha,
                                 lora_dropout=options.dropout,
                                 target_modules=list(options.targets) or None)
        return peft.get_peft_model(model, config)

    return build


@pytest.mark.slow
@pytest.mark.parametrize(("build", "options"), [
    (gpt2, LoraOptions()),
    (llama, LoraOptions(rank=16, alpha=32, dropout=0.05, targets=(
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))),
], ids=["gpt2-defaults", "llama-all-linear"])
def test_as_peft_builds_it(peft_model: Callable[[nn.Module, LoraOptions], nn.Module],
                           build: Callable[[], nn.Module], options: LoraOptions) -> None:
    # peft's own model: trainable and total parameters exact, and graphmem traces it to the
    # same step, byte for byte, as its own substitution
    with pytest.warns(UserWarning) if build is gpt2 else _nothing():  # Conv1D fan_in_fan_out
        reference = peft_model(build(), options)
    trainable, total = reference.get_nb_trainable_parameters()
    with fine_tuned(build(), FinetuneOptions(lora=options), "adam") as report:
        assert report is not None
        assert (report.params.trainable, report.params.total) == (trainable, total)
    ours = analyze(Request(build(), tuple(SPEC), training=TrainingOptions(),
                           finetune=FinetuneOptions(lora=options), plan=False))
    theirs = analyze(Request(reference, tuple(SPEC), training=TrainingOptions(), plan=False))
    assert ours.liveness.activation_peak_bytes == theirs.liveness.activation_peak_bytes
    assert ours.params.count == theirs.params.count


def _nothing() -> object:
    import contextlib

    return contextlib.nullcontext()
