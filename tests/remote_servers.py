"""Real mlx_lm.server subprocesses on free 127.0.0.1 ports, for the remote backend's tests."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
START_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlxServer:
    """`mlx_lm.server --model FOLDER`, alone or under `mlx.launch --backend ring -n N`."""

    def __init__(self, model: Path, log: Path, ranks: int = 0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        server = [
            str(BIN / "mlx_lm.server"),
            "--model",
            str(Path(model).resolve()),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        if ranks:
            server = [
                str(BIN / "mlx.launch"),
                "--backend",
                "ring",
                "-n",
                str(ranks),
                "--starting-port",
                str(free_port()),
                "--",
                *server,
            ]
        env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(log.parent / "no-hf-cache"))
        self.log = log
        self._log_file = open(log, "wb")
        # Its own process group, so stopping it also stops the ranks mlx.launch started.
        self.proc = subprocess.Popen(
            server, stdout=self._log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlx_lm.server exited with {self.proc.returncode}: {self.tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"mlx_lm.server did not answer in {START_TIMEOUT_S} s: {self.tail()}")

    def server_processes(self) -> int:
        """How many mlx_lm.server processes run in this server's process group (Linux /proc)."""
        count = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            pgrp = int(stat.rsplit(")", 1)[1].split()[2])
            if pgrp == self.proc.pid and b"mlx_lm.server" in cmdline and b"mlx.launch" not in cmdline:
                count += 1
        return count

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._log_file.close()


def mlx_launch_missing() -> str:
    """Why `mlx.launch --backend ring` cannot run here, or "" when it can."""
    if not (BIN / "mlx.launch").exists() and shutil.which("mlx.launch") is None:
        return "mlx.launch is not installed (it comes with mlx)"
    return ""
