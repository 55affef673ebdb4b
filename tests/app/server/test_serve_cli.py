"""`chinwag serve` as a process: it prints its URL, serves, and SIGTERM/SIGINT stop it cleanly, saving the caches."""

import os
import re
import signal
import subprocess
import sys

import httpx
import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_server_and_saves_the_caches(sig, tiny_model_path, chinwag_home):
    env = {**os.environ, "CHINWAG_HOME": str(chinwag_home)}
    cmd = [sys.executable, "-m", "app.cli.main", "serve", "--model", str(tiny_model_path), "--port", "0"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/v1", line).group(0)
        body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3}
        assert httpx.post(url + "/chat/completions", json=body, timeout=60).status_code == 200
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "caches saved" in proc.stderr.read()
    assert list((chinwag_home / "kv").rglob("*.safetensors"))  # the conversation's cache, for the next start
    assert (chinwag_home / "server_conversations.json").exists()
