"""The GPU table: data file contents, lookups, error messages, validation of bad rows."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from graphmem.core.symbolic import SymInt
from graphmem.devices.gpus import (
    GpuSpec,
    GpuTableError,
    UnknownGpuError,
    find_gpu,
    gpu_key,
    load_gpu_table,
    load_gpu_table_from,
)
from graphmem.errors import GraphmemError
from tests.helpers.cli import Run

GIB = 2**30
MIB = 2**20
TFLOPS = 1e12
GBPS = 1e9

REQUIRED_GPUS = (
    "t4", "p100-16gb", "v100-16gb", "v100-32gb", "a10", "a100-40gb", "a100-80gb", "l4",
    "l40s", "h100-sxm", "h100-pcie", "h200-sxm", "rtx-3060-12gb", "rtx-3090", "rtx-4090",
    "rtx-a6000",
)


# --- the packaged table -----------------------------------------------------------------


def test_table_has_every_required_gpu() -> None:
    names = {gpu.name for gpu in load_gpu_table()}
    assert set(REQUIRED_GPUS) <= names


@pytest.mark.parametrize("gpu", load_gpu_table(), ids=lambda gpu: gpu.name)
def test_every_row_has_a_source_and_positive_numbers(gpu: GpuSpec) -> None:
    assert gpu.source.strip() and "http" in gpu.source
    assert gpu.memory_bytes > 0 and gpu.memory_bandwidth_bytes_per_s > 0
    assert gpu.fp32_flops_per_s > 0 and gpu.fp16_flops_per_s > 0
    for optional_rate in (gpu.bf16_flops_per_s, gpu.tf32_flops_per_s):
        assert optional_rate is None or optional_rate > 0


@pytest.mark.parametrize("gpu", load_gpu_table(), ids=lambda gpu: gpu.name)
def test_memory_is_whole_gib_and_measured_totals_are_below_it(gpu: GpuSpec) -> None:
    # datasheet "GB" of GPU memory is GiB; what the driver shows is never more than that
    assert gpu.memory_bytes % GIB == 0
    for measured in (gpu.reported_total_bytes, gpu.nvidia_smi_total_bytes):
        assert measured is None or 0.9 * gpu.memory_bytes < measured <= gpu.memory_bytes


@pytest.mark.parametrize("gpu", load_gpu_table(), ids=lambda gpu: gpu.name)
def test_tensor_rates_are_never_below_the_fp32_rate(gpu: GpuSpec) -> None:
    assert gpu.fp16_flops_per_s >= gpu.fp32_flops_per_s
    assert gpu.flops_per_s_for("bfloat16") >= gpu.fp32_flops_per_s


def test_pre_ampere_gpus_have_no_bf16_or_tf32() -> None:
    for gpu in load_gpu_table():
        if gpu.architecture in ("pascal", "volta", "turing"):
            assert gpu.bf16_flops_per_s is None and gpu.tf32_flops_per_s is None, gpu.name


def test_spec_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        find_gpu("t4").memory_bytes = 1  # type: ignore[misc]


# --- known facts, with the working -------------------------------------------------------


def test_t4_facts() -> None:
    t4 = find_gpu("t4")
    assert t4.memory_bytes == 17179869184  # 16 GiB = 16 * 2**30
    assert t4.memory_bandwidth_bytes_per_s == 320 * GBPS
    assert t4.fp16_flops_per_s == 65 * TFLOPS  # mixed precision FP16/FP32 tensor
    assert t4.nvidia_smi_total_bytes == 15360 * MIB  # ECC takes 1/16: 16384 * 15/16 = 15360
    assert t4.compute_capability == "7.5" and t4.architecture == "turing"


def test_a100_80gb_sxm_bandwidth() -> None:
    # A100 80GB SXM: 2039 GB/s (the PCIe card has 1935)
    assert find_gpu("a100-80gb").memory_bandwidth_bytes_per_s == 2039 * GBPS
    assert find_gpu("a100-80gb").memory_bytes == 80 * GIB  # 85899345920
    assert find_gpu("a100-40gb").memory_bandwidth_bytes_per_s == 1555 * GBPS


def test_h100_sxm_dense_bf16_not_the_sparse_figure() -> None:
    # datasheet 1979 TFLOP/s is with 2:4 sparsity; dense is 989.4 (Hopper whitepaper)
    h100 = find_gpu("h100-sxm")
    assert h100.bf16_flops_per_s == pytest.approx(989.4 * TFLOPS)
    assert h100.fp16_flops_per_s == pytest.approx(989.4 * TFLOPS)
    assert h100.tf32_flops_per_s == pytest.approx(494.7 * TFLOPS)
    assert h100.memory_bandwidth_bytes_per_s == 3350 * GBPS


def test_h100_pcie_differs_from_sxm_in_compute_not_memory() -> None:
    sxm, pcie = find_gpu("h100-sxm"), find_gpu("h100-pcie")
    assert sxm.memory_bytes == pcie.memory_bytes == 80 * GIB
    assert pcie.bf16_flops_per_s == pytest.approx(1513 / 2 * TFLOPS)  # 756.5 dense
    assert pcie.memory_bandwidth_bytes_per_s == 2000 * GBPS


def test_measured_hopper_totals() -> None:
    # measured with cuMemGetInfo on the project's machines, driver 580.159.04
    assert find_gpu("h100-sxm").reported_total_bytes == 85017493504  # 81079 MiB
    assert find_gpu("h100-sxm").nvidia_smi_total_bytes == 81559 * MIB
    assert find_gpu("h200-sxm").reported_total_bytes == 150109880320  # 143155.9 MiB
    assert find_gpu("h200-sxm").memory_bytes == 141 * GIB  # 151397597184


def test_p100_has_no_tensor_cores_and_says_so() -> None:
    p100 = find_gpu("p100-16gb")
    assert p100.fp16_flops_per_s == pytest.approx(18.7 * TFLOPS)  # 2 * 9.3 FP32, CUDA cores
    assert p100.notes is not None and "no tensor cores" in p100.notes.lower()


def test_geforce_fp16_is_the_fp32_accumulate_rate() -> None:
    # GA102 whitepaper: RTX 3090 FP16 tensor 142 with FP16 accumulate, 71 with FP32 accumulate
    assert find_gpu("rtx-3090").fp16_flops_per_s == pytest.approx(71 * TFLOPS)
    # Ada whitepaper: RTX 4090 330.3 with FP16 accumulate, 165.2 with FP32 accumulate
    assert find_gpu("rtx-4090").fp16_flops_per_s == pytest.approx(165.2 * TFLOPS)


# --- flops_per_s_for ---------------------------------------------------------------------


def test_flops_per_s_for_each_dtype() -> None:
    a100 = find_gpu("a100-80gb")
    assert a100.flops_per_s_for("float32") == pytest.approx(19.5 * TFLOPS)  # not TF32's 156
    assert a100.flops_per_s_for("float16") == pytest.approx(312 * TFLOPS)
    assert a100.flops_per_s_for("bfloat16") == pytest.approx(312 * TFLOPS)
    assert a100.flops_per_s_for("torch.bfloat16") == a100.flops_per_s_for("bf16")


def test_bfloat16_falls_back_to_fp32_without_bf16_tensor_cores() -> None:
    for name in ("t4", "v100-16gb", "p100-16gb"):
        gpu = find_gpu(name)
        assert gpu.flops_per_s_for("bfloat16") == gpu.fp32_flops_per_s


def test_flops_for_an_unknown_dtype_is_a_clear_error() -> None:
    with pytest.raises(GraphmemError, match="no FLOP rate for dtype 'int8' on t4"):
        find_gpu("t4").flops_per_s_for("int8")


# --- lookups -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("a100-40gb", "a100-40gb"),
        ("A100-40GB", "a100-40gb"),
        ("A100 40GB", "a100-40gb"),
        ("a100_40gb", "a100-40gb"),
        ("  a100 40gb  ", "a100-40gb"),
        ("T4", "t4"),
        ("Tesla T4", "t4"),  # nvidia-smi product names work too
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("h100", "h100-sxm"),  # documented default: same memory as the PCIe card
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("Tesla V100-SXM2-16GB", "v100-16gb"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("rtx3090", "rtx-3090"),
        ("A6000", "rtx-a6000"),
        ("NVIDIA H200", "h200-sxm"),
    ],
)
def test_find_gpu_accepts_names_aliases_and_spacing_variants(spelling: str, name: str) -> None:
    assert find_gpu(spelling).name == name


def test_gpu_key_drops_case_separators_and_brand_words() -> None:
    assert gpu_key("NVIDIA GeForce RTX_3090") == gpu_key("rtx-3090") == "rtx3090"


def test_typo_suggests_the_closest_name() -> None:
    with pytest.raises(UnknownGpuError) as caught:
        find_gpu("a10o-40gb")
    assert str(caught.value) == (
        "unknown GPU 'a10o-40gb'; did you mean 'a100-40gb'?"
        " Run 'graphmem gpus' to list the known GPUs."
    )
    assert isinstance(caught.value, GraphmemError)


@pytest.mark.parametrize(
    ("family", "choices"),
    [
        ("a100", "'a100-40gb' or 'a100-80gb'"),
        ("V100", "'v100-16gb' or 'v100-32gb'"),
    ],
)
def test_a_family_name_without_a_size_lists_the_sizes(family: str, choices: str) -> None:
    # no alias guesses the memory size: a wrong guess would give a wrong "fits" verdict
    with pytest.raises(UnknownGpuError, match=f"did you mean {choices}\\?"):
        find_gpu(family)


@pytest.mark.parametrize(("typed", "name"), [
    # one policy: a family is accepted when every variant the table has of it has the same
    # memory (the verdict cannot depend on the choice): RTX 3060 has one entry (12 GB); the
    # H100 SXM and PCIe both have 80 GiB (the first in the table is taken, the output names it)
    ("rtx3060", "rtx-3060-12gb"), ("RTX 3060", "rtx-3060-12gb"), ("rtx 3060", "rtx-3060-12gb"),
    ("h100", "h100-sxm"), ("H200", "h200-sxm"),
    # nvidia-smi's and the report's full names
    ("NVIDIA Tesla T4", "t4"), ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
])
def test_names_as_people_type_them(typed: str, name: str) -> None:
    assert find_gpu(typed).name == name


def test_a_one_letter_typo_of_a_short_name_is_suggested() -> None:
    with pytest.raises(UnknownGpuError, match="unknown GPU 't5'; did you mean 't4'\\?"):
        find_gpu("t5")


def test_nothing_close_still_says_how_to_list_the_gpus() -> None:
    with pytest.raises(UnknownGpuError) as caught:
        find_gpu("quantum-9000")
    assert str(caught.value) == (
        "unknown GPU 'quantum-9000'. Run 'graphmem gpus' to list the known GPUs."
    )
    assert "\n" not in str(caught.value)


# --- malformed data files ----------------------------------------------------------------

GOOD_ROW = """
[[gpu]]
name = "test-gpu"
full_name = "Test GPU"
aliases = ["tg"]
architecture = "ampere"
compute_capability = "8.0"
memory_bytes = 17179869184
memory_bandwidth_gbps = 1000.0
fp32_tflops = 10.0
fp16_tensor_tflops = 100.0
source = "made up for a test, https://example.com"
"""


def write_table(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gpus.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_file_loads(tmp_path: Path) -> None:
    (gpu,) = load_gpu_table_from(write_table(tmp_path, GOOD_ROW))
    assert gpu.name == "test-gpu" and gpu.bf16_flops_per_s is None
    assert gpu.memory_bandwidth_bytes_per_s == 1000 * GBPS  # converted from GB/s


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda row: row.replace('memory_bytes = 17179869184\n', ""),
         "row 2 ('test-gpu-2'): missing required field(s) 'memory_bytes'"),
        (lambda row: row.replace("fp32_tflops = 10.0", "fp32_tflops = -10.0"),
         "row 2 ('test-gpu-2'): field 'fp32_tflops' must be a positive number, got -10.0"),
        (lambda row: row.replace("memory_bytes = 17179869184", 'memory_bytes = "16 GB"'),
         "row 2 ('test-gpu-2'): field 'memory_bytes' must be a positive integer, got '16 GB'"),
        (lambda row: row.replace("fp32_tflops", "fp32_tflop"),
         "row 2 ('test-gpu-2'): missing required field(s) 'fp32_tflops'"),
        (lambda row: row + "bf16_tensr_tflops = 1.0\n",
         "row 2 ('test-gpu-2'): unknown field(s) 'bf16_tensr_tflops'"),
        (lambda row: row.replace('"ampere"', '"amperes"'),
         "row 2 ('test-gpu-2'): unknown architecture 'amperes'"),
        (lambda row: row + "reported_total_bytes = 1\n",
         "row 2 ('test-gpu-2'): field 'reported_total_bytes' needs a 'reported_source'"),
        (lambda row: row + 'nvidia_smi_total_mib = 20000\nreported_source = "x"\n',
         "row 2 ('test-gpu-2'): field 'nvidia_smi_total_mib' (20971520000 bytes) exceeds"),
        (lambda row: row.replace('aliases = ["tg-2"]', 'aliases = ["Test GPU"]'),
         "row 2 ('test-gpu-2'): field 'aliases' must be lower-case words joined by '-'"),
        (lambda row: row.replace('aliases = ["tg-2"]', 'aliases = ["tg"]'),
         "row 2 ('test-gpu-2'): name or alias 'tg' is already used by [[gpu]] row 1 ('test-gpu')"),
    ],
    ids=["missing", "negative", "string-bytes", "misspelt-required", "misspelt-optional",
         "architecture", "total-without-source", "total-above-memory", "alias-spelling",
         "duplicate-alias"],
)
def test_a_malformed_row_is_a_clear_error_naming_the_row(
    tmp_path: Path, edit: object, message: str
) -> None:
    second_row = GOOD_ROW.replace('"test-gpu"', '"test-gpu-2"').replace('["tg"]', '["tg-2"]')
    path = write_table(tmp_path, GOOD_ROW + edit(second_row))  # type: ignore[operator]
    with pytest.raises(GpuTableError) as caught:
        load_gpu_table_from(path)
    assert str(caught.value).startswith(f"{path}: [[gpu]] ")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = write_table(tmp_path, GOOD_ROW + "name = \n")
    with pytest.raises(GpuTableError, match="not valid TOML"):
        load_gpu_table_from(path)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GpuTableError, match="cannot read the GPU table"):
        load_gpu_table_from(tmp_path / "absent.toml")


def test_a_file_without_gpu_tables_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(GpuTableError, match=r"no \[\[gpu\]\] tables found"):
        load_gpu_table_from(write_table(tmp_path, "# nothing here\n"))


def test_the_gpu_table_shows_the_capacity_every_verdict_uses(run: Run) -> None:
    """One memory figure per GPU: `graphmem gpus` listed the T4 at its datasheet 16.0 GiB
    while every verdict held models against the 15.0 GiB its driver reports."""
    from graphmem.core.units import format_bytes
    from graphmem.passes.fit import fit_on_gpu

    code, out, err = run("gpus")
    assert code == 0, err
    rows = {cells[1].strip(): cells for line in out.splitlines()
            if len(cells := line.split("\u2502")) > 4 and cells[1].strip()}
    for gpu in load_gpu_table():
        capacity = fit_on_gpu(gpu, SymInt.const(0)).capacity_bytes
        assert rows[gpu.name][4].strip() == format_bytes(capacity), gpu.name
    assert rows["t4"][4].strip() == "15.0 GiB"  # 16,106,127,360 B reported (datasheet 16 GiB)


def test_one_family_policy_names_the_variant_a_family_name_is_taken_as(run: Run,
                                                                       tmp_path: Path) -> None:
    """`--gpu h100` took the SXM part without a word while `--gpu a100` (40 or 80 GB) was
    refused: one policy now, a family name resolves only where every variant has the same
    memory (the verdict cannot change), and the output names the variant it was taken as."""
    from graphmem.devices.gpus import other_variants

    assert [g.name for g in other_variants("h100")] == ["h100-pcie"]
    assert other_variants("h100-sxm") == () and other_variants("NVIDIA H100 SXM5 80 GB") == ()
    sxm, pcie = find_gpu("h100"), find_gpu("h100-pcie")
    assert sxm.memory_bytes == pcie.memory_bytes  # the family's one memory size
    assert sxm.memory_bandwidth_bytes_per_s != pcie.memory_bandwidth_bytes_per_s
    with pytest.raises(UnknownGpuError):
        find_gpu("a100")  # 40 or 80 GB: the verdict would depend on the guess
    model = tmp_path / "mlp.onnx"
    import onnx

    from tests.onnx_builders import mlp_model

    onnx.save(mlp_model(), model)
    code, out, err = run("analyze", model, "--batch", "2", "--gpu", "h100", "--no-html")
    assert code == 0, err
    assert "--gpu h100 is taken as h100-sxm" in " ".join(out.split())
    code, out, _ = run("analyze", model, "--batch", "2", "--gpu", "h100-sxm", "--no-html")
    assert "is taken as" not in out
