"""One window per data folder: a lock file says whether a window is open, and a local socket
lets a second `chinwag` bring that window to the front instead of opening another.

Two windows on the same data folder would each think they own every chat (streaming
repairs, settings, the last conversation).
"""

import hashlib
import os
from pathlib import Path

from app.core.serving import WINDOW_LOCK  # one name for the lock: `chinwag serve` checks it too
from engine.errors import ChinwagError

RAISE_REQUEST = b"raise\n"
RAISED = b"raised\n"  # the window's answer: whatever else holds the lock or the name is not Chinwag
CONNECT_TIMEOUT_MS = 1000
ANSWER_TIMEOUT_MS = 3000  # a window busy for a moment (weights loading) still answers in time


class WindowLock:
    """Held by the one window open on a data folder, for as long as it is open."""

    def __init__(self, folder: Path):
        import fcntl

        from engine.paths import FILE_MODE

        self.path = Path(folder) / WINDOW_LOCK
        try:
            self.fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
        except OSError as e:
            raise ChinwagError(f"cannot open {self.path}: {e.strerror or e}") from e
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise ChinwagError(
                f"Chinwag is already open on the data folder {folder}: use that window (one window per data folder)"
            ) from None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def server_name(folder: Path) -> str:
    """The local socket's name for a data folder (short: socket paths are limited)."""
    digest = hashlib.sha1(str(Path(folder).resolve()).encode()).hexdigest()[:16]
    return f"chinwag-{os.getuid()}-{digest}"


def serve_raise_requests(window, folder: Path):
    """Listen for a second `chinwag` on this data folder and bring window to the front.
    Returns the server (keep a reference); call only while holding the WindowLock."""
    from PySide6.QtNetwork import QLocalServer

    name = server_name(folder)
    QLocalServer.removeServer(name)  # a stale socket of a crashed window: we hold the lock
    server = QLocalServer(window)
    server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)

    def on_connection():
        while server.hasPendingConnections():
            connection = server.nextPendingConnection()
            # The asker closes once it has the answer: closing first could lose the answer.
            connection.disconnected.connect(connection.deleteLater)
            connection.write(RAISED)
            connection.flush()
            window.showNormal()
            window.raise_()
            window.activateWindow()

    server.newConnection.connect(on_connection)
    server.listen(name)
    return server


def ask_window_to_raise(folder: Path) -> bool:
    """Ask the window open on this data folder to come to the front; False unless a Chinwag
    window answered that it did (another program may hold the lock, or listen on the name)."""
    from PySide6.QtNetwork import QLocalSocket

    socket = QLocalSocket()
    socket.connectToServer(server_name(folder))
    if not socket.waitForConnected(CONNECT_TIMEOUT_MS):
        return False
    socket.write(RAISE_REQUEST)
    socket.waitForBytesWritten(CONNECT_TIMEOUT_MS)
    answer = b""
    while len(answer) < len(RAISED):
        # The answer may be in the buffer already (waitForReadyRead waits for more).
        if not socket.bytesAvailable() and not socket.waitForReadyRead(ANSWER_TIMEOUT_MS):
            break
        answer += bytes(socket.read(len(RAISED) - len(answer)).data())
    socket.disconnectFromServer()
    return answer == RAISED
