"""requires_grad=False is honoured by the trace: a frozen parameter gets no gradient and no
optimizer state, and autograd saves only what the trainable parameters' backward needs
(graphmem/frontends/torch/trace.py). Checked against a real CPU step of the same model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graphmem import analyze_torch
from graphmem.core.conventions import TrainingOptions
from graphmem.core.ir import Role
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.import_step import import_torch
from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.verify.runners.torch_runner import measure_step
from tests.helpers.torch_nets import MLP

pytestmark = pytest.mark.torch
SPEC = "32x64"


def half_frozen() -> MLP:
    """MLP(64, depth 4): blocks 0 and 1 frozen, blocks 2 and 3 and the head trained."""
    torch.manual_seed(0)
    model = MLP(width=64, depth=4)
    for parameter in model.blocks[:2].parameters():
        parameter.requires_grad_(False)
    return model


def trainable_names(model: nn.Module) -> list[str]:
    return [name for name, p in model.named_parameters() if p.requires_grad]


def graph_of(model: nn.Module, optimizer: str) -> object:
    return import_torch(model, [SPEC], "mlp", TrainingOptions(optimizer)).graph  # type: ignore[arg-type]


@pytest.mark.parametrize("optimizer, slots", [("sgd", ()), ("momentum", ("momentum_buffer",)),
                                              ("adam", ("exp_avg", "exp_avg_sq"))])
def test_gradients_and_optimizer_state_exactly_for_the_trainable_half(
        optimizer: str, slots: tuple[str, ...]) -> None:
    model = half_frozen()
    graph = graph_of(model, optimizer)
    trained = trainable_names(model)
    assert len(trained) == 10  # blocks 2, 3: two Linear each (weight, bias); the head
    state = sorted(v.name for v in graph.values.values() if v.role is Role.OPTIMIZER_STATE)
    assert state == sorted(f"{slot}[{name}]" for slot in slots for name in trained)
    # one gradient per trainable parameter, of its size: 2 x (64*256 + 256 + 256*64 + 64)
    # + 64*10 + 10 = 2 x 33,088 + 650 = 66,826 elements = 267,304 fp32 bytes
    gradients = [v for v in graph.values.values() if v.role is Role.GRADIENT]
    assert len(gradients) == 10
    assert sum(int(v.nbytes) for v in gradients) == 66_826 * 4 == 267_304


def test_frozen_layers_save_nothing_for_a_backward_they_do_not_have() -> None:
    # Freezing the first blocks, whose inputs reach no trainable parameter, drops what their
    # backward would have saved: block 0's input and GELU input (a [32, 256] each) and so on
    frozen = graph_of(half_frozen(), "sgd")
    torch.manual_seed(0)
    trained = graph_of(MLP(width=64, depth=4), "sgd")

    def saved_bytes(graph: object) -> int:
        return sum(int(v.nbytes) for v in graph.values.values()  # type: ignore[attr-defined]
                   if v.role is Role.SAVED_ACTIVATION)

    assert saved_bytes(frozen) < saved_bytes(trained)
    readers = {c.name for v in frozen.values.values() if v.role is Role.PARAMETER  # type: ignore[attr-defined]
               and v.name.startswith("blocks.0") for c in v.consumers}
    assert all("backward" not in name and "mm_" not in name[:3] for name in readers)


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_matches_a_real_cpu_step(optimizer: str) -> None:
    # measured on this CPU: equal to the byte (sgd 316,720) or within 4 bytes (adam)
    spec = [parse_tensor_spec(SPEC)]
    analysis = analyze_torch(half_frozen(), spec, train=True, optimizer=optimizer, plan=False,
                             suggest=False, amp_policy="cpu")
    measured = measure_step(half_frozen(), spec, True, optimizer)
    assert int(analysis.liveness.activation_peak_bytes) == pytest.approx(
        measured.peak_bytes, abs=64)


def test_a_model_with_nothing_to_train_is_refused() -> None:
    model = nn.Linear(8, 8).requires_grad_(False)
    with pytest.raises(GraphmemError, match="requires_grad=False"):
        import_torch(model, ["2x8"], "frozen", TrainingOptions())
