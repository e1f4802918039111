"""Trace a PyTorch model with fake tensors into one aten-level FX graph.

Inference traces the forward under no_grad in eval mode. Training traces ONE graph for the
whole step: forward and loss (under autocast for AMP), backward through the real autograd
graph (torch.autograd.grad), and the optimizer update as torch implements it (its functional
foreach implementation, the default on CUDA), in the steady state: optimizer state exists
before the step, as from step 2 on. No weight is ever materialized: parameters are fake.

Every node is annotated with its phase (forward / backward / optimizer) and the module path
that was running when it was traced. And every tensor's eager lifetime is recorded: the fake
tensors flowing through the model's Python code are referenced exactly as real ones would be
(local variables, autograd's saved tensors), so the moment CPython drops the last reference to
one is the moment eager PyTorch would free it. A weakref finalizer notes the graph node that
was last traced at that moment.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx.traceback as fx_traceback
from torch import nn
from torch.func import functional_call
from torch.fx.experimental.proxy_tensor import make_fx

from graphmem.core.conventions import STATE_SLOTS, Amp, TrainingOptions
from graphmem.core.ir import Role
from graphmem.core.routing import DEFAULT_ROUTING, MoeRouting
from graphmem.errors import GraphmemError, first_line, quiet_logger
from graphmem.frontends.torch.accumulation import EngineAccumulations, steal
from graphmem.frontends.torch.buffer_constants import valued_scalars, with_buffer_constants
from graphmem.frontends.torch.conversions import scalars_format_as_numbers, unchanged_conversions
from graphmem.frontends.torch.cuda_kernels import CudaKernels
from graphmem.frontends.torch.eager_layout import EagerLayoutFakeTensorMode
from graphmem.frontends.torch.fast_paths import eager_fast_paths
from graphmem.frontends.torch.grad_fns import backward_functions, numbered
from graphmem.frontends.torch.grouped_mm import any_dtype_grouped_mm
from graphmem.frontends.torch.kernel_choice import CudaTarget, KernelChoice, counted
from graphmem.frontends.torch.loader import TensorSpec, split_inputs
from graphmem.frontends.torch.memo_caches import memo_caches_emptied
from graphmem.frontends.torch.module_hooks import module_calls
from graphmem.frontends.torch.no_gradient import NoGradient, reached_leaves
from graphmem.frontends.torch.observed import EagerLifetimes, ObservedOps
from graphmem.frontends.torch.recompute import modes_follow_modules, parameters_held
from graphmem.frontends.torch.routing import RoutedValues
from graphmem.frontends.torch.sparse_gradients import refuse_sparse_gradients
from graphmem.frontends.torch.train_step import (
    AMP_DTYPES,
    SCALER_STATE,
    autocast,
    autocast_policy,
    cross_entropy_loss,
    optimizer_update,
    scaler_state,
    unscale,
    update_scale,
)
from graphmem.frontends.torch.value_checks import assumed_value_checks

__all__ = ["AMP_DTYPES", "MODULE_KEY", "PHASE_KEY", "TracedStep", "cross_entropy_loss",
           "module_scope_guard", "tensors_in", "trace_model"]
PHASE_KEY = "graphmem_phase"
MODULE_KEY = "graphmem_module"
_NO_FULL_COLLECTION = 2**30  # a full-collection threshold no trace reaches
# No TorchFunctionMetadataMode (where make_fx can turn it off): a Python layer under every
# torch call, ~8% of a trace, that notes each call for node.meta["torch_fn"], which make_fx's
# plain tracer never writes (only its module-stack tracer does): the graph is the same
# a keyword only some torch versions have
_MAKE_FX_OPTIONS: dict[str, Any] = ({"_disable_torch_fn_metadata_mode": True}
                    if "_disable_torch_fn_metadata_mode" in inspect.signature(make_fx).parameters
                    else {})


@dataclass
class TracedStep:
    graph_module: torch.fx.GraphModule
    leaf_roles: list[tuple[Role, str]]  # one per placeholder, in order: role and a label
    mode: str  # "inference" | "training"
    # fx node name -> the fx node last traced when eager PyTorch dropped that tensor
    released_after: dict[str, str] = field(default_factory=dict)
    # what the trace assumed (the routing policy of choices made by value): warnings
    warnings: list[str] = field(default_factory=list)
    # information: the trainable parameters the loss does not reach (no_gradient.py)
    notes: list[str] = field(default_factory=list)
    # the CUDA kernels a trace for a GPU assumed (cuda_kernels.py); () for a CPU trace
    kernels: tuple[KernelChoice, ...] = ()


def trace_model(
    model: nn.Module, inputs: list[TensorSpec], train: TrainingOptions | None,
    cuda: CudaTarget | None = None, routing: MoeRouting = DEFAULT_ROUTING,
) -> TracedStep:
    """The step traced with fake tensors: on the CPU's kernels, or with `cuda` as PyTorch's
    CUDA backend runs it on that GPU (cuda_kernels.py). Training honours requires_grad: a
    frozen parameter gets no gradient and no optimizer state, and autograd saves only what
    the trainable parameters' backward needs. A trainable parameter the loss does not reach
    gets none either (see NoGradient). Choices made by value (a mixture of experts' router)
    follow `routing` (routing.py). A memoized function the trace called first holds a fake
    tensor: emptied once the step's lifetimes are read (memo_caches.py)."""
    with memo_caches_emptied(model):
        return _trace_model(model, inputs, train, cuda, routing)


def _trace_model(model: nn.Module, inputs: list[TensorSpec], train: TrainingOptions | None,
                 cuda: CudaTarget | None, routing: MoeRouting) -> TracedStep:
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    trained = [name for name, p in params.items() if p.requires_grad] if train else []
    if train is not None and not trained:
        raise GraphmemError("--train: every parameter of the model has requires_grad=False,"
                            " so a training step computes no gradient; unfreeze some")
    scaled = cuda is not None and train is not None and train.amp == Amp.FP16
    fake_mode = EagerLayoutFakeTensorMode(allow_non_fake_inputs=True, eager_layout=cuda is None)
    with fake_mode:
        fake_params = [_fake_like(p, requires_grad=name in trained)
                       for name, p in params.items()]
        fake_buffers = [_fake_like(b) for b in buffers.values()]
        fake_inputs = [torch.empty(s.shape, dtype=s.dtype) for s in inputs]
        slots = STATE_SLOTS[train.optimizer] if train else ()
        fake_state = [[_fake_like(params[name]) for name in trained] for _ in slots]
        fake_state += [scaler_state()] if scaled else []
    roles = (
        [(Role.PARAMETER, name) for name in params]
        + [(Role.BUFFER, name) for name in buffers]
        + [(Role.OPTIMIZER_STATE, f"{slot}[{name}]") for slot in slots for name in trained]
        + [(Role.OPTIMIZER_STATE, name) for name in (SCALER_STATE if scaled else ())]
        + [(Role.INPUT, s.name or f"input{i}") for i, s in enumerate(inputs)]
    )
    no_gradient = NoGradient(trained, slots)
    sums = EngineAccumulations()
    step = with_buffer_constants(
        _training_step(model, params, buffers, train, scaled, inputs, no_gradient, sums)
        if train else _inference_step(model, params, buffers, inputs), valued_scalars(buffers))
    model.train(train is not None)
    lifetimes = EagerLifetimes(cpu=cuda is None)
    routed = RoutedValues(routing, [s.name or f"input{i}" for i, s in enumerate(inputs)])
    kernels = CudaKernels(cuda) if cuda is not None else None
    with (_restored_annotations(), _module_annotations(model), modes_follow_modules(model),
          autocast_policy(train),
          fx_traceback.preserve_node_meta(), _young_collections_only(), any_dtype_grouped_mm(),
          unchanged_conversions(), assumed_value_checks(), scalars_format_as_numbers(),
          eager_fast_paths(enabled=cuda is None)):
        graph_module = _make_fx(_observed(step, lifetimes, routed, kernels, sums), fake_params,
                                fake_buffers, fake_state, fake_inputs)
    lifetimes.held_past_step(graph_module.graph)
    steal(graph_module, sums.candidates, lifetimes.released_after)
    return TracedStep(graph_module, no_gradient.pruned(graph_module.graph, roles),
                      "training" if train else "inference",
                      released_after=dict(lifetimes.released_after),
                      notes=no_gradient.notes(params), warnings=routed.notes(),
                      kernels=_kernels_of(kernels, train, scaled))


@contextlib.contextmanager
def _young_collections_only() -> Iterator[None]:
    """No full (oldest-generation) cyclic collection while tracing.

    Each one walks the whole heap, torch's and transformers' objects too: 0.74 of a 70B
    step's 11.6 CPU s of tracing went to 7 of them. The young collections still run as often
    (their thresholds are untouched), so a tensor that only a reference cycle keeps alive is
    still released, and its eager lifetime noted, soon after it became garbage."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, _NO_FULL_COLLECTION)
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)


def _kernels_of(kernels: CudaKernels | None, train: TrainingOptions | None,
                scaled: bool) -> tuple[KernelChoice, ...]:
    if kernels is None:
        return ()
    found = list(kernels.choices)
    if train is not None:
        found.append(KernelChoice("optimizer", f"{train.optimizer}, foreach",
                                  "torch.optim's CUDA default (fused is opt-in)"))
    if scaled:
        found.append(KernelChoice("loss scaling", "GradScaler",
                                  "fp32 scale, int32 growth tracker, in-place unscale"))
    return counted(found)


def _observed(step: Callable[..., Any], lifetimes: EagerLifetimes, routed: RoutedValues,
              kernels: CudaKernels | None, sums: EngineAccumulations) -> Callable[..., Any]:
    # one dispatch mode for the three observers (observed.py): `routed` above `lifetimes`, so
    # an op it traces in a static form is noted like any other
    def run(*args: Any) -> Any:
        routed.inputs.fed(args[-1])  # step(params, buffers, state, inputs)
        with (ObservedOps(routed, sums, lifetimes),
              kernels if kernels is not None else contextlib.nullcontext()):
            return step(*args)

    return run


def _loss_of(train: TrainingOptions, output: object) -> torch.Tensor:
    """The step's loss: --loss (loaded by now), else cross-entropy."""
    loss_fn = train.loss or cross_entropy_loss
    assert callable(loss_fn), "the pipeline loads --loss FILE.py:FN before the trace"
    loss = loss_fn(output)
    if not isinstance(loss, torch.Tensor):
        raise GraphmemError(f"the loss function returned a {type(loss).__name__}: it must"
                            " return the loss as a scalar tensor")
    return loss


def _fake_like(tensor: torch.Tensor, requires_grad: bool = False) -> torch.Tensor:
    # its strides too: a model moved to channels_last has NHWC weights, which a convolution
    # reads without the copy it makes of an NCHW one (kernel_args.py `layout_copies`)
    fake = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype)
    return fake.requires_grad_(True) if requires_grad and tensor.is_floating_point() else fake


