"""Per-GPU memory under DDP, ZeRO 1/2/3, FSDP and tensor parallelism (distributed/strategies.py).

Checked three ways: a hand-built training graph worked out by hand (roles only, ONNX op names:
the pass knows no framework), the published formulas (the ZeRO paper's 16 bytes per parameter
and DeepSpeed's own estimators) on tiny_gpt, whose parameter count is known, and a real
DistributedDataParallel on CPU (gloo, one rank) for DDP's buckets.
"""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from graphmem import analyze_torch
from graphmem.cli.main import main
from graphmem.core.ir import Graph, Role
from graphmem.distributed.model_states import Part, TrainingProfile, profile_training
from graphmem.distributed.strategies import (
    STRATEGIES,
    DistributedConfig,
    ZeroSettings,
    fit_by_strategy,
    per_rank_memory,
)
from graphmem.errors import GraphmemError
from graphmem.passes.dims import value_bytes
from graphmem.pipeline.extras import with_distributed
from tests.builders import GraphBuilder, sizes_of
from tests.models import EXPECTED_PARAMS, tiny_gpt

# 100-element reduce buckets, every ZeRO-3 parameter partitioned, no prefetch beyond the layer
SMALL_ZERO = ZeroSettings(reduce_bucket_size=100, prefetch_bucket_size=0,
                          param_persistence_threshold=0)


def hand_graph() -> Graph:
    """x (10) -> MatMul with layer.weight (1000) -> a (100) -> loss -> grad (1000) -> Adam.

    Residents: x 40 B + weight 4000 B + exp_avg, exp_avg_sq 8000 B = 12040 B. Per step:
      0 fwd   a 400                          -> 12440
      1 loss  a 400 + l 4                    -> 12444
      2 bwd   l 4 + a 400 + grad 4000        -> 16444
      3 step  grad 4000 + tmp 4000           -> 20040  (the peak)
      4 upd   tmp 4000 + done 4              -> 16044
    """
    b = GraphBuilder("hand")
    b.tensor("x", 10, Role.INPUT)
    b.tensor("layer.weight", 1000, Role.PARAMETER)
    b.tensor("exp_avg", 1000, Role.OPTIMIZER_STATE)
    b.tensor("exp_avg_sq", 1000, Role.OPTIMIZER_STATE)
    b.node("fwd", ["x", "layer.weight"], {"a": 100}, op_type="MatMul")
    b.node("loss", ["a"], {"l": 1}, op_type="ReduceSum")
    b.node("bwd", ["l", "a", "x"], {"grad": 1000}, op_type="MatMul")
    b.node("step", ["layer.weight", "grad", "exp_avg", "exp_avg_sq"], {"tmp": 1000},
           op_type="Sqrt")
    b.node("upd", ["tmp", "layer.weight"], {"done": 1}, op_type="Add")
    b.values["a"].role = Role.SAVED_ACTIVATION
    b.values["grad"].role = Role.GRADIENT
    b.values["tmp"].role = Role.TEMPORARY
    return b.build(["done"])


@pytest.fixture(scope="module")
def hand() -> TrainingProfile:
    graph = hand_graph()
    return profile_training(graph, sizes_of(graph))


def rank(profile: TrainingProfile, strategy: str, gpus: int, **options: object):
    options.setdefault("zero", SMALL_ZERO)
    return per_rank_memory(profile, DistributedConfig(strategy, gpus, **options))  # type: ignore[arg-type]


def test_hand_profile_parts_add_up_to_the_single_gpu_timeline(hand: TrainingProfile) -> None:
    assert [hand.step_total(s) for s in range(5)] == [12440, 12444, 16444, 20040, 16044]
    assert hand.single_gpu_peak_bytes == 20040
    assert hand.part_bytes[Part.GRADIENTS] == (0, 0, 4000, 4000, 0)
    assert hand.part_bytes[Part.TEMPORARIES] == (0, 0, 0, 4000, 4000)
    assert hand.part_bytes[Part.OPTIMIZER_STATE] == (8000,) * 5
    assert hand.parameter_count == 1000


