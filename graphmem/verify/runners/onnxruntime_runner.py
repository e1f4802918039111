"""Run an ONNX model for real on onnxruntime and read what its profiler measured.

Runtimes, like importers, are the only modules that touch a framework: this one knows
onnxruntime (and onnx, to read the model's external-data references); nothing else in graphmem
imports them for running. The result is a typed `MeasuredRun`.

How it measures (onnxruntime 1.31, checked by experiment; see README "Check the numbers"):
- one `InferenceSession.run` with `SessionOptions.enable_profiling`, the profile written to a
  temporary folder (never the user's) and deleted after reading;
- every node event (`"cat": "Node"`, name `<node>_kernel_time`) carries the memory statistics
  of the execution provider's arena after the kernel ran: `mem_bytes_in_use`, `mem_in_use_peak`
  (the arena's high-water mark since the session was created, never reset between runs: so
  one session runs once), `mem_arena_held` (what the arena reserved from the system),
  `mem_bytes_requested_in_use` (the same without the arena's rounding), and the node's own
  `output_size`, `activation_size` (its non-initializer inputs), `parameter_size`;
- what the CPU arena holds: from session creation on, weights (initializers copied into it,
  or the prepacked copies that replace MatMul/Gemm weights; some models' initializers stay
  outside it); every tensor a kernel outputs, graph outputs included; kernels' scratch buffers
  (Conv's im2col buffer, one per intra-op thread); each allocation rounded up by the arena.
  It does not hold the caller's inputs (numpy arrays of the right dtype are used in place).
  So `activation_peak_bytes` = peak less what was in use before the first kernel ran.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.external_data_helper import ExternalDataInfo

from graphmem.errors import GraphmemError, first_line
from graphmem.frontends.onnx.limits import check_nesting
from graphmem.frontends.onnx.model_text import parse_model
from graphmem.frontends.onnx.ort_import import ort
from graphmem.frontends.onnx.ort_session import max_ir_version, quiet_onnxruntime
from graphmem.frontends.onnx.untrusted import (
    clear_tensor_data,
    external_location,
    external_tensors,
    quoted,
    raw_data_bytes,
    read_model_bytes,
    safe_data_file,
    tensor_numel,
    validate_graph,
)

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
OPTIMIZATION_LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
_KERNEL_SUFFIX = "_kernel_time"


@dataclass(frozen=True)
class InputSpec:
    """One model input to make up: its shape and numpy dtype; integers drawn from [0, high)."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy name: float32, float16, int64, bool...
    high: int = 100


@dataclass(frozen=True)
class MeasuredNode:
    """One kernel's profile event."""

    name: str
    op_type: str
    node_index: int | None  # onnxruntime's index of the node in its graph
    provider: str
    output_bytes: int  # onnxruntime's output_size
    output_shapes: tuple[tuple[int, ...], ...]
    activation_bytes: int  # the node's inputs that are not initializers
    parameter_bytes: int  # the node's initializer inputs (0 once prepacked)
    in_use_bytes: int  # arena bytes in use after the kernel ran (rounded by the arena)
    in_use_delta_bytes: int
    requested_in_use_bytes: int  # the same, as requested (no rounding)
    requested_delta_bytes: int
    in_use_peak_bytes: int  # the arena's high-water mark so far
    arena_held_bytes: int
    duration_us: int


