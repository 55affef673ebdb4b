"""The benchmark figures, one module each, in the order docs/BENCHMARKS.md numbers them.

A figure module measures and reports: `python -m bench.figures.<name>` runs its `main(argv)`,
which writes bench/results/<name>.json and rewrites the report; its `FIGURE`
(`bench.reporting.Figure`) gives the report its title, section, plot and headline rows.
bench/report.py and bench/run_all.py both read the list below: adding a figure is one new
module here and one line in FIGURES.
"""

import importlib

from bench.reporting import Figure

FIGURES = [
    "decode",
    "followup",
    "growth",
    "memory",
    "ui",
    "linux_blas",
    "speculative",
    "remote",
    "longchat",
    "typing_prefill",
    "highlight",
    "longchat_pause",
    "server",
    "documents",
    "tools",
    "speculative_edits",
    "families",
    "agent",
    "kv_fit",
    "concurrent",
]


def figures() -> list[Figure]:
    """Every figure's FIGURE, in order (imports the modules: no mlx, nothing measured)."""
    out = []
    for name in FIGURES:
        figure = importlib.import_module(f"bench.figures.{name}").FIGURE
        if figure.name != name:  # the module, its results file and its plot share one name
            raise ValueError(f"bench/figures/{name}.py: FIGURE.name is {figure.name!r}, not {name!r}")
        out.append(figure)
    return out
