"""The GPU table: datasheet memory, bandwidth and FLOP rates, read from data/gpus.toml.

The numbers live in the data file, with their conventions and sources; this module only
loads, validates and looks them up. Rates are converted to SI base units here
(GB/s -> bytes/s, TFLOP/s -> FLOP/s) so that callers never multiply by 1e9 themselves.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from graphmem.errors import GraphmemError

_BYTES_PER_S_PER_GBPS = 1e9  # datasheet GB/s are SI
_FLOPS_PER_TFLOP = 1e12
_BYTES_PER_MIB = 2**20
_LIST_HINT = "Run 'graphmem gpus' to list the known GPUs."

# Words that prefix product names ("NVIDIA GeForce RTX 3090", "Tesla T4") but identify nothing.
_BRAND_WORDS = frozenset({"nvidia", "tesla", "geforce"})
_SEPARATORS = re.compile(r"[\s_\-]+")
_CANONICAL_SPELLING = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_COMPUTE_CAPABILITY = re.compile(r"\d+\.\d+")
_ARCHITECTURES = frozenset({"pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell"})

_REQUIRED_TEXT = ("name", "full_name", "architecture", "compute_capability", "source")
_OPTIONAL_TEXT = ("notes", "reported_source")
_REQUIRED_RATES = ("memory_bandwidth_gbps", "fp32_tflops", "fp16_tensor_tflops")
_OPTIONAL_RATES = ("bf16_tensor_tflops", "tf32_tensor_tflops")
_OPTIONAL_COUNTS = ("reported_total_bytes", "nvidia_smi_total_mib")
_REQUIRED_FIELDS = (*_REQUIRED_TEXT, *_REQUIRED_RATES, "aliases", "memory_bytes")
_KNOWN_FIELDS = frozenset((*_REQUIRED_FIELDS, *_OPTIONAL_TEXT, *_OPTIONAL_RATES, *_OPTIONAL_COUNTS))

# dtype spellings (numpy/torch/ONNX style and short forms) -> which rate applies.
_DTYPE_RATE_KIND = {
    "float32": "fp32", "float": "fp32", "fp32": "fp32",
    "float16": "fp16", "half": "fp16", "fp16": "fp16",
    "bfloat16": "bf16", "bf16": "bf16",
}


class UnknownGpuError(GraphmemError):
    """A GPU name that is neither a table name nor an alias."""


class GpuTableError(GraphmemError):
    """The GPU data file is malformed; the message names the file and the row."""


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's datasheet numbers, in base units (bytes, bytes/s, FLOP/s).

    Tensor rates are dense (no sparsity). `fp16_flops_per_s` is tensor-core FP16 with FP32
    accumulate, except on GPUs without tensor cores (P100), where it is the CUDA-core rate.
    `reported_total_bytes` is the cudaMemGetInfo total and `nvidia_smi_total_bytes` the
    nvidia-smi total, both driver-dependent and known only for some GPUs (see
    `reported_source`); `memory_bytes` is the nominal datasheet capacity.
    """

    name: str
    full_name: str
    aliases: tuple[str, ...]
    architecture: str
    compute_capability: str
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float
    fp32_flops_per_s: float
    fp16_flops_per_s: float
    bf16_flops_per_s: float | None
    tf32_flops_per_s: float | None
    source: str
    notes: str | None = None
    reported_total_bytes: int | None = None
    nvidia_smi_total_bytes: int | None = None
    reported_source: str | None = None

    @property
    def capacity_bytes(self) -> int:
        """The memory every verdict holds a model against: what the driver reports where
        known, else nvidia-smi's total, else the datasheet's."""
        return self.reported_total_bytes or self.nvidia_smi_total_bytes or self.memory_bytes

    def flops_per_s_for(self, dtype_name: str) -> float:
        """Peak FLOP/s for matmul-like work computed in `dtype_name`.

        float32 -> `fp32_flops_per_s`, the non-tensor rate (PyTorch does not use TF32 for
        matmuls by default; `tf32_flops_per_s` is there for callers that enable it).
        float16 -> `fp16_flops_per_s`, dense tensor cores.
        bfloat16 -> `bf16_flops_per_s`, or `fp32_flops_per_s` on GPUs without BF16 tensor
        cores (P100, V100, T4), where bfloat16 math runs no faster than float32.
        Also accepts "fp32", "half", "bf16", "torch.float16" and the like.
        """
        kind = _DTYPE_RATE_KIND.get(dtype_name.strip().lower().removeprefix("torch."))
        if kind == "fp32":
            return self.fp32_flops_per_s
        if kind == "fp16":
            return self.fp16_flops_per_s
        if kind == "bf16":
            return self.bf16_flops_per_s or self.fp32_flops_per_s
        known = "float32, float16, bfloat16"
        raise GraphmemError(f"no FLOP rate for dtype '{dtype_name}' on {self.name}; known: {known}")


