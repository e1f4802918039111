"""A Hugging Face config.json is a model: built on the meta device, counted, traced.

Parameter counts are the published ones, from the published config.json values
(tests/helpers/llm_configs.py); traced checks use the real widths with one or two layers.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from graphmem import analyze
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.hf_config import (
    build_hf_model,
    checkpointed_layers,
    default_input,
    moe_summary,
)
from graphmem.pipeline.request import Request
from tests.helpers.cli import Run, assert_one_error_line
from tests.helpers.llm_configs import (
    LLAMA3_8B,
    LLAMA3_70B,
    MISTRAL_7B,
    MIXTRAL_8X7B,
    QWEN2_0_5B,
    TINY_LLAMA,
    layers,
)

pytestmark = pytest.mark.torch


def counted(config: dict[str, Any]) -> int:
    """Parameters as the analysis counts them: each named parameter once (tied ones once)."""
    module = build_hf_model(config).module
    return sum(p.numel() for _, p in module.named_parameters())


@pytest.mark.slow
@pytest.mark.parametrize(("config", "published"), [
    (LLAMA3_8B, 8_030_261_248), (MISTRAL_7B, 7_241_732_096),
    (MIXTRAL_8X7B, 46_702_792_704), (QWEN2_0_5B, 494_032_768),
    (LLAMA3_70B, 70_553_706_496),
], ids=["llama3-8b", "mistral-7b", "mixtral-8x7b", "qwen2-0.5b", "llama3-70b"])
def test_published_parameter_counts(config: dict[str, Any], published: int) -> None:
    assert counted(config) == published


def test_tied_embeddings_count_once() -> None:
    # Qwen2-0.5B ties lm_head to embed_tokens: 151,936 x 896 = 136,134,656 counted once.
    tied = layers(QWEN2_0_5B, 1)
    untied = {**tied, "tie_word_embeddings": False}
    assert counted(untied) - counted(tied) == 151_936 * 896


@pytest.mark.slow
def test_traced_parameters_and_flops_at_llama3_widths() -> None:
    # One Llama-3-8B layer at its real widths, traced:
    #   embed + lm_head: 2 x 128,256 x 4,096                    = 1,050,673,152
    #   q, o: 2 x 4,096^2; k, v: 2 x 4,096 x 1,024 (8 kv heads) =    41,943,040
    #   gate, up, down: 3 x 4,096 x 14,336                      =   176,160,768
    #   two RMSNorms in the layer, one at the end: 3 x 4,096    =        12,288
    #   total                                                   = 1,268,789,248
    result = analyze(Request(layers(LLAMA3_8B, 1), dims={"seq": 128}, plan=False))
    assert result.params.count == 1_268_789_248
    assert result.model.name == "LlamaForCausalLM"
    # the matmuls: 2 FLOPs per weight per token, 128 tokens, every weight but the embedding:
    # 2 x 128 x (1,268,789,248 - 525,336,576 - 12,288) = 190,316,625,920; attention scores
    # and elementwise ops come on top
    assert int(result.costs.total_flops) > 190_316_625_920


def test_a_config_names_its_inputs_and_says_what_it_assumed() -> None:
    module = build_hf_model(TINY_LLAMA).module
    spec, note = default_input(module, None, None)
    # no --batch, no --dim seq=: batch 1, seq min(2048, max_position_embeddings 512)
    assert spec.shape == (1, 512)
    assert "assumed (batch 1, seq 512)" in note
    spec, note = default_input(module, 4, 64)
    assert spec.shape == (4, 64) and "assumed" not in note
    with pytest.raises(GraphmemError, match="max_position_embeddings is 512"):
        default_input(module, 1, 513)


def test_batch_and_seq_bind_input_ids_and_are_spent() -> None:
    result = analyze(TINY_LLAMA, batch=2, dims={"seq": 32}, plan=False)
    assert tuple(int(d) for d in result.graph.inputs[0].shape) == (2, 32)
    # given, not assumed: a note (shown with --verbose), not a warning
    assert "input_ids 2x32:int64" in result.model.notes[1]
    assert not any("input_ids" in warning for warning in result.model.warnings)
    assumed = analyze(TINY_LLAMA, dims={"seq": 32}, plan=False)
    assert any("assumed (batch 1)" in warning for warning in assumed.model.warnings)


@pytest.mark.slow
def test_the_config_folder_and_file_are_the_same_model(tmp_path: Path, run: Run) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    for model in (tmp_path, tmp_path / "config.json"):
        code, out, _ = run("analyze", str(model), "--dim", "seq=16", "--no-html", "--json", "-")
        assert code == 0
        report = json.loads(out[out.index("{"):])
        assert report["model"]["name"] == "LlamaForCausalLM"
        assert report["params"]["count"] == counted(TINY_LLAMA)


@pytest.mark.slow
def test_the_report_is_named_after_the_model_folder(tmp_path: Path, run: Run,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "Llama-tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    monkeypatch.chdir(tmp_path)
    code, _, _ = run("analyze", str(folder), "--dim", "seq=16")
    assert code == 0
    assert (tmp_path / "Llama-tiny.graphmem.html").exists()


def test_mixture_of_experts_active_parameters_and_flops() -> None:
    # Mixtral-8x7B: each layer's experts hold 8 x 3 x 4,096 x 14,336 = 1,409,286,144
    # parameters; 32 layers: 45,097,156,608; one expert of all layers: 5,637,144,576.
    # A token runs 2 of 8: active = 46,702,792,704 - 6 x 5,637,144,576 = 12,879,925,248
    # (Mistral AI's "12.9B active").
    moe = moe_summary(build_hf_model(MIXTRAL_8X7B).module)
    assert moe is not None
    assert (moe.experts, moe.experts_per_token) == (8, 2)
    assert moe.expert_params == 45_097_156_608
    assert moe.active_params_per_token == 12_879_925_248
    # weight FLOPs per token: 2 per weight, all but the 32,000 x 4,096 embedding and the
    # 65 RMSNorm vectors of 4,096: 2 x (46,702,792,704 - 131,072,000 - 266,240)
    assert moe.flops_per_token_total == 93_142_908_928
    assert moe.flops_per_token_active == 93_142_908_928 - 2 * 33_822_867_456
    assert moe_summary(build_hf_model(layers(LLAMA3_8B, 1)).module) is None


@pytest.mark.slow
def test_mixtral_routing_traces_as_transformers_runs_it() -> None:
    # one Mixtral layer at its real widths, transformers' default experts implementation
    result = analyze(Request(layers(MIXTRAL_8X7B, 1), dims={"seq": 64}, plan=False))
    assert result.params.count == counted(layers(MIXTRAL_8X7B, 1))
    assert any("grouped_mm" in node.op_type for node in result.graph.nodes)


def test_gradient_checkpointing_wraps_each_decoder_layer() -> None:
    module = build_hf_model(TINY_LLAMA).module
    assert checkpointed_layers(module) == ("model.layers.0", "model.layers.1")


def test_building_a_config_needs_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("graphmem tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    assert counted(layers(MISTRAL_7B, 1)) > 0


@pytest.mark.parametrize(("text", "fragment"), [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "a JSON list, not an object"),
    ('{"hidden_size": 8}', 'no "model_type"'),
    ('{"model_type": "no-such-architecture"}', "transformers cannot make"),
])
def test_a_bad_config_is_one_error_line(tmp_path: Path, run: Run, text: str,
                                        fragment: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    code, _, err = run("analyze", str(path), "--no-html")
    assert_one_error_line(code, err, fragment)


@pytest.mark.parametrize(("args", "fragment"), [
    (["--dim", "width=8"], "--dim width: a Hugging Face config's input is input_ids"),
    (["--batch", "2", "--input", "2x8:int64"], "use one or the other"),
    (["--dim", "seq=100000"], "max_position_embeddings is 512"),
])
def test_bad_shapes_for_a_config_are_one_error_line(tmp_path: Path, run: Run, args: list[str],
                                                    fragment: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_LLAMA))
    code, _, err = run("analyze", str(path), "--no-html", *args)
    assert_one_error_line(code, err, fragment)


def test_a_model_that_takes_pixels_asks_for_its_input(tmp_path: Path, run: Run) -> None:
    vit = {"model_type": "vit", "architectures": ["ViTForImageClassification"],
           "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
           "intermediate_size": 128, "image_size": 32, "patch_size": 8}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(vit))
    code, _, err = run("analyze", str(path), "--no-html")
    assert_one_error_line(code, err, "takes pixel_values", "--input")
    code, _, _ = run("analyze", str(path), "--no-html", "--input", "1x3x32x32")
    assert code == 0


@pytest.mark.slow
def test_a_70b_model_analyzes_in_little_memory() -> None:
    # Llama-3-70B built whole on the meta device, one of its 80 layers traced at seq 512:
    # the peak resident set of the process stays far below the weights' 141 GB (bf16).
    script = (
        "from graphmem import analyze\n"
        "from graphmem.pipeline.request import Request\n"
        "from graphmem.frontends.torch.hf_config import build_hf_model\n"
        "from tests.helpers.llm_configs import LLAMA3_70B, layers\n"
        "module = build_hf_model(LLAMA3_70B).module\n"
        "assert sum(p.numel() for p in module.parameters()) == 70_553_706_496\n"
        "analyze(Request(layers(LLAMA3_70B, 1), dims={'seq': 512}, plan=False))\n"
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss across fork and exec, so a child of
        # a large pytest process would report the parent's peak
        "print(next(line.split()[1] for line in open('/proc/self/status')"
        " if line.startswith('VmHWM:')))\n")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True,
                          text=True, timeout=600, check=True)
    max_rss_kib = int(done.stdout.strip().splitlines()[-1])  # VmHWM is in kB
    assert max_rss_kib < 2 * 1024 * 1024


@pytest.mark.parametrize("key,count", [("num_hidden_layers", 10**6),
                                       ("num_local_experts", 10**7)])
def test_a_config_asking_for_millions_of_modules_is_refused_before_building(
        tmp_path: Path, run: Run, key: str, count: int) -> None:
    # a config is untrusted input: 10^6 layers would keep transformers building modules for
    # hours (3,000 tiny layers took 4 minutes); refused from the config object, nothing built
    (tmp_path / "config.json").write_text(json.dumps({**MIXTRAL_8X7B, key: count}))
    code, _, err = run("analyze", str(tmp_path), "--no-html")
    assert_one_error_line(code, err, f"{key} is {count:,}", "more than graphmem builds")
