"""`graphmem check` on any model `analyze` takes, run as analyze's options say: a training
job's memory budgets read its most-loaded rank (the number analyze's verdict reads), a served
config's sequences budget reads the KV cache per layer type (graphmem/gate/check.py,
gate/options.py, gate/ranks.py, gate/sequences.py).

The layout is tests/helpers/llm_configs.TINY_LLAMA (2 layers, hidden 128) trained with AdamW
at TP = 2 x PP = 2, batch 1 x 16 tokens: stage 0 holds layer 0 and the embedding, stage 1
layer 1, the final norm and the output layer.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

import graphmem
from graphmem.distributed.parallel import ParallelLayout
from tests.helpers.cli import run_cli
from tests.helpers.llm_configs import DEEPSEEK_V2_LITE_DENSE, MISTRAL_7B, TINY_LLAMA, layers

pytestmark = pytest.mark.torch

TRAIN: dict[str, Any] = {"batch": 1, "dims": {"seq": 16}, "train": True, "optimizer": "adamw",
                         "tensor_parallel": 2, "parallel": ParallelLayout(pipeline=2)}
TRAIN_FLAGS = ["--train", "--optimizer", "adamw", "--tensor-parallel", "2",
               "--pipeline-parallel", "2"]


def config_folder(root: Path, name: str, config: dict[str, Any]) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return config_folder(tmp_path_factory.mktemp("configs"), "tiny-llama", TINY_LLAMA)


def test_max_memory_100_percent_passes_exactly_when_analyze_says_it_fits(llama: Path) -> None:
    # the device total is the most-loaded rank's tensors + allocator + context (the
    # --cuda-reserve plus the libraries' workspaces) + NCCL: with no reserve it is `fixed`;
    # a reserve of capacity - fixed makes it the T4's capacity to the byte (analyze: fits,
    # check: passes), one byte more (analyze: does not fit, check: fails)
    first = graphmem.analyze(str(llama), gpu="t4", cuda_reserve_bytes=0, **TRAIN)
    capacity, fixed = first.fit.capacity_bytes, int(first.fit.required_bytes)
    for reserve, fits in ((capacity - fixed, True), (capacity - fixed + 1, False)):
        report = graphmem.check_model(llama, gpu="t4", cuda_reserve_bytes=reserve,
                                      max_memory="100%", **TRAIN)
        (model,) = report.models
        (memory,) = model.results
        assert model.analysis.fit.fits is fits  # analyze's verdict, on the same run
        assert memory.passed is fits and report.passed is fits
        assert memory.value == int(model.analysis.fit.required_bytes) == capacity + (not fits)
        assert memory.limit == capacity
        # the number is the most-loaded pipeline rank's, and the message names that rank
        plan = model.analysis.distributed.plan
        top = plan.most_loaded
        rank = model.numbers.rank
        assert rank.stage == top.stage and rank.device_total_bytes == memory.value
        assert [r.most_loaded for r in rank.ranks] == [row is top for row in plan.rows]
        assert max(r.device_total_bytes for r in rank.ranks) == memory.value
        assert f"pipeline stage {top.stage} of stages 0-1" in memory.message
        assert "tensor-parallel shard 1/2" in memory.message


def test_the_brief_command_line_and_its_outputs(llama: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    # graphmem check config --gpu h100 --train --tensor-parallel 2 --pipeline-parallel 2
    # --input 1x16:int64 --max-memory 90%: the JSON's per_rank is the analysis's plan, the
    # JUnit and terminal carry it
    junit = tmp_path / "check.xml"
    code, out, _ = run_cli(["check", str(llama), "--gpu", "h100", *TRAIN_FLAGS, "--input",
                            "1x16:int64", "--max-memory", "90%", "--max-params", "1M",
                            "--json", "-", "--junit", str(junit)], capsys)
    assert code == 0
    (model,) = json.loads(out)["models"]
    memory = model["analysis"]["memory"]
    per_rank = model["per_rank"]
    assert per_rank["tensor_parallel"] == 2 and per_rank["pipeline_parallel"] == 2
    ranks = memory["ranks"]
    shared = memory["per_rank"]["device_total_bytes"] - memory["per_rank"]["total_bytes"]
    assert [r["device_total_bytes"] for r in per_rank["ranks"]] == [
        r["total_bytes"] + shared for r in ranks]
    top = next(r for r in ranks if r["most_loaded"])
    assert per_rank["most_loaded_stage"] == top["stage"]
    budget = {b["name"]: b for b in model["budgets"]}
    assert budget["peak memory"]["value"] == per_rank["device_total_bytes"] \
        == model["analysis"]["gpu"]["required_bytes"]
    # max_params stays the whole model's, and says so
    assert budget["parameters"]["value"] == model["analysis"]["params"]["count"]
    assert "the whole model's, not a rank's" in budget["parameters"]["message"]
    cases = ET.parse(junit).getroot().iter("testcase")
    assert all("most-loaded rank" in (case.findtext("system-out") or "") for case in cases)
    # a size one byte under the most-loaded rank's total fails (at it: the 90% run above)
    limit = per_rank["device_total_bytes"] - 1
    code, out, _ = run_cli(["check", str(llama), "--gpu", "h100", *TRAIN_FLAGS, "--input",
                            "1x16:int64", "--max-memory", f"{limit}B"], capsys)
    assert code == 1, out
    assert "per rank:" in out and "stage 0" in out and "stage 1" in out
    assert "FAIL  peak memory" in out
    # the headline's memory is the rank's total, the one-GPU step's peak named as such
    from graphmem.core.units import format_bytes

    headline = " ".join(out.splitlines()[0].split())
    assert (f"{format_bytes(per_rank['device_total_bytes'])} per GPU on the most-loaded rank"
            " (the whole step on one GPU: peak") in headline


def test_a_sliding_window_config_is_gated_on_its_windowed_kv(
        tmp_path: Path) -> None:
    # Mistral-7B's widths, 2 layers, sliding_window 4096, served by vLLM at 32,768 tokens:
    # per token 2 (K, V) x 2 layers x 8 KV heads x 128 x 2 B = 8,192 B; a sliding layer
    # keeps window - 1 + one 2,048-token step = 6,143 tokens: ceil(6,143 / 16) + 1 = 385
    # blocks of 16 x 4,096 B per layer: 2 x 385 x 65,536 = 50,462,720 B per sequence
    # (a full layer would keep 2,048 blocks: 268,435,456 B)
    mistral = config_folder(tmp_path, "mistral", layers(MISTRAL_7B, 2))
    report = graphmem.check_model(mistral, gpu="a100-80gb", min_sequences=100, context=32768)
    (model,) = report.models
    numbers = model.numbers
    assert numbers.serving_per_token_bytes == 8192
    assert numbers.serving_sequence_bytes == 50_462_720
    (group,) = numbers.serving_groups
    assert (group.label, group.layers, group.tokens) == ("sliding 4096", 2, 6143)
    plan = model.analysis.kv_cache.serving
    memory, sequences = model.results  # --gpu alone: the model must fit too
    assert memory.name == "peak memory" and memory.passed
    assert sequences.passed and sequences.value == plan.total_sequences
    # the sequences counted are the KV cache over the windowed sequence, in whole blocks
    assert plan.max_sequences == plan.num_blocks // 385
    assert "sliding 4096 x2" in sequences.message


def test_an_mla_config_is_gated_on_its_latent(tmp_path: Path) -> None:
    # DeepSeek-V2-Lite's attention, 2 layers: one latent of kv_lora_rank 512 +
    # qk_rope_head_dim 64 per token per layer, no separate V: 2 x 576 x 2 B = 2,304 B
    deepseek = config_folder(tmp_path, "deepseek", layers(DEEPSEEK_V2_LITE_DENSE, 2))
    report = graphmem.check_model(deepseek, gpu="h100", serve=True, context=4096,
                                  min_sequences=1)
    numbers = report.models[0].numbers
    assert numbers.serving_per_token_bytes == 2 * 576 * 2
    assert [g.label for g in numbers.serving_groups] == ["mla"]


def test_a_budgets_file_serves_a_config_with_fp8_kv(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # the file's keys are the API's keywords: serve, context, kv_dtype. fp8 holds a token of
    # Mistral's 2 sliding layers in half of bf16's 8,192 B: 2 x 2 x 8 x 128 x 1 B = 4,096 B,
    # a sequence 2 x 385 blocks x 16 x 2,048 B = 25,231,360 B
    config_folder(tmp_path, "mistral", layers(MISTRAL_7B, 2))
    (tmp_path / "graphmem.toml").write_text(
        '[[model]]\npath = "mistral"\ngpu = "a100-80gb"\nserve = "vllm"\nkv_dtype = "fp8"\n'
        'context = 32768\nmin_sequences = 100\n')
    code, out, _ = run_cli(["check", "--budgets", str(tmp_path / "graphmem.toml"), "--json",
                            "-"], capsys)
    assert code == 0
    kv = json.loads(out)["models"][0]["kv_cache"]
    assert (kv["per_token_bytes"], kv["sequence_bytes"], kv["context"]) == (4096, 25_231_360,
                                                                            32768)
    assert kv["layer_groups"] == [{"type": "sliding 4096", "layers": 2, "tokens": 6143,
                                   "bytes": 25_231_360}]
