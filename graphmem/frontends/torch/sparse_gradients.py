"""Sparse gradients, which graphmem does not model: refused by name, never priced as dense.

`nn.Embedding(sparse=True)` (and `nn.EmbeddingBag`, `F.embedding(..., sparse=True)`) gives
its weight a sparse COO gradient (the ids' rows: indices [1, nnz] int64 and values
[nnz, width]), which `torch.optim.SparseAdam` or SGD read, and Adam or AdamW refuse. The
traced step's optimizers (sgd, adam, adamw: train_step.py) are dense; tracing on would fail
inside the update with a message about a sparse backend, or, planned as dense, hold a
full-size gradient the real step does not. So the step is refused as soon as backward has
made the gradients, naming the parameter and what to do.
"""

from __future__ import annotations

import torch

from graphmem.errors import GraphmemError


def refuse_sparse_gradients(names: dict[int, str], grads: list[torch.Tensor | None]) -> None:
    """Raise for the first gradient with a sparse layout (`names`: id of each gradient's
    parameter -> its name, in `grads`' order)."""
    for name, grad in zip(names.values(), grads, strict=True):
        if grad is not None and grad.layout != torch.strided:
            raise GraphmemError(
                f"parameter {name} gets a sparse gradient ({grad.layout}, e.g. from"
                " nn.Embedding(sparse=True) for torch.optim.SparseAdam): graphmem does not"
                " model sparse gradients or SparseAdam; analyze the step with sparse=False"
                " (a dense gradient of the whole table, with adam or adamw state), or"
                " inference without --train")
