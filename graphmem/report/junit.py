"""`graphmem check --junit`: JUnit XML, as CI systems (GitHub, GitLab, Jenkins) read it.

    <testsuites name="graphmem check" tests=N failures=F errors=0 time=T>
      <testsuite name="graphmem check" tests=N failures=F errors=0 skipped=0 time=T timestamp=..>
        <testcase classname="<model>" name="<budget>" time=..>
          <failure type="budget exceeded" message="<value> > <limit>">how it was computed</failure>
        </testcase> ...

One testcase per model x budget; a model's analysis time is shared out over its budgets.
Every string is printable (core/safe_text.py): ElementTree writes control characters as
they are, and XML 1.0 forbids most of them, so a model name holding one would make the file
unreadable to the CI; names are shortened as on the terminal.
"""

from __future__ import annotations

import datetime
import xml.etree.ElementTree as ET
from pathlib import Path

from graphmem.core.output_files import write_output_text
from graphmem.core.safe_text import printable, printable_text
from graphmem.gate.check import CheckReport
from graphmem.report.terminal.gate import format_quantity, plan_lines

SUITE_NAME = "graphmem check"


def check_to_junit(report: CheckReport) -> ET.ElementTree[ET.Element]:
    seconds = sum(m.seconds for m in report.models)
    counts = {"tests": str(report.budget_count), "failures": str(report.failure_count),
              "errors": "0", "time": f"{seconds:.3f}"}
    root = ET.Element("testsuites", {"name": SUITE_NAME, **counts})
    stamp = datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()
    suite = ET.SubElement(root, "testsuite", {"name": SUITE_NAME, **counts, "skipped": "0",
                                              "timestamp": stamp})
    for model in report.models:
        share = model.seconds / max(len(model.results), 1)
        plan = printable_text("\n".join(plan_lines(model.numbers)))
        for result in model.results:
            case = ET.SubElement(suite, "testcase", {
                "classname": printable(model.spec.label), "name": printable(result.name),
                "time": f"{share:.3f}"})
            if not result.passed:
                value = format_quantity(result.value, result.unit)
                limit = format_quantity(result.limit, result.unit)
                failure = ET.SubElement(case, "failure", {
                    "type": "budget exceeded",
                    "message": printable_text(f"{result.name}: {value} > limit {limit}")})
                failure.text = printable_text(f"{model.spec.model_path}: {result.message}")
            if plan:  # the per-rank plan and the KV cache per layer type the budget read
                ET.SubElement(case, "system-out").text = plan
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(report: CheckReport, path: Path) -> None:
    root = check_to_junit(report).getroot()
    # the same bytes ElementTree.write(path, encoding="utf-8", xml_declaration=True) writes
    text = ET.tostring(root, encoding="utf-8", xml_declaration=True).decode("utf-8")
    write_output_text(path, [text])