def gpu_key(spelling: str) -> str:
    """The form GPU names are compared in: lower case, no separators, no brand words.

    "NVIDIA A100 40GB", "a100_40gb" and "a100-40gb" all give "a10040gb".
    """
    words = [word for word in _SEPARATORS.split(spelling.strip().lower()) if word]
    return "".join(itertools.dropwhile(lambda word: word in _BRAND_WORDS, words))


@functools.cache
def load_gpu_table() -> tuple[GpuSpec, ...]:
    """The GPUs of graphmem/devices/data/gpus.toml, in file order, validated."""
    data_file = resources.files("graphmem.devices.data") / "gpus.toml"
    return _parse_table(data_file.read_text(encoding="utf-8"),
                        origin="graphmem/devices/data/gpus.toml")


def load_gpu_table_from(path: Path) -> tuple[GpuSpec, ...]:
    """The GPUs of a table file at `path` (same format as the packaged one), validated."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise GpuTableError(f"{path}: cannot read the GPU table: {error}") from error
    return _parse_table(text, origin=str(path))


def find_gpu(name: str) -> GpuSpec:
    """The GPU `name` means, as people type it (see `gpu_key`): its name, an alias, its full
    name as nvidia-smi prints it, or a family name (`rtx3060`, `h100`) when every variant of
    that family in the table has the same memory, so the choice cannot change a verdict (the
    table's first variant is taken; the output names it). A family whose variants differ in
    memory (`a100`: 40 or 80 GB) and a typo (`t5`) are UnknownGpuError with suggestions."""
    key = gpu_key(name)
    spec = _gpu_index().get(key)
    if spec is not None:
        return spec
    family = _family(key, load_gpu_table())
    if family and len({variant.memory_bytes for variant in family}) == 1:
        return family[0]
    raise UnknownGpuError(_unknown_gpu_message(name, load_gpu_table()))


def other_variants(name: str) -> tuple[GpuSpec, ...]:
    """The other GPUs a family name could mean (`h100`: h100-pcie beside the h100-sxm it is
    taken as): the same memory, so the verdict is the same, but other bandwidth and FLOP
    rates, so the latency is the variant's. () when `name` names one row (its name, its full
    name, or a spelling no other row starts with)."""
    key, spec = gpu_key(name), find_gpu(name)
    if key in (gpu_key(spec.name), gpu_key(spec.full_name)):
        return ()
    return tuple(other for other in _family(key, load_gpu_table()) if other != spec)


def _family(key: str, table: tuple[GpuSpec, ...]) -> list[GpuSpec]:
    """The GPUs one of whose spellings starts with `key` (`rtx3060` -> rtx-3060-12gb)."""
    return [spec for spec in table if key and _has_key_prefix(spec, key)]


@functools.cache
def _gpu_index() -> dict[str, GpuSpec]:
    table = load_gpu_table()
    index = {gpu_key(spelling): spec for spec in table for spelling in _spellings(spec)}
    for spec in table:  # "NVIDIA Tesla T4", as the report prints it
        index.setdefault(gpu_key(spec.full_name), spec)
    return index


def _spellings(spec: GpuSpec) -> tuple[str, ...]:
    return (spec.name, *spec.aliases)


# --- the error message for an unknown name ----------------------------------------------


def _unknown_gpu_message(name: str, table: tuple[GpuSpec, ...]) -> str:
    suggestions = _suggestions(gpu_key(name), table)
    if not suggestions:
        return f"unknown GPU '{name}'. {_LIST_HINT}"
    quoted = [f"'{suggestion}'" for suggestion in suggestions]
    choices = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f"unknown GPU '{name}'; did you mean {choices}? {_LIST_HINT}"


def _suggestions(key: str, table: tuple[GpuSpec, ...]) -> list[str]:
    """Every sized variant when `key` names a family ("a100"), else the closest name."""
    if not key:
        return []
    variants = [spec.name for spec in _family(key, table)]
    if variants:
        return variants
    name_by_key = {gpu_key(spelling): spec.name for spec in table for spelling in _spellings(spec)}
    # short names need a lower bar: 't5' is one letter from 't4' (ratio 0.5)
    cutoff = 0.5 if len(key) <= 4 else 0.6
    import difflib  # a mistyped GPU name only

    matches = difflib.get_close_matches(key, list(name_by_key), n=1, cutoff=cutoff)
    return [name_by_key[match] for match in matches]


def _has_key_prefix(spec: GpuSpec, prefix: str) -> bool:
    return any(gpu_key(spelling).startswith(prefix) for spelling in _spellings(spec))


# --- parsing and validation ------------------------------------------------------------


def _parse_table(text: str, origin: str) -> tuple[GpuSpec, ...]:
    import tomllib  # the table is read where a GPU is named (a command without one reads none)

    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise GpuTableError(f"{origin}: not valid TOML: {error}") from error
    rows = document.get("gpu")
    if not isinstance(rows, list) or not rows:
        raise GpuTableError(f"{origin}: no [[gpu]] tables found")
    labels = [_row_label(index, row) for index, row in enumerate(rows, start=1)]
    specs = tuple(
        _spec_from_row(row, f"{origin}: {label}") for label, row in zip(labels, rows, strict=True)
    )
    _check_unique_spellings(specs, labels, origin)
    return specs


def _row_label(index: int, row: Any) -> str:
    """How errors name a row: `[[gpu]] row 3 ('a10')`, counting from 1."""
    name = row.get("name") if isinstance(row, dict) else None
    return f"[[gpu]] row {index}" + (f" ({name!r})" if isinstance(name, str) else "")


def _spec_from_row(row: Any, where: str) -> GpuSpec:
    _check_fields(row, where)
    spec = GpuSpec(
        name=_canonical_spelling(row["name"], "name", where),
        full_name=_text(row, "full_name", where),
        aliases=_aliases(row, where),
        architecture=_architecture(row, where),
        compute_capability=_compute_capability(row, where),
        memory_bytes=_positive_int(row, "memory_bytes", where),
        memory_bandwidth_bytes_per_s=_bytes_per_s(row, where),
        fp32_flops_per_s=_flops_per_s(row, "fp32_tflops", where),
        fp16_flops_per_s=_flops_per_s(row, "fp16_tensor_tflops", where),
        bf16_flops_per_s=_optional_flops_per_s(row, "bf16_tensor_tflops", where),
        tf32_flops_per_s=_optional_flops_per_s(row, "tf32_tensor_tflops", where),
        source=_text(row, "source", where),
        notes=_optional_text(row, "notes", where),
        reported_total_bytes=_optional_positive_int(row, "reported_total_bytes", where),
        nvidia_smi_total_bytes=_nvidia_smi_total_bytes(row, where),
        reported_source=_optional_text(row, "reported_source", where),
    )
    _check_reported_totals(spec, where)
    return spec


def _check_fields(row: Any, where: str) -> None:
    if not isinstance(row, dict):
        raise GpuTableError(f"{where}: expected a table of fields, got {type(row).__name__}")
    missing = [field for field in _REQUIRED_FIELDS if field not in row]
    if missing:
        raise GpuTableError(f"{where}: missing required field(s) {', '.join(map(repr, missing))}")
    unknown = sorted(set(row) - _KNOWN_FIELDS)
    if unknown:
        raise GpuTableError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}")


def _text(row: dict[str, Any], key: str, where: str) -> str:
    value = row[key]
    if not isinstance(value, str) or not value.strip():
        raise GpuTableError(f"{where}: field '{key}' must be a non-empty string, got {value!r}")
    return value


def _optional_text(row: dict[str, Any], key: str, where: str) -> str | None:
    return _text(row, key, where) if key in row else None


def _canonical_spelling(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str) or not _CANONICAL_SPELLING.fullmatch(value):
        problem = "must be lower-case words joined by '-'"
        raise GpuTableError(f"{where}: field '{key}' {problem}, got {value!r}")
    return value


def _aliases(row: dict[str, Any], where: str) -> tuple[str, ...]:
    aliases = row["aliases"]
    if not isinstance(aliases, list):
        raise GpuTableError(f"{where}: field 'aliases' must be a list of strings, got {aliases!r}")
    return tuple(_canonical_spelling(alias, "aliases", where) for alias in aliases)


def _architecture(row: dict[str, Any], where: str) -> str:
    value = _text(row, "architecture", where)
    if value not in _ARCHITECTURES:
        known = ", ".join(sorted(_ARCHITECTURES))
        raise GpuTableError(f"{where}: unknown architecture {value!r}; known: {known}")
    return value


def _compute_capability(row: dict[str, Any], where: str) -> str:
    value = _text(row, "compute_capability", where)
    if not _COMPUTE_CAPABILITY.fullmatch(value):
        problem = "must look like \"8.0\""
        raise GpuTableError(f"{where}: field 'compute_capability' {problem}, got {value!r}")
    return value


def _positive_number(row: dict[str, Any], key: str, where: str) -> float:
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise GpuTableError(f"{where}: field '{key}' must be a positive number, got {value!r}")
    return float(value)


def _bytes_per_s(row: dict[str, Any], where: str) -> float:
    return _positive_number(row, "memory_bandwidth_gbps", where) * _BYTES_PER_S_PER_GBPS


def _flops_per_s(row: dict[str, Any], key: str, where: str) -> float:
    return _positive_number(row, key, where) * _FLOPS_PER_TFLOP


def _optional_flops_per_s(row: dict[str, Any], key: str, where: str) -> float | None:
    return _flops_per_s(row, key, where) if key in row else None


def _positive_int(row: dict[str, Any], key: str, where: str) -> int:
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise GpuTableError(f"{where}: field '{key}' must be a positive integer, got {value!r}")
    return value


def _optional_positive_int(row: dict[str, Any], key: str, where: str) -> int | None:
    return _positive_int(row, key, where) if key in row else None


def _nvidia_smi_total_bytes(row: dict[str, Any], where: str) -> int | None:
    mib = _optional_positive_int(row, "nvidia_smi_total_mib", where)
    return None if mib is None else mib * _BYTES_PER_MIB


def _check_reported_totals(spec: GpuSpec, where: str) -> None:
    """A measured total needs its source, and can't exceed the nominal capacity."""
    measured = {
        "reported_total_bytes": spec.reported_total_bytes,
        "nvidia_smi_total_mib": spec.nvidia_smi_total_bytes,
    }
    for key, total_bytes in measured.items():
        if total_bytes is None:
            continue
        if spec.reported_source is None:
            problem = "needs a 'reported_source' saying where it was seen"
            raise GpuTableError(f"{where}: field '{key}' {problem}")
        if total_bytes > spec.memory_bytes:
            raise GpuTableError(
                f"{where}: field '{key}' ({total_bytes} bytes) exceeds memory_bytes"
                f" ({spec.memory_bytes}); is memory_bytes in GB where GiB is meant?"
            )


def _check_unique_spellings(specs: tuple[GpuSpec, ...], labels: list[str], origin: str) -> None:
    """No two names/aliases may compare equal under `gpu_key`, within a row or across rows."""
    owner_by_key: dict[str, str] = {}
    for spec, label in zip(specs, labels, strict=True):
        for spelling in _spellings(spec):
            key = gpu_key(spelling)
            if not key:
                raise GpuTableError(f"{origin}: {label}: {spelling!r} is only brand words")
            if key in owner_by_key:
                problem = f"name or alias {spelling!r} is already used by {owner_by_key[key]}"
                raise GpuTableError(f"{origin}: {label}: {problem}")
            owner_by_key[key] = label
