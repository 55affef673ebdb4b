"""The window's MCP host: servers start with the window, restart when the Tools dialog changed them
(not for a policy), and stop when it closes; a chat's choice of servers is its own."""

import pytest

from app.tools import config
from app.tools.config import Policy
from tests.tools_servers.launch import stdio_entry

pytestmark = pytest.mark.qt


@pytest.mark.qt_log_ignore("does not support raise")  # the offscreen platform cannot raise the dialog
def test_the_tools_dialog_restarts_the_servers_only_when_they_changed(qtbot, window):
    tools = window.tools
    qtbot.waitUntil(lambda: tools._task is not None and tools._task.done())
    assert tools.host is None and not window.tools_button.isVisible()  # no mcp.json: no Tools button

    dialog = window.open_tools()
    entry = stdio_entry("calculator")
    config.add_server("calc", entry["command"], entry["args"])
    dialog.reject()
    qtbot.waitUntil(lambda: tools.servers == ["calc"], timeout=60_000)
    assert window.tools_button.isVisible() and window.tools_button.text().startswith("Tools: 2")
    host = tools.host

    dialog = window.open_tools()
    config.set_policy("calc", Policy.ALLOW)  # a policy is read at each call: no restart
    dialog.reject()
    assert tools.host is host

    # A chat's choice: off in this chat only, and a new chat starts with every server on.
    # The choice is the chat's setting: it goes with the chat.
    chat, other = window.store.create_conversation(), window.store.create_conversation()
    window.tools.set_on(chat.id, "calc", False)
    assert tools.host_for(chat.id) is None and tools.host_for(other.id) is not None
    assert window.store.conversation_settings(chat.id)["tools_off"] == ["calc"]
    window.tools.set_on("", "calc", False)  # the blank chat's choice waits for its id
    assert tools.host_for("") is None and "tools_off" not in window.store.conversation_settings(other.id)
    window.tools.adopt_choice(other.id)
    assert tools.host_for(other.id) is None and tools.host_for("") is not None

    dialog = window.open_tools()
    config.set_enabled("calc", False)
    dialog.reject()
    qtbot.waitUntil(lambda: tools.servers == [] and not tools.starting, timeout=60_000)
    assert not host.connections["calc"].running  # the old server was stopped
