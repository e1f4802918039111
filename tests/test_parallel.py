"""Per-rank memory with pipeline, sequence, context and expert parallelism
(graphmem/distributed/parallel.py, stages.py, experts.py, ranks.py).

Checked against a hand-built two-layer training graph worked out by hand, Megatron-LM's
schedules (in-flight micro-batches per rank) and its theoretical memory formula, and the
issue's anchor: Llama-3-8B at TP=2 x PP=2, whose most-loaded rank holds 2,007,633,920
parameters.
"""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from graphmem import analyze
from graphmem.core.conventions import TrainingOptions
from graphmem.core.ir import Graph, Phase, Role
from graphmem.core.routing import parse_moe_routing
from graphmem.distributed.attach import distributed_report, routed_sizes
from graphmem.distributed.experts import busiest_rank_factor
from graphmem.distributed.model_states import Part, profile_training
from graphmem.distributed.parallel import (
    ParallelLayout,
    chunk_of_forward,
    in_flight_forwards,
    split_layers,
)
from graphmem.distributed.ranks import rank_plan
from graphmem.distributed.stages import cut_stages, find_layers
from graphmem.distributed.strategies import DistributedConfig
from graphmem.errors import GraphmemError
from graphmem.passes.dims import DimBinding, value_bytes
from graphmem.pipeline.request import Request
from tests.builders import GraphBuilder, sizes_of
from tests.helpers.cli import run_cli
from tests.helpers.llm_configs import LLAMA3_8B, TINY_LLAMA, layers

pytestmark = pytest.mark.torch


# ----- the schedules -----------------------------------------------------------------------------
def test_1f1b_rank_i_of_p_holds_p_minus_i_micro_batches() -> None:
    # Megatron-LM's forward_backward_pipelining_without_interleaving: P - i - 1 warm-up
    # forwards + 1, at most M
    layout = ParallelLayout(pipeline=4, micro_batches=8)
    assert [in_flight_forwards(layout, r) for r in range(4)] == [4, 3, 2, 1]
    few = replace(layout, micro_batches=2)
    assert [in_flight_forwards(few, r) for r in range(4)] == [2, 2, 2, 1]


def test_interleaved_in_flight_is_megatrons_penalty() -> None:
    # P = 4, V = 2, M = 8: rank 0 runs (4 - 0 - 1) x 2 + (2 - 1) x 4 = 10 warm-up chunk
    # forwards + 1 = 11 chunks of L / 8 layers; Megatron's theoretical_memory_usage.py:
    # P x (1 + (P - 1) / (P x V)) = 4 x (1 + 3 / 8) = 5.5 micro-batches of L / 4 layers
    # = 11 chunks of L / 8
    layout = ParallelLayout(pipeline=4, micro_batches=8, schedule="interleaved",
                            virtual_stages=2)
    assert [in_flight_forwards(layout, r) for r in range(4)] == [11, 9, 7, 5]
    # the first P forwards run local chunk 0 (global chunk r), the next P chunk 1 (r + P)
    assert [chunk_of_forward(layout, 1, k) for k in range(9)] == [1, 1, 1, 1, 5, 5, 5, 5, 1]


def test_gpipe_holds_every_micro_batch() -> None:
    layout = ParallelLayout(pipeline=2, micro_batches=6, schedule="gpipe")
    assert [in_flight_forwards(layout, r) for r in range(2)] == [6, 6]


def test_layers_split_evenly_the_first_chunks_taking_the_rest() -> None:
    assert split_layers(32, 2) == (range(0, 16), range(16, 32))
    assert split_layers(5, 3) == (range(0, 2), range(2, 4), range(4, 5))


def test_layers_are_the_largest_module_repeat() -> None:
    paths = ["model.embed_tokens", "model.layers.0.mlp", "model.layers.1.mlp.experts.3",
             "model.layers.2.attn", "head.0"]
    found = find_layers(paths)
    assert found is not None and (found.prefix, found.count) == ("model.layers", 3)
    assert found.position("model.layers.1.mlp.experts.3") == 1
    assert found.position("model.norm") is None


