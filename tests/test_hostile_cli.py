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

from app.cli import main
from app.store import Store

ROOT = Path(__file__).resolve().parent.parent


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
    from app import transcripts_cli

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
        proc = subprocess.run([sys.executable, "-m", "app.cli", "replay", str(script), "--model",
                               str(tiny_model_path), "--context-cap", "8"],
                              capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.splitlines() == [line for line in proc.stderr.splitlines() if line.startswith("chinwag: error:")]
        assert "terminate called" not in proc.stderr


def test_second_window_on_the_same_data_folder_is_refused(chinwag_home):
    from app.main import WindowLock
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
