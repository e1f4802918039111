"""A Conv1d's scratch on the CPU (graphmem/runtime_models/conv1d_view.py `as_conv2d`): PyTorch
runs it as a 2-D convolution of height 1, so the 2-D rules price it. Each row's rule is checked
against the forward kernel's own allocations measured with torch.profiler (shapes other than
Autoformer's, which the rule was found on)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graphmem import analyze_torch
from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.runtime_models.torch_cpu import scratch_bytes
from graphmem.verify.runners import torch_runner

pytestmark = [pytest.mark.torch]

# (batch, c_in, c_out, length, kernel, stride, groups)
ROWS = [
    (2, 32, 7, 20, 3, 1, 1),  # Autoformer's trend projection
    (2, 16, 16, 64, 3, 1, 1),
    (4, 8, 24, 100, 5, 2, 1),
    (2, 64, 64, 32, 1, 1, 1),
    (2, 12, 40, 50, 3, 1, 1),
    (8, 32, 32, 40, 4, 1, 32),  # depthwise, as Mamba's
]


def _measured(conv: nn.Module, x: torch.Tensor) -> int:
    with torch.no_grad():
        conv(x)  # warm up: oneDNN's primitive cache
        with torch_runner._quiet_stderr(), torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as profile:
            conv(x)
    found = [k for k in torch_runner.kernel_scratch(profile) if k.kernel == "aten::convolution"]
    assert len(found) == 1
    return found[0].scratch_bytes


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[1]}to{r[2]}-k{r[4]}-s{r[5]}-g{r[6]}" for r in ROWS])
def test_conv1d_scratch_is_the_measured_one(row: tuple[int, ...]) -> None:
    batch, c_in, c_out, length, kernel, stride, groups = row
    torch.manual_seed(0)
    conv = nn.Conv1d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False).eval()
    analysis = analyze_torch(conv, [parse_tensor_spec(f"{batch}x{c_in}x{length}")], plan=False,
                             suggest=False)
    node = next(n for n in analysis.graph.nodes if n.op_type == "aten.convolution.default")
    assert scratch_bytes(node, {}, torch.get_num_threads()) == _measured(
        conv, torch.randn(batch, c_in, length))


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_only_a_bias_is_padded_to_onednns_block(bias: bool) -> None:
    # 32 -> 7 channels, 3x3, 2x32x8x8 fp32: oneDNN pads a bias to 16 channels + 128 B (16 x 4
    # + 128 = 192 B) while it runs; with no bias there is none to pad
    torch.manual_seed(0)
    conv = nn.Conv2d(32, 7, 3, padding=1, bias=bias).eval()
    analysis = analyze_torch(conv, [parse_tensor_spec("2x32x8x8")], plan=False, suggest=False)
    node = next(n for n in analysis.graph.nodes if n.op_type == "aten.convolution.default")
    assert scratch_bytes(node, {}, torch.get_num_threads()) == _measured(
        conv, torch.randn(2, 32, 8, 8))