@pytest.mark.parametrize(("strategy", "expected"), [
    # params 4000 + grads 4000 + opt 8000 + tmp 4000 + x 40 at step 3 = 20040; buckets: DDP's
    # flat copy of every gradient, 4000
    ("ddp", (4000, 4000, 8000, 4000, 40, 0, 4000, 24040)),
    # opt 8000/4 = 2000, tmp 4000/4 = 1000; reduce bucket 100 elements x 4 B = 400
    ("zero1", (4000, 4000, 2000, 1000, 40, 0, 400, 11440)),
    # + grads 4000/4 = 1000
    ("zero2", (4000, 1000, 2000, 1000, 40, 0, 400, 8440)),
    # + params 4000/4 = 1000; gathered: the largest layer whole, 1000 x 4 B
    ("zero3", (1000, 1000, 2000, 1000, 40, 4000, 400, 9440)),
    # gathered: the two largest units (one here, 4000); bucket: its unsharded gradient 4000
    ("fsdp", (1000, 1000, 2000, 1000, 40, 4000, 4000, 13040)),
])
def test_hand_worked_per_rank_at_four_gpus(hand: TrainingProfile, strategy: str,
                                           expected: tuple[int, ...]) -> None:
    r = rank(hand, strategy, 4)
    got = (r.parameters_bytes, r.gradients_bytes, r.optimizer_state_bytes, r.temporaries_bytes,
           r.activations_bytes, r.gathered_bytes, r.buckets_bytes, r.total_bytes)
    assert got == expected
    assert r.peak_node == "step"


def test_hand_zero_paper_layout_zero2(hand: TrainingProfile) -> None:
    # Psi = 1000. Params 2 B each = 2000, unsharded; grads 2 B each: 2000 / 4 = 500;
    # optimizer: m, v 8000 + fp32 master 4000 = 12000 / 4 = 3000: 2 Psi + 14 Psi / N = 5500.
    # At step 3: grads 500 + tmp 1000 + x 40 = 1540; bucket 100 x 2 B = 200.
    r = rank(hand, "zero2", 4, layout="zero-paper")
    assert r.model_states_bytes == 2 * 1000 + 14 * 1000 // 4 == 5500
    assert r.total_bytes == 2000 + 3000 + 1540 + 200


def test_framework_free_tensor_parallel_split_of_a_matmul_output() -> None:
    # Only 2-D matmul weights split; the builder's tensors are 1-D, so nothing splits here and
    # T = 2 changes nothing but the job size.
    graph = hand_graph()
    profile = profile_training(graph, sizes_of(graph))
    assert rank(profile, "ddp", 1, tensor_parallel=2).total_bytes == rank(
        profile, "ddp", 1).total_bytes


def test_inference_graph_is_refused() -> None:
    b = GraphBuilder("inference")
    b.tensor("x", 10, Role.INPUT)
    b.node("relu", ["x"], {"y": 10})
    graph = b.build(["y"])
    with pytest.raises(GraphmemError, match="--train"):
        profile_training(graph, sizes_of(graph))


def test_bad_config_is_a_clear_error(hand: TrainingProfile) -> None:
    with pytest.raises(GraphmemError, match="--gpus 0"):
        rank(hand, "zero3", 0)
    with pytest.raises(GraphmemError, match="--strategy zero4"):
        rank(hand, "zero4", 2)


# --- tiny_gpt: 141,056 parameters (tests/models.py EXPECTED_PARAMS) --------------------------

PSI = EXPECTED_PARAMS["tiny_gpt"][1]


@pytest.fixture(scope="module")
def gpt() -> TrainingProfile:
    analysis = analyze_torch(tiny_gpt(), ["2x16:int64"], train=True, optimizer="adam")
    return profile_training(analysis.graph, value_bytes(analysis.graph, analysis.dims))


