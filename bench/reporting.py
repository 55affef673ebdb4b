"""What a figure module gives the report (`Figure`, `Run`) and the helpers its report code shares.

Imports neither mlx nor bench.common: the report and the tests read figures without measuring,
and bench/figures/linux_blas.py's children must choose their BLAS before anything loads one.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# A figure's report code is given its own results (bench/results/<name>.json, loaded) and every
# loaded result by file name, for the figures that quote another (decode's quantized run, memory's
# prefill speeds from linux_blas).
Results = dict[str, dict]


@dataclass(frozen=True)
class Run:
    """A measuring command beyond a figure's own: `python -m bench.figures.<figure> *args`."""

    results: str  # the file it writes: bench/results/<results>.json
    args: tuple[str, ...] = ()
    label: str = ""  # how the Reproduce line names it: "Quantized: `...`"


@dataclass(frozen=True)
class Figure:
    """One figure of docs/BENCHMARKS.md: what a module in bench/figures/ exports as FIGURE."""

    name: str  # the module's name, its results file and its plot: bench/results/<name>.json, docs/bench/<name>.png
    title: str  # without its number: the registry's order numbers the figures
    section: Callable[[dict, Results], list[str]]  # the Markdown lines under the plot
    plot: Callable[[dict, Results, Path], None] | None = None  # writes the PNG at the path given
    headline: Callable[[dict, Results], list[list[str]]] | None = None  # rows: measure, result, detail
    extra_runs: tuple[Run, ...] = ()  # more result files it reads, each measured by its own command

    @property
    def runs(self) -> tuple[Run, ...]:
        return (Run(self.name), *self.extra_runs)


# --- formatting ---------------------------------------------------------------------------


def f(x, digits=2):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:,.{digits}f}"


def mb(n):
    return f"{n / 2**20:,.1f} MiB"


def ratio_word(r, higher_is_better=True):
    """'1.05x (Chinwag faster)' style, from Chinwag / mlx-lm."""
    if r is None or math.isnan(r):
        return "–"
    good = r >= 1 if higher_is_better else r <= 1
    return f"{r:.2f}x" + ("" if abs(r - 1) < 0.005 else (" (Chinwag better)" if good else " (mlx-lm better)"))


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def model_label(d) -> str:
    m = d.get("model")
    if not m:
        return "quantized" if d["params"].get("quantized") else "as loaded"
    return "4-bit, float32 parameters" if m["quantized"] else f"dequantized to {m['dtype']}"


# --- plots --------------------------------------------------------------------------------


def pyplot():
    """matplotlib's pyplot on the Agg backend, with the report's style (imported only to plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    return plt


COLORS = {"chinwag": "#1f77b4", "mlx_lm": "#ff7f0e", "reprefill": "#7f7f7f", "proposed": "#2ca02c"}
