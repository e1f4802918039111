"""onnxruntime CPU's GRU, LSTM and RNN kernels (graphmem/runtime_models/ort_rnn.py): their
working buffers and packed weights worked out by hand from the kernels' source, then checked
to the byte against onnxruntime's measured `mem_in_use_peak` (one thread) on single nodes of a
grid (directions, batch, sequence and hidden sizes, input sizes, initial states,
sequence_lens, omitted outputs, linear_before_reset, peepholes, weights fed at run time) and
on nn.LSTM and nn.RNN taggers exported by the TorchScript exporter. The planner's rule they
brought out (a tensor nothing reads never takes a freed buffer, ort_plan.py) is checked on
TopK's unread indices."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from graphmem.frontends.onnx.importer import import_onnx
from graphmem.runtime_models.ort_kernels import kernel_scratch, prepacked_weights
from graphmem.runtime_models.ort_rnn import pack_b_bytes, rnn_scratch_bytes
from tests.helpers.rnn_nodes import RnnCase, measured_peak, predicted_peak, rnn_model


def _node(case: RnnCase, tmp_path: Path):  # the model's one node, as graphmem imports it
    graph = import_onnx(rnn_model(case, tmp_path / "rnn.onnx")).graph
    return graph.nodes[0]


def test_pack_b_size_rounds_columns_to_16_and_bytes_to_64() -> None:
    # MlasGemmPackBSize(60, 4): 60 columns -> 64, 64 * 4 rows * 4 B = 1,024 B (a multiple of 64)
    assert pack_b_bytes(60, 4) == 1024
    # (20, 20): 32 * 20 * 4 = 2,560 B; (3, 3): 16 * 3 * 4 = 192 B
    assert pack_b_bytes(20, 20) == 2560
    assert pack_b_bytes(3, 3) == 192


def test_bidirectional_gru_buffers(tmp_path: Path) -> None:
    # B=3, S=17, H=20, I=4, a bias, no sequence_lens, Y and Y_h named. Per direction:
    # cur_h, batched_hidden0 and the z, r, h biases: 5 x B*H*4 = 240 B; outputZRH
    # 3H*B*S*4 = 3 * 20 * 3 * 17 * 4 = 12,240 B; the lengths B int32 = 12 B; the reverse
    # direction also its input reversed S*B*I*4 = 816 B and its outputs S*B*H*4 = 4,080 B
    case = RnnCase("GRU", "bidirectional", batch=3, seq=17, hidden=20)
    forward = (240,) * 5 + (12240, 12)
    assert rnn_scratch_bytes(_node(case, tmp_path), {}) == forward + (240,) * 5 + (
        12240, 816, 4080, 12)
    # arena-rounded (256 B each): 5 * 256 + 12,288 + 256 = 13,824 and 13,824 + 1,024 +
    # 4,096 = 18,944: 32,768 B held while the kernel runs


def test_gru_without_y_h_and_linear_before_reset(tmp_path: Path) -> None:
    # Y_h omitted: its buffer D*B*H*4 = 1 * 1 * 8 * 4 = 32 B first; linear_before_reset with
    # a bias: z, r and Wbh, Rbh apart (4 x 32 B) and linear_output (32 B); outputZRH
    # 3 * 8 * 1 * 5 * 4 = 480 B; sequence_lens given: no lengths
    case = RnnCase("GRU", outputs=("Y",), linear_before_reset=1, lengths=True)
    assert rnn_scratch_bytes(_node(case, tmp_path), {}) == (32,) + (32,) * 2 + (32,) * 5 + (
        480,)


def test_lstm_buffers_read_peepholes_in_place(tmp_path: Path) -> None:
    # Only Y_c named: Y_h's buffer D*B*H*4 = 2 * 3 * 8 * 4 = 192 B. Per direction: hidden0,
    # internal_memory_prev (H*4 = 32 B), batched_hidden0, _internal_memory_prev, _clipped
    # (B*H*4 = 96 B), output_iofc 4H*B*S*4 = 4 * 8 * 3 * 5 * 4 = 1,920 B, four gate biases
    # (32 B); the reverse direction's input (5 * 3 * 4 * 4 = 240 B) and outputs (480 B); no
    # copy of the peepholes; then each direction's lengths, 3 int32 = 12 B
    case = RnnCase("LSTM", "bidirectional", batch=3, outputs=("Y_c",), peepholes=True)
    direction = (32, 32, 96, 96, 96, 1920, 32, 32, 32, 32)
    assert rnn_scratch_bytes(_node(case, tmp_path), {}) == (
        192, *direction, *direction, 240, 480, 12, 12)


def test_rnn_buffers(tmp_path: Path) -> None:
    # X * W^T for one direction at a time, S*B*H*4 = 5 * 3 * 8 * 4 = 480 B; Y omitted: its
    # buffer S*D*B*H*4 = 5 * 2 * 3 * 8 * 4 = 960 B
    case = RnnCase("RNN", "bidirectional", batch=3, outputs=("Y_h",))
    assert rnn_scratch_bytes(_node(case, tmp_path), {}) == (480, 960)
    assert kernel_scratch(_node(case, tmp_path), 1, {}).sizes_bytes == (480, 960)


def test_packed_weights(tmp_path: Path) -> None:
    # GRU, D=2, H=20, I=4: W [2, 60, 4] -> 2 x pack(60, 4) = 2 x 1,024 = 2,048 B; R
    # [2, 60, 20] -> 2 x (pack(40, 20) + pack(20, 20)) = 2 x (3,840 + 2,560) = 12,800 B
    gru = import_onnx(rnn_model(RnnCase("GRU", "bidirectional", hidden=20),
                                tmp_path / "gru.onnx")).graph
    assert prepacked_weights(gru.nodes) == [("W", 2048), ("R", 12800)]
    # LSTM, D=1, H=8, I=4: W [1, 32, 4] -> pack(32, 4) = 512 B; R [1, 32, 8] -> 1,024 B
    lstm = import_onnx(rnn_model(RnnCase("LSTM"), tmp_path / "lstm.onnx")).graph
    assert prepacked_weights(lstm.nodes) == [("W", 512), ("R", 1024)]
    # weights fed at run time are not packed; RNN packs nothing
    fed = import_onnx(rnn_model(RnnCase("GRU", weights_fed=True), tmp_path / "fed.onnx")).graph
    assert prepacked_weights(fed.nodes) == []
    rnn = import_onnx(rnn_model(RnnCase("RNN"), tmp_path / "rnn.onnx")).graph
    assert prepacked_weights(rnn.nodes) == []


# A grid of single nodes: each measured on onnxruntime. The rules were fitted on two thirds of
# a 54-shape grid and held out on the rest (docs/runtime-models.md); these are some of both.
GRID = [
    RnnCase("GRU", "forward", 1, 1, 20, 4, initial=True, linear_before_reset=1),
    RnnCase("GRU", "forward", 3, 17, 64, 33, outputs=("Y",)),
    RnnCase("GRU", "reverse", 1, 5, 20, 33, initial=True, lengths=True),
    RnnCase("GRU", "reverse", 3, 5, 20, 4, outputs=("Y_h",), linear_before_reset=1),
    RnnCase("GRU", "bidirectional", 3, 5, 20, 33, bias=False, outputs=("Y_h",),
            linear_before_reset=1, weights_fed=True),
    RnnCase("GRU", "bidirectional", 3, 17, 20, 4),
    RnnCase("LSTM", "forward", 1, 5, 64, 33, bias=False, outputs=("Y_h",), peepholes=True),
    RnnCase("LSTM", "forward", 3, 5, 20, 4, initial=True, lengths=True, outputs=("Y",),
            weights_fed=True),
    RnnCase("LSTM", "reverse", 3, 17, 64, 16, bias=False, lengths=True,
            outputs=("Y_h", "Y_c"), peepholes=True),
    RnnCase("LSTM", "bidirectional", 1, 1, 20, 4, bias=False, outputs=("Y_h",)),
    RnnCase("LSTM", "bidirectional", 3, 5, 8, 33, outputs=("Y_c",), peepholes=True),
    RnnCase("LSTM", "bidirectional", 3, 17, 20, 16, outputs=("Y", "Y_h", "Y_c")),
    RnnCase("RNN", "forward", 1, 1, 8, 16, bias=False, lengths=True, outputs=("Y",)),
    RnnCase("RNN", "reverse", 3, 5, 64, 16),
    RnnCase("RNN", "bidirectional", 3, 17, 64, 16, outputs=("Y_h",)),
    RnnCase("RNN", "bidirectional", 1, 5, 64, 33, initial=True),
]


@pytest.mark.parametrize("case", GRID, ids=lambda c: f"{c.op}-{c.direction}-b{c.batch}"
                         f"-s{c.seq}-h{c.hidden}-{'+'.join(c.outputs)}")
def test_single_node_to_the_byte(case: RnnCase, tmp_path: Path) -> None:
    path = rnn_model(case, tmp_path / "rnn.onnx")
    assert predicted_peak(path) == measured_peak(path)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_the_buffers_do_not_depend_on_the_threads(op: str, tmp_path: Path) -> None:
    # batch 8 parallelizes LSTM's steps over the batch rows (more than 4 rows); neither
    # kernel takes per-thread buffers from the arena: the same peak at 1, 2 and 4 threads
    path = rnn_model(RnnCase(op, "bidirectional", batch=8, seq=17, hidden=64, input_size=16),
                     tmp_path / "rnn.onnx")
    peaks = {measured_peak(path, threads=n) for n in (1, 2, 4)}
    assert peaks == {predicted_peak(path)}


class Tagger(torch.nn.Module):
    """Embeddings, a recurrent layer of `kind` (batch first), a head."""

    def __init__(self, kind: str, **options: object) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(128, 16)
        self.rnn = getattr(torch.nn, kind)(16, 32, batch_first=True, **options)
        self.head = torch.nn.Linear(64 if options.get("bidirectional") else 32, 128)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(ids))
        return self.head(out)


def _exported(module: torch.nn.Module, path: Path) -> Path:
    torch.manual_seed(0)
    ids = torch.randint(0, 128, (2, 16))
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(module.eval(), (ids,), str(path), dynamo=False, opset_version=18,
                          input_names=["input_0"], output_names=["out"],
                          external_data=False)
    return path


@pytest.mark.parametrize("kind, options", [
    ("LSTM", {"num_layers": 2, "bidirectional": True}),  # 249,520 / 248,896 B
    ("RNN", {"num_layers": 2, "nonlinearity": "relu"}),  # 49,744 / 49,712 B
])
def test_exported_taggers_to_the_byte(kind: str, options: dict[str, object],
                                      tmp_path: Path) -> None:
    # each layer's unread Y_h (and Y_c) gets its own buffer, not the next layer's freed one
    torch.manual_seed(0)
    path = _exported(Tagger(kind, **options), tmp_path / f"{kind}.onnx")
    for level in ("disabled", "all"):
        assert predicted_peak(path, level) == measured_peak(path, level)


def test_a_tensor_nothing_reads_takes_no_freed_buffer(tmp_path: Path) -> None:
    # X [4, 64] -> TopK(64) -> Neg -> TopK(64) -> Neg; each TopK's indices [4, 64] int64
    # (2,048 B) unread. The second TopK's values take the first's freed values buffer, but
    # its indices get a buffer of their own while the first's are held: 2,048 B more than
    # a plan that reused it (measured 6,152 B in use, 8 B of them the k initializer)
    k = numpy_helper.from_array(np.array([64], np.int64), "k")
    nodes = [helper.make_node("TopK", ["X", "k"], ["V0", "I0"]),
             helper.make_node("Neg", ["V0"], ["N0"]),
             helper.make_node("TopK", ["N0", "k"], ["V1", "I1"]),
             helper.make_node("Neg", ["V1"], ["out"])]
    spec = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 64]) for n in ("X", "out")]
    graph = helper.make_graph(nodes, "topk", spec[:1], spec[1:], [k])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    path = tmp_path / "topk.onnx"
    onnx.save(model, path)
    assert predicted_peak(path) == measured_peak(path) == 6152
