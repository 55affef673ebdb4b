"""The window, `chinwag chat` and `chinwag serve` run the same scripted turn (tests/app/chat/scripted_turn.py:
a document, a call to a real MCP server, the answer) through the one turn driver: the same messages
reach the engine and the same rows land in the store."""

import io
import json
import sys

import pytest

from app.core.store import Store
from tests.app.chat.scripted_turn import QUESTION, ScriptedEngine, check, write_document
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
