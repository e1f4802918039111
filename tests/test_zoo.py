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
from tests.zoo_models import ZOO

pytestmark = [pytest.mark.slow, pytest.mark.torch]

ROUTING = ("routing is data: balanced routing predicted, a real router's choice measured "
           "(tests/test_moe.py checks that balanced and worst bracket it)")
SCRATCH = ("kernel scratch (oneDNN's convolution and its backward) is not predicted yet: "
           "issue 22 item 5")
# (architecture, step) -> why its peak is off by more than 2% (docs/zoo.md has the numbers)
ACCUMULATION = ("autograd accumulates a gradient used many times (a scan loop's select "
                "backwards) in place; the trace holds an out-of-place add")
TENSOR_GAPS: dict[tuple[str, str], str] = {
    ("mixtral", "inference"): ROUTING,
    ("qwen2_moe", "inference"): ROUTING,
    ("mamba", "training"): ACCUMULATION,
    ("falcon_mamba", "training"): ACCUMULATION,
    ("jamba", "training"): ACCUMULATION,
    ("convbert", "inference"): "a [32, 16] projection held 2,048 B longer than eager holds it",
    ("convnextv2", "training"): "8,192 B under a real step; not yet explained",
}
ALLOCATOR_GAPS: dict[tuple[str, str], str] = {
    **{(name, step): SCRATCH for name in ("resnet", "regnet", "segformer", "tiny_resnet",
                                          "tiny_vgg", "tiny_mobilenet", "tiny_unet")
       for step in ("inference", "training")},
    ("convnext", "training"): SCRATCH,
}


@functools.cache
def row(name: str, train: bool) -> ZooRow:
    return check(next(entry for entry in ZOO if entry.name == name), train)


def cases(gaps: dict[tuple[str, str], str] | None = None) -> list[object]:
    found = []
    for entry in ZOO:
        for step in ("inference", "training"):
            reason = (gaps or {}).get((entry.name, step))
            marks = [pytest.mark.xfail(reason=reason, strict=False)] if reason else []
            found.append(pytest.param(entry.name, step == "training", marks=marks,
                                      id=f"{entry.name}-{step}"))
    return found


def test_the_zoo_covers_every_family() -> None:
    families = {entry.family for entry in ZOO}
    assert families == {"decoder", "encoder", "encoder-decoder", "vision", "speech",
                        "multimodal", "moe", "ssm", "cnn"}
    assert len(ZOO) >= 40


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