@pytest.mark.torch
@pytest.mark.slow
def test_gpt_profile_counts_the_known_parameters(gpt: TrainingProfile) -> None:
    assert gpt.parameter_count == PSI == 141_056
    assert gpt.parameter_bytes == gpt.gradient_bytes == 4 * PSI  # fp32 weights and grads
    assert max(gpt.part_bytes[Part.OPTIMIZER_STATE]) == 8 * PSI  # Adam: m and v in fp32


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
@pytest.mark.torch
def test_zero_paper_sixteen_bytes_per_parameter(gpt: TrainingProfile, gpus: int) -> None:
    # Rajbhandari et al. 2020, Fig. 1 (mixed-precision Adam, K = 12): per GPU
    # stage 1: 2 Psi + 2 Psi + 12 Psi / N; stage 2: 2 Psi + 14 Psi / N; stage 3: 16 Psi / N.
    # PSI = 141,056 = 2^8 * 551, so every N here divides it exactly.
    paper = {"zero1": 4 * PSI + 12 * PSI // gpus, "zero2": 2 * PSI + 14 * PSI // gpus,
             "zero3": 16 * PSI // gpus}
    for strategy, expected in paper.items():
        assert rank(gpt, strategy, gpus, layout="zero-paper").model_states_bytes == expected


@pytest.mark.parametrize("gpus", [1, 4, 8])
@pytest.mark.torch
def test_traced_fp32_adam_is_also_sixteen_bytes_but_split_differently(
        gpt: TrainingProfile, gpus: int) -> None:
    # torch (no AMP) holds 4 B params + 4 B grads + 8 B Adam state: 16 Psi in all, like the
    # paper, but stage 1 shards only the 8 B of state, not 12.
    assert rank(gpt, "zero3", gpus).model_states_bytes == 16 * PSI // gpus
    assert rank(gpt, "zero1", gpus).model_states_bytes == 8 * PSI + 8 * PSI // gpus
    assert rank(gpt, "ddp", gpus).model_states_bytes == 16 * PSI


def deepspeed_zero2_gpu_bytes(total_params: int, total_gpus: int) -> int:
    """DeepSpeed's estimate_zero2_model_states_mem_needs, cpu_offload=False
    (deepspeed/runtime/zero/stage_1_and_2.py): 2 = params_16bit, 18 = 2 grads_16bit +
    4 grads_32bit + 4 params_32bit + 8 optimizer states."""
    return 2 * total_params + int(18 * total_params / total_gpus)


def deepspeed_zero3_gpu_bytes(total_params: int, largest_layer: int, total_gpus: int) -> int:
    """DeepSpeed's estimate_zero3_model_states_mem_needs, no offload
    (deepspeed/runtime/zero/stage3.py): 4 * largest_layer_params + 18 * total / gpus."""
    return 4 * largest_layer + int(18 * total_params / total_gpus)


@pytest.mark.parametrize("gpus", [1, 2, 8])
@pytest.mark.torch
def test_agrees_with_deepspeed_zero2_estimator(gpt: TrainingProfile, gpus: int) -> None:
    ours = rank(gpt, "zero2", gpus, layout="deepspeed").model_states_bytes
    assert ours == deepspeed_zero2_gpu_bytes(PSI, gpus)


@pytest.mark.parametrize("gpus", [1, 2, 8])
@pytest.mark.torch
def test_deepspeed_zero3_estimator_and_where_graphmem_differs(gpt: TrainingProfile,
                                                              gpus: int) -> None:
    # Largest module by its own parameters: wte, 512 x 64 = 32,768.
    largest = 512 * 64
    estimate = deepspeed_zero3_gpu_bytes(PSI, largest, gpus)
    r = rank(gpt, "zero3", gpus, layout="deepspeed")
    # graphmem shards the same 2 + 2 + 4 + 4 + 8 = 20 bytes as its stage-2 count; the stage-3
    # estimator counts 18 (one 2-byte gradient copy fewer).
    assert r.model_states_bytes == estimate - 4 * largest + 2 * PSI // gpus
    # Gathered: the largest layer whole in 2-byte working precision (no prefetch here); the
    # estimator's 4 B per element also covers that layer's full gradient, which graphmem
    # counts in the reduce bucket.
    assert r.gathered_bytes == 2 * largest


@pytest.mark.torch
def test_ddp_single_rank_is_the_single_gpu_peak_plus_buckets(gpt: TrainingProfile) -> None:
    r = rank(gpt, "ddp", 1)
    assert r.buckets_bytes == gpt.gradient_bytes == 4 * PSI
    assert r.total_bytes == gpt.single_gpu_peak_bytes + r.buckets_bytes
    assert rank(gpt, "ddp", 1, ddp_gradient_as_bucket_view=True).total_bytes == (
        gpt.single_gpu_peak_bytes)


@pytest.mark.torch
def test_ddp_does_not_depend_on_n(gpt: TrainingProfile) -> None:
    totals = {rank(gpt, "ddp", n).total_bytes for n in (1, 2, 8, 64, 1024)}
    assert len(totals) == 1


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "zero3"])
@pytest.mark.torch
def test_zero_at_one_rank_shards_nothing(gpt: TrainingProfile, strategy: str) -> None:
    r = rank(gpt, strategy, 1)
    assert r.total_bytes == gpt.single_gpu_peak_bytes + r.buckets_bytes + r.gathered_bytes


