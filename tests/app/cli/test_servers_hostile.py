"""`chinwag servers` (and chats through a server) with hostile input: what a server sends never
reaches the terminal raw, an API key never shows, and a URL, key or file nothing can use is one
line (exit 2) before anything is saved."""

import io
import json
import os
from pathlib import Path

import pytest

from app.cli.main import main
from tests.remote_standin import StandIn, chunk

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


def test_a_reply_with_escape_sequences_reaches_the_terminal_harmless_and_is_kept_as_sent(monkeypatch, capsys):
    from app.core.store import Store

    sent = "Hi\x1b]0;pwned\x07 there\x1b[2J\r\nnext\x9b31m\tline"
    events = [chunk(sent[:4]), chunk(sent[4:]), chunk(finish="stop"), b"data: [DONE]\n\n"]  # ESC ] split apart
    with StandIn(script=lambda b, h: events) as s:
        assert main(["servers", "add", "lab", s.url]) == 0
        capsys.readouterr()
        monkeypatch.setattr("sys.stdin", io.StringIO("hi\n/exit\n"))
        assert main(["chat", "--model", "lab/scripted"]) == 0
    out = capsys.readouterr().out
    assert not set(out) & {"\x1b", "\x07", "\x9b", "\r"}, repr(out)
    assert "there" in out and "\nnext" in out and "\tline" in out  # newlines and tabs stay
    with Store() as store:
        [conv] = store.list_conversations()
        assert store.get_conversation(conv.id).messages[-1].content == sent  # what is saved is what was sent


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


# --- API keys never leak ----------------------------------------------------------------------

KEY = "sk-live-0123456789abcdef"