@pytest.mark.parametrize(("layout", "tp", "message"), [
    (ParallelLayout(pipeline=0), 1, "--pipeline-parallel 0"),
    (ParallelLayout(schedule="zigzag"), 1, "--pipeline-schedule zigzag"),
    (ParallelLayout(virtual_stages=2), 1, "goes with --pipeline-schedule interleaved"),
    (ParallelLayout(pipeline=4, micro_batches=6, schedule="interleaved"), 1,
     "multiple of --pipeline-parallel 4"),
    (ParallelLayout(sequence_parallel=True), 1, "add --tensor-parallel"),
])
def test_bad_layouts_are_one_clear_error(layout: ParallelLayout, tp: int, message: str) -> None:
    with pytest.raises(GraphmemError, match=message):
        layout.check(tp)


# ----- a hand-worked pipeline ------------------------------------------------------------------
def two_layer_graph() -> Graph:
    """x -> layers.0 -> a0 -> layers.1 -> a1 -> head -> logits -> loss -> backward -> step.

    float32; sizes in bytes: x 40 (an input), a0 80, a1 120, logits 20, l 4, g_a1 120,
    g_a0 80, done 4; parameters layers.0.weight 400, layers.1.weight 400, head.weight 200.
    Order: 0 fwd0, 1 fwd1, 2 head, 3 loss, 4 bwd_head, 5 bwd1, 6 bwd0, 7 step.
    """
    b = GraphBuilder("two-layer")
    b.tensor("x", 10, Role.INPUT)
    for name, numel in (("layers.0.weight", 100), ("layers.1.weight", 100),
                        ("head.weight", 50)):
        b.tensor(name, numel, Role.PARAMETER)
    forward, backward = Phase.FORWARD, Phase.BACKWARD
    nodes = [
        ("fwd0", ["x", "layers.0.weight"], {"a0": 20}, forward, "layers.0"),
        ("fwd1", ["a0", "layers.1.weight"], {"a1": 30}, forward, "layers.1"),
        ("head", ["a1", "head.weight"], {"logits": 5}, forward, "head"),
        ("loss", ["logits"], {"l": 1}, forward, ""),
        ("bwd_head", ["l", "a1"], {"g_a1": 30, "g_head": 50}, backward, "head"),
        ("bwd1", ["g_a1", "a0"], {"g_a0": 20, "g1": 100}, backward, "layers.1"),
        ("bwd0", ["g_a0", "x"], {"g0": 100}, backward, "layers.0"),
        ("step", ["g0", "g1", "g_head"], {"done": 1}, Phase.OPTIMIZER, ""),
    ]
    for name, inputs, outputs, phase, module in nodes:
        b.node(name, inputs, outputs, op_type="Add", phase=phase).module_path = module
    for name in ("g0", "g1", "g_head"):
        b.values[name].role = Role.GRADIENT
    return b.build(["done"])


def hand_plan(layout: ParallelLayout, **options: object):
    graph = two_layer_graph()
    profile = profile_training(graph, sizes_of(graph))
    config = DistributedConfig("ddp", 1, parallel=layout, **options)  # type: ignore[arg-type]
    cut = cut_stages(graph, sizes_of(graph), profile.parameters, layout.chunks, "--pp")
    return cut, rank_plan(profile, cut, config)


