"""The remote backend against a stdlib stand-in server: streaming, history, and every failure."""

import asyncio
import json
import logging
import os
import stat

import pytest

from app.cli.main import main
from engine import ChinwagError, Engine, GenerationParams, TextDelta, TurnStats
from engine.backend import StopSignal
from engine.remote import backend as remote
from engine.remote import errors, servers, urls
from engine.remote.spec import resolve
from tests.remote_standin import MODELS, StandIn


@pytest.fixture(autouse=True)
def no_keychain(monkeypatch):
    """Never touch the real keychain of the machine running the tests."""
    monkeypatch.setenv("CHINWAG_KEYRING", "0")


@pytest.fixture
def standin():
    with StandIn() as s:
        yield s


def collect(engine, conv, messages, params=None):
    async def go():
        text, stats, others = [], None, []
        async for ev in engine.chat(conv, messages, params or GenerationParams(temperature=0)):
            if isinstance(ev, TextDelta):
                text.append(ev.text)
            elif isinstance(ev, TurnStats):
                stats = ev
            else:
                others.append(ev)
        return "".join(text), stats, others

    return go()


def run_chat(spec, turns, params=None):
    """Load spec on a fresh Engine and chat turn by turn; returns [(reply, stats)]."""

    async def go():
        engine = Engine()
        out = []
        try:
            await engine.load_model(spec)
            messages = [{"role": "system", "content": "Be brief."}]
            for user in turns:
                messages.append({"role": "user", "content": user})
                text, stats, _ = await collect(engine, "c", messages, params)
                messages.append({"role": "assistant", "content": text})
                out.append((text, stats))
        finally:
            await engine.close()
        return out

    return asyncio.run(go())


def test_a_server_model_refuses_to_continue_a_reply_and_sends_nothing(standin):
    params = GenerationParams(temperature=0, max_tokens=3, continue_reply=True)
    with pytest.raises(ChinwagError, match="continued only by a model on this computer, not one on server"):
        run_chat(f"{standin.url}#chat", ["Hi"], params)
    assert not any(path.endswith("/chat/completions") for path, _, _ in standin.requests)


def test_stream_maps_text_usage_and_finish(standin):
    [(text, stats)] = run_chat(f"{standin.url}#chat", ["Hi"], GenerationParams(temperature=0, max_tokens=3))
    assert text == "Hello there #0"
    assert stats.finish_reason == "length" and stats.prompt_tokens == 20 and stats.generated_tokens == 3
    assert stats.ttft_s > 0 and stats.error == ""


def test_history_is_sent_byte_identical_and_reused_tokens_are_the_servers(standin):
    replies = run_chat(f"{standin.url}#chat", ["one", "two", "three"])
    assert [s.reused_tokens for _, s in replies] == [0, 10, 20]
    bodies = [json.loads(raw) for _, raw, _ in standin.requests]
    for prev, cur, (reply, _) in zip(bodies, bodies[1:], replies):
        assert cur["messages"][: len(prev["messages"])] == prev["messages"]
        assert cur["messages"][len(prev["messages"])] == {"role": "assistant", "content": reply}
    # Stable parameters: every request differs only in its messages.
    strip = [{k: v for k, v in b.items() if k != "messages"} for b in bodies]
    assert strip[0] == strip[1] == strip[2]


def test_sampling_settings_map_to_the_request(standin):
    params = GenerationParams(
        temperature=0.3, top_p=0.9, top_k=40, min_p=0.05, repetition_penalty=1.1, max_tokens=7, seed=42
    )
    run_chat(f"{standin.url}#chat", ["Hi"], params)
    body = standin.requests[0][2]
    assert {
        k: body[k] for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_tokens", "seed")
    } == {
        "temperature": 0.3,
        "top_p": 0.9,
        "top_k": 40,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "max_tokens": 7,
        "seed": 42,
    }
    assert body["stream"] is True and body["model"] == "chat"
    run_chat(f"{standin.url}#chat", ["Hi"], GenerationParams())
    assert not {"top_k", "min_p", "repetition_penalty", "seed"} & set(standin.requests[-1][2])


def test_reasoning_is_shown_as_a_think_block_and_sent_back_as_received(standin):
    replies = run_chat(f"{standin.url}#reasoning", ["2+2?", "and 3+3?"])
    assert replies[0][0] == "<think>Let me think. Done.</think>The answer is 4."
    second = standin.requests[1][2]["messages"]
    assert second[2] == {"role": "assistant", "content": "The answer is 4."}


