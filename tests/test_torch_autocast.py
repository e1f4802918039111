"""CUDA's autocast policy on top of CPU autocast (graphmem/frontends/torch/autocast.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from graphmem import analyze_torch
from graphmem.core.ir import DType, Phase
from graphmem.frontends.torch.autocast import CudaAutocastPolicy
from tests.torch_models.small import TinyGPT

GPT_INPUT = "8x64:int64"


def _under_cuda_policy(fn):
    with torch.autocast("cpu", dtype=torch.bfloat16), CudaAutocastPolicy():
        return fn()


def test_ops_cuda_runs_in_fp32_return_fp32_and_matmul_stays_bf16() -> None:
    x = torch.randn(4, 8)
    w = torch.randn(8, 8)

    def step() -> dict[str, torch.dtype]:
        y = x @ w  # lower precision on both devices
        return {"matmul": y.dtype, "softmax": torch.softmax(y, -1).dtype,
                "layer_norm": nn.functional.layer_norm(y, (8,)).dtype,
                "exp": y.exp().dtype, "sum": y.sum().dtype, "relu": torch.relu(y).dtype}

    dtypes = _under_cuda_policy(step)
    assert dtypes == {"matmul": torch.bfloat16, "softmax": torch.float32,
                      "layer_norm": torch.float32, "exp": torch.float32, "sum": torch.float32,
                      "relu": torch.bfloat16}  # relu: no policy, keeps its input's dtype


def test_plain_cpu_autocast_leaves_softmax_in_bf16() -> None:
    # The difference the policy exists for: without it softmax of a bf16 tensor stays bf16.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.randn(4, 8) @ torch.randn(8, 8)
        assert torch.softmax(y, -1).dtype == torch.bfloat16


def test_cross_entropy_matches_the_composite_cuda_runs() -> None:
    logits = torch.randn(6, 10).bfloat16()
    target = torch.randint(0, 10, (6,))
    ours = _under_cuda_policy(lambda: nn.functional.cross_entropy(logits, target))
    # CUDA: log_softmax(logits, dtype=float32) then nll_loss; same value as fp32 CE
    expected = nn.functional.cross_entropy(logits.float(), target)
    assert ours.dtype == torch.float32
    assert torch.allclose(ours, expected, atol=1e-5)


def test_explicit_dtype_is_left_alone() -> None:
    y = torch.randn(4, 8).bfloat16()
    out = _under_cuda_policy(lambda: torch.softmax(y, -1, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16


@pytest.mark.slow
@pytest.mark.torch
def test_cuda_policy_holds_more_of_a_transformer_than_cpu_autocast() -> None:
    # fp32 softmax outputs, layer_norm outputs and log-probs are saved for backward on a GPU:
    # the CUDA-policy trace holds more than the CPU one (measured on an H100: 3,943,936 B,
    # benchmarks/results/torch_accuracy.md; CPU policy 2,603,784 B, CUDA policy 3,652,360 B).
    cpu = analyze_torch(TinyGPT(), [GPT_INPUT], train=True, amp="bf16", amp_policy="cpu",
                        plan=False, suggest=False)
    cuda = analyze_torch(TinyGPT(), [GPT_INPUT], train=True, amp="bf16", plan=False,
                         suggest=False)
    assert int(cuda.liveness.activation_peak_bytes) > 1.3 * int(cpu.liveness.activation_peak_bytes)


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_checkpointed_blocks_recompute_under_the_cuda_policy(amp: str) -> None:
    # checkpoint restores autocast for the recomputation in backward, graphmem restores the
    # CUDA policy on top of it: the recomputed layer_norm is fp32 again, as the forward's was
    # (without the policy it came out bf16/fp16 and checkpoint refused "different metadata")
    whole = analyze_torch(TinyGPT(), [GPT_INPUT], train=True, amp=amp, plan=False,
                          suggest=False)
    blocks = analyze_torch(TinyGPT(), [GPT_INPUT], train=True, amp=amp, plan=False,
                           suggest=False, checkpoints=["blocks.0", "blocks.1"])
    recomputed = [node for node in blocks.graph.nodes if node.phase == Phase.BACKWARD
                  and node.op_type == "aten.native_layer_norm.default"]
    assert [n.module_path for n in recomputed] == [f"blocks.{i}.norm{j}" for i in (1, 0)
                                                   for j in (1, 2)]
    assert {n.outputs[0].dtype for n in recomputed} == {DType.FLOAT32}
    assert (int(blocks.liveness.activation_peak_bytes)
            < int(whole.liveness.activation_peak_bytes))


def test_the_policy_is_gone_once_left() -> None:
    # the kernels are registered for the trace only: CPU autocast is its own again after
    y = torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _under_cuda_policy(lambda: torch.softmax(y @ y.T, -1)).dtype == torch.float32
        assert torch.softmax(y @ y.T, -1).dtype == torch.bfloat16


class SelfCheckpointed(TinyGPT):
    """TinyGPT whose forward checkpoints its own blocks (as a model with Hugging Face's
    gradient_checkpointing_enable does): graphmem sets none of it up."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.lm_head(self.norm(x))


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_a_model_checkpointing_itself_recomputes_under_the_cuda_policy(amp: str) -> None:
    # the policy is part of autocast, which torch.utils.checkpoint restores for the
    # recomputation; a function mode would be gone there (autograd runs backward without
    # them) and checkpoint refused the bf16 layer_norm ("different metadata")
    own = analyze_torch(SelfCheckpointed(), [GPT_INPUT], train=True, amp=amp, plan=False,
                        suggest=False)
    ours = analyze_torch(TinyGPT(), [GPT_INPUT], train=True, amp=amp, plan=False,
                         suggest=False, checkpoints=["blocks.0", "blocks.1"])
    # the same step as graphmem's own checkpointing of the same blocks
    assert int(own.liveness.activation_peak_bytes) == int(ours.liveness.activation_peak_bytes)
