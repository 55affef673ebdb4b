"""Writes docs/BENCHMARKS.md and docs/bench/*.png from bench/results/*.json.

    python -m bench.report        # no measuring: just the document and the plots

The figures, their order and their text come from bench/figures/ (FIGURES in its __init__);
this module adds what is not one figure's: the machine, the headline table, the recommendations.
"""

import argparse
import json
import sys
import traceback
from pathlib import Path

from bench.common import DOCS, RESULTS, ROOT
from bench.figures import figures
from bench.reporting import Figure, Results


def load(figs: list[Figure], results: Path = RESULTS) -> Results:
    """Every results file the figures read, by name, in figure order; the missing ones left out."""
    out = {}
    for fig in figs:
        for run in fig.runs:
            path = results / f"{run.results}.json"
            if path.exists():
                out[run.results] = json.loads(path.read_text())
    return out


def run_note(d):
    return (
        f"Ran {d['machine']['date']} in {d['seconds']:.0f} s, load average "
        f"{d['machine']['loadavg_at_start'][0]:.1f} at start and {d['loadavg_at_end'][0]:.1f} at end"
        + (" (CHINWAG_BENCH_QUICK: smoke-test sizes, not for quoting)" if d.get("quick") else "")
        + "."
    )


def blas_label(machine) -> str:
    b = machine["blas"]
    if b.get("loaded"):
        return f"system OpenBLAS ({b.get('config', b['library'])}, core {b.get('core', '?')})"
    return f"the reference BLAS bundled with mlx[cpu] ({b['reason']})"


