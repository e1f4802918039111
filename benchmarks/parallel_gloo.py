"""Per-rank memory of tensor-parallel and pipeline-parallel training, predicted vs measured.

`python benchmarks/parallel_gloo.py [--ranks 2]` runs a small decoder (pre-norm blocks
`blocks.N`, multi-head attention, GELU MLP) on CPU processes joined by gloo:
- TP: torch.distributed.tensor.parallel (DTensor): q, k, v and fc1 ColwiseParallel, o and
  fc2 RowwiseParallel, each rank computing its heads; the embedding and the output layer split
  by vocabulary, the cross-entropy under loss_parallel;
- PP: torch.distributed.pipelining, the blocks split into consecutive stages (embedding on
  the first, final norm, head and loss on the last), Schedule1F1B over M micro-batches;
and prints, per rank, graphmem's per-rank total (analyze with --tensor-parallel T or
--pipeline-parallel P, the traced batch one micro-batch; DDP's buckets left out: there is no
data parallelism) against the measured peak: the rank's parameters, optimizer state (Adam,
after a warm-up step) and gradients' bytes at the start, plus the running peak of
torch.profiler's memory deltas over one step (graphmem/verify/runners/torch_runner.py's CPU
measurement).
"""

from __future__ import annotations

import argparse
import os
import queue as queue_module
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphmem import analyze_torch
from graphmem.distributed.parallel import ParallelLayout
from graphmem.distributed.strategies import DistributedConfig
from graphmem.verify.runners.torch_runner import _measure_cpu

