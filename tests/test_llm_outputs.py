"""An LLM's fine-tuning and serving in every output: terminal, JSON and HTML say the same.

- QLoRA: one parameter count (the model's, NF4 weights by their elements), the NF4 weights
  listed by type in `params.quantized`, the fine-tuning report on the Analysis
  (`model.finetune`);
- --serve: the verdict is the serving plan's (one sequence at the context fits the engine's
  budget, or not), and the longest context has one answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from graphmem.devices.gpus import find_gpu
from graphmem.distributed.serving import (
    CacheShape,
    ServingConfig,
    ServingInputs,
    ServingReport,
    StepPeak,
    one_sequence_bytes,
    plan_serving,
    serving_fit,
)
from graphmem.frontends.torch.finetune import (
    FinetuneReport,
    HfSummary,
    LoraSummary,
    MoeSummary,
    Nf4Summary,
    ParamCounts,
)
from graphmem.frontends.torch.nf4 import nf4_bytes
from graphmem.passes.fit import fit_on_gpu
from graphmem.passes.params import (
    PackedWeights,
    ParamReport,
    QuantizedParams,
    with_packed_weights,
)
from graphmem.report.html.llm import finetune_rows, serving_rows
from graphmem.report.terminal.llm import finetune_lines, serving_lines, serving_verdict
from tests.helpers.cli import Run
from tests.helpers.llm_configs import TINY_LLAMA


# ----- the serving verdict, by hand ------------------------------------------------------------
def _plan(context: int, capacity_bytes: int = 1_000_000) -> ServingReport:
    # 2 layers x 2 KV heads x 16 head dim x 2 B, K and V: 2 x 2 x 2 x 16 x 2 = 256 B per token
    cache = CacheShape(layers=2, kv_heads=2, head_dim=16, dtype="float16", dtype_bytes=2)
    return plan_serving(ServingInputs(
        config=ServingConfig(context=context, enforce_eager=True), cache=cache, gpu_name="t4",
        capacity_bytes=capacity_bytes, cuda_context_bytes=50_000, weights_bytes=550_000,
        steps=(StepPeak("analyzed step", {}, 100_000),), position_limit=4096,
        position_limit_source="--max-context"))


def test_the_serving_verdict_is_one_sequence_in_the_budget() -> None:
    # vLLM 0.33 without CUDA graphs (--enforce-eager): requested = ceil(1,000,000 x 0.9) =
    # 900,000; KV cache = 900,000 - 550,000 weights - 100,000 step = 250,000 B (the 50,000 B
    # context is outside the requested memory); blocks of 16 x 256 = 4,096 B: 250,000 // 4,096
    # = 61 blocks. 512 tokens = 32 blocks: 61 // 32 = 1 sequence; one sequence needs 650,000
    # + 32 x 4,096 = 781,072 B <= 900,000: fits. What the engine then holds is the context
    # and the whole pool it allocates at start: 700,000 + 61 x 4,096 = 949,856 B
    fits = _plan(512)
    assert (fits.num_blocks, fits.blocks_per_sequence, fits.max_sequences) == (61, 32, 1)
    assert one_sequence_bytes(fits) == 781_072
    fit = serving_fit(fit_on_gpu(find_gpu("t4"), _symint(1)), fits)
    assert fit.fits is True and int(fit.required_bytes) == 949_856
    assert fit.limit_bytes == 950_000  # the budget and the context outside it
    assert fit.utilization == pytest.approx(949_856 / 1_000_000)
    assert sum(int(part.size_bytes) for part in fit.parts) == 949_856
    # 1,024 tokens = 64 blocks > 61: not one sequence; it needs 650,000 + 262,144 = 912,144 B
    short = _plan(1024)
    assert short.max_sequences == 0 and one_sequence_bytes(short) == 912_144
    fit = serving_fit(fit_on_gpu(find_gpu("t4"), _symint(1)), short)
    # with the context 962,144 B, 96% of the GPU, 12,144 B over the engine's 90% and the
    # context: the verdict is the budget's
    assert fit.fits is False and fit.utilization == pytest.approx(0.962144)
    assert fit.over_bytes == 12_144
    assert "does NOT fit" in serving_verdict(short) and "fits" in serving_verdict(fits)


def _symint(value: int) -> object:
    from graphmem.core.symbolic import SymInt

    return SymInt.const(value)


# ----- NF4 weights in the parameter count, by hand -----------------------------------------------
def test_nf4_constants_by_element() -> None:
    # a 4,096 x 4,096 weight: 262,144 blocks of 64. Double quantization: 262,144 uint8 absmax,
    # 1,024 fp32 nested absmax (one per 256 blocks), 256 + 1 + 16 fp32 (dynamic map, offset,
    # NF4 table): 262,144 + 1,024 + 273 = 263,441 elements; without: 262,144 fp32 absmax + 16
    assert nf4_bytes(4096 * 4096).constant_elements(True) == 263_441
    assert nf4_bytes(4096 * 4096, double_quant=False).constant_elements(False) == 262_160


def test_packed_weights_count_by_their_elements() -> None:
    # a traced model: 1,000 bf16 parameters (2,000 B) and one NF4 weight of 4,096 elements
    # packed in 2,048 uint8 parameter elements, with 100 constant elements (300 B) of its
    # 120 buffer elements (400 B)
    report = ParamReport(count=3_048, bytes=4_048, buffer_count=120, buffer_bytes=400,
                         constant_bytes=0,
                         bytes_by_dtype={"bfloat16": 2_000, "uint8": 2_048})
    packed = PackedWeights("nf4", parameters=4_096, stored_count=2_048, stored_bytes=2_048,
                           constant_count=100, constant_bytes=300)
    counted = with_packed_weights(report, packed)
    assert counted.count == 1_000 + 4_096 and counted.bytes == 4_048  # bytes as stored
    assert counted.quantized == (QuantizedParams("nf4", 4_096, 2_048),)
    assert counted.bytes_by_dtype == {"bfloat16": 2_000, "nf4": 2_048}
    assert (counted.buffer_count, counted.buffer_bytes) == (20, 100)
    assert counted.quantization_bytes == 300


# ----- compact lines ---------------------------------------------------------------------------
def _llama3_8b_qlora() -> FinetuneReport:
    """Llama-3-8B with QLoRA at r=8 on q_proj, v_proj: the numbers of docs/llm-finetuning.md."""
    layout = nf4_bytes(6_979_321_856)  # one sum stands for the 224 weights: the size is all
    return FinetuneReport(
        params=ParamCounts(8_033_669_120, 3_407_872, 8_030_261_248, 6_979_321_856,
                           13_631_488, 5_702_540_160),
        hf=HfSummary("llama", "LlamaForCausalLM", "bfloat16", 8192, "sdpa"),
        lora=LoraSummary(8, 8.0, 0.0, ("q_proj", "v_proj"), 64, 3_407_872, "float32"),
        nf4=Nf4Summary(224, layout, "bfloat16", 64, True, 117_440_512, ("lm_head",)),
        moe=MoeSummary(8, 2, 45_097_156_608, 46_702_792_704, 12_879_921_152, 1, 1),
        checkpointed_layers=tuple(f"model.layers.{i}" for i in range(32)))


def _rendered(lines: list[str]) -> list[str]:
    console = Console(width=200, record=True, color_system=None)
    for line in lines:
        console.print(line)
    return console.export_text().splitlines()


def test_terminal_blocks_are_at_most_8_lines_of_80_columns() -> None:
    big = _plan(8192, capacity_bytes=85_899_345_920)
    for lines in (finetune_lines(_llama3_8b_qlora()), serving_lines(big)):
        text = _rendered(lines)
        assert 1 < len(text) <= 8
        assert max(map(len, text)) <= 80, text


def test_terminal_and_html_rows_say_the_same_numbers() -> None:
    report = _llama3_8b_qlora()
    terminal = "\n".join(_rendered(finetune_lines(report)))
    html = " ".join(f"{row.label} {row.value} {row.exact}" for row in finetune_rows(report))
    for number in ("8,033,669,120", "3,407,872", "8,030,261,248"):
        assert number in terminal and number in html
    plan = _plan(512)
    terminal = "\n".join(_rendered(serving_lines(plan)))
    html = " ".join(f"{row.label} {row.value} {row.exact}" for row in serving_rows(plan))
    for number in ("61", "32 blocks each", "512 tokens"):
        assert number in terminal and number in html


# ----- end to end: a tiny Llama from its config ------------------------------------------------
@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    return path


def _outputs(run: Run, tmp_path: Path, *args: str) -> tuple[str, dict, str]:
    json_path, html_path = tmp_path / "out.json", tmp_path / "out.html"
    code, out, err = run("analyze", *args, "--json", str(json_path), "--html", str(html_path))
    assert code == 0, err
    return (out, json.loads(json_path.read_text(encoding="utf-8")),
            html_path.read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.torch
def test_qlora_in_every_output(run: Run, tmp_path: Path, tiny_config: Path) -> None:
    pytest.importorskip("transformers")
    out, report, html = _outputs(run, tmp_path, str(tiny_config), "--train", "--qlora",
                                 "--gradient-checkpointing", "--batch", "1", "--dim", "seq=64")
    finetune = report["model"]["finetune"]
    assert finetune is not None
    # TINY_LLAMA: hidden 128, MLP 256, 4 heads of 32, 2 KV heads, 2 layers, vocab 1,000.
    # Linear weights per layer: q 128x128 + k, v 128x64 + o 128x128 + gate, up, down 128x256
    # = 16,384 + 2 x 8,192 + 16,384 + 3 x 32,768 = 147,456; 2 layers: 294,912 in NF4.
    # Base: 294,912 + embedding and head 2 x 128,000 + 5 norms x 128 = 551,552; LoRA r=8 on
    # q_proj (8 x (128 + 128)) and v_proj (8 x (128 + 64)) per layer: 2 x 3,584 = 7,168.
    params = report["params"]
    assert params["count"] == finetune["parameters"]["total"] == 551_552 + 7_168
    assert params["quantized"] == [{"dtype": "nf4", "count": 294_912, "bytes": 147_456}]
    # constants per weight: one uint8 absmax per 64 weights, fp32 nested absmax per 256 blocks,
    # the 256 x fp32 dynamic map, the fp32 offset, the 16 x fp32 NF4 table:
    # q, o: 256 + 4 + 1,024 + 4 + 64 = 1,352; k, v: 128 + 4 + 1,092 = 1,224;
    # gate, up, down: 512 + 8 + 1,092 = 1,612; per layer 2,704 + 2,448 + 4,836 = 9,988; x 2
    assert params["quantization_bytes"] == finetune["nf4"]["bytes"]["total"] - 147_456 == 19_976
    assert "uint8" not in params["bytes_by_dtype"]
    assert finetune["checkpointed_layers"] == ["model.layers.0", "model.layers.1"]
    for text in (out, html):
        assert "558,720" in text and "7,168" in text
        assert "model.layers.0 .. model.layers.1" in text
    assert "QLoRA: 14 modules in NF4" in out  # 7 linear modules per layer x 2 layers


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize(("share", "fits"), [("0.9", True), ("0.005", False)])
def test_serving_verdict_in_every_output(run: Run, tmp_path: Path, tiny_config: Path,
                                         share: str, fits: bool) -> None:
    pytest.importorskip("transformers")
    out, report, html = _outputs(run, tmp_path, str(tiny_config), "--serve", "--gpu", "t4",
                                 "--gpu-memory-utilization", share, "--batch", "1",
                                 "--dim", "seq=64")
    serving = report["memory"]["serving"]
    # 0.005 x 15 GiB = 77 MiB is less than vLLM's CUDA-graph estimate alone (51 graphs in two
    # modes at 1 MiB each beyond the first): no KV block at all
    assert (serving["max_sequences"] >= 1) is fits and report["gpu"]["fits"] is fits
    assert report["gpu"]["basis"].startswith("serving plan")
    assert report["memory"]["kv_cache"]["max_context"] == serving["max_context"]
    sequences = f"sequences of {serving['context']:,} tokens at once"
    assert sequences in html and (sequences in out or not fits)
    # every part of the plan's total is on the "on the GPU" block, the step's activations too
    # (they were hidden as if they were the live-tensor peak shown below it)
    assert sum(report["gpu"]["parts"].values()) == report["gpu"]["required_bytes"]
    assert "step activation peak" in out
    if fits:
        assert f"fits: {serving['total_sequences']:,} sequences" in out
        assert "does NOT fit" not in out and "does not fit" not in html
    else:
        assert out.count("does NOT fit") >= 2  # the plan's line and the GPU verdict line
        assert "does not fit: one 512-token sequence needs" in html


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize(("gpu", "tokens"), [("a100-80gb", 2048), ("h100", 8192)])
def test_serve_leads_with_the_plan_and_profiles_the_engines_step(
        tmp_path: Path, run: Run, gpu: str, tokens: int) -> None:
    """--serve's headline said one sequence's 17.4 GiB of 80 GiB while vLLM holds 72 GiB, the
    answer ("55 sequences") 25 lines down, under an 'assumed input' warning. The step traced
    is the one vLLM profiles: max_num_batched_tokens (2,048 on an A100, 8,192 on other GPUs
    of 70 GiB or more), stated as a note."""
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    out = tmp_path / "r.json"
    code, text, err = run("analyze", tmp_path, "--serve", "--gpu", gpu, "--context", "512",
                          "--no-html", "--json", out)
    assert code == 0, err
    data = json.loads(out.read_text())
    plan, verdict = data["memory"]["serving"], data["gpu"]
    pool = plan["num_blocks"] * plan["block_bytes"]
    assert verdict["required_bytes"] == (plan["weights_bytes"] + plan["activation_bytes"]
                                         + plan["cuda_graph_bytes"]
                                         + plan["cuda_context_bytes"] + pool)
    # vLLM 0.33: the CUDA context is outside the requested memory
    assert verdict["required_bytes"] <= plan["budget_bytes"] + plan["cuda_context_bytes"]
    words = " ".join(text.split())  # lines wrap at the console's width
    # the headline, not 25 lines down: the share of the GPU is the budget's and the context's
    share = f"{verdict['required_bytes'] / plan['capacity_bytes']:.1%}"
    assert (f"({share}); {plan['total_sequences']:,} sequences of 512 tokens at once"
            in words[:300])
    # TINY_LLAMA has 512 positions: the engine's step is capped there
    assert "input_ids 1x" not in text  # no "assumed input" warning
    assert f"1x{min(tokens, 512)}:int64" in words[:120]