def test_hand_worked_chunks() -> None:
    cut, _ = hand_plan(ParallelLayout(pipeline=2))
    first, last = cut.chunks
    # chunk 0: x 40 at every step; a0 80 from fwd0 to bwd1 (the next stage reads it, this
    # one keeps it as its output); g_a0 80 received at bwd1, used by bwd0:
    #   steps 0-4: 120, 5: 200, 6: 120, 7: 40. Saved for its backward: x + a0 = 120
    assert first.whole_steps == (120, 120, 120, 120, 120, 200, 120, 40)
    assert first.saved_whole == 120
    # chunk 1 (layers.1, head, loss and their backward): a0 80 (steps 0-5), a1 120 (1-4),
    # logits 20 (2-3), l 4 (3-4), g_a1 120 (4-5), g_a0 80 (5-6), done 4 (7):
    #   0: 80, 1: 200, 2: 220, 3: 224, 4: 80 + 120 + 4 + 120 = 324, 5: 280, 6: 80, 7: 4
    assert last.whole_steps == (80, 200, 220, 224, 324, 280, 80, 4)
    assert last.saved_whole == 80 + 120 + 4  # a0, a1, l: made forward, read backward
    assert dict(cut.parameter_chunks) == {"layers.0.weight": {0}, "layers.1.weight": {1},
                                          "head.weight": {1}}


def test_hand_worked_1f1b_ranks() -> None:
    _, plan = hand_plan(ParallelLayout(pipeline=2, micro_batches=4))
    first, last = plan.rows
    # rank 0: 2 in flight: one micro-batch's saved 120 + its own peak 200 = 320;
    # parameters 400; gradients resident: all 1,000 B of gradients x 400 / 1,000 = 400;
    # DDP's buckets copy them: 400. Total 400 + 400 + 320 + 400 = 1,520
    assert (first.in_flight, first.memory.activations_bytes) == (2, 320)
    assert first.memory.total_bytes == 1_520
    # rank 1: 1 in flight: 324; parameters 600, gradients 600, buckets 600: 2,124
    assert (last.in_flight, last.memory.activations_bytes) == (1, 324)
    assert last.memory.total_bytes == 2_124
    assert plan.most_loaded is last
    assert (first.parameter_count, last.parameter_count) == (100, 150)


def test_hand_worked_gpipe_and_context_parallel() -> None:
    # GPipe, M = 4: rank 0 3 x 120 + 200 = 560, rank 1 3 x 204 + 324 = 936
    _, plan = hand_plan(ParallelLayout(pipeline=2, micro_batches=4, schedule="gpipe"))
    assert [row.memory.activations_bytes for row in plan.rows] == [560, 936]
    # context parallel 2 halves every step's activations: ceil(324 / 2) = 162
    _, plan = hand_plan(ParallelLayout(pipeline=2, context=2))
    assert plan.rows[1].memory.activations_bytes == 162
    assert plan.rows[1].memory.config.total_gpus == 4  # N 1 x T 1 x P 2 x C 2


def test_too_few_layers_is_one_clear_error() -> None:
    with pytest.raises(GraphmemError, match="3 pipeline chunks need as many layers and the"
                       " model has 2 repeated layers"):
        hand_plan(ParallelLayout(pipeline=3))


# ----- traced decoders ------------------------------------------------------------------------
def traced(config: dict, seq: int = 16, **distributed: object) -> Any:
    options = {"strategy": "ddp", "gpus": 1, **distributed}
    return analyze(Request(config, batch=1, dims={"seq": seq}, plan=False,
                           training=TrainingOptions(optimizer="adamw", amp="bf16"),
                           distributed=DistributedConfig(**options)))  # type: ignore[arg-type]


LLAMA3_8B_LAYER = {
    # q, o 2 x 4,096^2 + k, v 2 x 4,096 x 1,024 + gate, up, down 3 x 4,096 x 14,336
    "matmuls": 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336,  # 218,103,808
    "norms": 2 * 4096,
}


def llama_last_stage(layers_per_stage: int) -> int:
    """Llama-3-8B's last stage at TP = 2: its layers' matmuls halved, their norms whole,
    the final norm (4,096) and half of the untied 128,256 x 4,096 output layer."""
    layer = LLAMA3_8B_LAYER["matmuls"] // 2 + LLAMA3_8B_LAYER["norms"]  # 109,060,096
    return layers_per_stage * layer + 4096 + 128_256 * 4096 // 2


