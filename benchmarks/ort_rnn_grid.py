"""GRU, LSTM and RNN nodes: graphmem's ort-cpu model against onnxruntime's measured peak.

docs/runtime-models.md, "Recurrent kernels".

`python benchmarks/ort_rnn_grid.py [--level disabled|all]` builds 54 single-node models
(tests/helpers/rnn_nodes.py: per op and direction, batch 1/3 by sequence 1/5/17, the hidden
size, input size, bias, initial states, sequence_lens, named outputs, linear_before_reset,
peepholes and weights fed at run time drawn with a fixed seed), runs each once on onnxruntime
(one thread, profiler on: `mem_in_use_peak`) and prints a markdown row per node next to
graphmem's prediction, marked `fit` or `held` (a fixed third held out while the rules were
written), then the count off and the worst error per part.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.rnn_nodes import RnnCase, measured_peak, predicted_peak, rnn_model

OUTPUT_CHOICES = [("Y", "Y_h"), ("Y",), ("Y_h",), ("Y", "Y_h", "Y_c"), ("Y_c",), ("Y_h", "Y_c")]


def grid() -> list[tuple[RnnCase, bool]]:
    """The 54 cases, each with whether it was held out."""
    draw, extra, split = random.Random(7), random.Random(5), random.Random(11)
    cases = []
    for op in ("GRU", "LSTM", "RNN"):
        for direction in ("forward", "reverse", "bidirectional"):
            for batch in (1, 3):
                for seq in (1, 5, 17):
                    hidden, width = draw.choice((8, 20, 64)), draw.choice((4, 16, 33))
                    outputs = draw.choice(OUTPUT_CHOICES)
                    if op != "LSTM":
                        outputs = tuple(o for o in outputs if o != "Y_c") or ("Y",)
                    bias, initial = draw.random() < 0.7, draw.random() < 0.4
                    lengths = draw.random() < 0.3
                    linear = draw.choice((0, 1)) if op == "GRU" else 0
                    cases.append(RnnCase(op, direction, batch, seq, hidden, width, bias,
                                         initial, lengths, outputs, linear))
    drawn = []
    for case in cases:
        fed = extra.random() <= 0.2
        peepholes = case.op == "LSTM" and extra.random() < 0.4
        drawn.append((RnnCase(**{**case.__dict__, "weights_fed": fed,
                                 "peepholes": peepholes}), split.random() < 1 / 3))
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", default="disabled", choices=("disabled", "all"))
    level = parser.parse_args().level
    print("| part | op | direction | B | S | H | I | outputs | graphmem B | onnxruntime B |"
          " error |\n|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|")
    errors: dict[str, list[float]] = {"fit": [], "held": []}
    with tempfile.TemporaryDirectory() as folder:
        for index, (case, held) in enumerate(grid()):
            path = rnn_model(case, Path(folder) / f"{index}.onnx")
            predicted, measured = predicted_peak(path, level), measured_peak(path, level)
            part = "held" if held else "fit"
            errors[part].append((predicted - measured) / measured)
            print(f"| {part} | {case.op} | {case.direction} | {case.batch} | {case.seq} |"
                  f" {case.hidden} | {case.input_size} | {'+'.join(case.outputs)} |"
                  f" {predicted:,} | {measured:,} | {errors[part][-1]:+.2%} |", flush=True)
    for part, values in errors.items():
        off = sum(1 for e in values if e != 0)
        print(f"{part}: {len(values)} nodes, {off} off, worst {max(map(abs, values)):.2%}")


if __name__ == "__main__":
    main()
