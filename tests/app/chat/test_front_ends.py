"""The window, `chinwag chat` and `chinwag serve` run the same scripted turn (tests/app/chat/scripted_turn.py:
a document, a call to a real MCP server, the answer) through the one turn driver: the same messages
reach the engine and the same rows land in the store."""

import asyncio
import io
import json
import sys

import pytest

from app.core.store import Store
from engine.types import TurnOrigin
from tests.app.chat.scripted_turn import DOCUMENT, QUESTION, ScriptedEngine, check, check_engine, write_document
from tests.app.server.conftest import serve  # noqa: F401 (fixture)
from tests.app.tools.conftest import tiny_tools_model, tiny_tools_model_path  # noqa: F401 (fixtures)
from tests.app.tools.scripted import tool_call_ids
from tests.tools_servers.launch import stdio_entry


@pytest.fixture
def forced(tiny_tools_model):  # noqa: F811
    return tool_call_ids(tiny_tools_model[1], "add", '{"a": 2, "b": 3}')


def test_the_terminal_chat(chinwag_home, tmp_path, monkeypatch, capsys, tiny_tools_model_path, forced):  # noqa: F811
    from app.cli import chat
    from app.cli.main import main

    (chinwag_home / "mcp.json").write_text(json.dumps({"mcpServers": {"calc": stdio_entry("calculator")}}))
    engines: list[ScriptedEngine] = []
    monkeypatch.setattr(chat, "Engine", lambda **kw: engines.append(ScriptedEngine(forced, **kw)) or engines[-1])
    monkeypatch.setattr(sys, "stdin", io.StringIO(QUESTION + "\n"))
    argv = ["chat", "--model", str(tiny_tools_model_path), "--attach", write_document(tmp_path), "--allow-tools"]
    assert main([*argv, "--max-tokens", str(len(forced) + 4), "--temperature", "0"]) == 0
    assert "[add on calc (" in capsys.readouterr().out
    with Store() as store:
        (conv,) = store.list_conversations()
        check(engines[0].seen, store.get_conversation(conv.id).messages)
    assert set(engines[0].origins) == {TurnOrigin.TERMINAL}


def test_the_server(chinwag_home, serve, tiny_tools_model_path, forced):  # noqa: F811
    """The server runs no tool: the client (here the real MCP host and the openai client) runs the call and
    sends it back; the engine gets the same two turns. The client keeps the chat: the store gets nothing."""
    import openai

    from app.core.document_block import message_content
    from app.tools.client import ToolHost
    from app.tools.config import ServerConfig

    engine = ScriptedEngine(forced)
    running = serve(engine=engine, model=str(tiny_tools_model_path))
    entry = stdio_entry("calculator")

    async def client() -> str:
        host = ToolHost([ServerConfig("calc", entry["command"], tuple(entry["args"]))])
        await host.start()
        c = openai.AsyncOpenAI(base_url=running.url, api_key="none", max_retries=0, timeout=120)
        try:
            tools = [t.to_openai() for t in host.tools]
            options = {"model": "", "tools": tools, "max_tokens": len(forced) + 4, "temperature": 0}
            messages: list = [{"role": "user", "content": message_content(QUESTION, [DOCUMENT])}]
            first = (await c.chat.completions.create(messages=messages, **options)).choices[0]
            (call,) = first.message.tool_calls
            result = await host.call(host.find(call.function.name), json.loads(call.function.arguments))
            messages += [
                first.message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": result.text},
            ]
            second = (await c.chat.completions.create(messages=messages, **options)).choices[0]
            assert second.finish_reason in ("length", "stop") and not second.message.tool_calls
            return call.id
        finally:
            await c.close()
            await host.close()

    call_id = asyncio.run(client())
    check_engine(engine.seen, call_id)
    assert set(engine.origins) == {TurnOrigin.SERVER}
    with Store() as store:
        assert store.list_conversations() == []


@pytest.mark.qt
def test_the_window(qtbot, qloop, chinwag_home, tmp_path, tiny_tools_model_path, forced):  # noqa: F811
    """The real window on the scripted engine: the document attached in the composer, the call allowed by
    its policy (the card shows it run), the reply written by the driver as it streams."""
    from app.core.settings import DEFAULTS_KEY
    from app.gui.window import MainWindow
    from app.tools import config
    from app.tools.config import Policy
    from tests.app_helpers import dispose

    entry = stdio_entry("calculator")
    config.add_server("calc", entry["command"], entry["args"])
    config.set_policy("calc", Policy.ALLOW)
    store = Store()
    store.set_state(DEFAULTS_KEY, {"max_tokens": len(forced) + 4, "temperature": 0.0, "speculative": False})
    engine = ScriptedEngine(forced)
    window = MainWindow(store, engine)
    window.show()
    try:
        task = window.start_engine(str(tiny_tools_model_path))
        qtbot.waitUntil(task.done, timeout=120_000)
        qtbot.waitUntil(lambda: window.tools.servers == ["calc"], timeout=60_000)
        tray = window.composer.attachments
        tray.add_paths([write_document(tmp_path)])
        qtbot.waitUntil(lambda: bool(tray.ready_documents()) and not tray.busy(), timeout=30_000)
        assert window.chat.send(QUESTION)
        qtbot.waitUntil(lambda: window.chat.gen is None and not window.bridge.is_generating(), timeout=120_000)
        check(engine.seen, store.get_conversation(window.chat.conv_id).messages)
        assert set(engine.origins) == {TurnOrigin.WINDOW}
    finally:
        dispose(qtbot, window, store)