def test_llama3_widths_tp2_pp2_last_stage_parameters() -> None:
    # 4 of Llama-3-8B's layers at its widths: 2 per stage. Last stage:
    # 2 x 109,060,096 + 4,096 + 262,668,288 = 480,792,576; the first: the same less the
    # final norm (the embedding is as large as the output layer)
    result = traced(layers(LLAMA3_8B, 4), tensor_parallel=2,
                    parallel=ParallelLayout(pipeline=2))
    plan = result.distributed.plan
    first, last = plan.rows
    assert last.parameter_count == llama_last_stage(2) == 480_792_576
    assert first.parameter_count == last.parameter_count - 4096
    assert plan.tied == ()
    assert (first.holds, last.holds) == (("embedding",), ("head + loss",))


def megatron_most_loaded_shard(layers: int, hidden: int, ffn: int, heads: int, groups: int,
                               vocab: int, pp: int, tp: int) -> int:
    """Megatron-LM's theoretical_memory_usage.py, compute_weight_and_optimizer_memory (its
    formula, written out): transformer parameters
    2 L h^2 ((1 + g / a) + ffn / h x 3 / 2 (SwiGLU) + 2 / h (two LayerNorms, weight and
    bias) + 1 / (L h) (the final LayerNorm)); the most-loaded shard
    (transformer / PP + vocab x h) / TP."""
    transformer = 2 * layers * hidden * hidden * (
        Fraction(1) + Fraction(groups, heads) + Fraction(ffn, hidden) * Fraction(3, 2)
        + Fraction(2, hidden) + Fraction(1, layers * hidden))
    return int((transformer / pp + vocab * hidden) / tp)


def test_llama3_stage_against_megatrons_formula() -> None:
    # 4 layers: Megatron (4 x 218,103,808 + 4 x 16,384 + 8,192) / 2 + 525,336,576, / 2
    # = 480,790,528. Its layer norms (4h, LayerNorm with bias, split by TP) weigh what
    # Llama's two RMSNorms (2h, replicated) weigh per rank; its final norm is 2h spread
    # over PP x TP ranks (2,048 each), graphmem's Llama RMSNorm h whole on the last stage:
    # 4,096 - 2,048 = 2,048 more
    megatron = megatron_most_loaded_shard(4, 4096, 14336, 32, 8, 128_256, 2, 2)
    assert megatron == 480_790_528
    assert llama_last_stage(2) - megatron == 4096 - 2048
    # the full model: 2,007,631,872 + 2,048 = 2,007,633,920 (the anchor)
    assert megatron_most_loaded_shard(32, 4096, 14336, 32, 8, 128_256, 2, 2) + 2048 \
        == llama_last_stage(16) == 2_007_633_920


@pytest.mark.slow
def test_llama3_8b_tp2_pp2_anchor() -> None:
    # the anchor: 16 layers x 109,060,096 + 4,096 + 262,668,288 = 2,007,633,920
    result = traced(LLAMA3_8B, seq=8, tensor_parallel=2, parallel=ParallelLayout(pipeline=2))
    rows = result.distributed.plan.rows
    assert [row.parameter_count for row in rows] == [2_007_629_824, 2_007_633_920]
    assert llama_last_stage(16) == 2_007_633_920


def test_one_chunk_is_the_whole_steps_timelines(
        tiny_llama_step: tuple[Graph, DimBinding]) -> None:
    graph, dims = tiny_llama_step
    sizes = value_bytes(graph, dims)
    profile = profile_training(graph, sizes)
    (chunk,) = cut_stages(graph, sizes, profile.parameters, 1, "--pp").chunks
    assert chunk.whole_steps == profile.part_bytes[Part.ACTIVATIONS]
    assert chunk.split_steps == profile.part_bytes[Part.SPLIT_ACTIVATIONS]


@pytest.fixture(scope="module")
def tiny_llama_step() -> tuple[Graph, DimBinding]:
    result = traced(TINY_LLAMA)
    return result.graph, result.dims


