"""`chinwag serve` beside another server or the open window on the same data folder: refused in one
line that says who and where, before a model loads (a second model, the same kv/); it says where it
serves while it does."""

import asyncio
import json
import os

from app.cli.main import main
from app.core import serving
from engine import paths
from tests.app.core.test_serving import other_process, write  # noqa: F401 (fixture)


def test_serve_beside_another_server_is_refused_with_where_it_is(other_process, tiny_model_path, capsys):  # noqa: F811
    write(other_process, serving.WINDOW, "http://127.0.0.1:8080/v1")
    assert main(["serve", "--port", "0", "--model", str(tiny_model_path)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert (
        f"the Chinwag window (pid {other_process}) already serves this data folder at http://127.0.0.1:8080/v1"
        in lines[0]
    )


def test_serve_beside_the_open_window_is_refused(tiny_model_path, capsys):
    from app.gui.single_instance import WindowLock

    lock = WindowLock(paths.data_dir())
    try:
        assert main(["serve", "--port", "0", "--model", str(tiny_model_path)]) == 2
    finally:
        lock.release()
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert "the Chinwag window is open on this data folder: serve from it (File › Server…)" in line


def test_a_stale_record_is_ignored_and_serving_says_where_it_is(tiny_model_path, monkeypatch, capsys):
    from app.server import run

    write(2**22 + 12345)  # no such process: a server that crashed
    real, seen = run.serve_forever, {}

    async def serve_once(config, engine, ready=None, stop=None):  # the real server, stopped once it listens
        stop = asyncio.Event()

        def listening(server):
            ready(server)
            seen["record"] = json.loads((paths.data_dir() / serving.SERVING_FILE).read_text())
            stop.set()

        await real(config, engine, listening, stop)

    monkeypatch.setattr(run, "serve_forever", serve_once)
    assert main(["serve", "--port", "0", "--model", str(tiny_model_path)]) == 0
    record = seen["record"]
    assert record["by"] == "chinwag serve" and record["pid"] == os.getpid()
    assert record["url"].startswith("http://127.0.0.1:") and record["url"] in capsys.readouterr().out
    assert not (paths.data_dir() / serving.SERVING_FILE).exists()  # gone when it stops
