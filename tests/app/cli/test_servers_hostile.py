"""`chinwag servers` with a hostile server: what it sends never reaches the terminal raw."""

import json

import pytest

from app.cli.main import main
from tests.remote_standin import StandIn

HOSTILE_IDS = ["evil\x1b]0;pwned\x07model", "two\nlines", "bell\x07\x1b[2J", "fine"]


@pytest.fixture(autouse=True)
def no_keychain(monkeypatch):
    monkeypatch.setenv("CHINWAG_KEYRING", "0")


def test_model_ids_with_escape_sequences_are_printed_harmless(capsys):
    body = json.dumps({"object": "list", "data": [{"id": i, "object": "model"} for i in HOSTILE_IDS]}).encode()
    with StandIn(models_body=body) as s:
        assert main(["servers", "add", "lab", s.url]) == 0
        added = capsys.readouterr().out
        assert main(["servers", "list"]) == 0
        listed = capsys.readouterr().out
        assert main(["servers", "list", "--json"]) == 0
        as_json = capsys.readouterr().out
    for out in (added, listed, as_json):
        assert "\x1b" not in out and "\x07" not in out, out
    assert "evil ]0;pwned model" in listed and "two lines" in listed
    assert len(listed.splitlines()) == 1  # one server, one line: no id breaks the table
    assert json.loads(as_json)[0]["models"] == HOSTILE_IDS  # JSON keeps them exactly, escaped


def test_a_server_without_models_is_named_not_listed_as_an_empty_model_id(capsys):
    import socket

    from engine.remote import servers

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    servers.add_server("gone", f"http://127.0.0.1:{port}/v1")
    assert main(["models"]) == 0
    [row] = [line for line in capsys.readouterr().out.splitlines() if "gone" in line]
    assert row.startswith("gone (server)") and "unreachable" in row and "gone/" not in row