def test_sequence_parallel_splits_every_activation(
        tiny_llama_step: tuple[Graph, DimBinding]) -> None:
    graph, dims = tiny_llama_step
    base = DistributedConfig("ddp", 1, 2)
    plain = distributed_report(graph, dims, replace(base, parallel=ParallelLayout(
        pipeline=2)), None).plan
    sp = distributed_report(graph, dims, replace(base, parallel=ParallelLayout(
        pipeline=2, sequence_parallel=True)), None).plan
    for without, with_sp in zip(plain.rows, sp.rows, strict=True):
        assert with_sp.memory.activations_bytes < without.memory.activations_bytes
        assert with_sp.memory.parameters_bytes == without.memory.parameters_bytes


def test_cli_prints_every_stage_and_gates_on_the_most_loaded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    args = [str(tmp_path / "config.json"), "--train", "--batch", "1", "--dim", "seq=16",
            "--tensor-parallel", "2", "--pipeline-parallel", "2", "--no-html"]
    code, out, _ = run_cli(["analyze", *args, "--json", "-"], capsys)
    assert code == 0
    memory = json.loads(out)["memory"]
    ranks = memory["ranks"]
    assert [r["stage"] for r in ranks] == [0, 1]
    top = [r for r in ranks if r["most_loaded"]]
    assert len(top) == 1 and top[0]["total_bytes"] == memory["per_rank"]["total_bytes"]
    assert top[0]["total_bytes"] == max(r["total_bytes"] for r in ranks)


TOY_MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
               "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
               "num_experts_per_tok": 2, "vocab_size": 100, "max_position_embeddings": 64,
               "torch_dtype": "float32"}


def test_expert_parallel_shards_the_routed_experts_only() -> None:
    # Mixtral at toy widths (hidden 32, FFN 64, 4 experts, 2 layers): per layer
    # gate_up_proj [4, 128, 32] + down_proj [4, 32, 64] = 16,384 + 8,192 = 24,576 expert
    # elements, 2 layers: 49,152; E = 2 keeps 2 of the 4 experts: 24,576 fewer on every
    # rank, the rest (attention, router, norms) replicated
    def count(expert: int) -> int:
        result = traced(TOY_MIXTRAL, seq=8, parallel=ParallelLayout(expert=expert))
        plan = result.distributed.plan
        return plan.rows[0].parameter_count if plan else result.params.count

    whole = count(1)
    assert whole - count(2) == 49_152 // 2
    with pytest.raises(GraphmemError, match="4 experts per layer do not split over 3"):
        count(3)