def _make_fx(step: Callable[..., Any], *args: Any) -> torch.fx.GraphModule:
    try:
        with _quiet_fake_tensor_log(), _lazy_graph_module():
            return make_fx(step, tracing_mode="fake", **_MAKE_FX_OPTIONS)(*args)
    except GraphmemError:
        raise
    except Exception as error:  # the user's model: any failure is reported
        raise GraphmemError(
            f"tracing the model failed: {type(error).__name__}: {first_line(error)}; "
            + _tracing_hint(error)
        ) from error  # the cause is shown with --debug


def _lazy_graph_module() -> contextlib.AbstractContextManager[None]:
    """The traced GraphModule's Python code made when first asked for (`.code`, a call,
    printing), not at once: graphmem reads the graph's nodes and never runs the module, and
    writing and compiling the code of a Llama-3-8B training step (28,000 nodes) took about
    0.5 CPU s, twice (make_fx, then `steal`'s recompile). torch's `_LazyGraphModule`, as its
    compiler uses it; a torch without it makes the code at once, as before."""
    try:
        from torch.fx._lazy_graph_module import _use_lazy_graph_module
    except ImportError:  # pragma: no cover - torch releases before 2.3
        return contextlib.nullcontext()
    return _use_lazy_graph_module(True)


def _tracing_hint(error: Exception) -> str:
    text = f"{type(error).__name__} {error}"
    if type(error).__name__ == "CheckpointError":
        return ("a checkpointed layer's recomputation differs from its forward: with --gpu,"
                " graphmem's CUDA kernel choices follow a recomputation into module calls, not"
                " into a plain function the model checkpoints; checkpoint modules, or turn the"
                " model's checkpointing off and pass --gradient-checkpointing instead")
    if "NestedTensor" in text:
        return ("nn.TransformerEncoder in eval with a src_key_padding_mask packs the tokens the"
                " mask keeps into a nested tensor, a size read from the mask's values, which"
                " tracing with fake tensors cannot follow: build it with"
                " enable_nested_tensor=False (every token kept, the mask applied in each"
                " layer's fused kernel), or trace it without the mask")
    if any(key in text for key in ("DataDependent", "data-dependent", "DynamicOutputShape",
                                   "item()", "nonzero")):
        return ("the model branches on tensor values (if on a tensor, .item(), nonzero), which"
                " tracing with fake tensors cannot follow: make the branch static")
    return ("the model rejected the example inputs: check each --input's shape and dtype"
            " (e.g. 8x3x224x224, or 4x128:int64 for token ids)")