@dataclass(frozen=True)
class MeasuredRun:
    """What onnxruntime's profiler measured during one run."""

    ort_version: str
    provider: str  # the execution provider the memory statistics come from
    optimization: str  # graph optimization level: disabled | basic | extended | all
    threads: int | None  # intra-op threads; None: onnxruntime's default (one per core)
    nodes: tuple[MeasuredNode, ...]  # in execution order
    notes: tuple[str, ...]
    # the device's used memory read by `run_onnx`'s `device_used` right after the run, while
    # the session (its arena, its copies of the initializers) is alive; None: not read
    device_used_bytes: int | None = None

    @property
    def peak_bytes(self) -> int:
        """`mem_in_use_peak`, the largest over the run's events."""
        return max(n.in_use_peak_bytes for n in self.nodes)

    @property
    def arena_held_bytes(self) -> int:
        """`mem_arena_held`, the largest over the run's events."""
        return max(n.arena_held_bytes for n in self.nodes)

    @property
    def weights_in_arena_bytes(self) -> int:
        """Arena bytes in use before the first kernel: initializers or their prepacked copies."""
        first = self.nodes[0]
        return first.in_use_bytes - first.in_use_delta_bytes

    @property
    def activation_peak_bytes(self) -> int:
        """The peak less the weights: outputs, intermediates and scratch (arena-rounded)."""
        return self.peak_bytes - self.weights_in_arena_bytes

    @property
    def max_in_use_at_node_end_bytes(self) -> int:
        """Largest `mem_bytes_in_use` after a kernel, less the weights (no kernel scratch)."""
        return max(n.in_use_bytes for n in self.nodes) - self.weights_in_arena_bytes

    @property
    def max_requested_at_node_end_bytes(self) -> int:
        """The same without the arena's rounding (`mem_bytes_requested_in_use`)."""
        first = self.nodes[0]
        before = first.requested_in_use_bytes - first.requested_delta_bytes
        return max(n.requested_in_use_bytes for n in self.nodes) - before


def check_external_data(path: Path, model: onnx.ModelProto | None = None) -> tuple[Path, ...]:
    """Every external data file the model references is a regular file inside the model's
    folder (onnx_untrusted.safe_data_file), exists and is long enough; returns the files."""
    model = model if model is not None else _load_proto(path)
    files: list[Path] = []
    for label, tensor in external_tensors(model):
        data_file = safe_data_file(path, label, tensor)
        if not data_file.is_file():
            raise GraphmemError(
                f"{path}: its weights are in the external data file"
                f" {quoted(str(path.parent / external_location(tensor)))}, which is missing:"
                " verify runs the model for real and needs it next to the .onnx (graphmem"
                " analyze and check do not)")
        end = _data_end(path, label, tensor)
        if data_file.stat().st_size < end:
            raise GraphmemError(f"{path}: external data file {quoted(str(data_file))} is"
                                f" truncated ({label} needs bytes up to {end:,})")
        if data_file not in files:
            files.append(data_file)
    return tuple(files)


def _data_end(path: Path, label: str, tensor: onnx.TensorProto) -> int:
    """Where the tensor's bytes end in its data file (its offset plus its length)."""
    try:
        info = ExternalDataInfo(tensor)
        return (info.offset or 0) + (info.length or 0)
    except ValueError:
        raise GraphmemError(f"{path}: {label} has an external offset or length that is not a"
                            " number: the model file is broken; re-export it") from None


def with_random_weights(path: Path, folder: Path, seed: int = 0) -> Path:
    """A copy of a graph-only model (its external data file not shipped) in `folder`, every
    external tensor filled with small random values of its shape and dtype, stored inline:
    onnxruntime can then run it, and its memory does not depend on the values."""
    model = _load_proto(path)
    rng = np.random.default_rng(seed)
    for _, tensor in external_tensors(model):
        clear_tensor_data(tensor)
        dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
        values = (rng.standard_normal(tensor_numel(tensor)) * 0.02).astype(dtype) if (
            dtype.kind == "f") else None
        tensor.raw_data = bytes(raw_data_bytes(tensor)) if values is None else (
            np.ascontiguousarray(values).tobytes())
    target = folder / path.name
    onnx.save(model, str(target))
    return target


def run_onnx(path: Path, inputs: Sequence[InputSpec], provider: str = "cpu",
             optimization: str = "disabled", threads: int | None = None,
             seed: int = 0, device_used: Callable[[], int | None] | None = None
             ) -> MeasuredRun:
    """Run the model once with random inputs and return the profiler's measurements. The one
    place graphmem loads a model's weights: the notes say so. `device_used` (a GPU run) is
    called once after the run, the session still alive: its answer is `device_used_bytes`."""
    model = _load_proto(path)
    data_files = check_external_data(path, model)
    feeds = random_feeds(inputs, seed)
    notes = [_weights_note(data_files), *_planned_buffers_note(model)]
    with tempfile.TemporaryDirectory(prefix="graphmem-verify-") as folder:
        options = _session_options(Path(folder), optimization, threads)
        session = _session(path, model, options, provider, notes, bool(data_files))
        del model
        _check_feeds(session, feeds, path)
        try:
            session.run(None, feeds)
        except Exception as error:  # noqa: BLE001 - onnxruntime raises its own types
            raise GraphmemError(f"onnxruntime failed to run {path} on random inputs"
                                f" ({first_line(error)})") from None
        used = None if device_used is None else device_used()
        events = json.loads(Path(session.end_profiling()).read_text())
    nodes = _measured_nodes(events, PROVIDERS[provider], path)
    return MeasuredRun(ort_version=ort.__version__, provider=PROVIDERS[provider],
                       optimization=optimization, threads=threads, nodes=nodes,
                       notes=tuple(notes), device_used_bytes=used)


