"""onnxruntime CPU's Einsum temporaries (graphmem/runtime_models/ort_einsum.py): worked out by
hand from the kernel's steps, then checked to the byte against onnxruntime's measured
`mem_in_use_peak` (one thread, tests/helpers/ort.py `measure_all`) on small graphs: batched
matmul, transposed operands, a label only the first input has, one operand, three operands,
broadcasting, an implicit output, an ellipsis and the five equations of Mamba-2's chunked
scan (its dynamo export, docs/zoo.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphmem.runtime_models.bfc_arena import ArenaEvent
from graphmem.runtime_models.ort_einsum import einsum_temps
from graphmem.runtime_models.ort_kernels import KernelScratch
from tests.helpers.einsum import einsum_graph
from tests.helpers.ort import measure_all


def test_batched_matmul_copies_its_right_operand() -> None:
    # 'bij,bjk->bik', [8, 32, 64] x [8, 64, 16] fp32; labels b i j k; j is reduced. The left
    # is already [shared b, left-only i, reduced j, right-only k]: no copy. The right
    # [8, (i=1), 64, 16] is permuted to [b, j, k, i]: an input is never reshaped in place,
    # so a copy, 8 * 64 * 16 * 4 = 32,768 B; the product [8, 32, 1, 16]: 16,384 B; the
    # output's order is the product's: no final transpose
    temps = einsum_temps("bij,bjk->bik", [(8, 32, 64), (8, 64, 16)], 4)
    assert temps is not None
    assert temps.sizes_bytes == [32768, 16384]


def test_operands_out_of_label_order_are_transposed_and_held() -> None:
    # 'bji,bjk->bik', [8, 64, 32] x [8, 64, 16]: labels numbered b j i k as first seen, both
    # inputs already in that order: the right operand's copy (32,768 B), the left permuted
    # from [b, j, i, k] to [b, i, j, k] (8 * 64 * 32 * 4 = 65,536 B), the product 16,384 B
    temps = einsum_temps("bji,bjk->bik", [(8, 64, 32), (8, 64, 16)], 4)
    assert temps is not None
    assert temps.sizes_bytes == [65536, 32768, 16384]
    # 'bij,bjk->bki': the same pair, then the candidate [b, i, k] transposed to the
    # output's [b, k, i], 8 * 16 * 32 * 4 = 16,384 B more
    temps = einsum_temps("bij,bjk->bki", [(8, 32, 64), (8, 64, 16)], 4)
    assert temps is not None
    assert temps.sizes_bytes == [32768, 16384, 16384]
    assert temps.outputs_at == 2  # FinalizeOutput takes the output before that transpose


def test_a_label_only_the_first_input_has_is_summed_out_first() -> None:
    # 'ijz,jk->ik', [32, 64, 8] x [64, 16]: z is summed out of the first input into
    # [32, 64, 1]: 8,192 B; then the right [1, 64, 1, 16] permuted to [j, z, k, i]: 4,096 B
    # (a raw input is copied even when only dims of 1 move); the product [32, 1, 1, 16]:
    # 2,048 B
    temps = einsum_temps("ijz,jk->ik", [(32, 64, 8), (64, 16)], 4)
    assert temps is not None
    assert temps.sizes_bytes == [8192, 4096, 2048]


def test_three_operands_free_the_first_pairs_copies() -> None:
    # 'ij,jk,kl->il', [32, 64] x [64, 48] x [48, 16]. Pair 1 reduces j: the right copied to
    # [j, k, l, i] (12,288 B), the product [32, 1, 48, 1] (6,144 B), already in label order;
    # the right copy is freed on return. Pair 2 reduces k: the left (pair 1's product) is
    # permuted to [i, k, j, l]; only dims of 1 move, but only a copy the pair made itself is
    # reshaped instead, so a copy: 6,144 B; the right [k, l] to [k, j, l, i]: 3,072 B; the
    # product 32 * 16 * 4 = 2,048 B
    temps = einsum_temps("ij,jk,kl->il", [(32, 64), (64, 48), (48, 16)], 4)
    assert temps is not None
    assert temps.sizes_bytes == [12288, 6144, 6144, 3072, 2048]
    assert temps.frees_after[1] == (0,)  # the first pair's right copy, on its return
    scratch = KernelScratch(tuple(temps.sizes_bytes), frees_after=tuple(temps.frees_after))
    # held at once: 12,288 + 6,144 = 18,432, then 6,144 * 2 + 3,072 + 2,048 = 17,408
    assert scratch.held_bytes == 18432


def test_a_diagonal_is_not_modelled() -> None:
    assert einsum_temps("ii->i", [(4, 4)], 4) is None
    assert einsum_temps("ij,jk->ik", [(4, 4)], 4) is None  # two terms, one shape


# equation, input shapes: the generic cases and Mamba-2's chunked scan (b c l h n p s z as
# its export names them, at small sizes)
CASES = {
    "bmm": ("bij,bjk->bik", [(8, 32, 64), (8, 64, 16)]),
    "transposed": ("bji,bjk->bik", [(8, 64, 32), (8, 64, 16)]),
    "output_order": ("bij,bjk->bki", [(8, 32, 64), (8, 64, 16)]),
    "first_only": ("ijz,jk->ik", [(32, 64, 8), (64, 16)]),
    "three": ("ij,jk,kl->il", [(32, 64), (64, 48), (48, 16)]),
    "implicit": ("ij,jk", [(32, 64), (64, 16)]),
    "ellipsis": ("...ij,...jk->...ik", [(2, 4, 32, 64), (2, 4, 64, 16)]),
    "one_transposed": ("ij->ji", [(64, 48)]),
    "one_summed": ("ij->i", [(64, 48)]),
    "outer": ("i,j->ij", [(64,), (48,)]),
    "broadcast": ("bij,jk->bik", [(4, 32, 48), (48, 16)]),
    "chain": ("bij,bjk,bkl->bil", [(4, 32, 48), (4, 48, 16), (4, 16, 24)]),
    "mixed": ("ijk,ikl,jl->il", [(8, 16, 12), (8, 12, 20), (16, 20)]),
    # attention scores, heads inside (the CUDA provider's general processor:
    # tests/test_ort_cuda_einsum.py) and outside (its fast path; on CPU the processor)
    "scores_heads_inside": ("bthd,bshd->bhts", [(2, 16, 8, 64), (2, 32, 8, 64)]),
    "scores_heads_outside": ("bhtd,bhsd->bhts", [(2, 8, 16, 64), (2, 8, 32, 64)]),
    "mamba2_scores": ("bclhn,bcshn->bclsh", [(2, 4, 8, 4, 16), (2, 4, 8, 4, 16)]),
    "mamba2_diagonal": ("bclsh,bcshp->bclhp", [(2, 4, 8, 8, 4), (2, 4, 8, 4, 16)]),
    "mamba2_states": ("bclhn,bclhp->bchpn", [(2, 4, 8, 4, 16), (2, 4, 8, 4, 16)]),
    "mamba2_chunks": ("bzch,bzhpn->bchpn", [(2, 5, 4, 4), (2, 5, 4, 16, 16)]),
    "mamba2_off_diagonal": ("bclhn,bchpn->bclhp", [(2, 4, 8, 4, 16), (2, 4, 4, 16, 16)]),
}


@pytest.mark.ort
@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_einsum_temporaries_match_onnxruntime(tmp_path: Path, name: str) -> None:
    # without the temporaries every case was predicted 14 to 115 KB low (bmm: 114,688 B
    # predicted, 163,840 B measured); with them each is exact
    equation, shapes = CASES[name]
    temps = einsum_temps(equation, shapes, 4)
    assert temps is not None and temps.sizes_bytes, name
    predicted, measured = measure_all(einsum_graph(tmp_path, name, *CASES[name]), None, "disabled")
    assert predicted == measured, (name, predicted, measured)


def test_the_output_is_allocated_before_the_final_transpose() -> None:
    # FinalizeOutput asks for the op's output first, then transposes the candidate: the
    # output's chunk is chosen before the transpose's (Mamba-2's export: with the output
    # last, its chunk and the later tensors' differed, -2.29%; in this order it is exact)
    scratch = KernelScratch((300, 200, 100), outputs_at=2, frees_after=((), (), ()))
    events, freed = scratch.events("s", [ArenaEvent("out", 100)])
    assert [e.key for e in events] == ["s 0", "s 1", "out", "s 2"]
    assert freed == ["s 0", "s 1", "s 2"]
    # a replaced operand is freed right after its replacement
    events, freed = KernelScratch((300, 200), frees_after=((), (0,))).events("s", [])
    assert [(e.key, e.size_bytes) for e in events] == [("s 0", 300), ("s 1", 200),
                                                       ("s 0", None)]
    assert freed == ["s 1"]
