"""Activation checkpointing for an ONNX training step: its candidates and how its card reads.

The candidates are the exporter's modules, or the stretches between single-tensor cuts
(graphmem/suggest/onnx_candidates.py); the suggestion driver (graphmem/suggest/driver.py)
plans over them and re-analyses every plan it tries: the training step rebuilt from the ONNX
graph with those segments checkpointed (graphmem/training/checkpoint.py: nothing saved inside
them but their inputs, their forward run again in backward) and the whole analysis run again.
The ONNX file is not rewritten: the card says what to wrap in the PyTorch source it came from.
"""

from __future__ import annotations

from collections.abc import Callable

from graphmem.passes.dims import value_bytes
from graphmem.suggest.candidates import SegmentCandidate, forward_nodes
from graphmem.suggest.cards import Analysed, checkpoint_snippet
from graphmem.suggest.onnx_candidates import onnx_candidates

ONNX_CHECKPOINT_NOTE = (
    "the training step rebuilt from the ONNX graph with these segments checkpointed (nothing"
    " saved inside them but their inputs; their forward run again in backward, up to the last"
    " tensor backward reads: graphmem/training/checkpoint.py) and analysed again;"
    " Python: analyze_onnx(path, train=True, checkpoints=TARGETS)")
# ops that write a buffer in their training forward (BatchNorm's running statistics)
_STATEFUL_OPS = frozenset({"BatchNormalization"})


def onnx_checkpoint_terms(base: Analysed) -> tuple[list[SegmentCandidate], frozenset[str],
                                                    Callable[[tuple[str, ...]], str]]:
    """The candidates of the analysed ONNX training step (every dim bound), those whose
    forward updates a buffer, and the card's snippet for a chosen set of targets."""
    candidates = onnx_candidates(base.graph, base.costs, value_bytes(base.graph, base.dims))
    modules = {".".join(parts[:depth]) for n in forward_nodes(base.graph) if n.module_path
               for parts in [n.module_path.split(".")] for depth in range(1, len(parts) + 1)}

    def snippet(targets: tuple[str, ...]) -> str:
        return onnx_checkpoint_snippet(targets, all(t in modules for t in targets))

    return candidates, _stateful(base, candidates), snippet


def onnx_checkpoint_snippet(targets: tuple[str, ...], module_paths: bool) -> str:
    """What to change in the PyTorch source: graphmem does not rewrite the ONNX file."""
    if module_paths:
        return ("# the ONNX file is not rewritten: checkpoint these modules (the exporter's"
                " module paths)\n# in the PyTorch model it was exported from\n"
                + checkpoint_snippet(targets))
    listed = "\n".join(f"#   {t}" for t in targets)
    return ("# the ONNX file is not rewritten: in the PyTorch source, move the code that"
            " computes each\n# range of ONNX nodes below into a function f and call it as\n"
            "# y = torch.utils.checkpoint.checkpoint(f, x, use_reentrant=False)\n" + listed)


def _stateful(base: Analysed, candidates: list[SegmentCandidate]) -> frozenset[str]:
    forward = forward_nodes(base.graph)
    return frozenset(c.path for c in candidates if any(
        n.op_type in _STATEFUL_OPS for n in forward[c.first_step: c.last_step + 1]))
