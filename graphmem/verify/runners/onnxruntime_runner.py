"""Run an ONNX model for real on onnxruntime and read what its profiler measured.

Runtimes, like importers, are the only modules that touch a framework: this one knows
onnxruntime (and onnx, to read the model's external-data references); nothing else in graphmem
imports them for running. The result is a typed `MeasuredRun`.

How it measures (onnxruntime 1.31, checked by experiment; see README "Check the numbers"):
- one `InferenceSession.run` with `SessionOptions.enable_profiling`, in a child process under
  a time and memory limit (ort_child.py), the profile written to a temporary folder (never
  the user's) and deleted after reading, whatever became of the child; the child reads the
  model file itself (`runnable_bytes`), so the weights are held only under its limit and no
  copy of the model is written;
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

import contextlib
import json
import os
import resource
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.external_data_helper import ExternalDataInfo

from graphmem.core.units import format_bytes
from graphmem.errors import GraphmemError, first_line
from graphmem.frontends.onnx.lean_read import read_lean_model_bytes
from graphmem.frontends.onnx.limits import (
    check_loop_trips,
    check_nesting,
    session_outputs_refusal,
)
from graphmem.frontends.onnx.model_text import parse_model
from graphmem.frontends.onnx.ort_import import ort
from graphmem.frontends.onnx.ort_session import max_ir_version
from graphmem.frontends.onnx.read import LEAN_READ_FROM_BYTES
from graphmem.frontends.onnx.untrusted import (
    clear_tensor_data,
    external_location,
    external_tensors,
    quoted,
    raw_data_bytes,
    read_model_bytes,
    safe_data_file,
    tensor_numel,
)
from graphmem.frontends.onnx.validation import validate_graph
from graphmem.verify.runners.ort_spawn import start_guard, stop_group

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
OPTIMIZATION_LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
_KERNEL_SUFFIX = "_kernel_time"
# what the run's temporary folder holds for ort_child.py, and what it writes back (the model is
# read by the child from the user's file: runnable_bytes)
REQUEST_FILE, RESULT_FILE = "request.json", "result.json"


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
    model = model if model is not None else _load_proto(path, weights=False)
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


@dataclass(frozen=True)
class RunLimits:
    """What one run may take: the child process running onnxruntime is killed past
    `time_s` seconds and cannot map more than `memory_bytes` (its address space)."""

    time_s: float = 600.0
    memory_bytes: int = 0  # 0: three quarters of the machine's memory

    @property
    def address_space_bytes(self) -> int:
        if self.memory_bytes:
            return self.memory_bytes
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4

    @property
    def child_bytes(self) -> int:
        """The child's address space: the limit, or the one this process runs under where
        lower (it binds the child too)."""
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if hard == resource.RLIM_INFINITY:
            return self.address_space_bytes
        return min(self.address_space_bytes, hard)


def run_onnx(path: Path, inputs: Sequence[InputSpec], provider: str = "cpu",
             optimization: str = "disabled", threads: int | None = None,
             seed: int = 0, limits: RunLimits | None = None, device_used: bool = False,
             arena_extend: str = "next-power-of-two") -> MeasuredRun:
    """Run the model once with random inputs and return the profiler's measurements. The one
    place graphmem loads a model's weights: the notes say so. The run happens in a child
    process under `limits` (ort_child.py); its temporary folder is removed on every path.
    `device_used` (a GPU run): the device's used memory, read in the child after the run with
    the session still alive, is `device_used_bytes`. `arena_extend`: the arena's extend
    strategy, "next-power-of-two" (onnxruntime's default) or "same-as-requested"."""
    model = _load_proto(path, weights=False)
    data_files = check_external_data(path, model)
    check_loop_trips(model)
    too_wide = session_outputs_refusal(model)
    if too_wide is not None:
        raise GraphmemError(f"{path}: {too_wide}: verify runs the model on onnxruntime;"
                            " graphmem analyze reads it without a session")
    notes = [_weights_note(data_files), *_planned_buffers_note(model)]
    _check_provider(provider)
    supported = max_ir_version()
    if supported is not None and model.ir_version > supported:
        # A newer onnx stamps a newer IR version than onnxruntime reads; the graph is the same.
        notes.append(f"the model's IR version {model.ir_version} was lowered to {supported}"
                     f" (the highest onnxruntime {ort.__version__} reads) for the run")
    del model
    request = {
        "label": str(path), "model": str(path.resolve()), "ir_version": supported,
        "optimization": optimization, "threads": threads, "seed": seed,
        "provider": provider, "providers": _providers(provider),
        "data_folder": str(path.parent.resolve()) if data_files else None,
        "inputs": [[s.name, list(s.shape), s.dtype, s.high] for s in inputs],
        "device_used": device_used, "arena_extend": arena_extend,
    }
    with _terminate_as_interrupt(), tempfile.TemporaryDirectory(
            prefix="graphmem-verify-") as folder:
        events, used = _bounded_run(Path(folder), request, limits or RunLimits(), path)
    nodes = _measured_nodes(events, PROVIDERS[provider], path)
    return MeasuredRun(ort_version=ort.__version__, provider=PROVIDERS[provider],
                       optimization=optimization, threads=threads, nodes=nodes,
                       notes=tuple(notes), device_used_bytes=used)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """While the child runs, SIGTERM ends verify as Ctrl-C does (exit 2, "interrupted"): the
    child is killed and the run folder removed, where Python's default for SIGTERM would end
    the process at once and leave both behind. Only the main thread can take a signal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _bounded_run(folder: Path, request: dict[str, Any], limits: RunLimits,
                 path: Path) -> tuple[list[dict[str, Any]], int | None]:
    """The profile's events of ort_child's run in `folder` and the device's used memory it
    read (None unless asked), or one error line: what the child reported, or how it ended
    (killed past the time limit, out of memory, crashed)."""
    (folder / REQUEST_FILE).write_text(json.dumps(request))
    memory = limits.child_bytes

    # CUDA reserves virtual address space far beyond what it uses (a context fails to start
    # under an address-space limit): a GPU run is bounded by its time limit only
    bound_memory = request["provider"] != "cuda"

    def limit_child() -> None:  # in the child, before it runs Python
        if bound_memory:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash leaves no core file

    # the child imports this very graphmem (cwd is the folder: nothing of the user's on its path)
    package_root = str(Path(__file__).resolve().parents[3])
    paths = [package_root, *filter(None, [os.environ.get("PYTHONPATH")])]
    # the child (ort_guard.py) dies with this process, even by SIGKILL, and takes the folder
    child, alive = start_guard(folder, {**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
                               limit_child)
    try:
        code = child.wait(limits.time_s)
    except BaseException as stopped:  # the time limit, Ctrl-C, SIGTERM: the child goes too
        stop_group(child)
        if not isinstance(stopped, subprocess.TimeoutExpired):
            raise
        raise GraphmemError(
            f"onnxruntime ran {path} for more than verify's time limit of {limits.time_s:g} s"
            " and was stopped (a Loop that never ends, or a model too slow for this machine):"
            " raise --time-limit, or lower --batch/--dim") from None
    finally:
        os.close(alive)
    result_file = folder / RESULT_FILE
    result = json.loads(result_file.read_text()) if result_file.is_file() else {}
    if "error" in result:
        error = str(result["error"])
        if "alloc" in error.lower() or "out of memory" in error:
            error += f" (verify's memory limit is {format_bytes(memory)}: --memory-limit)"
        raise GraphmemError(error)
    if code != 0 or "profile" not in result:
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        raise GraphmemError(
            f"onnxruntime {ort.__version__} ended with {how} while running {path}, within"
            f" verify's memory limit of {format_bytes(memory)} (it crashes or runs out of"
            " memory on this model): raise --memory-limit, or lower --batch/--dim")
    return json.loads(Path(result["profile"]).read_text()), result.get("device_used")


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


def _check_provider(provider: str) -> None:
    if provider != "cpu" and not provider_available(provider):
        raise GraphmemError(f"--provider {provider}: this onnxruntime ({ort.__version__}) has no"
                            f" {PROVIDERS[provider]} (it has"
                            f" {', '.join(ort.get_available_providers())}); install"
                            " onnxruntime-gpu on a machine with an NVIDIA GPU, or use"
                            " --provider cpu")


def _providers(provider: str) -> list[str]:
    wanted = PROVIDERS[provider]
    return [wanted, "CPUExecutionProvider"] if provider != "cpu" else [wanted]


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


def _load_proto(path: Path, weights: bool = True) -> onnx.ModelProto:
    """The model file's protobuf, its external references kept (checked before a run), the
    graph validated (onnx_untrusted.py). `weights`: False reads it as analyze does, every
    tensor above 64 KiB without its bytes (lean_read.py), for the checks before a run."""
    # a large file without its doc strings and unknown fields (its weights kept: they run)
    try:
        data = read_lean_model_bytes(path, keep_tensors=weights) if (
            not weights or path.stat().st_size >= LEAN_READ_FROM_BYTES) else None
    except OSError:  # read_model_bytes says what is wrong with the file
        data = None
    try:
        model = parse_model(data if data is not None else read_model_bytes(path))
    except Exception as error:  # noqa: BLE001 - protobuf and onnx raise several types
        if isinstance(error, MemoryError) or "alloc failed" in str(error):
            raise GraphmemError(f"reading '{path}' with its weights ran out of memory"
                                f" ({first_line(error) or type(error).__name__})") from None
        raise GraphmemError(f"'{path}' is not a valid ONNX model ({first_line(error)})"
                            ) from None
    del data
    model.DiscardUnknownFields()
    validate_graph(model)
    check_nesting(model)
    return model


def runnable_bytes(path: Path, ir_version: int | None) -> bytes:
    """What ort_child.py hands onnxruntime: the model file read again in the child (its
    weights, without doc strings and unknown fields), checked as before the run, its IR
    version lowered to `ir_version` where given. Read in the child, under its memory limit:
    the parent never holds the weights, and no copy of the model is written anywhere."""
    model = _load_proto(path)
    if ir_version is not None and model.ir_version > ir_version:
        model.ir_version = ir_version
    return model.SerializeToString()