def test_the_verdict_reads_the_most_loaded_rank(tmp_path: Path) -> None:
    # with --gpu the headline verdict (what `check --max-memory` and the max batch read) is
    # the most-loaded pipeline rank's device total: its tensors + allocator + context
    result = analyze(Request(TINY_LLAMA, batch=1, dims={"seq": 16}, plan=False, gpu="a100-80gb",
                             training=TrainingOptions(optimizer="adamw"),
                             distributed=DistributedConfig("zero1", 2, 2, parallel=ParallelLayout(
                                 pipeline=2, micro_batches=4))))
    report = result.distributed
    top = max(row.memory.total_bytes for row in report.plan.rows)
    assert report.per_rank.total_bytes == top
    assert int(result.fit.required_bytes) == report.device_total_bytes
    assert report.device_total_bytes == (top + report.allocator_bytes + report.context_bytes
                                         + report.nccl_bytes)
    # the fewest GPUs keep T x P = 4 GPUs per data-parallel rank
    assert all(row.total_gpus % 4 == 0 for row in report.fit_by_strategy if row.total_gpus)
    # JSON and HTML show every stage and mark the most loaded
    ranks = result.to_dict()["memory"]["ranks"]
    assert [r["most_loaded"] for r in ranks].count(True) == 1
    result.to_html(tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    assert "Per pipeline rank" in page and page.count("(most loaded)") == 1


@pytest.mark.parametrize(("routing", "tokens", "experts", "top_k", "degree", "factor"), [
    # 8 tokens x top-2 of 4 experts, E = 2 (2 experts per rank), 16 choices per micro-batch:
    # balanced loads 4, 4, 4, 4: rank 0 receives 2 ranks x 8 = 16 -> 16 / 16 = 1
    ("balanced", 8, 4, 2, 2, Fraction(1)),
    # capacity=1.5: each expert at most ceil(1.5 x 16 / 4) = 6, loads 6, 6, 4, 0:
    # rank 0 receives 2 x 12 = 24 -> 24 / 16 = 3/2 (F)
    ("capacity=1.5", 8, 4, 2, 2, Fraction(3, 2)),
    # worst: loads 8, 8, 0, 0: rank 0 receives 2 x 16 = 32 -> 2 (E)
    ("worst", 8, 4, 2, 2, Fraction(2)),
    # 16 tokens x top-2 of 8, E = 4: capacity=1.25 caps at ceil(1.25 x 32 / 8) = 5, loads
    # 5, 5, 5, 5, 5, 5, 2, 0: rank 0 (experts 0, 1) receives 4 x 10 = 40 -> 40 / 32 = 5/4
    ("capacity=1.25", 16, 8, 2, 4, Fraction(5, 4)),
])
def test_busiest_expert_parallel_rank(routing: str, tokens: int, experts: int, top_k: int,
                                      degree: int, factor: Fraction) -> None:
    assert busiest_rank_factor(parse_moe_routing(routing), tokens, experts, top_k,
                               degree) == factor


def test_expert_parallel_activations_follow_the_routing() -> None:
    # the toy Mixtral (4 experts, top-2) at seq 8, E = 2: the router's top-k reads 8 tokens
    # x 2 choices; the busiest rank's factor is 1 (balanced), 3/2 (capacity=1.5), 2 (worst)
    # as worked above, and each skew holds more expert activations on the busiest rank, its
    # parameters unchanged
    def plan(routing: str) -> Any:
        return analyze(Request(TOY_MIXTRAL, batch=1, dims={"seq": 8}, plan=False,
                               moe_routing=parse_moe_routing(routing),
                               training=TrainingOptions(optimizer="sgd"),
                               distributed=DistributedConfig("ddp", 1, parallel=ParallelLayout(
                                   expert=2)))).distributed
    balanced, capacity, worst = (plan(r) for r in ("balanced", "capacity=1.5", "worst"))
    assert [r.plan.routing_factor for r in (balanced, capacity, worst)] == [
        1, Fraction(3, 2), 2]
    assert (balanced.per_rank.activations_bytes < capacity.per_rank.activations_bytes
            < worst.per_rank.activations_bytes)
    assert balanced.per_rank.parameters_bytes == worst.per_rank.parameters_bytes


def test_worst_routing_doubles_every_value_the_experts_make() -> None:
    # worst at E = 2 (factor 2, above): a value made inside `mlp.experts` is twice its traced
    # size on the busiest rank; attention, router and norms keep theirs
    result = analyze(Request(TOY_MIXTRAL, batch=1, dims={"seq": 8}, plan=False,
                             moe_routing=parse_moe_routing("worst"),
                             training=TrainingOptions(optimizer="sgd")))
    graph, dims = result.graph, result.dims
    sizes = value_bytes(graph, dims)
    config = DistributedConfig("ddp", 1, parallel=ParallelLayout(
        expert=2, routing=parse_moe_routing("worst")))
    routed, factor = routed_sizes(graph, sizes, profile_training(graph, sizes), config, dims)
    assert factor == 2
    made = {v.name: n.module_path for n in graph.nodes for v in n.outputs}
    inside = [name for name, path in made.items() if ".mlp.experts" in path and sizes[name]]
    assert inside and all(int(routed[n]) == 2 * int(sizes[n]) for n in inside)
    assert all(routed[n] == sizes[n] for n, path in made.items() if ".mlp.experts" not in path)
