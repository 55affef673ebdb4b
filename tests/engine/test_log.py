"""chinwag.log under hostile files and several processes: never blocks, never spills tracebacks."""

import os
import subprocess
import sys
import threading
from pathlib import Path

from engine import log

ROOT = Path(__file__).resolve().parents[2]

WRITER = """
import logging, sys
sys.path.insert(0, {root!r})
from engine import log
log.LOG_MAX_BYTES = 300  # rotate every few lines, so the processes rotate over each other
log.setup()
for i in range(1500):
    logging.getLogger("chinwag").warning("process %s line %s %s", sys.argv[1], i, "x" * 40)
"""


def test_a_fifo_as_the_log_does_not_block_setup(chinwag_home):
    os.mkfifo(chinwag_home / "chinwag.log")
    result = []
    worker = threading.Thread(target=lambda: result.append(log.setup()), daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "setup() blocked on a named pipe"
    assert result == [None]  # no log file: bugs go to stderr instead
    log.setup()  # the next call is as quick


def test_processes_rotating_the_log_at_once_print_no_logging_errors(chinwag_home, tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(root=str(ROOT)))
    procs = [
        subprocess.Popen([sys.executable, str(script), str(n)], stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        for n in range(6)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert not any("Logging error" in e or "Traceback" in e for e in errors), errors
    assert (chinwag_home / "chinwag.log").is_file()
