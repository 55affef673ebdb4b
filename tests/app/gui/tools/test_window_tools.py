"""Replies in the window call tools: the tiny tools model (scripted) calls a real MCP server's tool; the
approval card shows the call, Allow runs it, the result block appears and the reply goes on; Deny;
a tool whose policy is allow runs without asking; Stop during a hanging call; reopening shows the blocks."""

import dataclasses

import pytest
from PySide6.QtGui import QAction

from app.chat.turn import STOPPED_RESULT
from app.gui.chat.tool_message import ToolMessage
from app.gui.tools.cards import ApprovalCard, ToolResultBlock
from app.tools import config
from app.tools.config import Policy
from app.tools.policy import Answer
from tests.app.tools.scripted import Repeat, Script, tool_call_ids
from tests.app_helpers import dispose
from tests.tools_servers.launch import stdio_entry

pytestmark = pytest.mark.qt


def open_window(qtbot, monkeypatch, model_path, processor, kind="calculator", policy=Policy.ASK, max_tokens=48):
    """The real window on the tiny tools model, one MCP server in mcp.json, replies scripted by `processor`."""
    from app.core.settings import DEFAULTS_KEY
    from app.core.store import Store
    from app.gui.chat import controller
    from app.gui.window import MainWindow
    from engine.api import Engine

    entry = stdio_entry(kind)
    config.add_server("calc", entry["command"], entry["args"])
    config.set_policy("calc", policy)
    real = controller.params_from_settings
    monkeypatch.setattr(
        controller, "params_from_settings", lambda v: dataclasses.replace(real(v), logits_processors=(processor,))
    )
    store = Store()
    store.set_state(DEFAULTS_KEY, {"max_tokens": max_tokens, "temperature": 0.0, "speculative": False})
    window = MainWindow(store, Engine())
    window.show()
    task = window.start_engine(str(model_path))
    qtbot.waitUntil(task.done, timeout=120_000)
    qtbot.waitUntil(lambda: window.tools.servers == ["calc"], timeout=60_000)
    return store, window


def idle(window):
    return window.chat.gen is None and not window.bridge.is_generating()


def cards(window):
    return window.chat_view.findChildren(ApprovalCard)


def roles(store, conv_id):
    return [m.role for m in store.get_conversation(conv_id).messages]


def forced_call(tiny_tools_model, name="add", arguments='{"a": 2, "b": 3}'):
    return tool_call_ids(tiny_tools_model[1], name, arguments)


def test_always_allow_runs_the_call_and_the_reply_goes_on_and_reopening_shows_it(
    qtbot, qloop, monkeypatch, tiny_tools_model_path, tiny_tools_model
):
    forced = forced_call(tiny_tools_model)
    store, window = open_window(qtbot, monkeypatch, tiny_tools_model_path, Script(forced), max_tokens=len(forced) + 4)
    try:
        assert window.tools_button.isVisible() and window.tools_button.text().startswith("Tools: 2")
        # Before a reply, the cost is counted from the definitions; the reply counts it in the template.
        qtbot.waitUntil(lambda: "· ~" in window.tools_button.text() and window.tools_button.text().endswith(" tokens"))
        window.chat.send("What is 2 plus 3?")
        qtbot.waitUntil(lambda: len(cards(window)) == 1, timeout=60_000)
        (card,) = cards(window)
        assert (
            "add" in card.findChild(object, "toolApprovalTitle").text()
            and "calc" in card.findChild(object, "toolApprovalTitle").text()
        )
        assert card.arguments.toPlainText() == '{\n  "a": 2,\n  "b": 3\n}'
        assert not window.chat.turn.task.done()  # nothing ran before the answer
        card.buttons[Answer.ALWAYS].click()
        qtbot.waitUntil(lambda: idle(window), timeout=60_000)
        assert card.status.text() == "Always allowed"
        assert config.load().server("calc").policy_for("add") == Policy.ALLOW  # saved as the tool's policy
        assert config.load().server("calc").policy_for("multiply") == Policy.ASK
        conv_id = window.chat.conv_id
        messages = store.get_conversation(conv_id).messages
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
        call_msg, result, final = messages[1], messages[2], messages[3]
        assert call_msg.tool_calls[0].name == "add"
        assert result.content == "5.0" and result.tool_result.server == "calc" and result.tool_result.allowed
        assert final.status == "complete" and final.stats["generated_tokens"] >= 1
        # The call's markup is not left as text; its result is a collapsed block.
        widgets = window.chat_view.message_widgets()
        assert "<tool_call>" not in widgets[1].text()
        block = window.chat_view.findChild(ToolResultBlock)
        assert block.toggle.text().startswith("add · calc · ") and not block.details.isVisible()
        assert block.result_view.toPlainText() == "5.0"
        assert window.tools.costs.get(conv_id, 0) > 0  # what the definitions cost, from the turn
        cost = store.get_conversation(conv_id).messages[1].stats["tools_tokens"]
        assert window.tools_button.text() == f"Tools: 2 · {cost:,} tokens"

        window.chat.new_conversation()
        window.chat.open_conversation(conv_id)
        shown = window.chat_view.message_widgets()
        assert [type(w) for w in shown][2] is ToolMessage and shown[2].block.result_view.toPlainText() == "5.0"
        assert "<tool_call>" not in shown[1].text()
        qtbot.waitUntil(lambda: not cards(window))  # the answered card was the live reply's only
    finally:
        dispose(qtbot, window, store)


