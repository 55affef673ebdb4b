"""One thread that writes evicted KV caches to disk, so the engine thread does not wait for it.

Saving a long chat's cache takes seconds (8K tokens of the starter: 378 MB, 1-2 s with the
fsync here); the engine thread only takes a Snapshot (engine/context/cache_file.py) and goes
on. Jobs run one at a time, in the order given; a job that fails is logged (an environment
error in one line, anything else as a bug with its traceback) and the next one runs: the
thread never dies. Jobs must call no MLX: its evaluation is not thread-safe.
"""

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine import log as chinwag_log
from engine.errors import ChinwagError

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Job:
    run: Callable[[], None]
    what: str  # for the log: "saving the KV cache of …"
    done: threading.Event = field(default_factory=threading.Event)
    started: bool = False  # under the writer's lock
    cancelled: bool = False


def _nothing() -> None:
    pass


class CacheWriter:
    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending: list[Job] = []  # submitted, not yet done
        self._thread: threading.Thread | None = None
        self.seconds = 0.0  # spent running jobs; written by the writer's thread only

    def submit(self, run: Callable[[], None], what: str) -> Job:
        job = Job(run, what)
        with self._lock:
            self._pending.append(job)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="chinwag-cache-writer", daemon=True)
                self._thread.start()
        self._jobs.put(job)
        return job

    def cancel(self, job: Job) -> bool:
        """Drop `job` if it has not started (True: it never runs); else wait until it is done (False)."""
        with self._lock:
            if not job.started:
                job.cancelled = True
                self._finish(job)
                return True
        job.done.wait()
        return False

    def flush(self) -> None:
        """Wait until every job submitted so far is done."""
        with self._lock:
            pending = list(self._pending)
        for job in pending:
            job.done.wait()

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._pending)

    def _finish(self, job: Job) -> None:  # under the lock
        if job in self._pending:
            self._pending.remove(job)
        job.run = _nothing  # lets go of what the job holds (a snapshot of hundreds of MB)
        job.done.set()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            with self._lock:
                if job.cancelled:
                    continue
                job.started = True
            began = time.perf_counter()
            try:
                job.run()
            except (ChinwagError, OSError, RuntimeError) as e:  # a full disk costs a re-prefill later
                log.warning("%s failed: %s", job.what, e)
            except Exception as e:  # noqa: BLE001 - a bug, logged with its traceback; the next job runs
                chinwag_log.report_bug(e, job.what)
            finally:
                self.seconds += time.perf_counter() - began
                with self._lock:
                    self._finish(job)
