"""One answer for a routed (mixture-of-experts) ONNX graph: the experts' token counts (NonZero
over the router's one-hot choices) are bound once, by --moe-routing, in the dims binding
(graphmem/passes/routed_dims.py), and every number reads that binding: the live-tensor peak,
the FLOPs, the runtime model's tensors, the verdict and the largest batch. Each check
compares an analysis under a routing policy with the same analysis where the user bound the
counts by hand (--dim) at the loads the policy gives, worked out in the comments: the two
must agree in every section of the JSON. (Before, the runtime model sized the counts by the
policy while the passes left them free and probed them at 64.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from graphmem.api import analyze_onnx
from graphmem.core.routing import parse_moe_routing
from graphmem.passes.routed_dims import bind_routed
from tests.helpers.moe_onnx import EXPERTS, TOKENS, TOP_K, by_hand, moe_model, numbers


@pytest.mark.parametrize(("routing", "load"), [
    # 64 tokens x top-2 choices over 4 experts: 128 / 4 = 32 each
    ("balanced", TOKENS * TOP_K // EXPERTS),
    # worst: every expert at every token, 64 each
    ("worst", TOKENS)])
def test_the_live_peak_and_the_device_total_read_the_same_counts(
        tmp_path: Path, routing: str, load: int) -> None:
    path = moe_model(tmp_path / "moe.onnx")
    routed = analyze_onnx(path, moe_routing=routing, gpu="t4")
    assert [r.size for r in routed.dims.routed] == [load] * EXPERTS
    assert routed.dims.free == ()  # nothing left to probe at 64
    assert routed.liveness.peak_bytes.is_constant
    given = by_hand(path, routed, [load] * EXPERTS)
    assert given.dims.routed == ()  # the user's dims stay theirs
    assert numbers(routed) == numbers(given)
    assert routed.fit is not None and routed.runtime is not None
    assert routed.fit.live_peak_bytes == routed.liveness.peak_bytes
    assert any(f"assumed {routing}" in w for w in routed.model.warnings)


@pytest.mark.parametrize(("chooser", "top_k", "routing", "load"), [
    # one ArgMax (Switch's top-1): 64 tokens x 1 choice over 4 experts, 16 each
    ("argmax", 1, "balanced", TOKENS // EXPERTS),
    # Phi-MoE's two ArgMax concatenated (top-2, no TopK): 64 x 2 / 4 = 32 each
    ("two_argmax", 2, "balanced", TOKENS * 2 // EXPERTS),
    # worst: each expert at every one of the 64 tokens, however many it chooses
    ("two_argmax", 2, "worst", TOKENS)])
def test_a_router_that_chooses_with_argmax_is_found(
        tmp_path: Path, chooser: str, top_k: int, routing: str, load: int) -> None:
    path = moe_model(tmp_path / "moe.onnx", chooser=chooser)
    routed = analyze_onnx(path, moe_routing=routing, gpu="t4")
    assert [(r.expert, r.tokens, r.experts, r.top_k, r.size) for r in routed.dims.routed] == [
        (e, TOKENS, EXPERTS, top_k, load) for e in range(EXPERTS)]
    assert routed.dims.free == ()
    assert numbers(routed) == numbers(by_hand(path, routed, [load] * EXPERTS))
    assert any(f"top-{top_k} of {EXPERTS} over {TOKENS} tokens" in w
               for w in routed.model.warnings)


def test_choices_joined_along_the_tokens_are_no_router(tmp_path: Path) -> None:
    # Phi-MoE's two ArgMax joined along the tokens (axis 0: [128, 1]) instead of the choice
    # axis ([64, 2]): the joined axis is 128, and 128 x 64 tokens is not the 128 indices, so
    # they are not each token's choices; the NonZeros stay free
    import onnx

    path = moe_model(tmp_path / "moe.onnx", chooser="two_argmax")
    model = onnx.load(path)
    del model.graph.value_info[:]
    concat = next(node for node in model.graph.node if node.op_type == "Concat")
    concat.attribute[0].i = 0
    onnx.save(model, path)
    result = analyze_onnx(path)
    assert result.dims.routed == () and len(result.dims.free) == EXPERTS


@pytest.mark.parametrize(("routing", "load"), [
    # Switch's capacity mask (one-hot x (cumsum <= 20)) only drops choices: each expert's
    # count is at most its load before it, 64 tokens x top-1 / 4 = 16 balanced, 64 worst
    ("balanced", TOKENS // EXPERTS), ("worst", TOKENS)])
def test_a_capacity_mask_keeps_the_router(tmp_path: Path, routing: str, load: int) -> None:
    path = moe_model(tmp_path / "moe.onnx", chooser="argmax", capacity=20)
    routed = analyze_onnx(path, moe_routing=routing, gpu="t4")
    assert [(r.top_k, r.size) for r in routed.dims.routed] == [(1, load)] * EXPERTS
    assert numbers(routed) == numbers(by_hand(path, routed, [load] * EXPERTS))


def test_a_mul_by_anything_but_a_zero_one_mask_is_no_router(tmp_path: Path) -> None:
    # the same layer with the mask cast from an integer (any value, not 0/1: the counts may
    # be anything up to the mask's size) is no router's: its NonZeros stay free
    import onnx

    path = moe_model(tmp_path / "moe.onnx", chooser="argmax", capacity=20)
    model = onnx.load(path)
    del model.graph.value_info[:]
    for node in model.graph.node:
        if node.op_type == "LessOrEqual":
            node.op_type = "Sub"
    onnx.save(model, path)
    result = analyze_onnx(path)
    assert result.dims.routed == () and len(result.dims.free) == EXPERTS


def test_worst_holds_more_than_balanced_in_every_number(tmp_path: Path) -> None:
    # per expert the [n, 256] fp32 up-projection: 32 more rows under worst, 32 * 256 * 4 =
    # 32,768 B more at least, in the live peak and the device total alike
    path = moe_model(tmp_path / "moe.onnx")
    balanced, worst = (analyze_onnx(path, moe_routing=r, gpu="t4") for r in ("balanced",
                                                                             "worst"))
    assert int(worst.liveness.peak_bytes) >= int(balanced.liveness.peak_bytes) + 32_768
    assert worst.runtime is not None and balanced.runtime is not None
    assert (worst.runtime.tensors_at_peak_bytes
            >= balanced.runtime.tensors_at_peak_bytes + 32_768)


@pytest.mark.slow  # a search of 30-odd bound analyses and three more: 1.5 s
def test_the_largest_batch_is_the_verdict_at_that_batch(tmp_path: Path) -> None:
    # tokens is the batch axis; the counts follow it (B tokens x 2 / 4 each). A reserve that
    # leaves 64 MiB of the T4 stops the search below the dim limit: the device total it
    # found at the largest batch and the next is the verdict's at those batches, where the
    # live peak too reads counts routed at that batch
    path = moe_model(tmp_path / "moe.onnx", tokens="tokens")
    reserve = 15 * 2**30 - 64 * 2**20
    result = analyze_onnx(path, dims={"tokens": 64}, gpu="t4", cuda_reserve_bytes=reserve)
    found = result.max_batch
    assert found is not None and found.max_batch, found
    batch = found.max_batch
    at_max, at_next = (analyze_onnx(path, dims={"tokens": b}, gpu="t4",
                                    cuda_reserve_bytes=reserve) for b in (batch, batch + 1))
    base, extra = divmod(batch * TOP_K, EXPERTS)  # balanced: the first `extra` get one more
    assert [r.size for r in at_max.dims.routed] == [base + (e < extra) for e in range(EXPERTS)]
    assert at_max.fit is not None and at_next.fit is not None
    assert int(at_max.fit.required_bytes) == found.peak_at_max_bytes
    assert int(at_next.fit.required_bytes) == found.peak_at_next_bytes
    assert at_max.fit.fits and not at_next.fit.fits
    # (the largest batch of counts held by hand is another question: they do not follow it)
    loads = [base + (e < extra) for e in range(EXPERTS)]
    held = by_hand(path, at_max, loads, cuda_reserve_bytes=reserve)
    assert numbers(at_max, ("memory", "flops")) == numbers(held, ("memory", "flops"))


def test_a_graph_with_no_router_keeps_its_binding(tmp_path: Path) -> None:
    # the same layer with the one-hot negated (not data movement) before each NonZero is no
    # router's: nothing is bound, the binding is the same object (every other graph's output
    # is unchanged)
    import onnx

    path = moe_model(tmp_path / "moe.onnx")
    model = onnx.load(path)
    del model.graph.value_info[:]
    for node in model.graph.node:
        if node.op_type == "Transpose":
            node.op_type = "Neg"
            del node.attribute[:]
    onnx.save(model, path)
    result = analyze_onnx(path)
    assert result.dims.routed == () and len(result.dims.free) == EXPERTS  # free, as before
    assert bind_routed(result.graph, result.dims, parse_moe_routing("worst")) is result.dims
    assert not any("mixture-of-experts" in w for w in result.model.warnings)


@pytest.mark.ort
def test_verify_runs_a_routed_graph(tmp_path: Path) -> None:
    # `graphmem verify` sizes the per-node comparison at the analysis's dims: with the
    # counts left free it failed with an internal error ("size 74064 + 2048*NonZero_12_o0__d1
    # depends on unbound dims"); now it runs at the routed counts (64 x 2 / 4 = 32 each)
    from graphmem.api import verify_model
    from graphmem.verify.onnx_run import Verification

    result = verify_model(moe_model(tmp_path / "moe.onnx"), threads=1, optimized_run=False)
    assert isinstance(result, Verification)
    assert list(result.dims.values()) == [TOKENS * TOP_K // EXPERTS] * EXPERTS
    assert result.predicted_activation_peak_bytes > 0 and result.nodes
