"""A model that checkpoints itself (`torch.utils.checkpoint` in its own forward), traced as
graphmem's own checkpointing of the same blocks traces it, on the CPU and for a GPU.

The recomputation runs in backward, inside autograd's engine: graphmem keeps its fake
parameters swapped in through backward (a model built on the meta device, as `file.py:fn`
builds it, failed with "found at least two devices, cpu and meta") and enters its CUDA kernel
choices again around each recomputed module (with --gpu a recomputed dropout saved a float
mask where the forward saved a bool one: CheckpointError "different metadata").
graphmem/frontends/torch/recompute.py."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from graphmem import analyze_torch  # noqa: E402
from graphmem.frontends.torch.loader import parse_tensor_spec  # noqa: E402
from tests.helpers.cli import Run  # noqa: E402

pytestmark = pytest.mark.torch

MODEL = '''
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 64)

    def forward(self, x):
        return self.down(nn.functional.dropout(torch.relu(self.up(x)), 0.1, self.training))


class Net(nn.Module):
    def __init__(self, own_checkpoints=True):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.own_checkpoints = own_checkpoints

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.own_checkpoints else block(x)
        return x


def build():
    return Net()
'''
INPUT = "512x64"
BLOCKS = ["blocks.0", "blocks.1", "blocks.2"]


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    path = tmp_path_factory.mktemp("own_checkpoints") / "model.py"
    path.write_text(MODEL)
    namespace: dict[str, object] = {}
    exec(compile(MODEL, str(path), "exec"), namespace)  # the test's own model, above
    return {"path": path, **namespace}


def peak(model: nn.Module, gpu: str | None, checkpoints: list[str] | None = None) -> int:
    result = analyze_torch(model, [parse_tensor_spec(INPUT)], train=True, gpu=gpu,
                           plan=False, suggest=False, checkpoints=checkpoints or [])
    assert result.costs.unsupported_ops == {}
    return int(result.liveness.activation_peak_bytes)


@pytest.mark.slow
@pytest.mark.parametrize("gpu", [None, "t4"])
def test_its_own_checkpoints_trace_as_graphmems(net: dict, gpu: str | None) -> None:
    make = net["Net"]
    own = peak(make(), gpu)
    ours = peak(make(own_checkpoints=False), gpu, BLOCKS)
    plain = peak(make(own_checkpoints=False), gpu)
    assert own == ours
    assert own < plain  # the blocks' activations are recomputed, not saved


@pytest.mark.parametrize("gpu", [pytest.param(None, marks=pytest.mark.slow), "t4"])
def test_a_meta_built_model_file_analyses(net: dict, run: Run, gpu: str | None) -> None:
    # `python -m graphmem analyze model.py:build --train [--gpu t4]` builds on meta
    args = ["analyze", f"{net['path']}:build", "--input", INPUT, "--train", "--json", "-",
            "--no-html"]
    code, out, err = run(*args, *(["--gpu", gpu] if gpu else []))
    assert code in (0, 1), err  # 1: a verdict that does not fit, not an error
    assert "error" not in err
    report = json.loads(out)
    make = net["Net"]
    assert report["memory"]["activation_peak_bytes"] == peak(make(), gpu)
