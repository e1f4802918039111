"""Per-module FLOPs follow backward nodes and tied weights to the module that owns the
computation (frontends/torch/fx_convert.py `_attribute_backward_nodes`; the ONNX training
expansion copies each forward node's module onto its backward node): GPT-2's lm_head has its
forward and backward matmuls, ln_f only its own LayerNorm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphmem import Result, analyze_torch

ROOT = Path(__file__).resolve().parent.parent


def _flops(rows: object) -> dict[str, int]:
    return {row.module: int(row.flops) for row in rows}  # type: ignore[attr-defined]


@pytest.mark.torch
@pytest.mark.slow
def test_gpt2_training_step_charges_lm_head_forward_and_backward_to_lm_head() -> None:
    pytest.importorskip("transformers")
    import torch

    from tests.torch_models.hf import gpt2

    batch, seq, d, vocab = 2, 16, 128, 1000  # tests/torch_models/hf.py's config
    result: Result = analyze_torch(gpt2(), [torch.randint(0, vocab, (batch, seq))], train=True,
                                   module_depth=3)
    flops = _flops(result.modules.rows)
    # lm_head (tied to wte): forward logits = h @ W^T, 2*b*s*d*vocab = 2*2*16*128*1000 =
    # 8,192,000; backward grad_h = g @ W and grad_W = g^T @ h, the same each: 3 x 8,192,000
    # = 24,576,000; plus adding lm_head's weight gradient into the embedding's (the tie):
    # vocab*d = 128,000 -> 24,704,000
    assert flops["lm_head"] == 3 * 2 * batch * seq * d * vocab + vocab * d
    # ln_f: its LayerNorm forward and backward only (no matmul: < 1% of lm_head's)
    assert 0 < flops["transformer.ln_f"] < flops["lm_head"] // 100
    # the two blocks are the same computation; the foreach optimizer update is top level
    assert flops["transformer.h.0"] == flops["transformer.h.1"]
    optimizer = [n for n in result.graph.nodes if n.op_type.startswith("aten._foreach")]
    assert optimizer and all(n.module_path == "" for n in optimizer)


@pytest.mark.torch
@pytest.mark.slow
def test_t5_training_step_charges_lm_head_backward_to_lm_head() -> None:
    pytest.importorskip("transformers")
    import torch

    from tests.torch_models.hf import t5

    batch, source, target, d, vocab = 2, 16, 8, 64, 1000  # tests/torch_models/hf.py's config
    result: Result = analyze_torch(t5(), [torch.randint(0, vocab, (batch, source)),
                                          torch.randint(0, vocab, (batch, target))],
                                   train=True, module_depth=3)
    flops = _flops(result.modules.rows)
    # lm_head (tied to shared) on the decoder's 2x8 positions: 2*2*8*64*1000 = 2,048,000
    # forward, the same for each backward matmul: 6,144,000; T5 scales the decoder's output
    # by d**-0.5 before it (one multiply per element, 2*8*64 = 1,024, whose backward is
    # charged here with the gradient it feeds)
    matmuls = 3 * 2 * batch * target * d * vocab
    assert matmuls <= flops["model.lm_head"] <= matmuls + batch * target * d
    assert flops["model.decoder.final_layer_norm"] < flops["model.lm_head"] // 100


@pytest.mark.slow
def test_onnx_training_step_charges_lm_head_forward_and_backward_to_lm_head(tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    done = subprocess.run(
        [sys.executable, "-m", "graphmem", "analyze", str(ROOT / "samples/tiny_gpt.onnx"),
         "--train", "--batch", "2", "--dim", "seq=16", "--depth", "1", "--no-html",
         "--json", str(out)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    flops = {row["module"]: row["flops"] for row in json.loads(out.read_text())["modules"]["rows"]}
    # tiny GPT sample: d 64, vocab 512; lm_head's forward 2*2*16*64*512 = 2,097,152 and its
    # two backward matmuls the same: 6,291,456 (its weight is its own initializer here)
    assert flops["lm_head"] == 3 * 2 * 2 * 16 * 64 * 512
    assert 0 < flops["ln_f"] < flops["lm_head"] // 50