def _quiet_fake_tensor_log() -> contextlib.AbstractContextManager[None]:
    """FakeTensor logs a traceback for every failing op before raising; the error is enough."""
    return quiet_logger("torch._subclasses.fake_tensor", logging.CRITICAL)


def _inference_step(model: nn.Module, params: dict, buffers: dict,
                    specs: list[TensorSpec]) -> Callable[..., Any]:
    def step(p: list, b: list, state: list, inputs: list) -> Any:
        with torch.no_grad(), _phase("forward"):
            output = functional_call(model, _state_dict(params, buffers, p, b),
                                     *split_inputs(specs, inputs))
        return tensors_in(output)

    return step


def tensors_in(output: Any, depth: int = 6) -> list[torch.Tensor]:
    """Every tensor the model returns, in order: inside tuples, lists, dicts (Hugging Face's
    ModelOutput) and plain objects such as a KV cache (`DynamicCache`), which make_fx cannot
    return as they are; the caller holds all of them, so all are graph outputs."""
    if isinstance(output, torch.Tensor):
        return [output]
    if depth == 0 or output is None or isinstance(output, str | int | float | bool):
        return []
    if isinstance(output, dict):
        items: Any = output.values()
    elif isinstance(output, list | tuple):
        items = output
    elif hasattr(output, "__dict__"):
        items = vars(output).values()
    else:
        return []
    return [t for item in items for t in tensors_in(item, depth - 1)]


