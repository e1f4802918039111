"""onnxruntime CUDA's Einsum (graphmem/runtime_models/ort_cuda_einsum.py), from its source: no
GPU here, so the expectations are the source's own (the fast path's classifications are
those of onnxruntime's planner test, onnxruntime/test/providers/cuda/
einsum_fast_path_test.cc) and the general path is the CPU processor it shares (measured on
CPU: tests/test_runtime_ort_einsum.py). docs/gpu-campaign.md lists the row to measure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from graphmem.core.ir import DType, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.runtime_models.ort_cuda_einsum import cuda_kernel_scratch, fast_path
from graphmem.runtime_models.ort_kernels import einsum_scratch
from tests.helpers.einsum import einsum_graph


@pytest.mark.parametrize(("equation", "shapes", "kind"), [
    # one input
    ("ij->ij", [(2, 3)], "Copy"),
    ("...ji->...ij", [(2, 3, 4)], "Transpose"),
    ("abc->ac", [(2, 3, 4)], "ReduceSum"),
    ("iij->ij", [(3, 3, 4)], "Diagonal"),
    ("...ii->...", [(2, 4, 4)], "Trace"),
    ("iii->i", [(5, 5, 5)], "Diagonal"),
    # two inputs
    ("ij,ij->ij", [(3, 4), (3, 4)], "Multiply"),
    ("i,j->ji", [(3,), (4,)], "Multiply"),
    ("bij,bj->bij", [(2, 3, 4), (2, 4)], "Multiply"),
    ("ij,jk->ik", [(3, 4), (4, 5)], "MatMul"),
    ("bhmd,bhnd->bhmn", [(2, 8, 16, 64), (2, 8, 32, 64)], "MatMul"),
    ("abc,cde->abde", [(2, 3, 4), (4, 5, 6)], "MatMul"),
    ("i,i->", [(64,), (64,)], "MatMul"),
    # the general processor: a summed dim of 1 against 4; the output's order not batch,
    # left, right; an input neither [batch, free, summed] nor [batch, summed, free]; three
    # inputs; a repeated label beside a second input; an output past cuBLAS's int
    ("ik,kj->ij", [(3, 1), (4, 5)], ""),
    ("ij,jk->ki", [(3, 4), (4, 5)], ""),
    ("bthd,bshd->bhts", [(2, 16, 8, 64), (2, 32, 8, 64)], ""),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], ""),
    ("iij,jk->ik", [(3, 3, 4), (4, 5)], ""),
    ("i,j->ij", [(65537,), (65536,)], ""),
])
def test_fast_path_as_onnxruntimes_planner(equation: str, shapes: list[tuple[int, ...]],
                                           kind: str) -> None:
    assert fast_path(equation, shapes) == kind


def einsum(equation: str, *shapes: tuple[int, ...]) -> Node:
    inputs = [Value(f"x{i}", DType.FLOAT32, tuple(SymInt.const(d) for d in shape),
                    Role.ACTIVATION) for i, shape in enumerate(shapes)]
    made = Node("e", "Einsum", inputs, [], attributes={"equation": equation})
    made.add_output(Value("y", DType.FLOAT32, None, Role.ACTIVATION))
    return made


def test_the_general_path_takes_the_cpu_processors_temporaries() -> None:
    # 'bthd,bshd->bhts' (attention scores, heads inside), [2, 16, 8, 64] x [2, 32, 8, 64]
    # fp32: no fast path; labels b t h d s as first seen. The right input [b, s, h, d] is out
    # of that order: transposed on entry, 131,072 B held to the end. The pair: shared b h,
    # left-only t, reduced d, right-only s; the left permuted to [b, h, t, d]: 65,536 B; the
    # right to [b, h, d, s]: an input is copied even where a reshape would do, 131,072 B;
    # the product [2, 8, 16, 32]: 32,768 B, already in the output's order
    node = einsum("bthd,bshd->bhts", (2, 16, 8, 64), (2, 32, 8, 64))
    scratch = cuda_kernel_scratch(node, {})
    assert scratch == einsum_scratch(node, {})
    assert scratch.sizes_bytes == (131_072, 65_536, 131_072, 32_768)


def test_the_fast_path_takes_nothing() -> None:
    # 'bhmd,bhnd->bhmn' on CPU copies its right operand permuted to [b, h, d, n] (2*8*32*64*4
    # = 131,072 B) and holds the product; CUDA's fast path runs one cuBLAS batched GEMM on
    # views of the inputs, straight into the output
    node = einsum("bhmd,bhnd->bhmn", (2, 8, 16, 64), (2, 8, 32, 64))
    assert 131_072 in einsum_scratch(node, {}).sizes_bytes
    assert cuda_kernel_scratch(node, {}).sizes_bytes == ()


@pytest.mark.parametrize(("equation", "shapes", "temporaries"), [
    # the general path: the temporaries above, 360,448 B, held with the Einsum's inputs (the
    # Neg outputs, 65,536 + 131,072 B) and output (32,768 B): 589,824
    ("bthd,bshd->bhts", [(2, 16, 8, 64), (2, 32, 8, 64)], 360_448),
    # the same scores with the heads outside: the fast path, nothing but the tensors
    ("bhtd,bhsd->bhts", [(2, 8, 16, 64), (2, 8, 32, 64)], 0),
])
def test_ort_cuda_holds_the_temporaries_at_the_einsum(
        tmp_path: Path, equation: str, shapes: list[tuple[int, ...]], temporaries: int) -> None:
    import graphmem

    path = einsum_graph(tmp_path, "scores", equation, shapes)
    result = graphmem.analyze_onnx(path, gpu="t4", runtime="ort-cuda")
    assert result.runtime is not None
    tensors = 65_536 + 131_072 + 32_768
    assert result.runtime.tensors_at_peak_bytes == tensors
    assert result.runtime.runtime_peak_bytes == tensors + temporaries