@pytest.mark.parametrize("strategy", ["zero3", "fsdp"])
@pytest.mark.torch
def test_full_sharding_decreases_with_n(gpt: TrainingProfile, strategy: str) -> None:
    totals = [rank(gpt, strategy, n).total_bytes for n in range(1, 65)]
    assert all(a >= b for a, b in pairwise(totals))
    assert totals[7] < totals[0]


@pytest.mark.torch
def test_parts_sum_to_total_and_stay_below_n1(gpt: TrainingProfile) -> None:
    for strategy in STRATEGIES:
        for n in (1, 3, 16):
            r = rank(gpt, strategy, n)
            assert r.total_bytes == sum((
                r.parameters_bytes, r.gradients_bytes, r.optimizer_state_bytes,
                r.temporaries_bytes, r.activations_bytes, r.gathered_bytes, r.buckets_bytes))


@pytest.mark.torch
def test_zero3_persistence_threshold_keeps_small_parameters_whole(gpt: TrainingProfile) -> None:
    # DeepSpeed's default stage3_param_persistence_threshold is 1e5 elements: every tiny_gpt
    # parameter (the largest is 32,768) stays whole on each rank, nothing is gathered.
    r = per_rank_memory(gpt, DistributedConfig("zero3", 8))
    assert r.parameters_bytes == 4 * PSI and r.gathered_bytes == 0
    # DeepSpeed's default reduce bucket: 5e8 elements in the gradient dtype (fp32 here)
    assert r.buckets_bytes == 500_000_000 * 4