def _training_step(
    model: nn.Module, params: dict, buffers: dict, train: TrainingOptions, scaled: bool,
    specs: list[TensorSpec], no_gradient: NoGradient, sums: EngineAccumulations,
) -> Callable[..., Any]:
    """Forward and loss, backward to the trainable parameters the loss reaches, the optimizer
    update of those; with `scaled` (fp16 on CUDA) through GradScaler (train_step.py); the
    engine's gradient sums noted by `sums` (accumulation.py)."""
    steps = [torch.tensor(1.0) for _ in params]  # steady state: one step already taken

    def step(p: list, b: list, state: list, inputs: list) -> Any:
        trainable = [t for t in p if t.requires_grad]
        scaler = state.pop() if scaled else None
        if train.grad_accum > 1:
            with _phase("backward"):  # the sums of the earlier micro-batches
                for t in trainable:
                    t.grad = torch.zeros_like(t)
        # the fake parameters held through backward too, where a checkpoint the model calls
        # itself recomputes its layers (recompute.py)
        with parameters_held(model, _state_dict(params, buffers, p, b)):
            with _phase("forward"), autocast(train.amp):
                args, kwargs = split_inputs(specs, inputs)
                output = model(*args, **kwargs)
                loss = _loss_of(train, output)
            used = no_gradient.found(trainable, reached_leaves(loss))
            trainable = [t for t, reaches in zip(trainable, used, strict=True) if reaches]
            state = [[s for s, reaches in zip(slot, used, strict=True) if reaches]
                     for slot in state]
            with _phase("backward"):
                scaled_loss = loss if scaler is None else loss * scaler[0]
                functions = backward_functions(scaled_loss)  # one walk for both hooks
                sums.watch(functions)
                with numbered(functions):  # the autograd node each op runs for (stamping)
                    if train.grad_accum > 1:
                        scaled_loss.backward()  # AccumulateGrad: .grad += each as made
                        grads = [t.grad for t in trainable]
                    else:
                        grads = list(torch.autograd.grad(scaled_loss, trainable))
            refuse_sparse_gradients(_names_of(trainable, params, p), grads)
        with _phase("optimizer"), torch.no_grad():
            found_inf = unscale(grads, scaler[0]) if scaler is not None else None
            optimizer_update(train.optimizer, trainable, grads, state, steps[: len(trainable)])
            if scaler is not None and found_inf is not None:
                update_scale(scaler[0], scaler[1], found_inf)
        return loss.detach()

    return step


