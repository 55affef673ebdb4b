"""serving.json: who serves the API on a data folder; a dead process's record is ignored."""

import json
import os
import subprocess
import sys

import pytest

from app.core import serving
from engine import paths


@pytest.fixture
def other_process():
    """A live process that is not this one (its pid goes in a record)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield child.pid
    child.kill()
    child.wait()


def write(pid: int, by=serving.CLI, url="http://127.0.0.1:8080/v1"):
    (paths.data_dir() / serving.SERVING_FILE).write_text(json.dumps({"by": by, "pid": pid, "url": url}))


def test_another_live_server_is_named_with_its_pid_and_address(other_process):
    write(other_process)
    found = serving.current()
    assert found == serving.Serving(serving.CLI, other_process, "http://127.0.0.1:8080/v1")
    assert (
        found.line()
        == f"chinwag serve (pid {other_process}) already serves this data folder at http://127.0.0.1:8080/v1"
    )
    serving.release()  # not ours: left alone
    assert serving.current() == found


def test_a_dead_processs_record_and_our_own_are_ignored():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    write(gone.pid)
    assert serving.current() is None  # a crashed server's record says nothing
    serving.claim(serving.WINDOW, "http://127.0.0.1:9000/v1")
    assert json.loads((paths.data_dir() / serving.SERVING_FILE).read_text())["pid"] == os.getpid()
    assert serving.current() is None  # this process is not "another" server
    serving.release()
    assert not (paths.data_dir() / serving.SERVING_FILE).exists()


@pytest.mark.parametrize("text", ["", "{", "[]", '{"by": "x"}', '{"by": "x", "pid": "abc", "url": "u"}'])
def test_an_unreadable_record_is_nobody(text):
    (paths.data_dir() / serving.SERVING_FILE).write_text(text)
    assert serving.current() is None


def test_an_open_window_is_seen_through_its_lock():
    from app.gui.single_instance import WindowLock

    assert not serving.window_open()
    lock = WindowLock(paths.data_dir())
    try:
        assert serving.window_open()
    finally:
        lock.release()
    assert not serving.window_open()
