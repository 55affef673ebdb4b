"""`chinwag mcp add|remove|list`: the MCP servers whose tools models can call. No Qt, no MLX."""

import argparse
import asyncio
import json

from app.cli.parser import OneLineParser
from engine.errors import one_line


def cmd_add(args: argparse.Namespace) -> int:
    from app.tools import config

    command = list(args.server_command or [])
    if command[:1] == ["--"]:  # argparse may leave the separator in
        command = command[1:]
    target = command[0] if command else ""
    if len(command) == 1 and target.startswith(("http://", "https://")):
        server = config.add_server(args.name, url=target)
    elif command:
        env = dict(_env_pair(e) for e in args.env or [])
        server = config.add_server(args.name, command[0], command[1:], env=env)
    else:
        from engine.errors import ChinwagError

        raise ChinwagError("give the server as: chinwag mcp add NAME -- COMMAND [ARGS...] or chinwag mcp add NAME URL")
    print(f"saved MCP server {server.name} ({server.transport}: {one_line(server.describe())}) in {config.mcp_path()}")
    return 0


def _env_pair(text: str) -> tuple[str, str]:
    from engine.errors import ChinwagError

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ChinwagError(f"--env {text!r}: expected NAME=VALUE")
    return key, value


def cmd_remove(args: argparse.Namespace) -> int:
    from app.tools import config

    config.remove_server(args.name)
    print(f"removed MCP server {args.name}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from app.tools import config
    from app.tools.probe import server_rows
    from app.tools.results import clip, shown_name

    cfg = config.load()
    rows = asyncio.run(server_rows(cfg.servers))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no MCP servers in {config.mcp_path()} (add one: chinwag mcp add NAME -- COMMAND [ARGS...])")
    for r in rows:
        print(f"{r['name']:20} {r['transport']:5} {r['status']:8} {clip(one_line(r['target']), 80)}")
        if r["reason"]:
            print(f"    {one_line(r['reason'])}")
        for t in r["tools"]:
            print(f"    {shown_name(t['name']):28} {t['policy']:5}  {clip(t['description'], 80)}")
        for line in r.get("left_out", []):
            print(f"    left out: {one_line(line)}")
    return 0


def add_commands(sub: "argparse._SubParsersAction[OneLineParser]") -> None:
    p = sub.add_parser("mcp", help="MCP servers whose tools models can call (mcp.json in the data folder)")
    msub = p.add_subparsers(dest="mcp_command", required=True, metavar="{add,list,remove}")
    a = msub.add_parser(
        "add", help="save a server: chinwag mcp add NAME -- COMMAND [ARGS...] (stdio) or chinwag mcp add NAME URL"
    )
    a.add_argument("name")
    a.add_argument("--env", action="append", metavar="NAME=VALUE", help="an environment variable for a stdio server")
    a.add_argument(
        "server_command",
        nargs="*",
        metavar="COMMAND",
        help="the command and its arguments after --, or the server's URL",
    )
    a.set_defaults(func=cmd_add)
    ls = msub.add_parser("list", help="start each enabled server and list its tools (or why it failed)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)
    rm = msub.add_parser("remove", help="forget a server")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_remove)