def test_deny_does_not_run_the_call(qtbot, qloop, monkeypatch, tiny_tools_model_path, tiny_tools_model):
    forced = forced_call(tiny_tools_model)
    store, window = open_window(qtbot, monkeypatch, tiny_tools_model_path, Script(forced), max_tokens=len(forced) + 2)
    try:
        window.chat.send("What is 2 plus 3?")
        qtbot.waitUntil(lambda: len(cards(window)) == 1, timeout=60_000)
        cards(window)[0].buttons[Answer.DENY].click()
        qtbot.waitUntil(lambda: idle(window), timeout=60_000)
        messages = store.get_conversation(window.chat.conv_id).messages
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[2].content == "error: the user did not allow this call" and not messages[2].tool_result.allowed
        assert cards(window)[0].status.text() == "Denied"
    finally:
        dispose(qtbot, window, store)


def test_policy_allow_runs_without_asking_and_stop_ends_a_hanging_call(
    qtbot, qloop, monkeypatch, tiny_tools_model_path, tiny_tools_model
):
    forced = forced_call(tiny_tools_model, "wait_forever", "{}")
    store, window = open_window(
        qtbot, monkeypatch, tiny_tools_model_path, Script(forced), "slow", Policy.ALLOW, max_tokens=len(forced) + 2
    )
    try:
        window.chat.send("Wait for me.")
        qtbot.waitUntil(lambda: window.chat.turn is not None and window.chat.turn.phase == "call", timeout=60_000)
        (card,) = cards(window)  # allowed by its policy: never asked, but shown as it runs
        assert not any(b.isVisible() for b in card.buttons.values())
        assert card.status.text() == "Allowed by its policy · running…"
        window.stop_action.trigger()
        qtbot.waitUntil(lambda: idle(window), timeout=30_000)
        assert card.status.text() == "Allowed by its policy · stopped while it ran"
        conv_id = window.chat.conv_id
        assert roles(store, conv_id) == ["user", "assistant", "tool"]
        stopped = store.get_conversation(conv_id).messages[-1]
        assert (
            stopped.content == STOPPED_RESULT and stopped.tool_result.is_error and stopped.tool_result.server == "calc"
        )
        assert window.chat_view.message_widgets()[-1].note.text() == "Stopped."
        # The chat goes on: the next reply sees the stopped round in its history.
        window.chat.send("Never mind.")
        qtbot.waitUntil(lambda: idle(window) and roles(store, conv_id)[-1] == "assistant", timeout=60_000)
    finally:
        dispose(qtbot, window, store)


def test_round_limit_ends_the_reply_with_a_line_and_a_chat_can_switch_its_servers_off(
    qtbot, qloop, monkeypatch, tiny_tools_model_path, tiny_tools_model
):
    forced = forced_call(tiny_tools_model, "add", '{"a": 1, "b": 1}')
    config.set_max_rounds(2)
    store, window = open_window(
        qtbot, monkeypatch, tiny_tools_model_path, Repeat(forced), policy=Policy.ALLOW, max_tokens=len(forced)
    )
    try:
        window.chat.send("Add forever.")
        qtbot.waitUntil(lambda: idle(window), timeout=60_000)
        conv_id = window.chat.conv_id
        assert roles(store, conv_id) == ["user", "assistant", "tool", "assistant", "tool"]
        assert window.chat_view.message_widgets()[-1].note.text().startswith("Stopped after 2 tool rounds")
        window.chat.new_conversation()
        window.chat.open_conversation(conv_id)  # the line is kept with the last result
        assert window.chat_view.message_widgets()[-1].note.text().startswith("Stopped after 2 tool rounds")
        # This chat turns its calculator off: the next reply has no tools (the call is only text).
        assert [c.status.text() for c in cards(window)] == ["Allowed by its policy"] * 2
        action = window.tools_button.menu_.findChild(QAction, "chatTools_calc")
        action.trigger()
        assert window.tools.off_in(conv_id) == {"calc"} and window.tools_button.text() == "Tools: off"
        window.chat.send("Again.")
        qtbot.waitUntil(lambda: idle(window) and roles(store, conv_id)[-1] == "assistant", timeout=60_000)
        assert roles(store, conv_id).count("tool") == 2
        qtbot.waitUntil(lambda: not cards(window))  # the reopened chat's cards went; the tool-less reply added none
    finally:
        dispose(qtbot, window, store)


