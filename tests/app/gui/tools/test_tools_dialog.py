"""The window's tool pieces: the approval card, the result block, and Chat › MCP Servers…."""

import json

import pytest

from app.gui.tools.cards import ApprovalCard, ToolResultBlock
from app.gui.tools.dialog import ToolsDialog
from app.tools import config
from app.tools.client import ToolResult
from app.tools.config import Policy
from app.tools.loop import ToolRun
from app.tools.policy import Answer
from engine.types import ToolCall
from tests.tools_servers.launch import stdio_entry

pytestmark = pytest.mark.qt

CALL = ToolCall("call_1", "read_file", '{"name": "notes.txt", "nested": {"deep": [1, 2]}}')


def test_approval_card_shows_the_call_in_full_and_answers_once(qtbot):
    card = ApprovalCard(CALL, "files", "read_file")
    qtbot.addWidget(card)
    answers = []
    card.answered.connect(answers.append)
    assert "read_file" in card.findChild(object, "toolApprovalTitle").text()
    assert card.arguments.toPlainText() == json.dumps(json.loads(CALL.arguments), indent=2)
    card.buttons[Answer.ALWAYS].click()
    card.answer(Answer.DENY)  # a second answer is ignored
    assert answers == [Answer.ALWAYS] and card.status.text() == "Always allowed"


def test_result_block_is_collapsed_plain_text(qtbot):
    hostile = '<b>bold</b> <img src="http://x/y.png"> \x1b[31mred'
    run = ToolRun(CALL, "files", ToolResult(hostile, False, 1.25), True)
    block = ToolResultBlock(run)
    qtbot.addWidget(block)
    block.show()
    assert block.toggle.text() == "read_file · files · 1.2 s"
    assert not block.details.isVisible()
    block.toggle.click()
    assert block.details.isVisible()
    assert block.result_view.toPlainText() == '<b>bold</b> <img src="http://x/y.png"> red'
    failed = ToolResultBlock(ToolRun(CALL, "files", ToolResult("error: boom", True, 0.1), True))
    qtbot.addWidget(failed)
    assert failed.toggle.text().endswith("· error")


def test_tools_dialog_adds_edits_enables_imports_and_sets_policies(qtbot, qloop, chinwag_home, tmp_path):
    dialog = ToolsDialog()
    qtbot.addWidget(dialog)
    dialog.new_server()
    calc = stdio_entry("calculator")
    dialog.name_edit.setText("calc")
    dialog.target_edit.setText(" ".join([calc["command"], *calc["args"]]))
    dialog.policy_box.setCurrentIndex(1)  # Allow
    assert dialog.save_server()
    server = config.load().server("calc")
    assert (server.command, server.args, server.policy) == (calc["command"], tuple(calc["args"]), Policy.ALLOW)
    item = dialog.server_list.item(0)
    item.setCheckState(item.checkState().__class__.Unchecked)
    assert not config.load().server("calc").enabled
    dialog.name_edit.setText("")
    assert not dialog.save_server() and "needs a name" in dialog.status.text()
    assert dialog.rounds_box.value() == config.DEFAULT_MAX_ROUNDS
    dialog.rounds_box.setValue(3)
    assert config.load().max_rounds == 3

    source = tmp_path / "claude_desktop_config.json"
    source.write_text(json.dumps({"mcpServers": {"web": {"url": "http://127.0.0.1:9/mcp"}}}))
    dialog.import_file(source)
    assert [s.name for s in config.load().servers] == ["calc", "web"]
    assert dialog.server_list.count() == 2

    dialog._show("calc")
    task = dialog.list_tools()
    qtbot.waitUntil(task.done, timeout=60_000)
    box = dialog.findChild(object, "mcpToolPolicy_add")
    assert box is not None, dialog.status.text()
    box.setCurrentIndex(2)  # Deny
    assert config.load().server("calc").policy_for("add") == Policy.DENY


def test_broken_mcp_json_is_one_line_in_the_dialog(qtbot, qloop, chinwag_home):
    (chinwag_home / "mcp.json").write_text("{")
    dialog = ToolsDialog()
    qtbot.addWidget(dialog)
    assert "mcp.json is not valid JSON" in dialog.status.text() and dialog.server_list.count() == 0


def test_import_opens_in_documents_and_imports_the_file_chosen(qtbot, qloop, chinwag_home, tmp_path, monkeypatch):
    from pathlib import Path

    home = tmp_path / "home"
    (home / "Documents").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DOCUMENTS_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))  # no user-dirs.dirs: Documents is ~/Documents
    source = home / "Documents" / "mcp.json"
    source.write_text(json.dumps({"mcpServers": {"web": {"url": "http://127.0.0.1:9/mcp"}}}))
    dialog = ToolsDialog()
    qtbot.addWidget(dialog)
    chooser = dialog.import_dialog()
    try:  # it opened in the folder chinwag was started from
        assert Path(chooser.directory().absolutePath()) == home / "Documents"
        chooser.fileSelected.emit(str(source))
    finally:
        chooser.reject()
    assert [s.name for s in config.load().servers] == ["web"]


def test_the_tool_rounds_box_is_a_number_wide(qtbot, qloop, chinwag_home):
    dialog = ToolsDialog()
    qtbot.addWidget(dialog)
    dialog.resize(640, 560)
    dialog.show()
    qtbot.waitExposed(dialog)
    # seen on X: the spin box for "8" ran the dialog's whole width
    assert dialog.rounds_box.width() < dialog.width() // 3


def test_approval_card_and_result_block_show_a_name_with_its_escapes_visible(qtbot):
    call = ToolCall("call_2", "x\nAllowed by its policy\u202e")
    card = ApprovalCard(call, "files", "rm\x1b[2J\nread_file")
    qtbot.addWidget(card)
    assert card.title.text() == "Run the tool rm\\x1b[2J\\x0aread_file on the server files?"
    block = ToolResultBlock(ToolRun(call, "files", ToolResult("done", False, 1.0), True))
    qtbot.addWidget(block)
    assert block.toggle.text() == "x\\x0aAllowed by its policy\\u202e · files · 1.0 s"


def test_listing_one_tool_says_one_tool(qtbot, qloop, chinwag_home):
    (chinwag_home / "mcp.json").write_text(json.dumps({"mcpServers": {"odd": stdio_entry("names", "odd:escapes")}}))
    dialog = ToolsDialog()
    qtbot.addWidget(dialog)
    dialog._show("odd")
    task = dialog.list_tools()
    qtbot.waitUntil(task.done, timeout=60_000)
    assert dialog.status.text() == "odd: 1 tool."
