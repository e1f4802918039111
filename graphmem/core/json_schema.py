"""The keys of graphmem's JSON outputs (README, "JSON schema"), defined once.

The writers (report/json/) emit exactly these; the baseline reader (gate/baseline.py) refuses
any other, so a key added to an output must be added here (tests/test_budgets_schema.py checks
that the writers and these sets agree).
"""

from __future__ import annotations

SCHEMA_VERSION = 1

# `graphmem analyze --json`: the top-level keys and those of its `dims`
ANALYSIS_KEYS = frozenset({
    "schema_version", "graphmem_version", "model", "config", "dims", "params", "flops",
    "memory", "nodes", "unsupported_ops", "unknown_shapes", "control_flow_nodes", "modules",
    "gpu", "sweep", "suggestions", "suggestion_budget", "checkpoint_curve", "runtime_options"})
DIMS_KEYS = frozenset({"bound", "free", "batch_dim"})

# `graphmem check --json`: the envelope and each model's entry
CHECK_KIND = "graphmem check"
CHECK_KEYS = frozenset({"schema_version", "kind", "graphmem_version", "passed", "exit_code",
                        "budget_count", "failure_count", "models"})
MODEL_KEYS = frozenset({"name", "path", "gpu", "dims", "passed", "seconds", "budgets",
                        "per_rank", "kv_cache", "analysis"})
