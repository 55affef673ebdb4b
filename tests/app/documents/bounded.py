"""Extraction in a child process under an address-space limit, for files built to exhaust memory: before a
fix they must fail the test, not take the machine. Reports the one line and the peak memory of the child
and of any process it started (the PDF reader's)."""

import json
import subprocess
import sys
from pathlib import Path

_CHILD = """
import json, resource, sys, time
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from app.documents.extract import extract
from engine.errors import ChinwagError
start = time.monotonic()
try:
    doc = extract(sys.argv[1])
    line, ok = f"{doc.kind}: {len(doc.text)} characters", True
except ChinwagError as e:
    line, ok = str(e), False
except MemoryError:
    line, ok = "MemoryError", False
def own_peak():
    # Linux keeps ru_maxrss across exec, so it may be the forking pytest worker's size: VmHWM is this image's.
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
unit = 1 if sys.platform == "darwin" else 1024
peak = max(own_peak(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * unit)
print(json.dumps({"line": line, "ok": ok, "peak": peak, "seconds": time.monotonic() - start}))
"""


def extract_bounded(path: Path, max_bytes: int = 2 << 30, timeout: float = 300) -> dict:
    """`extract(path)` in a child limited to `max_bytes` of address space; its one line, peak bytes, seconds.

    A child that dies (the limit reached inside a C library) reports its exit code as the line."""
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(max_bytes)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0 or not done.stdout.strip():
        return {"line": f"exit {done.returncode}: {done.stderr.strip()[-300:]}", "ok": False, "peak": 0, "seconds": 0}
    return json.loads(done.stdout.strip().splitlines()[-1])
