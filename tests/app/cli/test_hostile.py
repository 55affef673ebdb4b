"""The command line under hostile targets and its own bugs: one line, exit 2 for bad input,
exit 1 and a traceback in chinwag.log for a bug, nothing replaced that is not a regular file."""

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.main import main
from app.core.store import Store

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def conv_id(chinwag_home):
    with Store() as store:
        conv = store.create_conversation(title="export me")
        store.add_message(conv.id, "user", "hello")
        return conv.id


def export_refused(capsys, conv_id, target, *needles):
    assert main(["export", conv_id, "--format", "md", "-o", str(target)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("chinwag: error: cannot write"), err
    for needle in needles:
        assert needle in err[0]
    return err[0]


def test_export_never_replaces_a_fifo_or_socket(tmp_path, capsys, conv_id):
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    export_refused(capsys, conv_id, fifo, "named pipe")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    sock_path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        export_refused(capsys, conv_id, sock_path, "socket")
        assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "sock"]  # no temp files left


def test_export_through_a_symlink_writes_its_regular_file(tmp_path, capsys, conv_id):
    real = tmp_path / "real.md"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.md"
    link.symlink_to(real)
    assert main(["export", conv_id, "-o", str(link)]) == 0
    assert link.is_symlink() and real.read_text().startswith("# export me")
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    dangling = tmp_path / "dangling.md"
    dangling.symlink_to(tmp_path / "missing" / "x.md")
    export_refused(capsys, conv_id, dangling, "symlink")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    to_fifo = tmp_path / "to-fifo.md"
    to_fifo.symlink_to(fifo)
    export_refused(capsys, conv_id, to_fifo, "named pipe")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_export_to_an_overlong_name_is_one_line(tmp_path, capsys, conv_id):
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    export_refused(capsys, conv_id, tmp_path / ("x" * 300 + ".md"), "too long")
    assert list(tmp_path.iterdir()) == []


def test_a_bug_is_logged_with_its_traceback_and_shown_as_one_line(chinwag_home, capsys, monkeypatch):
    from app.cli import transcripts as transcripts_cli

    def broken(args):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(transcripts_cli, "cmd_conversations", broken)
    assert main(["conversations"]) == 1
    err = capsys.readouterr().err.splitlines()
    log_path = chinwag_home / "chinwag.log"
    assert len(err) == 1 and "a bug in Chinwag" in err[0] and str(log_path) in err[0], err
    text = log_path.read_text()
    assert "Traceback" in text and "TypeError: unsupported operand" in text and "def broken" not in err[0]
    assert stat.S_IMODE(log_path.stat().st_mode) == 0o600
    # --verbose prints the traceback as well.
    assert main(["--verbose", "conversations"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_user_errors_are_not_logged_as_bugs(chinwag_home, capsys, tmp_path):
    assert main(["import-conversation", str(tmp_path / "missing.json")]) == 2
    assert "bug" not in capsys.readouterr().err
    log_path = chinwag_home / "chinwag.log"
    assert not log_path.exists() or "Traceback" not in log_path.read_text()


def test_error_exits_after_mlx_never_abort(tmp_path, tiny_model_path, chinwag_home):
    # Before: about half of these ended "terminate called without an active exception", status 134.
    script = tmp_path / "long.json"
    script.write_text(json.dumps({"turns": ["word " * 100]}))
    env = dict(os.environ, CHINWAG_HOME=str(chinwag_home))
    for _ in range(2):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "app.cli.main",
                "replay",
                str(script),
                "--model",
                str(tiny_model_path),
                "--context-cap",
                "8",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=ROOT,
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.splitlines() == [
            line for line in proc.stderr.splitlines() if line.startswith("chinwag: error:")
        ]
        assert "terminate called" not in proc.stderr


def test_second_window_on_the_same_data_folder_is_refused(chinwag_home):
    from app.gui.single_instance import WindowLock
    from engine.errors import ChinwagError

    first = WindowLock(chinwag_home)
    try:
        with pytest.raises(ChinwagError, match="already open") as info:
            WindowLock(chinwag_home)
        assert str(chinwag_home) in str(info.value) and "\n" not in str(info.value)
    finally:
        first.release()
    WindowLock(chinwag_home).release()  # free again once the first window closed
    assert stat.S_IMODE((chinwag_home / "window.lock").stat().st_mode) == 0o600


def test_models_table_never_prints_escape_sequences(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "evil\x1b[2Jfolder"
    folder.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    from engine.models import registry

    monkeypatch.setattr(registry, "_load_folders", lambda: [str(folder)])  # as if added earlier
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "evil" in out and "\x1b" not in out


@pytest.mark.parametrize(
    "argv", [["import", "{fifo}"], ["import-conversation", "{fifo}"], ["replay", "{fifo}", "--model", "nowhere"]]
)
def test_a_named_pipe_as_input_is_refused_not_waited_on(tmp_path, capsys, argv):
    import threading

    fifo = tmp_path / "input.pipe"
    os.mkfifo(fifo)

    def unblock():  # should the reader wait after all, end its wait (and fail the test) instead of hanging
        if not done.wait(10):
            with open(fifo, "wb"):
                pass

    done = threading.Event()
    threading.Thread(target=unblock, daemon=True).start()
    try:
        assert main([a.format(fifo=fifo) for a in argv]) == 2
    finally:
        done.set()
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("[")]
    assert len(err) == 1 and "named pipe" in err[0], err


def test_a_named_pipe_as_the_log_blocks_no_command(chinwag_home, tmp_path, monkeypatch, capsys):
    """A FIFO at chinwag.log: every command still runs (none waits for a reader of the pipe), and a
    bug's traceback goes to stderr instead, with its one line; the pipe is left as it was."""
    import logging
    import threading

    from app.cli import transcripts as transcripts_cli
    from engine import log

    # The stderr handler a bug installs here (no log file) goes with this test, not into later ones.
    monkeypatch.setattr(logging.getLogger(), "handlers", list(logging.getLogger().handlers))
    monkeypatch.setattr(log, "_handlers", dict(log._handlers))
    fifo = chinwag_home / "chinwag.log"
    os.mkfifo(fifo)
    done, waited = threading.Event(), []

    def unblock():  # should a command open the pipe after all, end each wait (and fail the test)
        done.wait(10)
        while not done.wait(0.5):
            waited.append(True)
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader lets a waiting open go on
            try:
                while os.read(reader, 1 << 16):
                    pass
            except BlockingIOError:  # read all there was
                pass
            finally:
                os.close(reader)

    threading.Thread(target=unblock, daemon=True).start()
    try:
        assert main(["conversations"]) == 0
        assert main(["import-conversation", str(tmp_path / "missing.json")]) == 2
        out = capsys.readouterr()
        assert out.out == "no conversations yet\n" and len(out.err.splitlines()) == 1
        monkeypatch.setattr(transcripts_cli, "cmd_conversations", lambda args: {}["missing"])
        assert main(["conversations"]) == 1
    finally:
        done.set()
    assert not waited, "a command waited for a reader of the named pipe"
    err = capsys.readouterr().err.splitlines()
    assert "Traceback (most recent call last):" in err and "a bug in Chinwag" in err[-1]
    assert "details were printed above" in err[-1]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.qt
def test_a_second_chinwag_brings_the_first_window_forward(qtbot, chinwag_home):
    from PySide6.QtWidgets import QWidget

    from app.gui.single_instance import ask_window_to_raise, serve_raise_requests

    class Window(QWidget):
        raised = 0

        def raise_(self):  # the offscreen platform cannot raise a window: count the request
            self.raised += 1

    window = Window()
    qtbot.addWidget(window)
    server = serve_raise_requests(window, chinwag_home)
    assert ask_from_another_process(qtbot, chinwag_home)  # another process in real life: it waits for the answer
    qtbot.waitUntil(lambda: window.raised == 1)
    server.close()
    assert not ask_window_to_raise(chinwag_home)  # no window: the caller says so instead


ASKER = """
import sys
sys.path.insert(0, {root!r})
from pathlib import Path
from PySide6.QtCore import QCoreApplication
app = QCoreApplication([])
from app.gui.single_instance import ask_window_to_raise
print(ask_window_to_raise(Path(sys.argv[1])))
"""


def ask_from_another_process(qtbot, folder) -> bool:
    """ask_window_to_raise from a second process, as a second `chinwag` runs it, while this
    process's event loop (the first window's) keeps running."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    asker = subprocess.Popen(
        [sys.executable, "-c", ASKER.format(root=str(ROOT)), str(folder)], stdout=subprocess.PIPE, text=True, env=env
    )
    qtbot.waitUntil(lambda: asker.poll() is not None, timeout=30000)
    return asker.stdout.read().strip() == "True"


def test_a_lock_held_by_another_program_is_not_a_window_brought_forward(qtbot, chinwag_home):
    """Another program holds window.lock and listens on the window's name without answering:
    no Chinwag window answered, so a second `chinwag` says the lock is held by another program
    and exits 2 (app/gui/main.py), instead of claiming it raised a window."""
    import fcntl

    from PySide6.QtNetwork import QLocalServer

    from app.gui.single_instance import server_name

    fd = os.open(chinwag_home / "window.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    rogue = QLocalServer()
    QLocalServer.removeServer(server_name(chinwag_home))
    assert rogue.listen(server_name(chinwag_home))
    try:
        assert ask_from_another_process(qtbot, chinwag_home) is False
        second = second_chinwag(qtbot, chinwag_home)
    finally:
        rogue.close()
        os.close(fd)
    assert second.returncode == 2, second.stderr
    message = (
        f"{chinwag_home / 'window.lock'} is locked, but no Chinwag window answered: "
        "another program holds it (close it, or set CHINWAG_HOME to another folder)"
    )
    offscreen = "This plugin does not support propagateSizeHints()"  # the test's platform, not Chinwag
    assert [line for line in second.stderr.splitlines() if line != offscreen] == [f"chinwag: error: {message}"]
    assert second.stdout.splitlines() == [f"BOX {message}"]  # the box says the same, and nothing was raised


SECOND = """
import sys
sys.path.insert(0, {root!r})
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
app = QApplication([])

def dismiss():  # the box that says why (the offscreen platform has nobody to click OK)
    box = QApplication.activeModalWidget()
    if box is not None:
        print("BOX " + box.text(), flush=True)
        box.accept()
    QTimer.singleShot(50, dismiss)

QTimer.singleShot(0, dismiss)
from app.gui.main import run_app
sys.exit(run_app([]))
"""


def second_chinwag(qtbot, folder) -> subprocess.CompletedProcess:
    """`chinwag` (the window) started on `folder` in another process, its message box dismissed."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", CHINWAG_HOME=str(folder))
    proc = subprocess.Popen(
        [sys.executable, "-c", SECOND.format(root=str(ROOT))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    qtbot.waitUntil(lambda: proc.poll() is not None, timeout=60000)
    out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_undecodable_and_nul_arguments_are_one_line(tmp_path, capsys, conv_id):
    # Bytes that are not UTF-8 reach argv as lone surrogates; SQLite cannot bind those.
    assert main(["conversations", "--search", "\udcff"]) == 0
    capsys.readouterr()
    # A NUL byte cannot come from a shell, but the same functions serve the window and scripts.
    for argv in (
        ["export", conv_id, "-o", str(tmp_path / "a\x00.md")],
        ["import-conversation", str(tmp_path / "a\x00.json")],
        ["import", str(tmp_path / "a\x00.gguf")],
        ["replay", str(tmp_path / "a\x00.json"), "--model", "x"],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and "bug" not in err[0], err


def test_lone_surrogates_in_a_replay_script_are_replaced_not_a_bug(tmp_path, tiny_model_path, capsys):
    script = tmp_path / "surrogates.json"
    script.write_text('{"system": "\\udfff", "turns": ["hi \\ud800 there", "again \\udcff"]}')
    assert main(["replay", str(script), "--model", str(tiny_model_path), "--max-tokens", "2"]) == 0
    turns = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [t["turn"] for t in turns] == [0, 1] and turns[1]["reused_tokens"] > 0
