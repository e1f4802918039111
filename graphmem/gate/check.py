"""Run the gate: analyze each model at its dims, evaluate its budgets, collect the verdicts."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from graphmem.errors import GraphmemError
from graphmem.frontends.torch.spec import is_model_spec
from graphmem.gate.baseline import load_baseline
from graphmem.gate.budgets import (
    BudgetResult,
    Budgets,
    ModelNumbers,
    complete_budgets,
    evaluate,
    numbers_of,
)
from graphmem.gate.options import RequestBuilder
from graphmem.pipeline import run
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.request import Request, SuggestOptions


@dataclass(frozen=True)
class CheckSpec:
    """One model to check: where it is, at which dims, on which GPU, against which budgets;
    `options`: how it runs, as the Python API's keywords (train, optimizer, tensor_parallel,
    serve, inputs, ...: graphmem/gate/options.py), turned into the Request by the builder
    `run_check` is given."""

    model_path: Path
    label: str  # how reports name the model
    budgets: Budgets
    gpu: str | None = None
    batch: int | None = None
    dims: dict[str, int] = field(default_factory=dict)
    cuda_reserve_bytes: int | None = None
    baseline_path: Path | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    origin: str = ""  # where the entry was written, for errors: "graphmem.toml [[model]] #2"

    @property
    def model(self) -> str | Path:
        """What the Request names: a `file.py:fn` / `pkg.mod:fn` spec as text, else the path
        (an .onnx file, a Hugging Face config or its folder)."""
        text = str(self.model_path)
        return text if is_model_spec(text) else self.model_path


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


def run_check(specs: Sequence[CheckSpec], builder: RequestBuilder | None = None
              ) -> CheckReport:
    """Every model's verdicts; a usage or input error (GraphmemError) stops the whole check.
    Every Request is built and checked before the first analysis, so a bad option of the
    last entry fails at once. `builder`: graphmem.api.build_request (needed for entries
    with options)."""
    requests = [check_request(spec, builder) for spec in specs]
    return CheckReport(tuple(check_model(spec, request)
                             for spec, request in zip(specs, requests, strict=True)))


def check_request(spec: CheckSpec, builder: RequestBuilder | None = None) -> Request:
    """The Request of one entry, checked (no model read yet). With --min-sequences and no
    `serve` option the model is served as the budget says (its context and engine)."""
    try:
        return _checked_request(spec, builder)
    except GraphmemError as error:
        if not spec.origin:
            raise
        raise GraphmemError(f"{spec.origin}: {error}") from None


def _checked_request(spec: CheckSpec, builder: RequestBuilder | None) -> Request:
    budgets = complete_budgets(spec.budgets, spec.gpu, _baseline_source(spec))
    options = {key: value for key, value in spec.options.items() if value is not None}
    if budgets.min_sequences is not None and not options.get("serve"):
        serving = budgets.min_sequences.serving
        options.pop("context", None)  # the budget's: in its ServingConfig
        engine = options.pop("engine", None)  # an API keyword once it has one
        options["serve"] = serving if engine is None else replace(serving, engine=engine)
    settings: dict[str, Any] = {"batch": spec.batch, "dims": dict(spec.dims), "gpu": spec.gpu,
                "cuda_reserve_bytes": spec.cuda_reserve_bytes}
    if builder is not None:
        request = builder.request(spec.model, options, **settings)
    elif set(options) - {"serve"}:
        raise GraphmemError(f"{spec.label}: options {sorted(options)} need the Python API's"
                            " request builder: run_check(specs, request_builder()) with"
                            " request_builder from graphmem.options.check_entry")
    else:
        request = Request(spec.model, suggest=SuggestOptions(enabled=False),
                          serving=options.get("serve"), **settings)
    request.check()
    return request


def _baseline_source(spec: CheckSpec) -> str | None:
    return str(spec.baseline_path) if spec.baseline_path is not None else None


def check_model(spec: CheckSpec, request: Request | None = None) -> ModelCheck:
    started = time.perf_counter()
    budgets = complete_budgets(spec.budgets, spec.gpu, _baseline_source(spec))
    if spec.baseline_path is not None:
        budgets = replace(budgets, baseline=load_baseline(spec.baseline_path, spec.label))
    analysis = run.analyze(request if request is not None else check_request(spec))
    numbers = numbers_of(analysis)
    results = evaluate(numbers, budgets)
    return ModelCheck(spec, analysis, numbers, results, time.perf_counter() - started)
