"""The PyTorch trace's speed-ups change no answer (issue 17, graphmem/frontends/torch/trace.py).

Five things make a trace cheaper: no full (oldest-generation) cyclic collection while it
runs, no TorchFunctionMetadataMode under every torch call, the eager lifetimes returning at
once from the device queries C++ code makes, graphmem's three observers (routing, gradient
sums, lifetimes) as one dispatch mode instead of three stacked ones (observed.py), and the
GraphModule's Python code made only when asked for. Each test compares the trace with the
slow path (all five undone: the three observers stacked as three modes again, in the order
they had) or checks the one thing that changed. The conversion to
graphmem's IR reads each op's schema once and walks node arguments without pytree: compared
with the per-node schema walk and pytree on every node of a step; it runs with the cyclic
collector paused, as the ONNX importer's build does (graphmem/core/collector.py).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
from torch.utils._pytree import tree_leaves

from graphmem.core.conventions import Amp, TrainingOptions
from graphmem.devices.gpus import find_gpu
from graphmem.frontends.torch import fx_convert, import_step, observed, trace
from graphmem.frontends.torch.accumulation import EngineAccumulations
from graphmem.frontends.torch.import_step import tensor_specs
from graphmem.frontends.torch.kernel_choice import cuda_target
from graphmem.frontends.torch.routing import RoutedValues
from graphmem.frontends.torch.trace import TracedStep, trace_model
from tests.models import TinyCNN, tiny_gpt, tiny_llama

pytestmark = pytest.mark.torch
H100, A100 = (cuda_target(find_gpu(name)) for name in ("h100-sxm", "a100-80gb"))


@pytest.fixture
def default_collector(collector_on: None) -> Iterator[None]:
    """The cycle collector on at CPython's default thresholds, as it was after."""
    thresholds = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*thresholds)


def _slow_path(patch: pytest.MonkeyPatch) -> None:
    patch.setattr(trace, "_MAKE_FX_OPTIONS", {})
    patch.setattr(observed, "_DEVICE_QUERY", object())  # matches no op
    patch.setattr(trace, "_young_collections_only", contextlib.nullcontext)
    patch.setattr(trace, "_observed", _stacked_modes)
    patch.setattr(trace, "_lazy_graph_module", contextlib.nullcontext)


class _OneObserver(TorchDispatchMode):
    """One observer as a dispatch mode of its own, as each was before observed.py."""

    supports_higher_order_operators = True

    def __init__(self, handle: Callable[..., Any]) -> None:
        super().__init__()
        self.handle = handle

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self.handle(func, args, kwargs)


def _run_then(note: Callable[[Any, Any, Any, Any], None]) -> Callable[..., Any]:
    def handle(func: Any, args: Any, kwargs: Any) -> Any:
        out = func(*args, **(kwargs or {}))
        note(func, args, kwargs, out)
        return out

    return handle


def _stacked_modes(step: Callable[..., Any], lifetimes: observed.EagerLifetimes,
                   routed: RoutedValues, kernels: Any, sums: EngineAccumulations
                   ) -> Callable[..., Any]:
    """The three observers as three modes, lifetimes innermost and routing outermost."""
    def run(*args: Any) -> Any:
        with (_OneObserver(_run_then(lambda func, _, __, out: lifetimes.seen(func, out))),
              _OneObserver(_run_then(sums.seen)), _OneObserver(routed.dispatch),
              kernels if kernels is not None else contextlib.nullcontext()):
            try:
                return step(*args)
            finally:
                sums.close()

    return run


