"""`make bench`: every benchmark, each in its own process, then docs/BENCHMARKS.md.

    python -m bench.run_all [--only decode,ui] [--quick]

--quick (or CHINWAG_BENCH_QUICK=1) runs smoke-test sizes: for checking the scripts, not
for quoting. A failing benchmark is reported and the others still run; the exit code says
whether all of them succeeded.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from bench.common import RESULTS
from bench.figures import figures


def benches(results=RESULTS) -> dict:
    """Each results file's command, `python -m <module> *args`, cheapest first by its last run's seconds
    (never-run ones first), so a broken environment shows up early."""
    runs = {run.results: [f"bench.figures.{fig.name}", *run.args] for fig in figures() for run in fig.runs}

    def cost(name):
        try:
            return json.loads((results / f"{name}.json").read_text())["seconds"]
        except (OSError, ValueError, KeyError):
            return 0.0

    return {name: runs[name] for name in sorted(runs, key=cost)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    order = benches()
    p.add_argument("--only", default="", help="comma-separated names among: " + ", ".join(order))
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(order)
    unknown = [n for n in names if n not in order]
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(unknown)}")
    env = dict(os.environ, CHINWAG_BENCH_NO_REPORT="1")
    if args.quick:
        env["CHINWAG_BENCH_QUICK"] = "1"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from engine import cpu

    cpu.preload_openblas()
    info = cpu.openblas_info()
    print(
        f"== BLAS for the benchmarks: {info.get('config') or info['reason']}; OPENBLAS_CORETYPE="
        f"{info['OPENBLAS_CORETYPE'] or '(not set)'}",
        file=sys.stderr,
        flush=True,
    )
    if not info["loaded"]:
        print(
            "== note: without a system OpenBLAS, MLX uses its bundled reference BLAS "
            "(Debian/Ubuntu: apt-get install libopenblas0-pthread)",
            file=sys.stderr,
            flush=True,
        )
    failed = []
    started = time.perf_counter()
    for name in names:
        t = time.perf_counter()
        print(f"== {' '.join(order[name])}", file=sys.stderr, flush=True)
        code = subprocess.call([sys.executable, "-m", *order[name]], env=env, cwd=root)
        print(
            f"== {name}: {'ok' if code == 0 else f'FAILED ({code})'} in {time.perf_counter() - t:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        if code:
            failed.append(name)
    from bench import report

    report.write()
    print(
        f"== all benchmarks: {time.perf_counter() - started:.0f} s"
        + (f"; failed: {', '.join(failed)}" if failed else ""),
        file=sys.stderr,
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