def _names_of(tensors: list, params: dict, p: list) -> dict[int, str]:
    """{id of each of `tensors`: its parameter's name}, in `tensors`' order."""
    names = {id(t): name for name, t in zip(params, p, strict=True)}
    return {id(t): names.get(id(t), "?") for t in tensors}


def _state_dict(params: dict, buffers: dict, p: list, b: list) -> dict[str, torch.Tensor]:
    return {**dict(zip(params, p, strict=True)), **dict(zip(buffers, b, strict=True))}


@contextlib.contextmanager
def _restored_annotations() -> Iterator[None]:
    """Put fx's global annotations back as they were, whatever happened in the trace.

    A model that raises inside a module unwinds the phase annotation before the module
    hooks' ones are closed; each annotate() restores what it saw on entry, so closing them out
    of order would leave this trace's phase and module on every node of the next trace."""
    meta = fx_traceback.current_meta
    had_custom = "custom" in meta
    saved = dict(meta.get("custom", {}))
    try:
        yield
    finally:
        meta = fx_traceback.current_meta
        if had_custom:
            meta["custom"] = saved
        else:
            meta.pop("custom", None)


@contextlib.contextmanager
def _phase(name: str) -> Iterator[None]:
    with fx_traceback.annotate({PHASE_KEY: name}):
        yield


# the annotation stacks of the traces running now, innermost last (see module_scope_guard)
_ANNOTATION_STACKS: list[list[contextlib.ExitStack]] = []


@contextlib.contextmanager
def module_scope_guard() -> Iterator[None]:
    """Close the module annotations a block opened and left open on the way out.

    Non-reentrant checkpointing stops a recomputation early by raising inside a module's
    forward, so that module's forward hook never runs; without this its path would label the
    rest of the backward pass (graphmem/frontends/torch/checkpoint.py wraps recomputation).
    """
    stack = _ANNOTATION_STACKS[-1] if _ANNOTATION_STACKS else []
    depth = len(stack)
    try:
        yield
    finally:
        while len(stack) > depth:
            stack.pop().close()


@contextlib.contextmanager
def _module_annotations(model: nn.Module) -> Iterator[None]:
    """Annotate every traced node with the path of the module running when it was made
    (torch's global module hooks: module_hooks.py)."""
    stack: list[contextlib.ExitStack] = []

    named = [(path, module) for path, module in model.named_modules() if path]
    paths = {id(module): path for path, module in named}

    def enter(module: nn.Module) -> None:
        scope = contextlib.ExitStack()
        scope.enter_context(fx_traceback.annotate({MODULE_KEY: paths[id(module)]}))
        stack.append(scope)

    def leave(_: nn.Module) -> None:
        if stack:
            stack.pop().close()

    _ANNOTATION_STACKS.append(stack)
    try:
        with module_calls([module for _, module in named], enter, leave):
            yield
    finally:
        while stack:  # a hook that never ran must not label the next trace
            stack.pop().close()
        _ANNOTATION_STACKS.remove(stack)
