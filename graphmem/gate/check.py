"""Run the gate: analyze each model at its dims, evaluate its budgets, collect the verdicts."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from graphmem.distributed.serving import ServingConfig
from graphmem.gate.baseline import load_baseline
from graphmem.gate.budgets import (
    BudgetResult,
    Budgets,
    ModelNumbers,
    complete_budgets,
    evaluate,
    numbers_of,
)
from graphmem.pipeline import run
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.request import Request, SuggestOptions


@dataclass(frozen=True)
class CheckSpec:
    """One model to check: where it is, at which dims, on which GPU, against which budgets."""

    model_path: Path
    label: str  # how reports name the model
    budgets: Budgets
    gpu: str | None = None
    batch: int | None = None
    dims: dict[str, int] = field(default_factory=dict)
    cuda_reserve_bytes: int | None = None
    baseline_path: Path | None = None


@dataclass(frozen=True)
class ModelCheck:
    spec: CheckSpec
    analysis: Analysis
    numbers: ModelNumbers
    results: tuple[BudgetResult, ...]
    seconds: float  # analysis and evaluation time

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> tuple[BudgetResult, ...]:
        return tuple(r for r in self.results if not r.passed)


@dataclass(frozen=True)
class CheckReport:
    models: tuple[ModelCheck, ...]

    @property
    def passed(self) -> bool:
        return all(m.passed for m in self.models)

    @property
    def budget_count(self) -> int:
        return sum(len(m.results) for m in self.models)

    @property
    def failure_count(self) -> int:
        return sum(len(m.failures) for m in self.models)


def run_check(specs: Sequence[CheckSpec]) -> CheckReport:
    """Every model's verdicts; a usage or input error (GraphmemError) stops the whole check."""
    return CheckReport(tuple(check_model(spec) for spec in specs))


def _serving(budgets: Budgets) -> ServingConfig | None:
    """--min-sequences: the model is planned as served (graphmem/distributed/serving.py)."""
    return budgets.min_sequences.serving if budgets.min_sequences is not None else None


def check_model(spec: CheckSpec) -> ModelCheck:
    started = time.perf_counter()
    source = str(spec.baseline_path) if spec.baseline_path is not None else None
    budgets = complete_budgets(spec.budgets, spec.gpu, source)
    if spec.baseline_path is not None:
        budgets = replace(budgets, baseline=load_baseline(spec.baseline_path, spec.label))
    analysis = run.analyze(Request(spec.model_path, batch=spec.batch, dims=spec.dims,
                                   gpu=spec.gpu, cuda_reserve_bytes=spec.cuda_reserve_bytes,
                                   suggest=SuggestOptions(enabled=False),
                                   serving=_serving(budgets)))
    numbers = numbers_of(analysis)
    results = evaluate(numbers, budgets)
    return ModelCheck(spec, analysis, numbers, results, time.perf_counter() - started)
