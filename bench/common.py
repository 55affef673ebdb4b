"""Shared by the benchmark scripts: setup, statistics, the machine, and result files.

Every script is a module run as `python -m bench.<name>`. It measures, writes
bench/results/<name>.json, then rewrites docs/BENCHMARKS.md (and its plots) from all the
result files present, so one figure can be re-measured alone.

Import this module first: it preloads the system OpenBLAS (engine/cpu.py) before
anything imports mlx, as the app does, unless CHINWAG_NO_OPENBLAS=1.
"""

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine import cpu
from engine.models.folders import STARTER_ID

cpu.preload_openblas()

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs"
QUICK = os.environ.get("CHINWAG_BENCH_QUICK", "") not in ("", "0")  # smoke-test sizes


def reps(full: int, quick: int = 1) -> int:
    return quick if QUICK else full


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def ratio(a, b):
    return a / b if b else float("nan")


def log(*args):
    print(f"[{time.strftime('%H:%M:%S')}]", *args, file=sys.stderr, flush=True)


def peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


def rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def tiny_model(context_length: int = 32768) -> Path:
    """The tests' tiny random llama (tests/tiny_model.py), built in a temporary folder."""
    from tests.tiny_model import build_tiny_model

    folder = Path(tempfile.mkdtemp(prefix="chinwag-bench-tiny-")) / "tiny"
    return build_tiny_model(folder, context_length=context_length)


def temp_home() -> Path:
    """A throwaway CHINWAG_HOME, so that benches never touch the user's chats or caches."""
    home = Path(tempfile.mkdtemp(prefix="chinwag-bench-home-"))
    os.environ["CHINWAG_HOME"] = str(home)
    return home


def starter_path() -> Path:
    """The starter model's MLX folder (imported from its GGUF on first use)."""
    from engine.models import registry

    path, _info = registry.resolve_model(STARTER_ID)
    return path


# --- the machine ----------------------------------------------------------------------


def _cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def _version(pkg: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine() -> dict:
    """A description of this machine and process, recorded with every result."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        ram = 0
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "engine", "app"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        if dirty:
            commit += " + uncommitted changes in engine/ or app/"
    except (OSError, subprocess.SubprocessError):
        commit = ""
    flags = ""
    try:
        text = Path("/proc/cpuinfo").read_text()
        have = set(next(l for l in text.splitlines() if l.startswith("flags")).split(":", 1)[1].split())
        flags = " ".join(f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in have)
    except (OSError, StopIteration):
        pass
    return {
        "cpu": _cpu_name(),
        "cpu_flags": flags,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "ram_gib": round(ram / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "mlx": _version("mlx"),
        "mlx_lm": _version("mlx-lm"),
        "pyside6": _version("PySide6-Essentials"),
        "blas": cpu.openblas_info(),
        "env": {
            k: os.environ[k]
            for k in ("CHINWAG_NO_OPENBLAS", "CHINWAG_CPU_DEQUANTIZE", "CHINWAG_CPU_FLOAT32")
            if k in os.environ
        },
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


# --- results --------------------------------------------------------------------------


_AT_START: dict = {}


def at_start() -> dict:
    """The machine and commit as this process started (engine files can change during a run)."""
    if not _AT_START:
        _AT_START.update(machine())
    return _AT_START


def save(name: str, data: dict, command: str, started: float) -> Path:
    m = machine()
    m["commit"] = at_start()["commit"]
    m["loadavg_at_start"] = at_start()["loadavg_at_start"]
    m["date"] = at_start()["date"]
    data = {
        "name": name,
        "command": command,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": m,
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "quick": QUICK,
        **data,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, default=float))
    log(f"wrote {path.relative_to(ROOT)}")
    return path


def finish(write_report: bool = True) -> None:
    """Rewrite docs/BENCHMARKS.md from the result files, unless run_all does it at the end."""
    if write_report and not os.environ.get("CHINWAG_BENCH_NO_REPORT"):
        from bench import report

        report.write()


at_start()


async def timed_chat(engine, conv, messages, params):
    """One Engine turn timed from the caller: (seconds to the first token, reply text, TurnStats).

    A server's deltas carry no token ids: their first text counts as the first token.
    """
    from engine import TextDelta, TurnStats

    t0 = time.perf_counter()
    first, parts, stats = None, [], None
    async for ev in engine.chat(conv, messages, params):
        if isinstance(ev, TextDelta):
            if first is None and (ev.token_ids or ev.text):
                first = time.perf_counter()
            parts.append(ev.text)
        elif isinstance(ev, TurnStats):  # not the prefill's progress events
            stats = ev
    return (first or time.perf_counter()) - t0, "".join(parts), stats
