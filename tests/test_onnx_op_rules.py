"""Cost rules of the ops that completed the ONNX standard's coverage (docs/onnx-ops.md), on
hand-built nodes; every expected number states its working."""

from __future__ import annotations

import pytest

from graphmem.core.ir import DType, Graph, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.ops import ShapeUnknownError
from graphmem.ops.attention import SCORE_FLOPS
from graphmem.passes.costs import CostStatus, compute_costs
from tests.helpers.op_nodes import assert_cost, cost, node, tensor

PREVIEW = "ai.onnx.preview"
TRAINING = "ai.onnx.preview.training"
ML = "ai.onnx.ml"
BATCH = SymInt.symbol("batch")


def typed(dtype: DType, *shape: int) -> Value:
    return tensor(*shape, dtype=dtype)


# ----- recurrent ----------------------------------------------------------------------------
def test_lstm_defaults() -> None:
    # X [seq 1, batch 3, input 2], W [1, 4*3, 2], R [1, 12, 3]: hidden 3, one direction
    # MACs: per step 4 gates x (input + hidden) x hidden = 4 * 3 * (2 + 3) = 60, x batch 3 = 180
    # FLOPs per step per hidden unit: 4 gates x 1 add (xW + hR) = 4; i, f, o sigmoid 3 * 4,
    # c~ tanh 1, C = f C + i c~ 3, H = o tanh(C) 1 + 1: 18; so 22 x (1 * 3 * 3) = 198
    n = node("LSTM", [tensor(1, 3, 2), tensor(1, 12, 2), tensor(1, 12, 3)], [tensor(1, 3, 3)],
             hidden_size=3)
    assert_cost(n, 180, 2 * 180 + 198)


def test_lstm_bias_peepholes_bidirectional() -> None:
    # X [5, 2, 4], W [2, 4*6, 4], R [2, 24, 6], B [2, 48], P [2, 18]: hidden 6, 2 directions
    # MACs = 2 dirs * 5 steps * 2 batch * 24 * (4 + 6) = 4,800
    # per unit: 4 gates x (1 + 2 bias adds) = 12; cell 18; peepholes 3 multiply-adds 6: 36
    # FLOPs = 2 * 4,800 + 2 dirs * (5 * 2 * 6) * 36 = 9,600 + 4,320
    inputs = [tensor(5, 2, 4), tensor(2, 24, 4), tensor(2, 24, 6), tensor(2, 48), None, None,
              None, tensor(2, 18)]
    assert_cost(node("LSTM", inputs, [tensor(5, 2, 2, 6)], hidden_size=6), 4_800, 13_920)


def test_gru_and_rnn() -> None:
    # GRU X [1, 3, 2], W [1, 3*5, 2], R [1, 15, 5]: MACs 3 * 15 * (2 + 5) = 315
    # per unit: 3 gates x 1 add = 3; z, r sigmoid 2 * 4, h~ tanh 1, r (.) H 1,
    # (1 - z) h~ + z H 4: 14; so 17 x 15 = 255; FLOPs 630 + 255 = 885
    gru = node("GRU", [tensor(1, 3, 2), tensor(1, 15, 2), tensor(1, 15, 5)], [tensor(1, 3, 5)])
    assert_cost(gru, 315, 885)
    # RNN X [1, 3, 2], W [1, 4, 2], R [1, 4, 4]: MACs 3 * 4 * (2 + 4) = 72
    # per unit: 1 add, tanh 1: 2 x 12 = 24; FLOPs 144 + 24 = 168
    rnn = node("RNN", [tensor(1, 3, 2), tensor(1, 4, 2), tensor(1, 4, 4)], [tensor(1, 3, 4)])
    assert_cost(rnn, 72, 168)


def test_rnn_batch_first_layout_and_activation() -> None:
    # layout 1: X [batch 3, seq 7, input 2]; Relu 1: same count as Tanh: 3 * 7 * 4 * (2 + 4)
    n = node("RNN", [tensor(3, 7, 2), tensor(1, 4, 2), tensor(1, 4, 4)], [tensor(3, 7, 1, 4)],
             layout=1, activations=(b"Relu",))
    assert_cost(n, 504, 2 * 504 + 2 * (7 * 3 * 4))


