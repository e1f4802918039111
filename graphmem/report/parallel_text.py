"""A model-parallel layout in words, for every renderer."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rendered where the analysis has them: their modules are loaded then
    from graphmem.distributed.parallel import ParallelLayout


def layout_text(layout: ParallelLayout) -> str:
    """` x pipeline 2 (1f1b, 4 micro-batches) x context 2 ...` (empty when trivial)."""
    text = ""
    if layout.pipeline > 1:
        chunks = (f", {layout.virtual_stages} virtual stages" if layout.virtual_stages > 1
                  else "")
        text += (f" x pipeline {layout.pipeline} ({layout.schedule},"
                 f" {layout.micro_batch_count} micro-batches{chunks})")
    if layout.context > 1:
        text += f" x context {layout.context}"
    if layout.expert > 1:
        text += f", experts over {layout.expert}"
    if layout.sequence_parallel:
        text += ", sequence parallel"
    return text