def test_keepalive_comments_become_prefill_progress(standin):
    backend = remote.RemoteBackend(resolve(f"{standin.url}#keepalive"))
    seen = []

    async def go():
        stop = StopSignal()
        events = []
        async for ev in backend.chat(
            "c",
            [{"role": "user", "content": "hi"}],
            GenerationParams(),
            stop,
            progress=lambda done, total: seen.append((done, total)),
        ):
            events.append(ev)
        return events

    events = asyncio.run(go())
    assert seen == [(100, 300), (200, 300), (300, 300)]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello there #0"


def test_401_is_one_line_naming_the_server_and_never_the_key(monkeypatch, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    with StandIn(api_key="right-key") as s:
        monkeypatch.setenv("WRONG_KEY", "wrong-key-123")
        assert main(["servers", "add", "lab", s.url, "--api-key-env", "WRONG_KEY"]) == 0
        err = capsys.readouterr().err
        # It answered: not "not reachable" (seen in the window's menu too), and the key was refused.
        assert "lab answered, but cannot be used now" in err and "refused the API key" in err and "401" in err
        assert "wrong-key-123" not in err
        assert main(["servers", "list", "--json"]) == 0
        [row] = json.loads(capsys.readouterr().out)
        assert row["status"] == "unusable" and row["reason"].startswith("refused the API key (HTTP 401")
        with pytest.raises(ChinwagError) as e:
            run_chat("lab/chat", ["hi"])
        message = str(e.value)
        assert "server lab" in message and "API key" in message and "401" in message
        assert "wrong-key-123" not in message and "\n" not in message
        # The right key works and is sent as a bearer token.
        monkeypatch.setenv("RIGHT_KEY", "right-key")
        assert main(["servers", "remove", "lab"]) == 0
        assert main(["servers", "add", "lab", s.url, "--api-key-env", "RIGHT_KEY"]) == 0
        [(text, _)] = run_chat("lab/chat", ["hi"])
        assert text == "Hello there #0"
    for secret in ("wrong-key-123", "right-key"):
        assert secret not in caplog.text
        assert secret not in capsys.readouterr().out
        assert secret not in (servers.paths.data_dir() / servers.SERVERS_FILE).read_text()


def test_api_key_file_is_private_and_separate(chinwag_home):
    servers.add_server("box", "http://127.0.0.1:9/v1", "k-123")
    keys = chinwag_home / servers.KEYS_FILE
    assert stat.S_IMODE(os.stat(keys).st_mode) == 0o600
    assert json.loads(keys.read_text()) == {"box": "k-123"}
    assert "k-123" not in (chinwag_home / servers.SERVERS_FILE).read_text()
    assert "k-123" not in repr(servers.get_server("box"))
    servers.add_server("box2", "http://127.0.0.1:9", replace="box")  # renamed; the key moves along
    assert servers.get_server("box2").api_key == "k-123" and servers.get_server("box") is None
    servers.remove_server("box2")
    assert json.loads(keys.read_text()) == {}


def test_500_with_a_message(standin):
    with pytest.raises(ChinwagError, match=r"server 127\.0\.0\.1:\d+: HTTP 500: the GPU caught fire"):
        run_chat(f"{standin.url}#error-500", ["hi"])


def test_unknown_model_is_refused_by_name(standin):
    with pytest.raises(ChinwagError, match="has no model 'nope'; it serves: chat"):
        run_chat(f"{standin.url}#nope", ["hi"])


def test_malformed_sse_keeps_the_partial_reply_and_says_so(standin):
    [(text, stats)] = run_chat(f"{standin.url}#malformed", ["hi"])
    assert text == "Partial"
    assert stats.finish_reason == "error" and "malformed stream data" in stats.error
    with pytest.raises(ChinwagError, match="malformed stream data"):
        run_chat(f"{standin.url}#malformed-first", ["hi"])


def test_a_dropped_connection_keeps_the_reply_marked_stopped(standin):
    [(text, stats)] = run_chat(f"{standin.url}#drop", ["hi"])
    assert text == "Cut off"
    assert stats.finish_reason == "cancelled" and "server 127.0.0.1" in stats.error


def test_a_stalled_stream_times_out_with_a_clear_line(standin, monkeypatch):
    monkeypatch.setattr(errors, "READ_TIMEOUT_S", 0.5)
    [(text, stats)] = run_chat(f"{standin.url}#stall", ["hi"])
    assert text == "Before the stall"
    assert stats.finish_reason == "cancelled" and "stopped sending for 0.5 s (read timed out)" in stats.error


def test_stop_ends_a_stalled_or_streaming_reply_at_once(standin):
    async def go(model):
        engine = Engine()
        await engine.load_model(f"{standin.url}#{model}")
        text = []
        async for ev in engine.chat("c", [{"role": "user", "content": "hi"}]):
            if isinstance(ev, TextDelta):
                text.append(ev.text)
                if len(text) == 2 or model == "stall":
                    engine.stop("c")
            else:
                stats = ev
        await engine.close()
        return "".join(text), stats

    # A stalled read is interrupted (the stand-in would hold it for 30 s, then end without
    # a finish reason, an error); a stream ends within one token.
    for model in ("stall", "slow"):
        text, stats = asyncio.run(go(model))
        assert stats.finish_reason == "cancelled" and stats.error == ""
        assert text == {"stall": "Before the stall", "slow": " t0 t1"}[model]


def test_context_overflow_drops_the_oldest_turn_and_retries(standin):
    replies = run_chat(f"{standin.url}#overflow", ["one", "two"])
    assert replies[0][1].dropped_messages == 0
    assert replies[1][1].dropped_messages == 2
    assert [m["content"] for m in standin.requests[-1][2]["messages"]] == ["Be brief.", "two"]


def test_connection_refused_names_the_server():
    with pytest.raises(ChinwagError, match=r"connection refused at http://127\.0\.0\.1:9/v1"):
        run_chat("http://127.0.0.1:9", ["hi"])


def test_empty_models_body_means_default_model():
    with StandIn(models_body=b"") as s:
        servers.add_server("mlx", s.url)
        infos = servers.server_models()
        assert [(m.id, m.source, m.status, m.server) for m in infos] == [
            ("mlx/default_model", "server", "ready", "mlx")
        ]
        assert resolve(s.url).model == "default_model"


def test_models_lists_servers_with_reachability(standin, capsys):
    servers.add_server("lab", standin.url)
    servers.add_server("gone", "http://127.0.0.1:9")
    assert main(["models", "--json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out) if r["source"] == "server"]
    assert [r["id"] for r in rows if r["server"] == "lab"] == [f"lab/{m}" for m in MODELS]
    [gone] = [r for r in rows if r["server"] == "gone"]
    assert gone["status"] == "unusable" and gone["reason"].startswith("unreachable: connection refused")
    models = asyncio.run(Engine().list_models())
    assert {"lab/chat", "gone/"} <= {m.id for m in models}


def test_servers_cli_add_list_remove(standin, capsys):
    assert main(["servers", "add", "lab", standin.url.removesuffix("/v1")]) == 0
    assert "saved server lab" in capsys.readouterr().out
    assert main(["servers", "list", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["name"] == "lab" and row["url"] == standin.url and row["status"] == "reachable"
    assert row["has_api_key"] is False and "chat" in row["models"]
    assert main(["servers", "add", "lab", standin.url]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["servers", "add", "bad/name", standin.url]) == 2
    assert main(["servers", "add", "x", "ftp://host"]) == 2
    assert main(["servers", "add", "x", standin.url, "--api-key-env", "CHINWAG_TEST_UNSET"]) == 2
    assert "CHINWAG_TEST_UNSET" in capsys.readouterr().err
    assert main(["servers", "remove", "lab"]) == 0
    assert main(["servers", "remove", "lab"]) == 2
    capsys.readouterr()
    assert main(["servers", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_replay_through_a_saved_server_and_a_url(standin, tmp_path, capsys):
    script = tmp_path / "chat.json"
    script.write_text(json.dumps({"system": "", "turns": ["one", "two"]}))
    servers.add_server("lab", standin.url)
    for spec in ("lab/chat", f"{standin.url}#chat"):
        assert main(["replay", str(script), "--model", spec]) == 0
        turns = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [t["reply"] for t in turns] == ["Hello there #0", "Hello there #1"]
        assert [t["reused_tokens"] for t in turns] == [0, 10]
        assert turns[0]["prompt_ids"] == [] and turns[0]["reply_ids"] == []
    assert main(["replay", str(script), "--model", "lab/nope"]) == 2
    assert "server lab has no model 'nope'" in capsys.readouterr().err


def test_tls_to_a_plain_http_server_is_a_tls_error(standin):
    url = standin.url.replace("http://", "https://")
    with pytest.raises(ChinwagError, match=r"^server 127\.0\.0\.1:\d+: TLS error talking to https://127\.0\.0\.1"):
        run_chat(f"{url}#chat", ["hi"])


def test_the_local_engine_is_unaffected_by_a_failed_server(standin, tiny_model_path):
    async def go():
        engine = Engine()
        try:
            await engine.load_model(str(tiny_model_path))
            with pytest.raises(ChinwagError):
                await engine.load_model("http://127.0.0.1:9")
            assert engine.current_model.source != "server"  # the failed load kept the local model
            await engine.load_model(f"{standin.url}#error-500")
            with pytest.raises(ChinwagError, match="HTTP 500"):
                await collect(engine, "c", [{"role": "user", "content": "hi"}])
            await engine.load_model(str(tiny_model_path))
            text, stats, _ = await collect(
                engine, "c", [{"role": "user", "content": "hi"}], GenerationParams(temperature=0, max_tokens=3)
            )
            return stats
        finally:
            await engine.close()

    stats = asyncio.run(go())
    assert stats.generated_tokens == 3 and stats.kv_offset > 0


def test_credentials_in_a_url_are_refused():
    with pytest.raises(ChinwagError, match="user:password part"):
        servers.add_server("x", "http://me:secret@127.0.0.1:8080/v1")
    assert "secret" not in urls.display_url("http://me:secret@127.0.0.1:8080/v1")


def test_a_server_without_a_model_list_takes_a_named_model():
    with StandIn(models_endpoint=False) as s:
        [(text, _)] = run_chat(f"{s.url}#chat", ["hi"])
        assert text == "Hello there #0"
        with pytest.raises(ChinwagError, match=r"models is not there \(HTTP 404\); name the model"):
            run_chat(s.url, ["hi"])
        servers.add_server("bare", s.url)
        [info] = servers.server_models()
        assert info.status == "unusable" and "name the model" in info.reason


def test_chat_in_the_terminal_through_a_saved_server(standin, chinwag_home):
    import subprocess
    import sys

    servers.add_server("lab", standin.url)
    out = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "chat", "--model", "lab/chat", "--temperature", "0"],
        input="hi\nagain\n/exit\n",
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CHINWAG_HOME": str(chinwag_home), "CHINWAG_KEYRING": "0"},
    )
    assert out.returncode == 0, out.stderr
    assert "Chatting with chat on lab" in out.stdout
    assert "Hello there #0" in out.stdout and "Hello there #1" in out.stdout
    assert [json.loads(raw)["messages"][-1]["content"] for _, raw, _ in standin.requests] == ["hi", "again"]


def test_a_reply_from_an_earlier_session_is_sent_without_its_reasoning_block(standin):
    async def go():
        engine = Engine()  # a new session: it never saw these replies arrive
        try:
            await engine.load_model(f"{standin.url}#chat")
            history = [
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "<think>Let me think. Done.</think>The answer is 4."},
                {"role": "assistant", "content": "A <think> in the middle stays."},
                {"role": "user", "content": "and 3+3?"},
            ]
            return await collect(engine, "c", history)
        finally:
            await engine.close()

    asyncio.run(go())
    sent = [m["content"] for m in standin.requests[-1][2]["messages"]]
    assert sent == ["2+2?", "The answer is 4.", "A <think> in the middle stays.", "and 3+3?"]


@pytest.mark.parametrize(
    "error, expected",
    [
        (
            "[Errno -2] Name or service not known",
            "cannot resolve the host of http://studio.lan:8080/v1 (DNS lookup failed)",
        ),
        ("[Errno 8] nodename nor servname provided, or not known", "cannot resolve the host"),
        (
            "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed",
            "TLS error talking to http://studio.lan:8080/v1",
        ),
    ],
)
def test_connection_failures_are_named(error, expected):
    import httpx

    server = servers.Server("studio", "http://studio.lan:8080/v1")
    assert errors.describe_http_error(httpx.ConnectError(error), server).startswith(expected)
    assert "no answer from" in errors.describe_http_error(httpx.ConnectTimeout("timed out"), server)


def test_403_and_unknown_status_lines():
    assert errors.response_error(403, b'{"detail": "Forbidden"}').startswith("denied access (HTTP 403: Forbidden)")
    assert errors.response_error(502, b"") == "HTTP 502 with no message"
    assert errors.response_error(500, b"<html>Bad   Gateway</html>") == "HTTP 500: <html>Bad Gateway</html>"


def test_keepalive_comments_reach_the_engines_caller_as_prefill_progress(standin):
    from engine.types import PrefillProgress

    async def go():
        engine = Engine()
        try:
            await engine.load_model(f"{standin.url}#keepalive")
            return [ev async for ev in engine.chat("c", [{"role": "user", "content": "hi"}])]
        finally:
            await engine.close()

    events = asyncio.run(go())
    progress = [(e.done, e.total) for e in events if isinstance(e, PrefillProgress)]
    assert progress == [(100, 300), (200, 300), (300, 300)]
    assert isinstance(events[0], PrefillProgress) and isinstance(events[-1], TurnStats)
