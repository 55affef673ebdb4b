"""`make bench`: every benchmark, each in its own process, then docs/BENCHMARKS.md.

    python -m bench.run_all [--only decode,ui] [--quick]

--quick (or CHINWAG_BENCH_QUICK=1) runs smoke-test sizes: for checking the scripts, not
for quoting. A failing benchmark is reported and the others still run; the exit code says
whether all of them succeeded.
"""

import argparse
import os
import subprocess
import sys
import time

# name -> the module and its arguments; cheapest first, so a broken environment shows up early.
BENCHES = {
    "linux_blas": ["bench.linux_blas"],
    "ui": ["bench.ui"],
    "memory": ["bench.memory"],
    "growth": ["bench.growth"],
    "decode": ["bench.decode"],
    "decode_quantized": ["bench.decode", "--quantized"],
    "followup": ["bench.followup"],
    "highlight": ["bench.highlight"],
    "longchat": ["bench.longchat"],
    "longchat_pause": ["bench.longchat_pause"],
    "typing_prefill": ["bench.typing_prefill"],
    "speculative": ["bench.speculative"],
    "remote": ["bench.remote"],
    "server": ["bench.server"],
}
ORDER = list(BENCHES)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated names among: " + ", ".join(ORDER))
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or ORDER
    unknown = [n for n in names if n not in ORDER]
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(unknown)}")
    env = dict(os.environ, CHINWAG_BENCH_NO_REPORT="1")
    if args.quick:
        env["CHINWAG_BENCH_QUICK"] = "1"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from engine.local import blas

    blas.preload_openblas()
    info = blas.openblas_info()
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
        print(f"== {' '.join(BENCHES[name])}", file=sys.stderr, flush=True)
        code = subprocess.call([sys.executable, "-m", *BENCHES[name]], env=env, cwd=root)
        print(
            f"== {name}: {'ok' if code == 0 else f'FAILED ({code})'} in {time.perf_counter() - t:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        if code:
            failed.append(name)
    from bench import report

    report.main()
    print(
        f"== all benchmarks: {time.perf_counter() - started:.0f} s"
        + (f"; failed: {', '.join(failed)}" if failed else ""),
        file=sys.stderr,
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