def _weights_note(data_files: Sequence[Path]) -> str:
    where = "the model file" if not data_files else "the model file and " + ", ".join(
        quoted(f.name) for f in data_files)
    return (f"verify loaded the model's weights from {where} to run it (the one graphmem"
            " command that reads weights; analyze and check never do)")


def random_feeds(inputs: Sequence[InputSpec], seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal floats; integers uniform in [0, high); booleans fair coin flips."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in inputs:
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            array = rng.standard_normal(spec.shape).astype(dtype)
        elif dtype.kind == "b":
            array = rng.integers(0, 2, spec.shape).astype(bool)
        elif dtype.kind in "iu":
            array = rng.integers(0, max(spec.high, 1), spec.shape).astype(dtype)
        else:
            raise GraphmemError(f"input {spec.name}: dtype {spec.dtype} cannot be made up;"
                                " verify takes float, integer and bool inputs")
        feeds[spec.name] = np.ascontiguousarray(array)
    return feeds


def provider_available(provider: str) -> bool:
    return PROVIDERS[provider] in ort.get_available_providers()


# ----- session -----------------------------------------------------------------------------


def _session_options(folder: Path, optimization: str, threads: int | None
                     ) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(folder / "ort_profile")
    options.graph_optimization_level = OPTIMIZATION_LEVELS[optimization]
    options.log_severity_level = 4  # fatal only: verify reports failures itself, in one line
    if threads is not None:
        options.intra_op_num_threads = threads
    return options


def _session(path: Path, model: onnx.ModelProto, options: ort.SessionOptions, provider: str,
             notes: list[str], external: bool) -> ort.InferenceSession:
    wanted = PROVIDERS[provider]
    if provider != "cpu" and not provider_available(provider):
        raise GraphmemError(f"--provider {provider}: this onnxruntime ({ort.__version__}) has no"
                            f" {wanted} (it has {', '.join(ort.get_available_providers())});"
                            " install onnxruntime-gpu on a machine with an NVIDIA GPU, or use"
                            " --provider cpu")
    providers = [wanted, "CPUExecutionProvider"] if provider != "cpu" else [wanted]
    ort.set_default_logger_severity(4)  # a provider that fails to load logs before we can tell
    try:
        session = _create(path, model, options, providers, notes, external)
    finally:
        ort.set_default_logger_severity(2)
    if session.get_providers()[0] != wanted:
        raise GraphmemError(f"--provider {provider}: onnxruntime could not start {wanted} here"
                            " (no usable GPU, or its CUDA/cuDNN libraries are missing); use"
                            " --provider cpu, or run on a machine with an NVIDIA GPU")
    return session


def _create(path: Path, model: onnx.ModelProto, options: ort.SessionOptions,
            providers: list[str], notes: list[str], external: bool) -> ort.InferenceSession:
    """The session, from the bytes graphmem read and checked (onnxruntime does not open the
    model file again); external data from the model's folder, its locations checked."""
    quiet_onnxruntime()
    supported = max_ir_version()
    if supported is not None and model.ir_version > supported:
        # A newer onnx stamps a newer IR version than onnxruntime reads; the graph is the same.
        notes.append(f"the model's IR version {model.ir_version} was lowered to {supported}"
                     f" (the highest onnxruntime {ort.__version__} reads) for the run")
        model.ir_version = supported
    if external:
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(path.parent.resolve()))
    try:
        return ort.InferenceSession(model.SerializeToString(), options, providers=providers)
    except Exception as error:  # noqa: BLE001 - onnxruntime raises its own types
        raise GraphmemError(f"onnxruntime {ort.__version__} could not load {path}"
                            f" ({first_line(error)})") from None