def test_recurrent_symbolic_sequence() -> None:
    # X [seq, 1, 2]: MACs 1 * 4 * (2 + 4) = 24 per step
    n = node("RNN", [tensor("seq", 1, 2), tensor(1, 4, 2), tensor(1, 4, 4)], [tensor(1, 1, 4)])
    assert cost(n).macs == SymInt.symbol("seq") * 24


# ----- signal -------------------------------------------------------------------------------
def test_dft_real_input_along_an_axis() -> None:
    # [1, 10, 10, 1] real, axis 1: n = 10, ceil(log2 10) = 4, 10 transforms (the other axis)
    # a real transform: 5 * n * log2 n / 2 = 5 * 10 * 4 / 2 = 100; x 10 = 1,000
    n = node("DFT", [tensor(1, 10, 10, 1)], [tensor(1, 10, 10, 2)], axis=1)
    assert_cost(n, 0, 1_000)


def test_dft_complex_power_of_two() -> None:
    # [4, 16, 2] complex, axis 1: 5 * 16 * 4 = 320 per transform, 4 of them: 1,280
    assert_cost(node("DFT", [tensor(4, 16, 2)], [tensor(4, 16, 2)], axis=1), 0, 1_280)


def test_dft_inverse_one_sided_reads_the_even_length() -> None:
    # irfft of [1, 6, 10, 2] on axis 1: n = 2 * (6 - 1) = 10 points to real output: 100 each
    n = node("DFT", [tensor(1, 6, 10, 2)], [tensor(1, 10, 10, 1)], axis=1, inverse=1, onesided=1)
    assert_cost(n, 0, 1_000)


def test_dft_axis_as_data_counts_the_largest_axis() -> None:
    # axis is an input (opset 20): axes 0 (n 1: 0), 1 (n 8: 5*8*3 = 120 x 2), 2 (n 2: 10 x 8)
    n = node("DFT", [tensor(1, 8, 2, 2), None, typed(DType.INT64)], [tensor(1, 8, 2, 2)])
    result = cost(n)
    assert result.flops == 240
    assert "largest" in result.note


def test_stft() -> None:
    # signal [1, 128, 1], window [16]: 15 frames of 16 points, real:
    # window 16 multiplies + 5 * 16 * 4 / 2 = 160: 176 x 15 = 2,640
    inputs = [tensor(1, 128, 1), typed(DType.INT64), tensor(16)]
    assert_cost(node("STFT", inputs, [tensor(1, 15, 9, 2)]), 0, 2_640)
    # no window: the frame length from 9 one-sided bins, 2 * (9 - 1) = 16: 160 x 15 = 2,400
    inputs = [tensor(1, 128, 1), typed(DType.INT64), None, typed(DType.INT64)]
    assert_cost(node("STFT", inputs, [tensor(1, 15, 9, 2)]), 0, 2_400)


@pytest.mark.parametrize(("op", "flops"), [("HannWindow", 4 * 10), ("HammingWindow", 4 * 10),
                                           ("BlackmanWindow", 8 * 10)])
def test_windows(op: str, flops: int) -> None:
    # [10]: a0 - a1 cos(2 pi k / N) 4 per element (Blackman one more cosine term: 8)
    assert_cost(node(op, [typed(DType.INT32)], [tensor(10)]), 0, flops)


def test_mel_weight_matrix() -> None:
    # [9 bins, 8 mel bands]: 4 per element (two ramps, divide, min) = 288
    inputs = [typed(DType.INT32)] * 3 + [tensor(), tensor()]
    assert_cost(node("MelWeightMatrix", inputs, [tensor(9, 8)]), 0, 288)