VOCAB, WIDTH, HEADS, FFN, LAYERS = 512, 256, 8, 1024, 4
BATCH, SEQ, MICRO_BATCHES = 8, 128, 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.q, self.k, self.v, self.o = (nn.Linear(WIDTH, WIDTH) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(WIDTH, FFN), nn.Linear(FFN, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.norm1(x)
        # -1 heads: with tensor parallel each rank holds HEADS / T of them
        q, k, v = (p(h).view(b, s, -1, WIDTH // HEADS).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm2(x))))


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())


def graphmem_loss(logits: torch.Tensor) -> torch.Tensor:
    """What graphmem traces: cross-entropy against zero targets (the default loss)."""
    return loss_fn(logits, torch.zeros(tuple(logits.shape[:2]), dtype=torch.long))


# ----- the runs ----------------------------------------------------------------------------------
def _state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if hasattr(t, "to_local") else t
    params = sum(local(p).nbytes for p in model.parameters())
    state = sum(local(t).nbytes for s in optimizer.state.values() for t in s.values()
                if torch.is_tensor(t) and t.dim() > 0)
    return params + state


def _param_bytes(model: nn.Module) -> int:
    return sum((p.to_local() if hasattr(p, "to_local") else p).nbytes
               for p in model.parameters())


def _tp_rank(rank: int, world: int, result: dict) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        loss_parallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = Decoder()
    for block in model.blocks:
        parallelize_module(block, mesh, {"q": ColwiseParallel(), "k": ColwiseParallel(),
                                         "v": ColwiseParallel(), "o": RowwiseParallel(),
                                         "fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    # the vocabulary split too (Megatron's VocabParallelEmbedding and parallel cross-entropy)
    parallelize_module(model, mesh, {
        "embed": RowwiseParallel(input_layouts=Replicate()),
        "head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)})
    # foreach Adam takes DTensors or tensors, not both: one optimizer for each
    split = [p for p in model.parameters() if hasattr(p, "to_local")]
    whole = [p for p in model.parameters() if not hasattr(p, "to_local")]
    optimizers = [torch.optim.Adam(split, foreach=True), torch.optim.Adam(whole, foreach=True)]
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))

    def step() -> None:
        with loss_parallel():
            loss = graphmem_loss(model(ids))
            loss.backward()
        for optimizer in optimizers:
            optimizer.step()

    step()
    model.zero_grad(set_to_none=True)
    start = sum(_state_bytes(model, o) for o in optimizers) - _param_bytes(model)
    result[rank] = start + _measure_cpu(step).peak_bytes


def _pp_rank(rank: int, world: int, result: dict) -> None:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    torch.manual_seed(0)
    full = Decoder()
    per = LAYERS // world
    stage_module = _stage(full, rank, per, world)
    micro = BATCH // MICRO_BATCHES
    example = (torch.randint(0, VOCAB, (micro, SEQ)) if rank == 0
               else torch.zeros(micro, SEQ, WIDTH))
    stage = PipelineStage(stage_module, rank, world, torch.device("cpu"),
                          input_args=(example,))
    schedule = Schedule1F1B(stage, MICRO_BATCHES, loss_fn=loss_fn)
    optimizer = torch.optim.Adam(stage_module.parameters(), foreach=True)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    target = torch.zeros(BATCH, SEQ, dtype=torch.long)

    def step() -> None:
        if rank == 0:
            schedule.step(ids)
        elif rank == world - 1:
            schedule.step(target=target)
        else:
            schedule.step()
        optimizer.step()

    step()
    stage_module.zero_grad(set_to_none=True)
    start = _state_bytes(stage_module, optimizer)
    result[rank] = start + _measure_cpu(step).peak_bytes


class _Stage(nn.Module):
    def __init__(self, full: Decoder, rank: int, per: int, world: int) -> None:
        super().__init__()
        self.embed = full.embed if rank == 0 else None
        self.blocks = nn.ModuleList(full.blocks[rank * per:(rank + 1) * per])
        last = rank == world - 1
        self.norm, self.head = (full.norm, full.head) if last else (None, None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)) if self.head is not None else x


def _stage(full: Decoder, rank: int, per: int, world: int) -> nn.Module:
    return _Stage(full, rank, per, world)


def _worker(rank: int, world: int, kind: str, init: str, queue: mp.Queue) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    result: dict = {}
    (_tp_rank if kind == "tp" else _pp_rank)(rank, world, result)
    queue.put((rank, result[rank]))
    dist.barrier()
    dist.destroy_process_group()


def measure(kind: str, world: int) -> list[int]:
    context = mp.get_context("spawn")
    queue = context.Queue()
    with tempfile.TemporaryDirectory() as folder:
        init = f"file://{os.path.join(folder, 'rendezvous')}"
        processes = [context.Process(target=_worker, args=(r, world, kind, init, queue))
                     for r in range(world)]
        for process in processes:
            process.start()
        found = {}
        for _ in processes:
            try:
                rank, peak = queue.get(timeout=600)
            except queue_module.Empty:  # a rank failed: its traceback is above
                for process in processes:
                    process.kill()
                raise SystemExit(f"{kind}: a rank failed") from None
            found[rank] = peak
        for process in processes:
            process.join()
    return [found[r] for r in range(world)]


# ----- the predictions ----------------------------------------------------------------------------
def predict(kind: str, world: int) -> list[int]:
    layout = ParallelLayout(pipeline=world, micro_batches=MICRO_BATCHES) if kind == "pp" \
        else ParallelLayout()
    batch = BATCH // MICRO_BATCHES if kind == "pp" else BATCH
    config = DistributedConfig("ddp", 1, world if kind == "tp" else 1, parallel=layout)
    torch.manual_seed(0)
    result = analyze_torch(Decoder(), [f"{batch}x{SEQ}:int64"], train=True, optimizer="adam",
                           loss=graphmem_loss, distributed=config, plan=False)
    report = result.distributed
    rows = [row.memory for row in report.plan.rows] if report.plan else [report.per_rank] * world
    return [m.total_bytes - m.buckets_bytes for m in rows]  # no DDP: no buckets


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--only", choices=("tp", "pp"))
    args = parser.parse_args()
    print(f"decoder: {LAYERS} blocks, width {WIDTH}, {HEADS} heads, FFN {FFN}, vocab {VOCAB};"
          f" batch {BATCH} x seq {SEQ}, fp32, Adam; pipeline: {MICRO_BATCHES} micro-batches,"
          " 1F1B")
    print("| layout | rank | predicted | measured (gloo, CPU) | error |")
    print("|---|---:|---:|---:|---:|")
    for kind in (args.only,) if args.only else ("tp", "pp"):
        label = f"{kind.upper()}={args.ranks}"
        for rank, (p, m) in enumerate(zip(predict(kind, args.ranks),
                                          measure(kind, args.ranks), strict=True)):
            print(f"| {label} | {rank} | {p:,} | {m:,} | {(p - m) / m:+.1%} |", flush=True)


if __name__ == "__main__":
    main()