def _check_feeds(session: ort.InferenceSession, feeds: dict[str, np.ndarray],
                 path: Path) -> None:
    needed = [i.name for i in session.get_inputs()]
    missing = [name for name in needed if name not in feeds]
    if missing:
        raise GraphmemError(f"{path}: onnxruntime expects inputs {', '.join(missing)} that"
                            " graphmem did not find among the graph's inputs")
    for name in list(feeds):
        if name not in needed:  # e.g. an initializer also listed as a graph input
            del feeds[name]


def _planned_buffers_note(model: onnx.ModelProto) -> list[str]:
    """Intermediate shapes in the file change how onnxruntime allocates (measured, see README)."""
    outputs = sum(len(node.output) for node in model.graph.node)
    known = len(model.graph.value_info)
    if not outputs or known < outputs / 2:
        return []
    return [f"the model carries the shapes of its intermediate tensors ({known} value_info"
            f" entries, {outputs} node outputs): with them onnxruntime plans buffer reuse"
            " before the run instead of allocating and freeing as it goes, and holds more"
            " (samples/tiny_gpt.dynamo.onnx: 2.7x graphmem's liveness peak, 1.2x with the"
            " value_info removed; README, 'Check the numbers')"]


# ----- the profile -------------------------------------------------------------------------


def _measured_nodes(events: list[dict[str, Any]], provider: str, path: Path
                    ) -> tuple[MeasuredNode, ...]:
    kernels = [e for e in events
               if e.get("cat") == "Node" and str(e.get("name", "")).endswith(_KERNEL_SUFFIX)]
    nodes = tuple(_node(e) for e in kernels if "mem_in_use_peak" in e.get("args", {}))
    if not nodes:
        raise GraphmemError(
            f"onnxruntime {ort.__version__}'s profile of {path} has no memory statistics"
            " (mem_in_use_peak): verify needs onnxruntime 1.31 or newer with its memory arena")
    on_provider = tuple(n for n in nodes if n.provider == provider)
    return on_provider or nodes


def _node(event: dict[str, Any]) -> MeasuredNode:
    args = event["args"]
    index = args.get("node_index")
    return MeasuredNode(
        name=str(event["name"])[: -len(_KERNEL_SUFFIX)],
        op_type=str(args.get("op_name", "")),
        node_index=int(index) if index is not None else None,
        provider=str(args.get("provider", "")),
        output_bytes=int(args.get("output_size", 0)),
        output_shapes=tuple(_shape(entry) for entry in args.get("output_type_shape", [])),
        activation_bytes=int(args.get("activation_size", 0)),
        parameter_bytes=int(args.get("parameter_size", 0)),
        in_use_bytes=int(args["mem_bytes_in_use"]),
        in_use_delta_bytes=int(args.get("mem_in_use_delta", 0)),
        requested_in_use_bytes=int(args.get("mem_bytes_requested_in_use",
                                            args["mem_bytes_in_use"])),
        requested_delta_bytes=int(args.get("mem_requested_in_use_delta",
                                           args.get("mem_in_use_delta", 0))),
        in_use_peak_bytes=int(args["mem_in_use_peak"]),
        arena_held_bytes=int(args.get("mem_arena_held", 0)),
        duration_us=int(event.get("dur", 0)),
    )


def _shape(entry: dict[str, list[int]]) -> tuple[int, ...]:
    """`{"float": [32, 64]}` -> (32, 64)."""
    return tuple(int(d) for dims in entry.values() for d in dims)


# ----- helpers -----------------------------------------------------------------------------


def _load_proto(path: Path) -> onnx.ModelProto:
    """The model file's protobuf, its external references kept (checked before a run), the
    graph validated (onnx_untrusted.py)."""
    data = read_model_bytes(path)
    try:
        model = parse_model(data)
    except Exception as error:  # noqa: BLE001 - protobuf and onnx raise several types
        raise GraphmemError(f"'{path}' is not a valid ONNX model ({first_line(error)})"
                            ) from None
    validate_graph(model)
    check_nesting(model)
    return model


