"""Cost rules for the aten ops the zoo (tests/test_zoo.py) found unpriced: each traced with
fake tensors, forward and backward, and its FLOPs stated with the working."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from graphmem.core.ir import ImportedCost
from tests.helpers.traced_ops import traced_flops

pytestmark = [pytest.mark.torch]




def gradient_of(op: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], object]:
    def step(x: torch.Tensor) -> object:
        return torch.autograd.grad(op(x).sum(), x)

    return step


def leaf(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, requires_grad=True)


def test_scatter_add_adds_each_source_element() -> None:
    # scatter_add(self [2, 6], 1, index [2, 5], src [2, 5]): 2 * 5 = 10 adds
    flops = traced_flops(lambda x, i, s: x.scatter_add(1, i, s), torch.randn(2, 6),
                         torch.zeros(2, 5, dtype=torch.int64), torch.randn(2, 5))
    assert flops["scatter_add"] == 10


def test_masked_fill_in_place_is_a_select() -> None:
    def fill(x: torch.Tensor) -> torch.Tensor:
        return x.clone().masked_fill_(x > 0, 0.0)

    assert traced_flops(fill, torch.randn(3, 4))["masked_fill_"] == 0


def test_max_pool_backward_adds_each_gradient_at_its_argmax() -> None:
    # [1, 2, 4, 4] pooled 2x2 -> [1, 2, 2, 2]: 8 gradients, 1 add each
    flops = traced_flops(gradient_of(lambda x: F.max_pool2d(x, 2)), leaf(1, 2, 4, 4))
    assert flops["max_pool2d_with_indices_backward"] == 8


def test_avg_pool_backward_spreads_each_gradient_over_its_window() -> None:
    # 8 gradients x a 2x2 window = 32, as the forward's 8 outputs x 4 window elements
    flops = traced_flops(gradient_of(lambda x: F.avg_pool2d(x, 2)), leaf(1, 2, 4, 4))
    assert flops["avg_pool2d_backward"] == flops["avg_pool2d"] == 32


def test_bilinear_upsampling_is_three_lerps_per_output() -> None:
    # [1, 2, 4, 4] -> [1, 2, 8, 8]: 128 outputs x 3 lerps x 3 FLOPs = 1152; the backward
    # accumulates the same taps per output gradient
    flops = traced_flops(gradient_of(lambda x: F.interpolate(
        x, scale_factor=2.0, mode="bilinear")), leaf(1, 2, 4, 4))
    assert flops["upsample_bilinear2d"] == flops["upsample_bilinear2d_backward"] == 1152


def test_nearest_upsampling_copies_and_its_backward_adds() -> None:
    # 128 outputs copied (0); their 128 gradients each added into the source pixel
    flops = traced_flops(gradient_of(lambda x: F.interpolate(x, scale_factor=2.0)),
                         leaf(1, 2, 4, 4))
    assert flops["upsample_nearest2d"] == 0
    assert flops["upsample_nearest2d_backward"] == 128


def test_unfold_copies_and_fold_adds() -> None:
    # im2col [1, 2, 4, 4], 2x2 windows -> columns [1, 8, 9] (copied); col2im adds the 72
    # column elements back into their pixels
    flops = traced_flops(gradient_of(lambda x: F.unfold(x, 2)), leaf(1, 2, 4, 4))
    assert flops["im2col"] == 0
    assert flops["col2im"] == 72


@pytest.mark.parametrize(("op", "packet", "per_element"), [
    (F.softplus, "softplus_backward", 4),  # exp, add, divide, multiply
    (F.hardswish, "hardswish_backward", 3),
    (F.relu6, "hardtanh_backward", 2),  # a mask of x in range, multiply
])


def test_activation_backwards_cost_the_onnx_backward_rules(
        op: Callable[[torch.Tensor], torch.Tensor], packet: str, per_element: int) -> None:
    # [3, 4]: 12 elements
    assert traced_flops(gradient_of(op), leaf(3, 4))[packet] == 12 * per_element


def test_weight_norm_costs_its_norm_and_scale() -> None:
    # v [4, 3], g [4, 1]: w = v * g / ||v||: 12 x (square, sum, multiply) = 36; backward
    # 12 x 5 = 60 (graphmem/ops/normalization.py WEIGHT_NORM_BACKWARD_FLOPS)
    def step(v: torch.Tensor, g: torch.Tensor) -> object:
        return torch.autograd.grad(torch._weight_norm(v, g, 0).sum(), v)

    flops = traced_flops(step, leaf(4, 3), torch.randn(4, 1))
    assert flops["_weight_norm_interface"] == 36
    assert flops["_weight_norm_interface_backward"] == 60


def test_new_empty_strided_makes_bytes() -> None:
    flops = traced_flops(lambda x: x.new_empty_strided((2, 3), (3, 1)), torch.randn(2))
    assert flops["new_empty_strided"] == 0


# ----- zoo6: the ops the second round of architectures found unpriced ------------------------


def test_in_place_scatter_and_unsqueeze_cost_their_out_of_place_forms() -> None:
    # DeepSeek-V3's group mask (scatter_ of a value), BigBird's block gathers (scatter_ of a
    # source, unsqueeze_): no rule names them; aten's `inplace` tag leads to scatter (0:
    # it moves bytes) and unsqueeze (a view: 0). A rule for the in-place form would win.
    def step(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y.scatter_(1, index, 1.0).unsqueeze_(0)
        return y

    flops = traced_flops(step, torch.randn(2, 6), torch.zeros(2, 3, dtype=torch.int64))
    assert flops["scatter_"] == flops["unsqueeze_"] == 0


def test_an_in_place_op_with_arithmetic_keeps_its_forms_flops() -> None:
    # scatter_add_ has its own rule (each source element added: 2 * 3 = 6); the in-place
    # fallback only answers ops no rule names, so it never replaces a rule
    def step(x: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return x.clone().scatter_add_(1, index, src)

    flops = traced_flops(step, torch.randn(2, 6), torch.zeros(2, 3, dtype=torch.int64),
                         torch.randn(2, 3))
    assert flops["scatter_add_"] == 6


def test_random_draws_make_bytes() -> None:
    # PhiMoE's sparse mixer draws its jitter in training: uniform_, exponential_ (aten's
    # nondeterministic_seeded tag), no arithmetic counted, as rand and randn
    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x).uniform_() + torch.empty_like(x).exponential_()

    flops = traced_flops(step, torch.randn(3, 4))
    assert flops["uniform_"] == flops["exponential_"] == 0
    assert flops["add"] == 12


def test_any_and_all_compare_each_element() -> None:
    # Longformer's and LED's padding checks: any / all over [3, 4] bools, 12 compares each
    flops = traced_flops(lambda x: torch.stack([(x > 0).any(), (x > 0).all()]),
                         torch.randn(3, 4))
    assert flops["any"] == flops["all"] == 12


def test_glu_is_a_sigmoid_and_a_multiply_per_output() -> None:
    # glu([3, 8], dim=-1) -> [3, 4]: 12 outputs x (sigmoid 4 + multiply 1) = 60; backward
    # per gradient element: sigmoid 4 + two multiplies' gradients 2 + sigmoid's backward 3
    # = 9, 12 x 9 = 108 (the wav2vec2-Conformer's convolution module)
    flops = traced_flops(gradient_of(lambda x: F.glu(x, dim=-1)), leaf(3, 8))
    assert flops["glu"] == 60
    assert flops["glu_backward"] == 108


def test_bicubic_upsampling_is_five_four_tap_filters_per_output() -> None:
    # [1, 2, 4, 4] -> [1, 2, 8, 8]: 128 outputs x 5 filters x 7 FLOPs = 4480, the ONNX Resize
    # rule's cubic count; the backward the same taps per output gradient (YOLOS resizes its
    # position embeddings bicubically)
    flops = traced_flops(gradient_of(lambda x: F.interpolate(
        x, scale_factor=2.0, mode="bicubic")), leaf(1, 2, 4, 4))
    assert flops["upsample_bicubic2d"] == flops["upsample_bicubic2d_backward"] == 4480


def test_polar_is_a_cosine_a_sine_and_two_multiplies() -> None:
    # polar(abs [4, 3], angle [4, 3]): 12 x (cos 1 + sin 1 + 2 multiplies) = 48 (DeepSeek-V2's
    # rotary frequencies as complex numbers)
    flops = traced_flops(torch.polar, torch.rand(4, 3), torch.randn(4, 3))
    assert flops["polar"] == 48


def test_the_third_rounds_copies_cost_no_arithmetic() -> None:
    # masked_scatter (a vision-language model's image features into the placeholders'
    # embeddings) and its backward move elements; linspace and repeat_interleave make them
    def step(x: torch.Tensor) -> object:
        mask = torch.arange(12).reshape(3, 4) % 2 == 0
        y = x.masked_scatter(mask, x * 2) + torch.linspace(0, 1, 4)
        return torch.autograd.grad(y.sum(), x), torch.arange(3).repeat_interleave(2)

    flops = traced_flops(step, leaf(3, 4))
    for op in ("masked_scatter", "masked_scatter_backward", "linspace"):
        assert flops[op] == 0, op


def test_adaptive_average_pool_backward_is_the_forward_transposed() -> None:
    # [1, 2, 4, 4] pooled to 2x2 (UperNet's pyramid pooling): 32 inputs, 1 add each
    # forward; the backward gives each of the 32 input elements its share: 32
    flops = traced_flops(gradient_of(lambda x: F.adaptive_avg_pool2d(x, 2)), leaf(1, 2, 4, 4))
    assert flops["_adaptive_avg_pool2d"] == flops["_adaptive_avg_pool2d_backward"] == 32


def test_grid_sampling_is_bilinear_taps_per_output() -> None:
    # input [1, 2, 4, 4] sampled at a [1, 3, 5, 2] grid -> [1, 2, 3, 5]: 30 outputs x 3
    # lerps x 3 FLOPs = 270 (Mask2Former's deformable attention); the backward, per output
    # gradient, the same 270
    def step(x: torch.Tensor, grid: torch.Tensor) -> object:
        return torch.autograd.grad(F.grid_sample(x, grid, align_corners=False).sum(), x)

    flops = traced_flops(step, leaf(1, 2, 4, 4), torch.rand(1, 3, 5, 2) * 2 - 1)
    assert flops["grid_sampler_2d"] == flops["grid_sampler_2d_backward"] == 270
def _substitution_counts(size: int, columns: int, unitriangular: bool) -> tuple[int, int]:
    """Forward substitution written out, L X = B: (multiply-adds, divisions) it performs."""
    macs = divisions = 0
    for _ in range(columns):
        for row in range(size):
            macs += row  # b_row - sum_{j < row} L[row, j] * x_j
            divisions += 0 if unitriangular else 1  # / L[row, row]
    return macs, divisions
@pytest.mark.parametrize("unitriangular", [True, False])


def test_triangular_solve_is_substitutions_multiply_adds(unitriangular: bool) -> None:
    # solve_triangular(L [2, 5, 5], B [2, 5, 3]): 2 x 3 columns x (0+1+2+3+4 = 10) = 60 MACs,
    # 120 FLOPs, + 2 x 5 x 3 = 30 divisions when the diagonal is not ones (Qwen3-Next's
    # gated delta rule solves unitriangular systems); counted against substitution written out
    macs, divisions = _substitution_counts(5, 2 * 3, unitriangular)
    assert (macs, divisions) == (60, 0 if unitriangular else 30)
    flops = traced_flops(lambda a, b: torch.linalg.solve_triangular(
        a, b, upper=False, unitriangular=unitriangular), torch.randn(2, 5, 5), torch.randn(2, 5, 3))
    assert flops["linalg_solve_triangular"] == 2 * macs + divisions


def test_triangular_solve_from_the_right_counts_rows() -> None:
    # X A = B with A [4, 4], B [3, 4]: 3 rows x (0+1+2+3 = 6) = 18 MACs, 36 FLOPs + 12 divisions
    macs, divisions = _substitution_counts(4, 3, False)
    flops = traced_flops(lambda a, b: torch.linalg.solve_triangular(a, b, upper=True, left=False),
                         torch.randn(4, 4), torch.randn(3, 4))
    assert flops["linalg_solve_triangular"] == 2 * macs + divisions == 48


def test_a_chosen_index_formats_as_its_number_while_tracing() -> None:
    # Switch Transformers and NLLB-MoE pick an expert of a ModuleDict by
    # f"expert_{expert_idx[0]}": eager formats a 0-dim tensor as its number, a fake tensor
    # (a Tensor subclass) as its repr; the trace formats the routed choice's value
    from graphmem.frontends.torch.loader import parse_tensor_spec
    from graphmem.frontends.torch.trace import trace_model
    class Picked(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.router = torch.nn.Linear(4, 3)
            self.experts = torch.nn.ModuleDict({f"expert_{i}": torch.nn.Linear(4, 4)
                                                for i in range(3)})
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            choice = self.router(x).argmax(-1)[0]
            return self.experts[f"expert_{choice}"](x)
    traced = trace_model(Picked(), [parse_tensor_spec("2x4")], None)
    assert sum(n.target == torch.ops.aten.addmm.default
               for n in traced.graph_module.graph.nodes) == 2  # the router and one expert


def test_a_value_read_to_the_host_costs_no_arithmetic() -> None:
    # `.item()` of a value the trace knows (LLaVA's and Qwen2.5-VL's placeholder count,
    # formatted into their check's message) is aten._local_scalar_dense: one element read
    from graphmem.frontends.torch.costs import imported_cost

    graph = torch.fx.Graph()
    read = graph.call_function(torch.ops.aten._local_scalar_dense.default,
                               (graph.placeholder("x"),))
    assert imported_cost(read) == ImportedCost(0, 0)


def test_is_all_true_and_is_any_true_compare_each_element_once() -> None:
    # _is_all_true / _is_any_true of a [3, 4] bool (torch.distributions' argument checks,
    # Gemma-3n's activation sparsity): a min / a max over 12 elements, one compare each = 12;
    # the comparison making the bool is 12 more (pointwise)
    flops = traced_flops(lambda x: (torch.ops.aten._is_all_true(x > 0),
                                    torch.ops.aten._is_any_true(x > 0)), torch.randn(3, 4))
    assert flops["_is_all_true"] == flops["_is_any_true"] == 12


def test_an_unknown_scalar_formats_as_before_while_tracing() -> None:
    # a value the trace does not know (a sum of the input) keeps its repr in an f-string,
    # as before the rule: a log line must not end the trace
    from graphmem.frontends.torch.loader import parse_tensor_spec
    from graphmem.frontends.torch.trace import trace_model
    seen: list[str] = []
    class Logged(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.linear(x)
            seen.append(f"{y.sum()}")
            return y
    trace_model(Logged(), [parse_tensor_spec("2x4")], None)
    assert seen and seen[0].startswith("FakeTensor(")