@pytest.mark.torch
def test_tensor_parallel_splits_matmul_and_embedding_weights(gpt: TrainingProfile) -> None:
    # Splittable (2-D, read by mm/addmm or embedding): wte 512x64, wpe 128x64 and per layer
    # c_attn 192x64, attn c_proj 64x64, c_fc 256x64, mlp c_proj 64x256 = 49,152; two layers:
    # 32,768 + 8,192 + 98,304 = 139,264 of 141,056 (biases and LayerNorms stay whole).
    r = rank(gpt, "ddp", 1, tensor_parallel=2)
    split = 139_264
    assert r.split_parameter_share == pytest.approx(split / PSI)
    assert r.parameters_bytes == 4 * (PSI - split + split // 2)
    assert r.optimizer_state_bytes == 8 * (PSI - split + split // 2)
    assert r.activations_bytes <= rank(gpt, "ddp", 1).activations_bytes


@pytest.mark.torch
def test_tensor_parallel_replicates_weights_it_cannot_divide(gpt: TrainingProfile) -> None:
    # T = 3 divides 192 (c_attn: 192 x 64) and nothing else
    r = rank(gpt, "ddp", 1, tensor_parallel=3)
    assert "h.0.attn.c_attn.weight" not in r.replicated_matmul_weights
    assert "wte.weight" in r.replicated_matmul_weights


@pytest.mark.torch
def test_fit_by_strategy_finds_the_smallest_n(gpt: TrainingProfile) -> None:
    config = DistributedConfig("ddp", 1, zero=SMALL_ZERO)
    usable = rank(gpt, "zero3", 3).total_bytes
    rows = {row.strategy: row for row in fit_by_strategy(gpt, config, usable)}
    for strategy, row in rows.items():
        if row.data_parallel is None:
            assert rank(gpt, strategy, 1 << 20).total_bytes > usable
            continue
        assert row.per_rank_total_bytes == rank(gpt, strategy, row.data_parallel).total_bytes
        assert row.per_rank_total_bytes <= usable
        if row.data_parallel > 1:
            assert rank(gpt, strategy, row.data_parallel - 1).total_bytes > usable
    assert rows["zero3"].data_parallel is not None and rows["zero3"].data_parallel <= 3
    assert rows["ddp"].data_parallel is None  # DDP replicates everything: no N helps


@pytest.mark.slow
@pytest.mark.torch
def test_ddp_buckets_match_a_real_reducer() -> None:
    """A real DistributedDataParallel (gloo, one rank, CPU): its reducer's bucket sizes add up
    to every gradient once, graphmem's DDP bucket bytes."""
    model = tiny_gpt()
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        ddp = DistributedDataParallel(model)
        ddp(torch.randint(0, 512, (2, 16))).float().sum().backward()
        logged = ddp._get_ddp_logging_data()
    finally:
        dist.destroy_process_group()
    bucket_bytes = sum(int(size) for size in str(logged["bucket_sizes"]).split(","))
    assert logged["gradient_as_bucket_view"] == 0
    analysis = analyze_torch(tiny_gpt(), ["2x16:int64"], train=True, optimizer="sgd")
    report = with_distributed(analysis, DistributedConfig("ddp", 1))
    assert report.distributed is not None
    assert report.distributed.per_rank.buckets_bytes == bucket_bytes == 4 * PSI


@pytest.mark.torch
def test_with_distributed_needs_training() -> None:
    analysis = analyze_torch(tiny_gpt(), ["2x16:int64"])
    with pytest.raises(GraphmemError, match="--train"):
        with_distributed(analysis, DistributedConfig("zero3", 4))


@pytest.mark.torch
def test_cli_json_per_rank_and_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", "tests/models.py:tiny_gpt", "--input", "2x16:int64", "--train",
                 "--gpus", "4", "--strategy", "zero2", "--gpu", "t4", "--no-html",
                 "--reduce-bucket-size", "1000", "--json", "-"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["config"]["strategy"] == "zero2" and result["config"]["gpus"] == 4
    assert result["config"]["tensor_parallel"] == 1
    per_rank = result["memory"]["per_rank"]
    parts = ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes",
             "temporaries_bytes", "activations_bytes", "gathered_bytes", "buckets_bytes")
    assert per_rank["total_bytes"] == sum(per_rank[k] for k in parts)
    assert per_rank["buckets_bytes"] == 1000 * 4
    rows = result["memory"]["fit_by_strategy"]
    assert [row["strategy"] for row in rows] == list(STRATEGIES)
    assert all(row["min_gpus"] == 1 for row in rows)  # 3 MiB fits a T4


@pytest.mark.parametrize("argv, message", [
    (["--gpus", "4"], "add --train"),
    (["--train", "--gpus", "0"], "--gpus 0"),
    (["--train", "--strategy", "zero9"], "--strategy zero9: choose one of ddp, zero1"),
])
def test_cli_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", "tests/models.py:tiny_gpt", "--input", "2x16:int64", "--no-html",
                 *argv])
    assert code == 2
    assert message in capsys.readouterr().err


def test_replace_keeps_layout_checks(hand: TrainingProfile) -> None:
    config = replace(DistributedConfig("zero2", 2), layout="fp8")
    with pytest.raises(GraphmemError, match="--state-layout fp8"):
        per_rank_memory(hand, config)


@pytest.mark.slow
@pytest.mark.torch
def test_terminal_explains_a_bucket_larger_than_the_model(
        capsys: pytest.CaptureFixture[str]) -> None:
    # DeepSpeed's default reduce buffer (5e8 elements) dwarfs a tiny model: say why, and how
    # to set it, instead of leaving a 1.9 GiB bucket next to kilobytes of parameters.
    from graphmem.cli.main import main

    argv = ["analyze", "tests/torch_models/small.py:build_tiny_gpt", "--input", "8x64:int64",
            "--train", "--gpus", "4", "--strategy", "zero2", "--no-html"]
    assert main(argv) == 0
    assert "--reduce-bucket-size sets it" in " ".join(capsys.readouterr().out.split())
    assert main([*argv, "--reduce-bucket-size", "1000"]) == 0
    assert "--reduce-bucket-size sets it" not in " ".join(capsys.readouterr().out.split())
