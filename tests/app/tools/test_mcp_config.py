"""mcp.json (Claude Desktop / Cursor / LM Studio format), Chinwag's settings beside it, and `chinwag mcp`."""

import json
import sys

import pytest

from app.cli.main import main
from app.tools import config
from app.tools.config import Policy
from app.tools.policy import Answer, Approvals
from engine.errors import ChinwagError
from tests.tools_servers.launch import SCRIPT, http_server

CURSOR_FILE = {
    "mcpServers": {
        "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"], "env": {"K": "v"}},
        "web": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}, "type": "http"},
    },
    "otherAppKey": {"kept": True},
}


def write_mcp(home, data) -> None:
    (home / "mcp.json").write_text(json.dumps(data) if not isinstance(data, str) else data)


def test_reads_the_common_format_and_keeps_other_keys(chinwag_home):
    write_mcp(chinwag_home, CURSOR_FILE)
    cfg = config.load()
    fs, web = cfg.servers
    assert (fs.transport, fs.command, fs.args, fs.env) == (
        "stdio",
        "npx",
        ("-y", CURSOR_FILE["mcpServers"]["fs"]["args"][1], "/tmp"),
        {"K": "v"},
    )
    assert (web.transport, web.url, web.headers) == ("http", "https://example.com/mcp", {"Authorization": "Bearer x"})
    assert fs.enabled and fs.policy == Policy.ASK
    config.add_server("calc", sys.executable, [SCRIPT, "calculator"])
    config.remove_server("fs")
    data = json.loads((chinwag_home / "mcp.json").read_text())
    assert data["otherAppKey"] == {"kept": True} and data["mcpServers"]["web"]["type"] == "http"
    assert list(data["mcpServers"]) == ["web", "calc"]
    assert (chinwag_home / "mcp.json").stat().st_mode & 0o077 == 0  # env and headers may hold keys


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"mcpServers": {"a": {"command": "x", "args": [}}', "line 1 column 48"),
        ('{"mcpServers": []}', "at the top"),
        ('{"mcpServers": {"a": {"args": []}}}', 'mcpServers.a needs "command"'),
        ('{"mcpServers": {"a": {"command": "x", "args": "y"}}}', "mcpServers.a.args must be a list of strings"),
        ('{"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}', "mcpServers.a.env must be an object of strings"),
        ('{"mcpServers": {"a": {"url": "ftp://x"}}}', "mcpServers.a.url must be an http"),
    ],
)
def test_malformed_file_gets_one_line_naming_file_and_place(chinwag_home, capsys, text, where):
    write_mcp(chinwag_home, text)
    with pytest.raises(ChinwagError, match="mcp.json") as e:
        config.load()
    assert where in str(e.value) and "\n" not in str(e.value)
    assert main(["mcp", "list"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and where in err
    before = (chinwag_home / "mcp.json").read_text()
    with pytest.raises(ChinwagError):
        config.add_server("b", "cmd")  # a broken file is never overwritten
    assert (chinwag_home / "mcp.json").read_text() == before


def test_enabled_and_policies_live_beside_mcp_json(chinwag_home):
    write_mcp(chinwag_home, CURSOR_FILE)
    config.set_enabled("web", False)
    config.set_policy("fs", Policy.DENY)
    config.set_policy("fs", Policy.ALLOW, tool="read_file")
    config.set_max_rounds(3)
    assert json.loads((chinwag_home / "mcp.json").read_text()) == CURSOR_FILE  # untouched for the other apps
    cfg = config.load()
    assert [s.name for s in cfg.enabled] == ["fs"] and cfg.max_rounds == 3
    fs = cfg.server("fs")
    assert fs.policy_for("read_file") == Policy.ALLOW and fs.policy_for("write_file") == Policy.DENY
    approvals = Approvals(cfg)
    assert approvals.decide("fs", "write_file") == Policy.DENY
    config.set_policy("fs", Policy.ASK)
    approvals = Approvals(config.load())
    assert approvals.decide("fs", "other") == Policy.ASK
    assert approvals.answer("fs", "other", Answer.ALWAYS)
    assert approvals.decide("fs", "other") == Policy.ALLOW and config.load().server("fs").policy_for("other") == "allow"
    assert not approvals.answer("fs", "x", Answer.DENY)
    assert Approvals(config.load(), allow_all=True).decide("fs", "write_file") == Policy.ALLOW


def test_import_another_apps_file(chinwag_home, tmp_path):
    source = tmp_path / "claude_desktop_config.json"
    source.write_text(json.dumps(CURSOR_FILE))
    assert config.import_file(source) == ["fs", "web"]
    assert [s.name for s in config.load().servers] == ["fs", "web"]
    with pytest.raises(ChinwagError, match="no such file"):
        config.import_file(tmp_path / "missing.json")


def test_cli_add_list_remove(chinwag_home, capsys):
    assert main(["mcp", "add", "calc", "--", sys.executable, SCRIPT, "calculator"]) == 0
    assert main(["mcp", "add", "broken", "--", sys.executable, SCRIPT, "crash", "--at-start"]) == 0
    with http_server("calculator") as url:
        assert main(["mcp", "add", "web", url]) == 0
        capsys.readouterr()
        assert main(["mcp", "list", "--json"]) == 0
        rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["calc"]["status"] == "ok" and [t["name"] for t in rows["calc"]["tools"]] == ["add", "multiply"]
    assert rows["web"]["status"] == "ok" and rows["web"]["transport"] == "http"
    assert rows["broken"]["status"] == "failed" and "the configuration is broken" in rows["broken"]["reason"]
    assert main(["mcp", "remove", "broken"]) == 0
    assert main(["mcp", "remove", "broken"]) == 2
    assert "no MCP server named 'broken'" in capsys.readouterr().err
    assert main(["mcp", "add", "x"]) == 2


def test_cli_list_shows_a_tool_name_with_escapes_neutralised(chinwag_home, capsys):
    from tests.tools_servers.servers import ESCAPE_NAME

    write_mcp(
        chinwag_home, {"mcpServers": {"odd": {"command": sys.executable, "args": [SCRIPT, "names", "odd:escapes"]}}}
    )
    assert main(["mcp", "list"]) == 0
    out = capsys.readouterr().out
    assert not set(out) & {"\x1b", "\x07"}
    assert "ok_tool\\x1b]0;PWNED\\x07\\x1b[2J" in out  # the name as it is, every escape visible
    assert main(["mcp", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["tools"][0]["name"] == ESCAPE_NAME  # JSON keeps the exact name


INVISIBLE_NAMES = [
    "x\u2028Allowed by its policy",
    "read\U000e0041\U000e0042",
    "rea\u00add",
    "rm\u2003",
    "\u3164",
    "x\ufe0f",
]


def test_cli_list_shows_invisible_and_line_breaking_characters_in_a_tool_name(chinwag_home, capsys):
    """A line separator (Qt breaks the line there), tag characters, a soft hyphen, an em space, a Hangul
    filler, a variation selector: each written as its escape, so no name passes for another or breaks a line."""
    names = ",".join(INVISIBLE_NAMES)
    write_mcp(
        chinwag_home, {"mcpServers": {"odd": {"command": sys.executable, "args": [SCRIPT, "names", f"odd:{names}"]}}}
    )
    assert main(["mcp", "list"]) == 0
    out = capsys.readouterr().out
    for shown in (
        "x\\u2028Allowed by its policy",
        "read\\U000e0041\\U000e0042",
        "rea\\xadd",
        "rm\\u2003",
        "\\u3164",
        "x\\ufe0f",
    ):
        assert shown in out, shown
    assert set(out).isdisjoint(c for name in INVISIBLE_NAMES for c in name if not c.isascii())


def test_cli_list_says_which_tools_are_left_out_and_why(chinwag_home, capsys):
    write_mcp(chinwag_home, {"mcpServers": {"big": {"command": sys.executable, "args": [SCRIPT, "bloated"]}}})
    assert main(["mcp", "list"]) == 0
    out = capsys.readouterr().out
    assert "    left out: huge_schema: its input schema is 2." in out
    assert "its name is 200 characters (at most 64)" in out and "the server lists over 128" in out
