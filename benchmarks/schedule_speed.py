"""Time the schedule search and the arena planner on large graphs.

    python benchmarks/schedule_speed.py [--layers 80] [--random-nodes 25000]

Two graphs, built directly in graphmem's IR (no ONNX file, no weights):
- a Llama-shaped decoder: per layer RMSNorm, q/k/v projections, rotary embedding, attention
  with a causal mask, output projection, SwiGLU MLP, the residual adds, and the shape
  arithmetic an ONNX export carries (Shape/Gather/Unsqueeze/Concat chains feeding Reshapes),
  about 160 nodes per layer; dims `batch` and `seq` bound to 1 x 2048, fp16;
- a random DAG: each node reads 1-3 recent tensors (and now and then an old one) and writes
  1-2 of random size.

Prints, per graph: nodes, buffers, seconds for the model-order liveness, the integer memory
model, each greedy pass, the whole best-order search, the arena plan, and the peaks.
Results are recorded in benchmarks/results/schedule_speed.md.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphmem.core.ir import DType, Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes
from graphmem.devices.gpus import find_gpu
from graphmem.passes.arena import plan_arena
from graphmem.passes.dims import bind_dims
from graphmem.passes.liveness import analyze_liveness
from graphmem.passes.memory_model import build_memory_model, order_peak
from graphmem.passes.schedule import GREEDY_KEYS, best_order, greedy_order
from graphmem.pipeline.analysis import ModelInfo
from graphmem.pipeline.run import run_passes

T = TypeVar("T")


class _Builder:
    def __init__(self, name: str) -> None:
        self.name = name
        self.values: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.inputs: list[Value] = []

    def value(self, name: str, shape: tuple[SymInt, ...], dtype: DType, role: Role) -> Value:
        value = Value(name, dtype, shape, role)
        self.values[name] = value
        if role is Role.INPUT:
            self.inputs.append(value)
        return value

    def node(self, op: str, inputs: list[Value], shape: tuple[SymInt, ...],
             dtype: DType = DType.FLOAT16) -> Value:
        name = f"{op}_{len(self.nodes)}"
        node = Node(name, op, list(inputs), [])
        for value in dict.fromkeys(inputs):
            value.consumers.append(node)
        out = self.value(f"{name}_out", shape, dtype, Role.ACTIVATION)
        out.producer = node
        node.outputs.append(out)
        self.nodes.append(node)
        return out

    def graph(self, outputs: list[Value]) -> Graph:
        for value in outputs:
            value.role = Role.OUTPUT
        return Graph(self.name, self.nodes, self.values, self.inputs, outputs)


def _c(*dims: int) -> tuple[SymInt, ...]:
    return tuple(SymInt.const(d) for d in dims)


def llama_graph(layers: int, hidden: int = 8192, heads: int = 64, kv_heads: int = 8,
                ffn: int = 28672) -> Graph:
    """A Llama-70B-shaped decoder over `layers` layers, batch and seq symbolic."""
    batch, seq = SymInt.symbol("batch"), SymInt.symbol("seq")
    head_dim = hidden // heads
    b = _Builder(f"llama{layers}")
    ids = b.value("input_ids", (batch, seq), DType.INT64, Role.INPUT)
    embed = b.value("embed", _c(32000, hidden), DType.FLOAT16, Role.PARAMETER)
    x = b.node("Gather", [embed, ids], (batch, seq, SymInt.const(hidden)))
    mask = b.node("Trilu", [b.node("ConstantOfShape", [b.node("Shape", [ids], _c(2),
                                                                DType.INT64)], (seq, seq))],
                  (seq, seq))
    for layer in range(layers):
        def weight(name: str, *shape: int, layer: int = layer) -> Value:
            return b.value(f"l{layer}.{name}", _c(*shape), DType.FLOAT16, Role.PARAMETER)

        def shape_chain(source: Value) -> Value:
            # Shape -> Gather -> Unsqueeze (x2) -> Concat: the int64 arithmetic of an export
            shape = b.node("Shape", [source], _c(3), DType.INT64)
            parts = [b.node("Unsqueeze", [b.node("Gather", [shape], (), DType.INT64)], _c(1),
                            DType.INT64) for _ in range(2)]
            return b.node("Concat", parts, _c(4), DType.INT64)

        def rms_norm(h: Value, w: Value) -> Value:
            sq = b.node("Pow", [h], (batch, seq, SymInt.const(hidden)), DType.FLOAT32)
            mean = b.node("ReduceMean", [sq], (batch, seq, SymInt.const(1)), DType.FLOAT32)
            inv = b.node("Reciprocal", [b.node("Sqrt", [b.node("Add", [mean], mean.shape,
                                                                     DType.FLOAT32)],
                                                mean.shape, DType.FLOAT32)],
                         mean.shape, DType.FLOAT32)
            return b.node("Mul", [b.node("Mul", [h, inv], h.shape), w], h.shape)

        def heads_of(h: Value, count: int) -> Value:
            shaped = b.node("Reshape", [h, shape_chain(h)],
                            (batch, seq, SymInt.const(count), SymInt.const(head_dim)))
            return b.node("Transpose", [shaped],
                          (batch, SymInt.const(count), seq, SymInt.const(head_dim)))

        def rotary(h: Value) -> Value:
            half = b.node("Slice", [h, shape_chain(h)], h.shape[:3] + _c(head_dim // 2))
            other = b.node("Slice", [h, shape_chain(h)], half.shape)
            rotated = b.node("Concat", [b.node("Neg", [other], other.shape), half], h.shape)
            return b.node("Add", [b.node("Mul", [h], h.shape),
                                  b.node("Mul", [rotated], h.shape)], h.shape)

        normed = rms_norm(x, weight("ln1", hidden))
        q = rotary(heads_of(b.node("MatMul", [normed, weight("wq", hidden, hidden)],
                                   x.shape), heads))
        kv_width = kv_heads * head_dim
        kv_shape = (batch, seq, SymInt.const(kv_width))
        k = rotary(heads_of(b.node("MatMul", [normed, weight("wk", hidden, kv_width)],
                                   kv_shape), kv_heads))
        v = heads_of(b.node("MatMul", [normed, weight("wv", hidden, kv_width)], kv_shape),
                     kv_heads)
        k = b.node("Expand", [k, shape_chain(k)], q.shape)
        v = b.node("Expand", [v, shape_chain(v)], q.shape)
        kt = b.node("Transpose", [k], (batch, SymInt.const(heads), SymInt.const(head_dim), seq))
        scores = b.node("MatMul", [q, kt], (batch, SymInt.const(heads), seq, seq))
        scores = b.node("Add", [b.node("Div", [scores], scores.shape), mask], scores.shape)
        probs = b.node("Softmax", [scores], scores.shape)
        attn = b.node("MatMul", [probs, v], q.shape)
        attn = b.node("Reshape", [b.node("Transpose", [attn], (batch, seq, SymInt.const(heads),
                                                                SymInt.const(head_dim))),
                                  shape_chain(attn)], x.shape)
        x = b.node("Add", [x, b.node("MatMul", [attn, weight("wo", hidden, hidden)], x.shape)],
                   x.shape)
        normed = rms_norm(x, weight("ln2", hidden))
        ffn_shape = (batch, seq, SymInt.const(ffn))
        gate = b.node("MatMul", [normed, weight("wg", hidden, ffn)], ffn_shape)
        up = b.node("MatMul", [normed, weight("wu", hidden, ffn)], ffn_shape)
        act = b.node("Mul", [b.node("Mul", [gate, b.node("Sigmoid", [gate], ffn_shape)],
                                    ffn_shape), up], ffn_shape)
        x = b.node("Add", [x, b.node("MatMul", [act, weight("wd", ffn, hidden)], x.shape)],
                   x.shape)
    logits = b.node("MatMul", [rms_norm(x, weight("ln_f", hidden, layer=layers)),
                               b.value("lm_head", _c(hidden, 32000), DType.FLOAT16,
                                       Role.PARAMETER)], (batch, seq, SymInt.const(32000)))
    return b.graph([logits])


def random_graph(node_count: int, seed: int = 0) -> Graph:
    rng = random.Random(seed)
    b = _Builder(f"random{node_count}")
    recent = [b.value("in", _c(rng.randint(1, 1 << 16)), DType.FLOAT32, Role.INPUT)]
    for _ in range(node_count):
        picks = rng.sample(recent[-8:], k=min(len(recent[-8:]), rng.randint(1, 3)))
        if rng.random() < 0.05:
            picks.append(rng.choice(recent))
        recent.append(b.node("Op", picks, _c(rng.randint(1, 1 << 20)), DType.FLOAT32))
        if rng.random() < 0.3:
            recent.append(b.node("Op", picks[:1], _c(rng.randint(1, 1 << 16)), DType.FLOAT32))
    return b.graph([recent[-1]])


def _timed(label: str, run: Callable[[], T]) -> T:
    start = time.perf_counter()
    result = run()
    print(f"  {label:<34} {time.perf_counter() - start:7.2f} s")
    return result


def bench(graph: Graph, dims: dict[str, int]) -> None:
    sizes = {name: (v.nbytes.bind(dims) if v.nbytes is not None else None)
             for name, v in graph.values.items()}
    print(f"{graph.name}: {len(graph.nodes):,} nodes, dims {dims or 'none'}")
    liveness = _timed("liveness (model order)", lambda: analyze_liveness(graph, sizes))
    model = _timed("integer memory model", lambda: build_memory_model(graph, sizes, dims))
    print(f"  {'buffers':<34} {len(model.buffer_names):,}")
    for key in GREEDY_KEYS:
        order = _timed(f"greedy pass {key.__name__}", lambda key=key: greedy_order(model, key))
        print(f"  {'  its peak':<34} {format_bytes(order_peak(model, order)[0])}")
    search = _timed("best order (all passes)", lambda: best_order(model))
    arena = _timed("arena plan (model order)", lambda: plan_arena(model))
    print(f"  model-order peak {format_bytes(int(liveness.peak_bytes))}, best order "
          f"{format_bytes(search.peak_bytes)} ({search.method}), lower bound "
          f"{format_bytes(int(liveness.lower_bound_bytes))}")
    print(f"  arena {format_bytes(arena.arena_bytes)} for a live activation peak of "
          f"{format_bytes(arena.live_activation_peak_bytes)} (fragmentation "
          f"{arena.fragmentation:.1%}); no reuse {format_bytes(arena.no_reuse_bytes)}")


def bench_pipeline(graph: Graph, dims: dict[str, int], gpu: str) -> None:
    """Every pass after import, as `graphmem analyze --gpu` runs them, with and without the
    planning passes (schedule, arena, roofline, max batch)."""
    info = ModelInfo(graph.name, graph.name, "ir", 0, len(graph.nodes), "none", ())
    binding = bind_dims(graph, None, dims)
    spec = find_gpu(gpu)
    base = _timed("all passes, no planning", lambda: run_passes(graph, info, binding, spec,
                                                                 None, plan=False))
    planned = _timed(f"all passes + planning ({gpu})",
                     lambda: run_passes(graph, info, binding, spec, None))
    assert planned.max_batch is not None and base.fit is not None
    reason = f" ({planned.max_batch.reason})" if planned.max_batch.reason else ""
    print(f"  max batch on {gpu}: {planned.max_batch.max_batch}{reason}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=80)
    parser.add_argument("--random-nodes", type=int, default=25_000)
    args = parser.parse_args()
    llama = _timed("build llama graph", lambda: llama_graph(args.layers))
    bench(llama, {"batch": 1, "seq": 2048})
    bench_pipeline(llama, {"seq": 2048}, "h200")
    bench(_timed("build random graph", lambda: random_graph(args.random_nodes)), {})
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss_mib:.0f} MiB")


if __name__ == "__main__":
    main()