# ----- LLM ops ------------------------------------------------------------------------------
def test_linear_attention_linear_rule() -> None:
    # q, k, v [2, 4, 32], 4 heads, state [2, 4, 8, 8]: 8 tokens, dk * dv = 64
    # MACs: per token 4 KV heads' k (x) v 64 + 4 query heads' q^T S 64 = 512; x 8 = 4,096
    # FLOPs: 2 * 4,096 + the scale on 256 outputs = 8,448
    qkv = [tensor(2, 4, 32)] * 3
    n = node("LinearAttention", qkv, [tensor(2, 4, 32), tensor(2, 4, 8, 8)], q_num_heads=4,
             kv_num_heads=4, update_rule="linear")
    assert_cost(n, 4_096, 8_448)


def test_linear_attention_gated_delta_gqa() -> None:
    # q [2, 4, 64] (8 heads), k, v [2, 4, 32] (4 KV heads), decay [2, 4, 32], beta [2, 4, 4];
    # state [2, 4, 8, 8]: per token MACs 4 * 64 (update) + 4 * 64 (S^T k) + 8 * 64 (output)
    # = 1,024; x 8 tokens = 8,192
    # FLOPs: 2 * 8,192 + scale 512 + delta 2 per value 8 * 4 * 8 * 2 = 512
    #        + decay of the state 8 * 4 * 64 = 2,048 + exp of each decay value 256
    inputs = [tensor(2, 4, 64), tensor(2, 4, 32), tensor(2, 4, 32), None, tensor(2, 4, 32),
              tensor(2, 4, 4)]
    n = node("LinearAttention", inputs, [tensor(2, 4, 64), tensor(2, 4, 8, 8)], q_num_heads=8,
             kv_num_heads=4)
    assert_cost(n, 8_192, 16_384 + 512 + 512 + 2_048 + 256)


def test_flex_attention_gqa() -> None:
    # Q [2, 8, 4, 16], K [2, 2, 6, 16], V [2, 2, 6, 16]: l = 6
    # MACs = l * (numel(Q) + numel(out)) = 6 * (1,024 + 1,024) = 12,288
    # FLOPs = 2 * MACs + scores 2 * 8 * 4 * 6 = 384 x SCORE_FLOPS
    n = node("FlexAttention", [tensor(2, 8, 4, 16), tensor(2, 2, 6, 16), tensor(2, 2, 6, 16)],
             [tensor(2, 8, 4, 16)], domain=PREVIEW)
    assert_cost(n, 12_288, 24_576 + 384 * SCORE_FLOPS)


def test_causal_conv_with_state() -> None:
    # input [2, 4, 8], weight [4, 1, 4]: numel(out) 64 * k 4 = 256 MACs
    inputs = [tensor(2, 4, 8), tensor(4, 1, 4)]
    outputs = [tensor(2, 4, 8), tensor(2, 4, 3)]
    assert_cost(node("CausalConvWithState", inputs, outputs), 256, 512)
    # fused SiLU: x * sigmoid(x), 5 per output element: + 320
    n = node("CausalConvWithState", inputs, outputs, activation="silu")
    assert_cost(n, 256, 512 + 320)


def test_swiglu_and_tensor_scatter() -> None:
    # Swish(a) * b: Swish 6 + multiply 1 = 7 per element, [2, 4]: 56
    assert_cost(node("SwiGLU", [tensor(2, 4), tensor(2, 4)], [tensor(2, 4)]), 0, 56)
    # a KV-cache write: data movement, the bytes are the costs pass'
    inputs = [tensor(2, 1, 4, 5), tensor(2, 1, 1, 5), typed(DType.INT64, 2)]
    assert_cost(node("TensorScatter", inputs, [tensor(2, 1, 4, 5)]), 0, 0)


# ----- convolution, geometry, linear algebra ------------------------------------------------
def test_deform_conv() -> None:
    # X [1, 2, 3, 3], W [4, 2, 2, 2], out [1, 4, 2, 2]: MACs = numel(out) 16 * 2*2*2 = 128
    # samples: 1 * 2 channels * 4 taps * 4 positions = 32 bilinear (9) + mask (1): 320
    inputs = [tensor(1, 2, 3, 3), tensor(4, 2, 2, 2), tensor(1, 8, 2, 2), None,
              tensor(1, 4, 2, 2)]
    assert_cost(node("DeformConv", inputs, [tensor(1, 4, 2, 2)]), 128, 256 + 320)


