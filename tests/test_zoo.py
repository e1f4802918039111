"""The op-coverage zoo (tests/zoo_models.py; table and gaps in docs/zoo.md): transformers
architectures at toy widths (decoders, encoders, encoder-decoders, vision, speech,
multimodal, mixture of experts, state-space and hybrid) and plain torch CNNs, inference and an
AdamW training step: no unsupported op, parameters equal to the real model's sum of numel
(tied weights once), MACs within 1% of FlopCounterMode's for the same step (eager attention,
eager experts: FlopCounterMode counts neither the CPU flash kernel nor `_grouped_mm`), and the
predicted peak within 2% of a real CPU step's: its live tensors, and the allocator's peak with
kernels' scratch.

Each architecture and step is analysed, counted and measured once (a cache over the module);
the gaps the zoo still shows are expected failures with their cause, never skips.
`python benchmarks/zoo_table.py` prints the table.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("transformers")

from tests.helpers.zoo import ZooRow, check
from tests.zoo_models import TRAINING_MEASURED_ONCE, ZOO

pytestmark = [pytest.mark.slow, pytest.mark.torch]

ROUTING = ("routing is data: balanced routing predicted, a real router's choice measured "
           "(test_balanced_and_worst_routing_bracket_the_real_step checks the bracket, "
           "test_moe_peak_matches_the_step_routed_as_the_policy_routes the mechanism)")
# (architecture, step) -> why its peak is off by more than 2% (docs/zoo.md has the numbers)
TENSOR_GAPS: dict[tuple[str, str], str] = {
    ("mixtral", "inference"): ROUTING,
    ("qwen2_moe", "inference"): ROUTING,
    # the second round: inference, and training where the real routing moves the peak
    # (measured with the policy's routing each is within 0.01%)
    **dict.fromkeys([("qwen3_moe", "inference"), ("qwen3_moe", "training"),
                     ("gpt_oss", "inference"),
                     ("gpt_oss", "training"), ("phimoe", "inference"),
                     ("deepseek_v3", "training"), ("deepseek_v2", "training"),
                     # the third round: MiniMax -3.64%; Switch Transformers' training +5.98%
                     # (its capacity drops the real router's overflow, balanced drops none)
                     ("minimax", "inference"), ("switch_transformers", "training")], ROUTING),
    ("convbert", "inference"): (
        "transformers skips the all-ones attention mask after reading its values in eager "
        "(masking_utils `_ignore_bidirectional_mask_sdpa`) but builds it for a fake tensor "
        "(`is_tracing`): the trace holds one [2, 1, 16, 16] mask, 2,048 B, eager never makes; "
        "left on purpose (docs/zoo.md: the branch is taken before any value is read)"),
}
# (architecture, step) -> why the torch-cpu runtime model is off the allocator's peak by more
# than 2% (the live tensors are right: 0.00% for each)
ALLOCATOR_GAPS: dict[tuple[str, str], str] = {
    # the fifth round
    ("channels_last_bf16", "training"): (
        "oneDNN's bf16 channels-last weight-gradient scratchpad is not modelled (one "
        "allocation inside convolution_backward, independent of the batch: 162,308 B for "
        "16 -> 16 channels 3x3 at 32x32, 61,956 B at 16x16, two threads): -15.18%; the live "
        "tensors are within 0.03%"),
}


@functools.cache
def row(name: str, train: bool) -> ZooRow:
    return check(next(entry for entry in ZOO if entry.name == name), train)


def cases(gaps: dict[tuple[str, str], str] | None = None) -> list[object]:
    found = []
    for entry in ZOO:
        for step in ("inference", "training"):
            if step == "training" and entry.name in TRAINING_MEASURED_ONCE:
                continue  # measured once (docs/zoo.md): no op the suite's rows lack
            reason = (gaps or {}).get((entry.name, step))
            marks = [pytest.mark.xfail(reason=reason, strict=False)] if reason else []
            found.append(pytest.param(entry.name, step == "training", marks=marks,
                                      id=f"{entry.name}-{step}"))
    return found


def test_the_zoo_covers_every_family() -> None:
    families = {entry.family for entry in ZOO}
    assert families == {"decoder", "encoder", "encoder-decoder", "vision", "speech",
                        "multimodal", "moe", "ssm", "cnn", "diffusion",
                        # the fourth round's hand-written models (tests/zoo_custom.py)
                        "recommender", "graph", "spectral", "custom", "timeseries",
                        # the fifth round's (tests/zoo_custom2.py)
                        "gan",
                        # EnCodec (the third round's neural codec)
                        "audio"}
    assert len(ZOO) >= 80


@pytest.mark.parametrize(("name", "train"), cases())
def test_every_op_is_priced(name: str, train: bool) -> None:
    assert row(name, train).unsupported == {}


@pytest.mark.parametrize(("name", "train"), cases())
def test_parameters_are_the_real_models(name: str, train: bool) -> None:
    result = row(name, train)
    assert result.params == result.real_params


@pytest.mark.parametrize(("name", "train"), cases())
def test_macs_match_flop_counter_mode(name: str, train: bool) -> None:
    assert row(name, train).macs_ratio == pytest.approx(1.0, rel=0.01)


@pytest.mark.parametrize(("name", "train"), cases(TENSOR_GAPS))
def test_peak_matches_a_real_steps_tensors(name: str, train: bool) -> None:
    assert abs(row(name, train).peak_error) <= 0.02


@pytest.mark.parametrize(("name", "train"), cases({**TENSOR_GAPS, **ALLOCATOR_GAPS}))
def test_peak_matches_the_allocators_with_scratch(name: str, train: bool) -> None:
    assert abs(row(name, train).allocator_error) <= 0.02


def worst_routing_peak(name: str, train: bool) -> int:
    from graphmem import analyze_torch
    from graphmem.frontends.torch.loader import parse_tensor_spec
    from tests.helpers.zoo import built

    entry = next(entry for entry in ZOO if entry.name == name)
    analysis = analyze_torch(built(entry), [parse_tensor_spec(t) for t in entry.inputs],
                             train=train, optimizer="adamw" if train else None, plan=False,
                             suggest=False,
                             moe_routing="worst")
    return int(analysis.liveness.activation_peak_bytes)


MOE = [entry.name for entry in ZOO if entry.family == "moe"]


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("name", MOE)
def test_moe_peak_matches_the_step_routed_as_the_policy_routes(name: str, train: bool) -> None:
    # A real router's choice is data; graphmem assumes balanced routing. Run the real step
    # with every choice made as graphmem's policy makes it (tests/helpers/zoo_routing.py):
    # what is left is graphmem's mechanism, within 2% (measured 0.00 to -0.01% on all seven,
    # inference and training; Mixtral inference 64,672 B both, GPT-OSS training 549,392 B
    # predicted against 549,456 B)
    from tests.helpers.zoo import policy_routed_peak_bytes

    entry = next(entry for entry in ZOO if entry.name == name)
    predicted = row(name, train).predicted_peak_bytes
    assert predicted == pytest.approx(policy_routed_peak_bytes(entry, train), rel=0.02)


@pytest.mark.parametrize("name", MOE)
def test_balanced_and_worst_routing_bracket_the_real_step(name: str) -> None:
    # inference, where the peak is inside the experts: balanced routing (the default) is the
    # least a per-expert loop holds, --moe-routing worst (the top_k experts take every token)
    # the most; the real router's choice on random weights lies between (the profiler's
    # 4-byte scalars aside: 0.1%). Measured: Mixtral 64,672 <= 70,800 <= worst, Qwen2-MoE
    # 62,624 <= about 64,200 <= worst. Training peaks past the experts (gradients and AdamW's
    # update), where routing moves little: those rows pass the 2% bar on their own.
    result = row(name, False)
    assert result.predicted_peak_bytes <= result.measured_peak_bytes * 1.001
    assert result.measured_peak_bytes <= worst_routing_peak(name, False) * 1.001
