"""`chinwag servers add` says where the API key really went: the keychain, or the 0600 file when the
keychain refused it."""

import socket
import stat

import pytest

from app.cli.main import main
from engine.remote import servers
from tests.keychains import LockedKeychain, MemoryKeychain, use_keychain


@pytest.fixture
def dead_url():
    with socket.socket() as s:  # a port nobody listens on: the add still saves, with a warning
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_a_key_in_the_keychain_is_reported_there(monkeypatch, capsys, dead_url):
    monkeypatch.setenv("LAB_KEY", "secret-1")
    with use_keychain(monkeypatch, MemoryKeychain()) as chain:
        assert main(["servers", "add", "lab", dead_url, "--api-key-env", "LAB_KEY"]) == 0
        out = capsys.readouterr().out
        assert "API key kept in the system keychain" in out and "secret-1" not in out
        assert chain.passwords == {(servers.KEYRING_SERVICE, "lab"): "secret-1"}
        assert not servers.keys_file().exists()


def test_a_key_the_keychain_refused_is_reported_in_the_file(monkeypatch, capsys, dead_url):
    monkeypatch.setenv("LAB_KEY", "secret-2")
    with use_keychain(monkeypatch, LockedKeychain()) as chain:
        assert main(["servers", "add", "lab", dead_url, "--api-key-env", "LAB_KEY"]) == 0
        out = capsys.readouterr().out
        assert f"API key kept in {servers.keys_file()} (readable only by you)" in out and servers.KEYCHAIN not in out
        assert chain.passwords == {}
        assert stat.S_IMODE(servers.keys_file().stat().st_mode) == 0o600
        # And the key is found there again, though a keychain answers reads.
        assert servers.get_server("lab").api_key == "secret-2"


def test_no_key_no_claim(monkeypatch, capsys, dead_url):
    with use_keychain(monkeypatch, MemoryKeychain()):
        assert main(["servers", "add", "lab", dead_url]) == 0
        assert "API key" not in capsys.readouterr().out