def test_col2im_and_affine_grid() -> None:
    # Col2Im [1, 5, 5] column blocks: each of 25 elements added into its pixel
    inputs = [tensor(1, 5, 5), typed(DType.INT64, 2), typed(DType.INT64, 2)]
    assert_cost(node("Col2Im", inputs, [tensor(1, 1, 5, 5)]), 0, 25)
    # AffineGrid theta [2, 2, 3] -> [2, 4, 5, 2]: 80 coordinates of 2 MACs + 1 add
    n = node("AffineGrid", [tensor(2, 2, 3), typed(DType.INT64, 4)], [tensor(2, 4, 5, 2)])
    assert_cost(n, 160, 320 + 80)


def test_det() -> None:
    # [3, 4, 4]: per matrix (m-1) m (2m-1) / 6 = 3 * 4 * 7 / 6 = 14 MACs, (m-1) m / 2 = 6
    # divides and m - 1 = 3 multiplies of the diagonal: 3 matrices: 42 MACs, 84 + 27 FLOPs
    assert_cost(node("Det", [tensor(3, 4, 4)], [tensor(3)]), 42, 84 + 27)
    # [2, 2] -> []: 1 MAC, 1 divide, 1 multiply
    assert_cost(node("Det", [tensor(2, 2)], [tensor()]), 1, 2 + 2)


def test_max_roi_pool_is_an_upper_bound() -> None:
    # X [1, 3, 6, 6], 2 ROIs: each taken as the whole map, 2 * 3 * 36 = 216 compares
    n = node("MaxRoiPool", [tensor(1, 3, 6, 6), tensor(2, 5)], [tensor(2, 3, 2, 2)],
             pooled_shape=(2, 2))
    assert cost(n).flops == 216
    assert "upper bound" in cost(n).note


def test_small_ops() -> None:
    # CumProd: a running product, 1 per element; BitCast: no arithmetic; MVN: 5 per element
    assert_cost(node("CumProd", [tensor(2, 3), typed(DType.INT32)], [tensor(2, 3)]), 0, 6)
    assert_cost(node("BitCast", [tensor(3)], [typed(DType.INT32, 3)], to=6), 0, 0)
    mvn = node("MeanVarianceNormalization", [tensor(3, 3, 3, 1)], [tensor(3, 3, 3, 1)])
    assert_cost(mvn, 0, 27 * 5)


# ----- random ops ---------------------------------------------------------------------------
def test_random_ops() -> None:
    # uniform u * (high - low) + low: 2; normal Box-Muller 4 + scale and mean 2: 6;
    # Bernoulli u < p: 2 (per output element, [batch, 10])
    assert_cost(node("RandomUniform", [], [tensor("batch", 10)]), 0, BATCH * 20)
    assert_cost(node("RandomNormalLike", [tensor(4, 5)], [tensor(4, 5)]), 0, 120)
    assert_cost(node("Bernoulli", [tensor(10)], [tensor(10)]), 0, 20)
    # Multinomial [3, 5 classes] -> [3, 7 samples]: CDF 2 * 15 = 30, per sample a uniform and
    # ceil(log2 5) = 3 compares: 21 * 4 = 84
    assert_cost(node("Multinomial", [tensor(3, 5)], [typed(DType.INT32, 3, 7)]), 0, 30 + 84)


# ----- preview training ops -----------------------------------------------------------------
def test_optimizers() -> None:
    # two tensors X [2] and X [3]: 5 elements
    r_t = [tensor(), typed(DType.INT64)]
    xs = [tensor(2), tensor(3)]
    adagrad = node("Adagrad", r_t + xs * 3, xs * 2, domain=TRAINING)
    assert_cost(adagrad, 0, 5 * 9)
    adam = node("Adam", r_t + xs * 4, xs * 3, domain=TRAINING)
    assert_cost(adam, 0, 5 * 15)
    assert_cost(node("Momentum", r_t + xs * 3, xs * 2, domain=TRAINING, mode="standard"), 0, 35)
    assert_cost(node("Momentum", r_t + xs * 3, xs * 2, domain=TRAINING, mode="nesterov"), 0, 45)


