"""The serving budget of a gate: `--min-sequences N --context TOKENS [--engine E]`, at least N
sequences of TOKENS fit at once in the engine's KV cache (graphmem/distributed/serving.py),
and the numbers of an analysis it is checked against. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from graphmem.core.kv_layers import GroupUse
from graphmem.core.units import format_bytes
from graphmem.distributed.engines import ENGINE_VERSIONS, VLLM
from graphmem.distributed.serving import ServingConfig
from graphmem.errors import GraphmemError

if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis


@dataclass(frozen=True)
class MinSequences:
    """`--min-sequences N`: at least N sequences of the serving context must fit at once in
    the paged KV cache (graphmem/distributed/serving.py), served as `serving` says."""

    count: int
    serving: ServingConfig = field(default_factory=ServingConfig)


def min_sequences(count: int | None, context: int | None, where: str = "",
                  names: tuple[str, str] = ("--min-sequences ", "--context "),
                  engine: str | None = None) -> MinSequences | None:
    """The sequences budget from its two settings (`names`: how the user wrote them, the
    command line's flags or the budgets file's keys): N sequences of `context` tokens,
    served by `engine` (vLLM by default)."""
    count_name, context_name = names
    if count is None:
        if context is not None:
            raise GraphmemError(f"{where}{context_name}{context} is the tokens per sequence of"
                                f" {count_name.rstrip(' =')}: add {count_name}N or drop it")
        return None
    if context is None:
        raise GraphmemError(f"{where}{count_name}{count} needs {context_name}TOKENS: the"
                            " tokens per sequence (prompt + output) each must hold")
    if count < 1:
        raise GraphmemError(f"{where}{count_name}{count}: give at least 1 sequence")
    return MinSequences(count, ServingConfig(context=context, engine=engine or VLLM))


class ServingNumbers(NamedTuple):
    """The serving plan's numbers a gate reads (ModelNumbers' `serving_*` fields): with the
    KV cache per layer type (full, sliding window, MLA latent, state: core/kv_layers.py)."""

    serving_sequences: int | None = None
    serving_context: int | None = None
    serving_text: str = ""
    serving_per_token_bytes: int | None = None  # one more token of every growing layer
    serving_sequence_bytes: int | None = None  # one sequence of the context, every layer
    serving_groups: tuple[GroupUse, ...] = ()  # what one sequence holds per layer type


def serving_numbers(analysis: Analysis) -> ServingNumbers:
    kv = analysis.kv_cache
    plan = kv.serving if kv is not None else None
    if plan is None:
        return ServingNumbers()
    # a model of states only: a block is one sequence's states (serving.py `state_only`)
    block = "one sequence's states" if plan.state_only else f"{plan.block_size} tokens"
    text = (f"{plan.total_sequences:,} sequences of {plan.context:,} tokens fit at once on"
            f" {plan.gpu_name} ({ENGINE_VERSIONS[plan.engine]}): {plan.num_blocks:,} KV"
            f" blocks of {block}, {plan.blocks_per_sequence:,} per sequence")
    if plan.replicas > 1:
        text += f", x{plan.replicas} replicas"
    if plan.layer_groups:
        kinds = ", ".join(f"{use.label} x{use.layers}" for use in plan.layer_groups)
        text += f"; KV per sequence {format_bytes(plan.sequence_bytes)} ({kinds} layers)"
    return ServingNumbers(plan.total_sequences, plan.context, text, plan.per_token_bytes,
                          plan.sequence_bytes, plan.layer_groups)



def serving_context(count: int | None, context: int | None, options: Mapping[str, Any]
                    ) -> tuple[int | None, dict[str, Any]]:
    """(the --min-sequences budget's context, the run's options): with a `serve` option and
    no sequences budget, `context` is the serving plan's alone (the model's position limit
    when absent); otherwise it is the budget's, which serves the model when `serve` is not
    given (gate/check.py `check_request`)."""
    serve = options.get("serve")
    with_context = {**options, "context": context} if serve and context is not None else {
        **options}
    return (None if serve and count is None else context), with_context
