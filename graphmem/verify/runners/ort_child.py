"""The process that runs a model on onnxruntime for `graphmem verify`: ort_guard.py forks it
(onnxruntime_runner.py starts the guard) and calls `main(FOLDER)`.

A model is untrusted, and running it can crash onnxruntime (a segmentation fault in native
code), loop without end (a Loop whose condition stays true) or allocate without bound (a scan
output that grows each iteration). So the run happens here, in a child process the caller
starts with an address-space limit and kills past its time limit. It reads the model file
itself (its path is in the request), so the weights are only ever held here, under the limit;
the caller's temporary FOLDER (the request, the profile, the result) is removed by the caller
on every path, whatever became of this process, and by the guard if the caller dies first.

FOLDER/request.json says what to run; FOLDER/result.json gets {"profile": PATH} or
{"error": MESSAGE}, MESSAGE one line for the user.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import sys
from pathlib import Path
from typing import Any

from graphmem.errors import GraphmemError, first_line
from graphmem.frontends.onnx.ort_import import ort
from graphmem.frontends.onnx.ort_session import quiet_onnxruntime
from graphmem.verify.runners.onnxruntime_runner import (
    OPTIMIZATION_LEVELS,
    REQUEST_FILE,
    RESULT_FILE,
    InputSpec,
    random_feeds,
    runnable_bytes,
)


class _RunError(Exception):
    """One line for the user (the caller raises it as a GraphmemError)."""


def main(folder: Path) -> int:
    request = json.loads((folder / REQUEST_FILE).read_text())
    result: dict[str, Any] = {}
    try:
        result["profile"] = _run(folder, request, result)
    except _RunError as error:
        result = {"error": str(error)}
    (folder / RESULT_FILE).write_text(json.dumps(result))
    return 0


def _run(folder: Path, request: dict[str, Any], result: dict[str, Any]) -> str:
    label = request["label"]  # the model's path as the user gave it
    if request["provider"] == "cuda":
        _load_cuda_libraries()
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(folder / "ort_profile")
    options.graph_optimization_level = OPTIMIZATION_LEVELS[request["optimization"]]
    options.log_severity_level = 4  # fatal only: verify reports failures itself, in one line
    if request["threads"] is not None:
        options.intra_op_num_threads = request["threads"]
    if request["data_folder"] is not None:
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", request["data_folder"])
    quiet_onnxruntime()
    ort.set_default_logger_severity(4)  # a provider that fails to load logs before we can tell
    providers = _arena_providers(request, options)
    try:
        source = runnable_bytes(Path(request["model"]), request["ir_version"])
    except GraphmemError as error:  # out of memory, or the file changed since the checks
        raise _RunError(str(error)) from None
    except MemoryError:
        raise _RunError(f"reading {label} with its weights ran out of memory") from None
    try:
        session = ort.InferenceSession(source, options, providers=providers)
    except Exception as error:  # noqa: BLE001 - onnxruntime raises its own types
        raise _RunError(f"onnxruntime {ort.__version__} could not load {label}"
                        f" ({first_line(error)})") from None
    if session.get_providers()[0] != request["providers"][0]:
        raise _RunError(f"--provider {request['provider']}: onnxruntime could not start"
                        f" {request['providers'][0]} here (no usable GPU, or its CUDA/cuDNN"
                        " libraries are missing); use --provider cpu, or run on a machine with"
                        " an NVIDIA GPU")
    feeds = random_feeds([InputSpec(name, tuple(shape), dtype, high)
                          for name, shape, dtype, high in request["inputs"]], request["seed"])
    needed = [i.name for i in session.get_inputs()]
    missing = [name for name in needed if name not in feeds]
    if missing:
        raise _RunError(f"{label}: onnxruntime expects inputs {', '.join(missing)} that"
                        " graphmem did not find among the graph's inputs")
    feeds = {name: value for name, value in feeds.items() if name in needed}
    try:
        session.run(None, feeds)
    except Exception as error:  # noqa: BLE001 - onnxruntime raises its own types
        raise _RunError(f"onnxruntime failed to run {label} on random inputs"
                        f" ({first_line(error)})") from None
    if request.get("device_used"):  # the session still alive: what the GPU holds for it
        result["device_used"] = cuda_used_bytes()
    return str(session.end_profiling())


# onnxruntime's ArenaExtendStrategy by graphmem's name (graphmem/runtime_models/bfc_arena.py)
ARENA_EXTEND = {"next-power-of-two": ("kNextPowerOfTwo", 0),
                "same-as-requested": ("kSameAsRequested", 1)}


def _arena_providers(request: dict[str, Any], options: Any) -> list[Any]:
    """The providers, with the arena's extend strategy where it is not the default: the CUDA
    provider's `arena_extend_strategy` option; on the CPU an arena registered in the
    environment with that strategy (OrtArenaCfg) and the session told to use it."""
    providers: list[Any] = list(request["providers"])
    name, code = ARENA_EXTEND[request.get("arena_extend", "next-power-of-two")]
    if code == 0:
        return providers
    if request["provider"] == "cuda":
        providers[0] = (providers[0], {"arena_extend_strategy": name})
        return providers
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                             ort.OrtMemType.DEFAULT)
    with contextlib.suppress(Exception):  # registered once per process
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, code, -1, -1))
    options.add_session_config_entry("session.use_env_allocators", "1")
    return providers


def cuda_used_bytes() -> int | None:
    """cuMemGetInfo's total - free on the current context (the one onnxruntime made; its
    primary context is retained where none is current), without loading another CUDA
    library; None where there is no CUDA driver."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    if cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) != 0:
        device, context = ctypes.c_int(), ctypes.c_void_p()
        if (cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(device), 0)
                or cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
                or cuda.cuCtxSetCurrent(context)
                or cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))):
            return None
    return total.value - free.value


def _load_cuda_libraries() -> None:
    """onnxruntime-gpu (CUDA 13, cuDNN 9) finds its libraries where PyTorch's CUDA build
    loaded them: torch first where it is installed (no CUDA context is made), then
    onnxruntime's own preload for any still missing; best effort (the session says next
    whether the provider starts)."""
    with contextlib.suppress(Exception):
        import torch  # noqa: F401
    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        with contextlib.suppress(Exception):
            preload()


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
