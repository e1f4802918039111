"""The terminal summary (rich): the answer first, the rest behind `--verbose`. Render only.

The default view, within about 20 lines of 80 columns: which model and at which shapes; the
verdict on the GPU (fits or not, by how much, the largest batch); where the memory goes (the
device total's parts, the live tensors by role, the largest modules); what to change; real
warnings. `--verbose` adds everything else (tables, schedule, arena plan, roofline, runtime
model, suggestions, notes), each term glossed where it first appears (details.py).
"""

from __future__ import annotations

import io

from rich.console import Console

from graphmem.core.safe_text import markup_text
from graphmem.passes.modules import TOP
from graphmem.pipeline.analysis import Analysis
from graphmem.report.out_of_memory import out_of_memory_text
from graphmem.report.terminal.answer import (
    advice_lines,
    memory_table,
    peak_formula_line,
    verdict_line,
)
from graphmem.report.terminal.details import (
    Glossary,
    fit_line,
    gap_lines,
    has_modules,
    live_table,
    module_table,
    print_totals,
)
from graphmem.report.terminal.distributed import kv_cache_lines, print_distributed
from graphmem.report.terminal.headline import headline, kernels_line
from graphmem.report.terminal.llm import print_llm
from graphmem.report.terminal.plan import print_plans, print_sweep
from graphmem.report.terminal.runtime import print_runtime
from graphmem.report.terminal.suggestions import print_suggestions

VERBOSE_HINT = "details: --verbose"
REPR_WIDTH = 80


def print_summary(analysis: Analysis, console: Console, verbose: bool = False) -> None:
    """The answer; with `verbose`, every section after it."""
    print_answer(analysis, console)
    if verbose:
        print_details(analysis, console)
    else:
        console.print(f"[dim]{VERBOSE_HINT}[/]")


def print_answer(analysis: Analysis, console: Console) -> None:
    console.print(headline(analysis))
    console.print(verdict_line(analysis))  # always line 2: the answer
    kernels = kernels_line(analysis)
    if kernels:  # one line; --verbose lists each kernel with why and what it saves
        console.print(kernels, no_wrap=True, overflow="ellipsis")
    for line in _warnings(analysis):
        console.print(line)
    formula = peak_formula_line(analysis)
    if formula:
        console.print(formula)
    console.print(memory_table(analysis))
    oom = analysis.fit.out_of_memory if analysis.fit is not None else None
    if oom is not None:  # where this GPU would stop the run (the total above is the demand)
        console.print(f"[dim]{markup_text(out_of_memory_text(oom))}[/]")
    # what the user asked for by flag is the answer for them: fine-tuning and serving
    # (llm.py), the per-GPU memory of a distributed job, the sweep
    print_llm(analysis, console)
    if analysis.distributed is not None:
        print_distributed(analysis, console, kv_cache=False)
    print_sweep(analysis, console)
    for line in advice_lines(analysis):
        console.print(line)


def _warnings(analysis: Analysis) -> list[str]:
    """Real warnings only: informational notes (ModelInfo.notes: the model a config built,
    what LoRA applied) are behind --verbose."""
    model = [f"[yellow]warning:[/] {markup_text(text)}" for text in analysis.model.warnings]
    return [*model, *gap_lines(analysis)]


def model_notes(analysis: Analysis) -> tuple[str, ...]:
    """What the front end and the pipeline noted (ModelInfo.notes): information, shown
    with --verbose."""
    return analysis.model.notes


def print_details(analysis: Analysis, console: Console) -> None:
    """Everything behind the answer, with a one-line gloss of each term where it appears."""
    glossary = Glossary(console)
    console.print("[bold]details[/]")
    for note in model_notes(analysis):
        console.print(f"[dim]note: {markup_text(note)}[/]")
    for kernel in analysis.model.kernels:
        console.print(f"[dim]CUDA kernel assumed: {markup_text(str(kernel))}[/]")
    print_totals(analysis, console, glossary)
    glossary.explain("live at the peak")
    console.print(live_table(analysis, console.width))
    if analysis.modules is not None and has_modules(analysis.modules):
        if any(row.module == TOP for row in analysis.modules.rows):
            glossary.explain("top level")
        console.print(module_table(analysis.modules, console.width))
    if analysis.fit is not None:
        glossary.explain("usable")
        console.print(fit_line(analysis.fit))
    print_plans(analysis, console, glossary.explain, sweep=False)
    if analysis.runtime is not None:
        glossary.explain("device total")
    print_runtime(analysis, console)
    if analysis.kv_cache is not None:
        glossary.explain("KV cache")
        for line in kv_cache_lines(analysis.kv_cache):
            console.print(line)
    print_suggestions(analysis.suggestions, console)


def summary_text(analysis: Analysis, width: int = REPR_WIDTH) -> str:
    """The default summary as plain text (no colour, no markup): what `print(result)` and
    `repr(result)` show in Python."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, highlight=False,
                      emoji=False, force_terminal=False)
    print_answer(analysis, console)
    return buffer.getvalue().rstrip("\n")


def summary_html(analysis: Analysis, width: int = REPR_WIDTH) -> str:
    """The default summary as HTML with the terminal's colours (Jupyter's `_repr_html_`):
    rich escapes the text; the styles are inline."""
    console = Console(file=io.StringIO(), width=width, record=True, highlight=False,
                      emoji=False, force_terminal=True, color_system="truecolor")
    print_answer(analysis, console)
    return console.export_html(inline_styles=True, code_format=_HTML_BLOCK)


_HTML_BLOCK = ("<pre class='graphmem-summary' style='font-family:monospace;"
               "line-height:1.3'><code>{code}</code></pre>")