def _described(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return tuple(value.shape), value.dtype, value.stride()
    if isinstance(value, list | tuple):
        return [_described(item) for item in value]
    return repr(value)


def _signature(traced: TracedStep) -> tuple[Any, ...]:
    """Everything graphmem reads from a trace: nodes, their annotations and values, the eager
    lifetimes, the kernels, the placeholders' roles."""
    nodes = [(n.op, n.name, str(n.target), str(n.args), str(n.kwargs), n.meta.get("custom"),
              _described(n.meta.get("val"))) for n in traced.graph_module.graph.nodes]
    return nodes, traced.released_after, traced.kernels, traced.leaf_roles


class Routed(nn.Module):
    """The routing's paths other than a plain op: a top-2 choice, `nonzero` and `x[mask]` in
    static form, and `item()` read for a branch."""

    def __init__(self) -> None:
        super().__init__()
        self.router, self.expert = nn.Linear(8, 4), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, chosen = torch.topk(self.router(x), 2, dim=-1)
        picked = (chosen == 1).any(-1)  # the tokens that chose expert 1
        if picked.nonzero().shape[0] == 0 or chosen.max().item() > 3:
            return x
        return self.expert(x[picked]).sum() + x.sum()


class SliceReads(nn.Module):
    """A state read slice by slice: its slices' gradients summed by the engine, in place."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = torch.tanh(self.fc(x))  # [4, 8, 16]
        return sum((state[i] * 3).mean() for i in range(4))


class Branches(nn.Module):
    """torch.cond, a higher-order op, through the observers."""

    def __init__(self) -> None:
        super().__init__()
        self.wide, self.narrow = nn.Linear(16, 16), nn.Linear(16, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.mean() > 0, lambda x: torch.relu(self.wide(x)),
                          lambda x: self.narrow(x), (x,))


CASES: dict[str, tuple[Callable[[], nn.Module], str, TrainingOptions | None, Any]] = {
    "gpt, bf16 step on an H100": (tiny_gpt, "2x64:int64", TrainingOptions("adamw", Amp.BF16),
                                  H100),
    "llama, fp16 step on an A100 (loss scaling)": (
        tiny_llama, "2x64:int64", TrainingOptions("adam", Amp.FP16), A100),
    "cnn, sgd step on the CPU": (TinyCNN, "4x3x32x32", TrainingOptions("sgd"), None),
    "gpt, inference on an H100": (tiny_gpt, "2x64:int64", None, H100),
    "routed, sgd step": (Routed, "12x8", TrainingOptions("sgd"), None),
    "slice reads, sgd step": (SliceReads, "4x8x16", TrainingOptions("sgd"), None),
    "torch.cond, inference": (Branches, "4x16", None, None),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_the_fast_trace_is_the_slow_trace(case: str, monkeypatch: pytest.MonkeyPatch,
                                          default_collector: None) -> None:
    build, spec, training, cuda = CASES[case]
    torch.manual_seed(0)
    model = build()
    specs = tensor_specs([spec])
    fast = trace_model(model, specs, training, cuda)
    with monkeypatch.context() as patch:
        _slow_path(patch)
        slow = trace_model(model, specs, training, cuda)
    assert _signature(fast) == _signature(slow)
    assert fast.released_after  # the lifetimes were recorded, not skipped


class Recording(nn.Module):
    """Notes the collector's thresholds while its forward is traced; raises if asked."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.fail = fail
        self.seen: list[tuple[int, ...]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(gc.get_threshold())
        if self.fail:
            raise ValueError("a failing model")
        return self.fc(x)


def test_no_full_collection_while_tracing_and_thresholds_restored(
        default_collector: None) -> None:
    model = Recording()
    trace_model(model, tensor_specs(["2x8"]), TrainingOptions())
    assert model.seen == [(700, 10, trace._NO_FULL_COLLECTION)]  # young ones still run
    assert gc.get_threshold() == (700, 10, 10)


def test_thresholds_restored_after_a_failing_trace(default_collector: None) -> None:
    with pytest.raises(Exception, match="a failing model"):
        trace_model(Recording(fail=True), tensor_specs(["2x8"]), None)
    assert gc.get_threshold() == (700, 10, 10)


class Cycled(nn.Module):
    """`hidden` is left in a reference cycle: only the cycle collector frees it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.fc(x))
        box: list[Any] = [hidden]
        box.append(box)
        del box, hidden
        out = x
        for _ in range(100):  # enough allocations for several young collections
            out = out * 1.5
        return out


def test_a_tensor_only_a_cycle_holds_is_still_released_during_the_trace(
        default_collector: None) -> None:
    traced = trace_model(Cycled(), tensor_specs(["4x16"]), None)
    last = list(traced.graph_module.graph.nodes)[-2].name  # the last op, before the output
    assert "relu" in traced.released_after
    assert traced.released_after["relu"] != last  # by a young collection, not at the end


class ModeStack(nn.Module):
    """Notes the torch function modes and dispatch modes active while its forward is traced."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.modes: list[str] = []
        self.dispatch_modes: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.modes = [type(mode).__name__ for mode in _get_current_function_mode_stack()]
        self.dispatch_modes = [type(mode).__name__ for mode in _get_current_dispatch_mode_stack()]
        return self.fc(x)


@pytest.mark.skipif(not trace._MAKE_FX_OPTIONS, reason="this PyTorch's make_fx has no such option")
def test_no_torch_fn_metadata_mode_under_the_trace() -> None:
    """make_fx's TorchFunctionMetadataMode only feeds node.meta["torch_fn"], which its plain
    tracer never even writes: the trace runs without it, and the graph is the same."""
    model = ModeStack()
    trace_model(model, tensor_specs(["2x8"]), TrainingOptions(), H100)
    assert "CudaKernels" in model.modes  # the stack was seen
    assert "TorchFunctionMetadataMode" not in model.modes


def _schema_aliases(fx_node: torch.fx.Node) -> dict[int, Any]:
    """The schema walk fx_convert made for every node before its per-op plans (the oracle)."""
    schema = getattr(fx_node.target, "_schema", None)
    if schema is None:
        return {}
    packet = getattr(fx_node.target, "overloadpacket", None)
    if packet is not None and packet.__name__ in fx_convert.STORAGE_SHARING_OPS:
        return {0: fx_node.args[0]}
    if len(schema.returns) == 1 and isinstance(fx_node.meta.get("val"), list | tuple):
        where = fx_convert._aliased_argument(schema, schema.returns[0].alias_info)
        base = fx_convert._argument(fx_node, *where) if where is not None else None
        return dict.fromkeys(range(len(fx_node.meta["val"])), base) if base is not None else {}
    arg_by_set = {frozenset(a.alias_info.before_set): fx_convert._argument(fx_node, i, a.name)
                  for i, a in enumerate(schema.arguments)
                  if a.alias_info is not None and a.alias_info.before_set}
    return {index: arg_by_set[frozenset(r.alias_info.before_set)]
            for index, r in enumerate(schema.returns)
            if r.alias_info is not None and frozenset(r.alias_info.before_set) in arg_by_set}


@pytest.mark.slow
def test_per_op_alias_plans_and_argument_walk_match_the_per_node_ones() -> None:
    """fx_convert reads each op's schema once (`_alias_plan`) and walks arguments without
    pytree (`_nodes_in`): the same aliases and the same inputs, in order, on every node of an
    AMP training step (views, in-place optimizer updates, split / unbind lists)."""
    build, spec, training, cuda = CASES["llama, fp16 step on an A100 (loss scaling)"]
    traced = trace_model(build(), tensor_specs([spec]), training, cuda)
    nodes = [n for n in traced.graph_module.graph.nodes if n.op == "call_function"]
    lists = [n for n in nodes if isinstance(n.meta.get("val"), list | tuple)]
    assert lists and any(fx_convert._output_aliases(n) for n in nodes)
    for node in nodes:
        assert fx_convert._output_aliases(node) == _schema_aliases(node), node.format_node()
        tree = (node.args, node.kwargs)
        walked = [leaf for leaf in tree_leaves(tree) if isinstance(leaf, torch.fx.Node)]
        assert fx_convert._nodes_in(tree, []) == walked


def test_the_conversion_runs_with_the_collector_paused(
        collector_on: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    convert = import_step.graph_from_trace

    def recording(*args: Any) -> Any:
        seen.append(gc.isenabled())
        return convert(*args)

    monkeypatch.setattr(import_step, "graph_from_trace", recording)
    import_step.import_torch(Recording(), ["2x8"], "recording")
    assert seen == [False]
    assert gc.isenabled()


def test_graphmems_observers_are_one_dispatch_mode_above_make_fxs() -> None:
    """Each Python dispatch mode costs every op a re-dispatch: graphmem adds one above
    make_fx's proxy mode, not one per observer."""
    model = ModeStack()
    trace_model(model, tensor_specs(["2x8"]), TrainingOptions(), H100)
    proxy = model.dispatch_modes.index("ProxyTorchDispatchMode")
    assert model.dispatch_modes[proxy + 1:] == ["ObservedOps"]


def test_the_traced_code_is_made_when_asked_for_and_holds_the_stolen_sums() -> None:
    """The GraphModule's code is not written during the trace (torch's _LazyGraphModule),
    and when read it is the graph's as `steal` left it: 4 slice gradients of the state, 3
    sums by the engine, all in place into the first (as test_torch_grad_accumulation's scan)."""
    from torch.fx._lazy_graph_module import _LazyGraphModule

    traced = trace_model(SliceReads(), tensor_specs(["4x8x16"]), TrainingOptions("sgd"))
    module = traced.graph_module
    assert isinstance(module, _LazyGraphModule) and module._needs_recompile()
    assert module.code.count("torch.ops.aten.add_.Tensor(") == 3
    assert not module._needs_recompile()  # made once, on the read