def test_stop_at_the_approval_card_runs_nothing(qtbot, qloop, monkeypatch, tiny_tools_model_path, tiny_tools_model):
    forced = forced_call(tiny_tools_model)
    store, window = open_window(qtbot, monkeypatch, tiny_tools_model_path, Script(forced), max_tokens=len(forced) + 2)
    try:
        window.chat.send("What is 2 plus 3?")
        qtbot.waitUntil(lambda: len(cards(window)) == 1, timeout=60_000)
        window.stop_action.trigger()
        qtbot.waitUntil(lambda: idle(window), timeout=30_000)
        messages = store.get_conversation(window.chat.conv_id).messages
        assert [m.role for m in messages] == ["user", "assistant", "tool"]
        assert messages[2].content == STOPPED_RESULT and not messages[2].tool_result.allowed
        assert cards(window)[0].status.text() == "Stopped: the call did not run"
    finally:
        dispose(qtbot, window, store)


def test_a_model_without_tool_support_says_so_once_from_its_load(qtbot, qloop, monkeypatch, tiny_model_path):
    store, window = open_window(qtbot, monkeypatch, tiny_model_path, Script([]), max_tokens=3)
    try:
        # Before any message: the banner, and the header's button says it (not "Tools: 1 · ~86 tokens").
        said = [t for t in window.notices.texts() if "no tool support" in t]
        assert said == ["This model's chat template has no tool support: tools are off for it."]
        assert window.bridge.current_model.tools_off.startswith("this model's chat template has no tool support")
        assert window.tools_button.text() == "Tools: off for this model"
        assert "no tool support" in window.tools_button.toolTip()
        assert window.tools.costs == {}  # nothing counted for definitions it will never see
        for text in ("Hello.", "Again."):
            window.chat.send(text)
            qtbot.waitUntil(lambda: idle(window), timeout=60_000)
        said = [t for t in window.notices.texts() if "no tool support" in t]
        assert said == ["This model's chat template has no tool support: tools are off for it."]
        assert window.tools_button.text() == "Tools: off for this model"
        assert store.get_conversation(window.chat.conv_id).messages[-1].status == "complete"
    finally:
        dispose(qtbot, window, store)


def test_closing_the_window_while_a_card_waits_keeps_the_history_whole(
    qtbot, qloop, monkeypatch, tiny_tools_model_path, tiny_tools_model
):
    from app.core.store import Store

    forced = forced_call(tiny_tools_model)
    store, window = open_window(qtbot, monkeypatch, tiny_tools_model_path, Script(forced), max_tokens=len(forced) + 2)
    window.chat.send("What is 2 plus 3?")
    qtbot.waitUntil(lambda: len(cards(window)) == 1, timeout=60_000)
    conv_id, tools = window.chat.conv_id, window.tools
    dispose(qtbot, window, store)
    assert tools.host is None  # its servers were stopped with the window
    again = Store()
    try:
        messages = again.get_conversation(conv_id).messages
        assert [m.role for m in messages] == ["user", "assistant", "tool"]
        assert messages[2].content == STOPPED_RESULT
    finally:
        again.close()


def test_a_draft_read_ahead_carries_the_tools_so_enter_computes_one_token(
    qtbot, qloop, monkeypatch, tiny_tools_model_path
):
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    store, window = open_window(qtbot, monkeypatch, tiny_tools_model_path, Script([]), max_tokens=3)
    try:
        window.chat.send("Hello there")
        qtbot.waitUntil(lambda: idle(window), timeout=60_000)
        with qtbot.waitSignal(window.bridge.draftPrefilled, timeout=60_000) as read:
            window.composer.set_text("And a second question, please.")
            window.chat.prefill_draft(window.composer.text())
        assert read.args[1].finished
        QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: idle(window) and len(roles(store, window.chat.conv_id)) == 4, timeout=60_000)
        stats = store.get_conversation(window.chat.conv_id).messages[-1].stats
        assert stats["tools_tokens"] > 0  # the reply had the tools: the read-ahead had them too
        assert stats["prefilled_tokens"] == 1 and stats["reused_tokens"] == stats["prompt_tokens"] - 1
    finally:
        dispose(qtbot, window, store)