def test_gradient_walks_the_forward_path() -> None:
    # c = a + b; d = c * a; Gradient(xs=[a, b], y=d): the backward of Mul (both inputs on the
    # path: g * other for each, 1 + 1 per element) and Add (passes the gradient on, 0):
    # [3]: 6 FLOPs
    a, b, c, d = (Value(name, DType.FLOAT32, (SymInt.const(3),), Role.INPUT)
                  for name in "abcd")
    graph = Graph("g", [], {v.name: v for v in (a, b, c, d)}, [a, b], [])
    graph.add_node(node("Add", [a, b], [c]))
    graph.add_node(node("Mul", [c, a], [d]))
    grads = [tensor(3), tensor(3)]
    gradient = graph.add_node(node("Gradient", [a, b], grads, domain=TRAINING, xs=(b"a", b"b"),
                                   y="d"))
    assert_cost(gradient, 0, 6)


# ----- strings, images, ai.onnx.ml ----------------------------------------------------------
def test_string_ops_say_what_they_leave_out() -> None:
    for op in ("StringConcat", "StringSplit", "StringNormalizer", "RegexFullMatch"):
        result = cost(node(op, [typed(DType.STRING, 2)], [typed(DType.STRING, 2)]))
        assert (result.flops, result.macs) == (0, 0)
        assert "bytes are unknown" in result.note


def test_string_tensors_are_listed_as_unknown_size_not_zero() -> None:
    # the costs pass: a string op is OK with its note; its string output has no byte size
    x = Value("x", DType.STRING, (SymInt.const(2),), Role.INPUT)
    y = Value("y", DType.STRING, (SymInt.const(2),), Role.OUTPUT)
    graph = Graph("g", [], {"x": x, "y": y}, [x], [y])
    graph.add_node(node("StringConcat", [x, x], [y]))
    (result,) = compute_costs(graph).nodes
    assert result.status is CostStatus.OK
    assert "string op" in result.note
    assert y.nbytes is None


def test_image_decoder() -> None:
    # [h, w, 3] from the encoded bytes: known dims (named by inference) -> 0 FLOPs, said so
    encoded = typed(DType.UINT8, 1058)
    decoded = Value("img", DType.UINT8, (SymInt.symbol("h"), SymInt.symbol("w"),
                                         SymInt.const(3)), Role.OUTPUT)
    result = cost(node("ImageDecoder", [encoded], [decoded]))
    assert result.flops == 0 and "decoding" in result.note
    unknown = Value("img", DType.UINT8, (None, None, SymInt.const(3)), Role.OUTPUT)
    with pytest.raises(ShapeUnknownError, match="the image size is in the encoded bytes"):
        cost(node("ImageDecoder", [encoded], [unknown]))


def test_tfidf_vectorizer() -> None:
    # [12] ints, bigrams only (lengths 2..2), skips 0..5: 12 * 1 * 6 = 72 counts; TFIDF weights
    # 7 outputs: 79
    n = node("TfIdfVectorizer", [typed(DType.INT32, 12)], [tensor(7)], min_gram_length=2,
             max_gram_length=2, max_skip_count=5, mode="TFIDF")
    assert cost(n).flops == 79