def machine_table(res) -> list:
    any_result = next(iter(res.values()))
    m = any_result["machine"]
    rows = [
        ["CPU", f"{m['cpu']} ({m['cpu_flags']})"],
        ["cores", f"{m['cores']} ({m['usable_cores']} usable), shared with other engineers' jobs"],
        ["memory", f"{m['ram_gib']} GiB"],
        ["OS", m["os"]],
        ["Python / MLX / mlx-lm / PySide6", f"{m['python']} / {m['mlx']} / {m['mlx_lm']} / {m['pyside6']}"],
        ["BLAS used by figures 1–5", blas_label(m)],
        [
            "OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE",
            f"{m['blas'].get('OPENBLAS_CORETYPE') or 'not set'} / {m['blas'].get('OPENBLAS_L2_SIZE') or 'not set'}",
        ],
        ["commit measured", m["commit"]],
    ]
    return ["| | |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]


RECOMMENDATIONS = [
    "1. Done (6eafe4a): the Engine preloads OpenBLAS (`engine.local.blas.preload_openblas()` in "
    "`Engine._ensure_thread`, before the engine thread imports mlx) and `engine.local.loading.load` runs small "
    "quantized models dequantized to float32 when it is loaded (`CHINWAG_NO_OPENBLAS=1`, "
    "`CHINWAG_CPU_DEQUANTIZE=0/1`), and the README's Linux section says to install OpenBLAS (25f4e7f). "
    "`make setup` does not install it (it needs root), so CI and fresh machines run the quantized path, "
    "figure 6's first row, unless it is installed.",
    "2. Done: prefill chunks start at 32 tokens and double (up to 512) while a chunk takes under "
    "0.25 s (`engine/local/generation.py`), so Stop stays prompt at ~10 tok/s and large chunks run where prefill is "
    "fast. Before, a fixed 32-token chunk cost the dequantized starter ~1/3 of its prefill speed.",
    "3. Done: `ContiguousAttentionKVCache.from_state(state, max_seq_len)` allocates `max_seq_len` positions "
    "directly instead of doubling from the positions held, and cache restores are timed including the read.",
    "4. Done: `Engine.memory_stats()` returns a `MemoryReport` (tokens held, positions and bytes reserved, "
    "evictions, restores and their seconds), which figure 4 reads. Also done (2026-12-02): an eviction's file is "
    "written on a thread of its own (`engine/context/cache_writer.py`) from views of the cache's buffers; the "
    "engine thread, which spent ~1.2 s saving a starter-sized cache of 8K tokens, now spends ~1 ms (figure 4).",
    "5. No longer seen (2026-12-02): the first reply after start stalled the GUI thread once for 55–70 ms before "
    "its first token (figure 5, earlier runs). Today its longest stall is ~20 ms, while tokens arrive, as long as "
    "a later reply's (12–18 ms). Which change removed it was not isolated.",
    "6. Done (d154c9c): the prefill change that closed figure 1's TTFT gap.",
    "7. Done (2026-12-02): greedy decoding takes the argmax of the logits without normalising them first (the same "
    "token). The Linux CPU wheel computes `exp` one element at a time, ~13 ns each here: normalising a 49K vocabulary "
    "cost 3.3 ms of a 64 ms plain step, and 13.6 ms of a 17-token verification pass's 135 ms. Left as it is: the "
    "same slow `exp` in attention's softmax and SwiGLU's sigmoid is ~40% of what each further verified token costs "
    "(~1.5 of ~3.9 ms at 250 positions, growing with the context), inside MLX's own kernels.",
]


def headline(figs: list[Figure], res: Results) -> list:
    rows = []
    for number, fig in enumerate(figs, 1):
        if fig.headline and fig.name in res:
            rows += [[str(number), *row] for row in fig.headline(res[fig.name], res)]
    return ["| fig. | measure | result | detail |", "|---|---|---|---|"] + ["| " + " | ".join(r) + " |" for r in rows]


def figure_lines(number: int, fig: Figure, res: Results, plots: Path) -> list:
    """One figure's part of the document: its title, its plot (written into plots), the commands, the section."""
    title = f"{number}. {fig.title}"
    lines = ["", f"## {title}", ""]
    d = res.get(fig.name)
    if d is None:
        return lines + [f"Not measured yet: `python -m bench.figures.{fig.name}`."]
    if fig.plot:
        try:
            fig.plot(d, res, plots / f"{fig.name}.png")
            lines += [f"![{title}](bench/{fig.name}.png)", ""]
        except Exception as e:  # noqa: BLE001 - a broken plot must not lose the tables; the traceback goes to stderr
            traceback.print_exc()
            lines += [f"(plot failed: {type(e).__name__}: {e})", ""]
    reproduce = f"Reproduce: `{d['command']}`. {run_note(d)}"
    for run in fig.extra_runs:
        if run.results in res:
            reproduce += f" {run.label}: `{res[run.results]['command']}`. {run_note(res[run.results])}"
    lines += [reproduce, ""]
    try:
        lines += fig.section(d, res)
    except Exception as e:  # noqa: BLE001 - one broken section must not lose the others; the traceback goes to stderr
        traceback.print_exc()
        lines.append(f"(section failed: {type(e).__name__}: {e})")
    return lines


def render(figs: list[Figure], res: Results, plots: Path) -> str:
    """The whole of docs/BENCHMARKS.md from loaded results; writes the plots into plots."""
    plots.mkdir(parents=True, exist_ok=True)
    total = sum(d["seconds"] for d in res.values())
    lines = [
        "# Chinwag benchmarks",
        "",
        "Written by `make bench` (`python -m bench.run_all`), which runs every script in `bench/figures/` and then "
        "`python -m bench.report`. Each figure's own command re-measures it alone and rewrites this file; "
        "the raw numbers are in `bench/results/*.json`. "
        + (f"The last full run took {total / 60:.0f} minutes." if res else ""),
        "",
        "This machine is shared and noisy (2 cores, other engineers' test suites running at the same time). "
        "So every comparison runs both sides in the same run, interleaved, with repetitions where affordable, "
        "and reports medians and the ratio; the load average at the start and end of each figure is given. "
        "Sizes were cut to keep `make bench` near 20 minutes, and each section says what it ran.",
        "",
        "## The machine",
        "",
    ]
    if not res:
        lines.append("No results yet: run `make bench`.")
    else:
        lines += machine_table(res)
        if next(iter(res.values()))["machine"]["blas"].get("loaded"):
            lines += [
                "",
                "The benchmark processes preload OpenBLAS (`engine/cpu.py`) before importing mlx, as the "
                "Engine itself does since 6eafe4a, so both sides of every comparison run with the same BLAS; "
                "and with OpenBLAS loaded `engine.local.loading.load` runs the starter dequantized to float32 "
                "(figure 6 compares the four combinations).",
            ]
        lines += ["", "## Headline numbers", ""] + headline(figs, res)
    for number, fig in enumerate(figs, 1):
        lines += figure_lines(number, fig, res, plots)
    lines += ["", "## Recommendations for the engine", ""] + RECOMMENDATIONS
    return "\n".join(lines) + "\n"


def write(results: Path = RESULTS, docs: Path = DOCS) -> Path:
    """Rewrite docs/BENCHMARKS.md and docs/bench/*.png from the result files present."""
    figs = figures()
    res = load(figs, results)
    path = docs / "BENCHMARKS.md"
    path.write_text(render(figs, res, docs / "bench"))
    plotted = sum(1 for fig in figs if fig.plot and fig.name in res)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} and {plotted} plots", flush=True)
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=RESULTS, help="the folder of <name>.json result files")
    p.add_argument("--docs", type=Path, default=DOCS, help="where BENCHMARKS.md and bench/*.png go")
    args = p.parse_args(argv)
    write(args.results, args.docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
