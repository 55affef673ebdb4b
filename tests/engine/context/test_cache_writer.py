"""engine/context/cache_writer.py: one thread runs the jobs in order, and survives their failures."""

import logging
import threading

from engine.context.cache_writer import CacheWriter


def held(writer: CacheWriter) -> threading.Event:
    """Hold the writer's thread with a job of the test's until the event returned is set."""
    release, running = threading.Event(), threading.Event()

    def hold() -> None:
        running.set()
        release.wait(30)

    writer.submit(hold, "holding the writer")
    assert running.wait(30)
    return release


def test_jobs_run_in_order_on_a_thread_of_their_own():
    writer, ran = CacheWriter(), []
    for i in range(5):
        writer.submit(lambda i=i: ran.append((i, threading.current_thread().name)), f"job {i}")
    writer.flush()
    assert [i for i, _ in ran] == list(range(5))
    assert {name for _, name in ran} == {"chinwag-cache-writer"}
    assert not writer.busy


def test_a_full_disk_is_one_warning_and_the_next_job_runs(caplog):
    writer, ran = CacheWriter(), []

    def full() -> None:
        raise OSError(28, "No space left on device")

    with caplog.at_level(logging.WARNING):
        writer.submit(full, "saving the KV cache of a")
        writer.submit(lambda: ran.append("b"), "saving the KV cache of b")
        writer.flush()
    assert ran == ["b"]
    (record,) = [r for r in caplog.records if r.name == "engine.context.cache_writer"]
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert record.getMessage() == "saving the KV cache of a failed: [Errno 28] No space left on device"


def test_a_bug_in_a_job_is_logged_with_its_traceback_and_the_next_job_runs(caplog):
    writer, ran = CacheWriter(), []

    def bug() -> None:
        raise KeyError("layers")

    with caplog.at_level(logging.WARNING):
        writer.submit(bug, "saving the KV cache of a")
        writer.submit(lambda: ran.append("b"), "saving the KV cache of b")
        writer.flush()
    assert ran == ["b"]
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "saving the KV cache of a" in record.getMessage() and record.exc_info[0] is KeyError


def test_a_job_cancelled_before_it_starts_never_runs():
    writer, ran = CacheWriter(), []
    release = held(writer)
    job = writer.submit(lambda: ran.append("cancelled"), "a job")
    assert writer.cancel(job) and job.done.is_set()
    release.set()
    writer.submit(lambda: ran.append("next"), "the next job")
    writer.flush()
    assert ran == ["next"]


def test_cancelling_a_running_job_waits_until_it_is_done():
    writer, ran = CacheWriter(), []
    running, release = threading.Event(), threading.Event()

    def slow() -> None:
        running.set()
        release.wait(30)
        ran.append("slow")

    job = writer.submit(slow, "a slow job")
    assert running.wait(30)
    threading.Timer(0.2, release.set).start()
    assert not writer.cancel(job)
    assert ran == ["slow"]


def test_flush_waits_for_every_job_submitted():
    writer, ran = CacheWriter(), []
    release = held(writer)
    writer.submit(lambda: ran.append("queued"), "a job")
    threading.Timer(0.2, release.set).start()
    writer.flush()
    assert ran == ["queued"] and not writer.busy