def test_ml_linear_and_svm() -> None:
    # LinearClassifier X [4, 3], coefficients 2 classes x 3: 4 * 6 = 24 MACs; SOFTMAX on the
    # scores [4, 2]: 5 * 8 = 40
    n = node("LinearClassifier", [tensor(4, 3)], [typed(DType.INT64, 4), tensor(4, 2)],
             domain=ML, coefficients=(0.1,) * 6, post_transform="SOFTMAX")
    assert_cost(n, 24, 48 + 40)
    # SVMRegressor RBF, X [4, 3], 5 support vectors: per row per vector 3 * 3 + 2 = 11 FLOPs
    # (4 * 5 * 11 = 220), dual coefficients 5: 4 * 5 = 20 MACs
    svm = node("SVMRegressor", [tensor(4, 3)], [tensor(4, 1)], domain=ML,
               support_vectors=(0.0,) * 15, coefficients=(1.0,) * 5, kernel_type="RBF")
    assert_cost(svm, 20, 40 + 220)


def test_ml_tree_ensemble_is_a_bound() -> None:
    # one tree: node 0 -> (node 1 interior, leaf), node 1 -> (node 2 interior, leaf),
    # node 2 -> (leaf, leaf): depth 3; X [3, 2]: 3 rows * (3 compares + 1 add) = 12
    n = node("TreeEnsemble", [tensor(3, 2)], [tensor(3, 2)], domain=ML, tree_roots=(0,),
             nodes_truenodeids=(1, 2, 0), nodes_trueleafs=(0, 0, 1),
             nodes_falsenodeids=(0, 1, 1), nodes_falseleafs=(1, 1, 1))
    result = cost(n)
    assert result.flops == 12
    assert "bound" in result.note


@pytest.mark.parametrize(("op", "attrs", "flops"), [
    ("Binarizer", {}, 1 * 6), ("Imputer", {}, 2 * 6), ("Scaler", {}, 2 * 6),
    ("Normalizer", {"norm": "L2"}, 3 * 6), ("Normalizer", {"norm": "MAX"}, 2 * 6),
    ("ArrayFeatureExtractor", {}, 0), ("OneHotEncoder", {}, 0),
])
def test_ml_per_element(op: str, attrs: dict[str, str], flops: int) -> None:
    # X [2, 3]: 6 elements
    assert_cost(node(op, [tensor(2, 3)], [tensor(2, 3)], domain=ML, **attrs), 0, flops)


def test_malformed_attributes_are_unknown_not_a_crash() -> None:
    # an untrusted model's attributes: lists of other lengths, zero heads
    trees = node("TreeEnsemble", [tensor(3, 2)], [tensor(3, 2)], domain=ML, tree_roots=(0,),
                 nodes_truenodeids=(1, 2, 0), nodes_trueleafs=(0,), nodes_falsenodeids=(0,),
                 nodes_falseleafs=())
    assert cost(trees).flops == 3 * (1 + 1)  # the common part: the root alone, depth 1
    heads = node("LinearAttention", [tensor(2, 4, 32)] * 3, [tensor(2, 4, 32), tensor(2, 4, 8, 8)],
                 q_num_heads=0, kv_num_heads=0)
    with pytest.raises(ShapeUnknownError, match="must be > 0"):
        cost(heads)
    with pytest.raises(ShapeUnknownError, match="rank 3, not 4"):
        cost(node("MaxRoiPool", [tensor(1, 6, 6), tensor(2, 5)], [tensor(2, 1, 2, 2)]))


def test_flex_attention_with_a_body_counts_the_attention_and_stays_flagged() -> None:
    # a score_mod graph of 3 nodes is not priced: the node stays a flagged subgraph, with the
    # attention's own count (Q [1, 2, 4, 8], K, V [1, 2, 4, 8]: 4 * (64 + 64) = 512 MACs)
    q, k, v, y = (Value(name, DType.FLOAT32, tuple(SymInt.const(d) for d in (1, 2, 4, 8)),
                        Role.INPUT if name != "y" else Role.OUTPUT) for name in "qkvy")
    graph = Graph("g", [], {x.name: x for x in (q, k, v, y)}, [q, k, v], [y])
    flex = node("FlexAttention", [q, k, v], [y], domain=PREVIEW)
    flex.subgraph_node_count = 3
    graph.add_node(flex)
    (result,) = compute_costs(graph).nodes
    assert result.status is CostStatus.SUBGRAPH
    assert result.macs == 512
    assert "without its 3 body nodes" in result.note