def files_text(folder: Path) -> str:
    """Every byte under the data folder (database, WAL, log, exports) as text."""
    return "".join(p.read_bytes().decode("latin-1") for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("given", [KEY, KEY + "\n"], ids=["key", "key with a trailing newline"])
def test_a_server_echoing_the_key_in_its_errors_never_shows_it(monkeypatch, capsys, chinwag_home, tmp_path, given):
    monkeypatch.setenv("LAB_KEY", given)
    with StandIn(echo_auth=True) as s:
        assert main(["servers", "add", "lab", s.url, "--api-key-env", "LAB_KEY"]) == 0
        assert main(["servers", "list"]) == 0
        assert main(["servers", "list", "--json"]) == 0
        assert main(["models"]) == 0
        out = capsys.readouterr()
        assert "Bearer [redacted]" in out.err and "401" in out.err
        script = tmp_path / "chat.json"
        script.write_text(json.dumps({"system": "", "turns": ["hi"]}))
        assert main(["replay", str(script), "--model", "lab/chat"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "server lab" in err and "API key" in err
        assert main(["replay", str(script), "--model", f"{s.url}#chat"]) == 2  # the saved server's key is used
    for text in (out.out, out.err, err, files_text(chinwag_home).replace(json.dumps({"lab": KEY}, indent=2), "")):
        assert KEY not in text


def echo_mid_reply(body, headers):
    """A reply, then an error event (and then malformed data) quoting the request's Authorization header."""
    auth = headers.get("Authorization", "")
    yield chunk("Partial")
    yield f"data: {json.dumps({'error': {'message': f'upstream refused {auth}'}})}\n\n".encode()


def test_a_key_echoed_mid_reply_stays_out_of_stats_database_and_exports(monkeypatch, capsys, chinwag_home, tmp_path):
    from app.core.store import Store

    monkeypatch.setenv("LAB_KEY", KEY)
    with StandIn(script=echo_mid_reply) as s:
        assert main(["servers", "add", "lab", s.url, "--api-key-env", "LAB_KEY"]) == 0
        monkeypatch.setattr("sys.stdin", io.StringIO("hi\n/exit\n"))
        assert main(["chat", "--model", "lab/scripted"]) == 0
    out = capsys.readouterr()
    with Store() as store:
        [conv] = store.list_conversations()
        reply = store.get_conversation(conv.id).messages[-1]
    assert reply.content == "Partial" and "failed mid-reply: upstream refused Bearer [redacted]" in reply.stats["error"]
    assert out.err.splitlines() == [f"chinwag: error: {reply.stats['error']}"]  # the terminal says why, redacted
    assert main(["export", conv.id, "-o", str(chinwag_home / "out.json")]) == 0
    assert main(["export", conv.id, "-o", str(chinwag_home / "out.md")]) == 0
    for text in (out.out, out.err, files_text(chinwag_home).replace(json.dumps({"lab": KEY}, indent=2), "")):
        assert KEY not in text


def test_a_reply_a_server_stopped_sending_says_why_in_one_line_naming_the_figure(monkeypatch, capsys):
    from app.core.store import Store
    from engine.remote import errors

    monkeypatch.setattr(errors, "READ_TIMEOUT_S", 3.0)  # the stall is 30 s; the first piece comes well within 3
    with StandIn() as s:
        assert main(["servers", "add", "lab", s.url]) == 0
        capsys.readouterr()
        monkeypatch.setattr("sys.stdin", io.StringIO("hi\n/exit\n"))
        assert main(["chat", "--model", "lab/stall"]) == 0  # the chat goes on; the reply is kept
        s.release.set()
    out = capsys.readouterr()
    assert "Before the stall" in out.out and "cancelled]" in out.out
    assert out.err.splitlines() == ["chinwag: error: server lab: stopped sending for 3 s (read timed out)"]
    with Store() as store:
        [conv] = store.list_conversations()
        reply = store.get_conversation(conv.id).messages[-1]
    assert reply.content == "Before the stall" and reply.status == "stopped"


def test_a_key_with_a_trailing_newline_is_stripped_and_works(monkeypatch, capsys, chinwag_home):
    from engine.remote import servers

    monkeypatch.setenv("LAB_KEY", KEY + "\n")
    with StandIn(api_key=KEY) as s:
        assert main(["servers", "add", "lab", s.url, "--api-key-env", "LAB_KEY"]) == 0
        assert servers.get_server("lab").api_key == KEY
        capsys.readouterr()
        assert main(["servers", "list", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)[0]["status"] == "reachable"


@pytest.mark.parametrize("key", [f"sk-{KEY}\nsecond-line", f"{KEY}\x1b[2J", f"{KEY}-ключ", f"{KEY}\u200b"])
def test_a_key_a_header_cannot_carry_is_one_line_and_nothing_is_saved(monkeypatch, capsys, chinwag_home, key):
    monkeypatch.setenv("LAB_KEY", key)
    assert main(["servers", "add", "lab", "http://127.0.0.1:9/v1", "--api-key-env", "LAB_KEY"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "the API key in $LAB_KEY has a" in err
    assert "an API key is plain ASCII on one line" in err
    assert KEY not in err and not (chinwag_home / "servers.json").exists()


def test_a_saved_key_a_header_cannot_carry_is_one_line_when_used(capsys, chinwag_home):
    from engine.remote import servers

    with StandIn() as s:
        servers.add_server("lab", s.url)
        servers.set_api_key("lab", f"{KEY}-ключ")  # saved by an older Chinwag, or by hand
        assert main(["servers", "list"]) == 0
        assert "the saved API key of server lab has a non-ASCII character" in capsys.readouterr().out
        assert main(["replay", str(_script(chinwag_home)), "--model", "lab/chat"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "non-ASCII" in err and KEY not in err


def _script(folder: Path) -> Path:
    path = folder / "script.json"
    path.write_text(json.dumps({"system": "", "turns": ["hi"]}))
    return path


@pytest.mark.parametrize("param", ["api_key", "key", "token", "access_token", "password", "sig", "X-Api-Key"])
def test_a_url_with_a_secret_in_its_query_is_refused_before_anything_keeps_it(capsys, chinwag_home, param):
    with StandIn() as s:
        spec = f"{s.url}?{param}=SECRET123&x=1#chat"
        assert main(["replay", str(_script(chinwag_home)), "--model", spec]) == 2
        err = capsys.readouterr().err
        assert "chinwag servers add NAME URL --api-key-env VAR" in err and f"{param}=…" in err
        assert main(["servers", "add", "lab", spec.partition("#")[0]]) == 2
        err += capsys.readouterr().err
    assert "SECRET123" not in err + files_text(chinwag_home) and not (chinwag_home / "servers.json").exists()
    assert not s.requests  # nothing was sent either


# --- URLs that urlsplit, IDNA or httpx refuse ------------------------------------------------

BAD_URLS = [
    "http://[::1",
    "http://[::1]:99999/v1",
    "http://host:port/v1",
    "http://xn--/v1",
    "http://xn--zz/v1",
    "http://☃.net/v1",
    "http://\u200b/v1",
    "http://999.1.1.1/v1",
    "http://a b/v1",
    "http://a\tb/v1",
    "http://ok/v1\x00",
    "http:///v1",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_url_nothing_can_use_is_one_line_before_anything_is_saved(capsys, chinwag_home, url):
    from engine.remote import servers

    servers.add_server("kept", "http://127.0.0.1:9/v1")
    before = (chinwag_home / "servers.json").read_bytes()
    assert main(["servers", "add", "lab", url]) == 2
    assert main(["replay", str(_script(chinwag_home)), "--model", f"{url}#chat"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 2 and err.count("not a server URL") == 2, err
    assert (chinwag_home / "servers.json").read_bytes() == before
    log = chinwag_home / "chinwag.log"
    assert not log.exists() or "Traceback" not in log.read_text()


def test_a_hand_edited_bad_url_in_servers_json_is_one_unreachable_row(capsys, chinwag_home):
    (chinwag_home / "servers.json").write_text(json.dumps({"servers": [{"name": "odd", "url": "http://xn--/v1"}]}))
    assert main(["models"]) == 0
    [row] = [line for line in capsys.readouterr().out.splitlines() if "odd" in line]
    assert "unreachable" in row and "not a server URL" in row
    assert main(["servers", "list"]) == 0


# --- servers.json and the key file as a named pipe or a link to /dev/zero -----------------------


@pytest.mark.parametrize("which", ["servers.json", "server-keys.json"])
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_saved_list_that_is_not_a_file_is_one_line_and_never_blocks(capsys, chinwag_home, which, kind):
    from engine.remote import servers

    servers.add_server("lab", "http://127.0.0.1:9/v1", KEY)
    path = chinwag_home / which
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    what = "a named pipe" if kind == "fifo" else "a device"
    for argv in (["servers", "list"], ["servers", "add", "x", "http://127.0.0.1:9/v1"], ["servers", "remove", "lab"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and f"cannot read {path}" in err and what in err
    # `chinwag models` (and the Model menu) still lists the local models; one row says why no server is.
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    [row] = [r for r in out.splitlines() if r.startswith("servers.json (server)")]
    assert "unusable" in row and f"cannot read {path}" in row and what in row
    assert len(out.splitlines()) > 1  # the local models' rows
    assert path.is_fifo() if kind == "fifo" else path.is_symlink()  # left as it was
    if which == "server-keys.json":  # the list was not changed by the remove that failed
        assert "lab" in (chinwag_home / "servers.json").read_text()


def test_a_saved_list_that_is_huge_is_one_line(capsys, chinwag_home):
    (chinwag_home / "servers.json").write_text(" " * (2 << 20))
    assert main(["servers", "list"]) == 2
    assert "it is over 1,048,576 bytes" in capsys.readouterr().err


def test_a_server_answering_one_byte_at_a_time_holds_no_listing(monkeypatch, capsys):
    import time

    from engine.remote import servers

    monkeypatch.setattr(servers, "LIST_TIMEOUT_S", 1.0)
    body = json.dumps({"data": [{"id": "chat"}]}).encode()  # 30 bytes at 0.5 s each: 15 s if read per byte
    with StandIn(models_body=body, models_drip_s=0.5) as s:
        for argv in (["servers", "add", "slow", s.url], ["servers", "list"], ["models"]):
            started = time.monotonic()
            assert main(argv) == 0, argv
            assert time.monotonic() - started < 10, argv
            out = capsys.readouterr()
            assert "did not answer within 1 s" in out.out + out.err, argv


def test_a_model_list_nested_a_million_deep_keeps_chinwag_models_working(capsys):
    with StandIn(models_body=b"[" * 1_000_000) as s:
        assert main(["servers", "add", "deep", s.url]) == 0
        assert main(["models"]) == 0
    [row] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("deep")]
    assert "unusable" in row and "did not answer an OpenAI model list" in row  # it answered, with no list


def test_a_stream_of_the_wrong_shape_is_exit_2_and_one_line_naming_the_server(capsys, chinwag_home):
    with StandIn(script=lambda b, h: [b'data: {"choices": {"0": "x"}}\n\n']) as s:
        assert main(["servers", "add", "odd", s.url]) == 0
        capsys.readouterr()
        assert main(["replay", str(_script(chinwag_home)), "--model", "odd/scripted"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("chinwag: error: server odd: sent a stream event of the wrong shape")


def test_a_replay_turn_a_server_cuts_short_stops_the_replay_with_one_line_and_exit_2(tmp_path, capsys):
    import itertools

    script = tmp_path / "chat.json"
    script.write_text(json.dumps({"turns": ["hi", "and then?"]}))
    with StandIn(script=lambda b, h: itertools.repeat(chunk("x"))) as s:  # ignores max_tokens
        assert main(["replay", str(script), "--model", f"{s.url}#scripted", "--max-tokens", "5"]) == 2
    captured = capsys.readouterr()
    [turn] = [json.loads(line) for line in captured.out.splitlines()]  # the cut turn, and no later one
    assert turn["turn"] == 0 and "kept sending past max_tokens (5)" in turn["error"]
    [line] = captured.err.splitlines()
    assert line.startswith("chinwag: error: turn 0: server 127.0.0.1:") and "past max_tokens (5)" in line


def test_token_counts_past_a_float_are_not_a_bug_in_chat_or_replay(monkeypatch, capsys, tmp_path):
    """A usage event counting 10**400 tokens ended `chinwag chat` and `replay` as "a bug" (exit 1),
    the reply marked failed."""
    from app.core.store import Store

    huge = json.dumps({"choices": [], "usage": {"prompt_tokens": 10**400, "completion_tokens": 10**400}})
    events = [chunk("Hi"), f"data: {huge}\n\n".encode(), chunk(finish="stop"), b"data: [DONE]\n\n"]
    script = tmp_path / "chat.json"
    script.write_text(json.dumps({"system": "", "turns": ["hi"]}))
    with StandIn(script=lambda b, h: events) as s:
        monkeypatch.setattr("sys.stdin", io.StringIO("hi\n/exit\n"))
        assert main(["chat", "--model", f"{s.url}#scripted", "--no-tools"]) == 0
        assert main(["replay", str(script), "--model", f"{s.url}#scripted"]) == 0
    out = capsys.readouterr()
    assert "bug" not in out.err and out.out.count("Hi") >= 2
    with Store() as store:
        [conv] = store.list_conversations()
        reply = store.get_conversation(conv.id).messages[-1]
    assert (reply.content, reply.status) == ("Hi", "complete")


def test_a_lone_surrogate_in_a_servers_tool_call_is_not_a_bug(monkeypatch, capsys, chinwag_home):
    """JSON's "\\ud800" in a tool call's arguments reached the MCP server as a string no UTF-8 holds:
    the tool server's connection broke and `chinwag chat` ended as a bug (exit 1)."""
    from tests.tools_servers.launch import stdio_entry

    (chinwag_home / "mcp.json").write_text(json.dumps({"mcpServers": {"calc": stdio_entry("calculator")}}))
    call = {"index": 0, "id": "c", "function": {"name": "add", "arguments": '{"a": "\\ud800", "b": 1}'}}
    asked = f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'tool_calls': [call]}}]})}\n\n".encode()

    def script(body, headers):
        if body["messages"][-1]["role"] == "tool":
            return [chunk("Done"), chunk(finish="stop"), b"data: [DONE]\n\n"]
        return [asked, chunk(finish="tool_calls"), b"data: [DONE]\n\n"]

    with StandIn(script=script) as s:
        monkeypatch.setattr("sys.stdin", io.StringIO("add them\n/exit\n"))
        assert main(["chat", "--model", f"{s.url}#scripted", "--allow-tools"]) == 0
    out = capsys.readouterr()
    assert "bug" not in out.err and "stopped" not in out.out and "Done" in out.out


def test_a_lone_surrogate_in_an_error_mid_reply_keeps_the_reply_and_is_not_a_bug(monkeypatch, capsys):
    """The error line could not be stored: `chinwag chat` ended as a bug (exit 1), the reply lost."""
    from app.core.store import Store

    events = [chunk("Partial"), b'data: {"error": {"message": "bad \\ud800 thing"}}\n\n']
    with StandIn(script=lambda b, h: events) as s:
        monkeypatch.setattr("sys.stdin", io.StringIO("hi\n/exit\n"))
        assert main(["chat", "--model", f"{s.url}#scripted", "--no-tools"]) == 0
    assert "bug" not in capsys.readouterr().err
    with Store() as store:
        [conv] = store.list_conversations()
        reply = store.get_conversation(conv.id).messages[-1]
    assert (reply.content, reply.status) == ("Partial", "failed")
    assert reply.stats["error"].endswith("failed mid-reply: bad \ufffd thing")
