"""The shipped sample models (samples/*.onnx) as the tests use them."""

from __future__ import annotations

from pathlib import Path

SAMPLES_DIR = Path(__file__).resolve().parent.parent.parent / "samples"
SAMPLE_MODELS = sorted(SAMPLES_DIR.glob("*.onnx"))
TINY_CNN = next((s for s in SAMPLE_MODELS if s.name == "tiny_cnn.onnx"), None)
# the samples small enough to run on onnxruntime in a test (names without ".onnx")
RUNNABLE = ["tiny_cnn", "tiny_cnn.nofold", "tiny_cnn.dynamo", "tiny_gpt", "tiny_gpt.dynamo",
            "tiny_llama", "tiny_llama.dynamo"]


def sample_dims(path: Path, batch: int, seq: int) -> dict[str, int]:
    """The sample's free input dims bound: the first to `batch`, the others to `seq`."""
    from graphmem.frontends.onnx.importer import import_onnx

    names = import_onnx(path).graph.input_dims_in_order()
    return {name: (batch if i == 0 else seq) for i, name in enumerate(names)}
