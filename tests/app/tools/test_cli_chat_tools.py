"""`chinwag chat` starts the MCP servers enabled in mcp.json (--no-tools: none) and stops them on exit."""

import json
import os
import subprocess
import sys

from app.tools.loop import ToolRun
from tests.app.cli.test_chat_saved import ROOT, chat
from tests.tools_servers.launch import stdio_entry


def test_chat_starts_enabled_servers_and_no_tools_turns_them_off(chinwag_home, tiny_tools_model_path):
    (chinwag_home / "mcp.json").write_text(
        json.dumps({"mcpServers": {"calc": stdio_entry("calculator"), "broken": stdio_entry("crash", "--at-start")}})
    )
    proc = chat(chinwag_home, tiny_tools_model_path, "What is 2 plus 3?\n", "--allow-tools", "--no-save")
    assert "[tools: add, multiply; every call allowed]" in proc.stdout
    assert proc.stdout.count("the tool definitions take ") == 1 and " tokens of context]" in proc.stdout
    assert "MCP server broken failed:" in proc.stderr and "the configuration is broken" in proc.stderr
    proc = chat(chinwag_home, tiny_tools_model_path, "Hello\n", "--no-tools", "--no-save")
    assert "[tools:" not in proc.stdout


def test_chat_on_a_model_without_tool_support_says_so_once(chinwag_home, tiny_model_path):
    (chinwag_home / "mcp.json").write_text(json.dumps({"mcpServers": {"calc": stdio_entry("calculator")}}))
    proc = chat(chinwag_home, tiny_model_path, "Hello\nAgain\n", "--no-save")
    assert proc.stdout.count("no tool support: tools are off") == 1


def test_broken_mcp_json_is_one_line_and_status_2(chinwag_home, tiny_model_path):
    (chinwag_home / "mcp.json").write_text('{"mcpServers": {"x": {"args": []}}}')
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "chat", "--model", str(tiny_model_path), "--no-save"],
        input="hi\n",
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "CHINWAG_HOME": str(chinwag_home)},
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith('mcpServers.x needs "command" (a stdio server) or "url" (an HTTP server)')


def test_names_from_a_server_are_shown_neutralised(chinwag_home, capsys, monkeypatch):
    import argparse
    import asyncio
    import io

    from app.cli.chat_tools import TerminalTools
    from engine.types import ToolCall
    from tests.tools_servers.servers import ESCAPE_NAME

    (chinwag_home / "mcp.json").write_text(json.dumps({"mcpServers": {"odd": stdio_entry("names", "odd:escapes")}}))
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    call = ToolCall("call-1", ESCAPE_NAME)

    async def body():
        args = argparse.Namespace(allow_tools=False, max_tool_rounds=None)
        tools = await TerminalTools.start(args)
        try:
            (spec,) = tools.host.tools
            assert await tools.ask(call, spec) == "once"
            tools.show(ToolRun(call, spec.server, await tools.host.call(spec, {}), True))
        finally:
            await tools.close()

    asyncio.run(body())
    out = capsys.readouterr().out
    assert not set(out) & {"\x1b", "\x07"}
    shown = "ok_tool\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[Hrun me"
    assert f"[tools: {shown}]" in out and f"[tool call: {shown} on odd]" in out and f"\n[{shown} on odd (" in out
