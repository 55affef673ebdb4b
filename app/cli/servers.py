"""`chinwag servers add|list|remove`: the model servers Chinwag can chat through. No Qt.

API keys come from an environment variable (never a command-line argument, which other
users can read in the process list) and are never printed.
"""

import argparse
import json
import os
import sys
from typing import Any

from app.cli.parser import OneLineParser
from engine.models.gguf.header import printable  # what a server sends may hold escape sequences
from engine.remote.urls import display_url
from engine.types import UNREACHABLE, ModelStatus, down_state


def cmd_add(args: argparse.Namespace) -> int:
    from engine.errors import ChinwagError
    from engine.remote import servers
    from engine.remote.errors import check_key

    key = ""
    if args.api_key_env:
        key = os.environ.get(args.api_key_env, "")
        if not key.strip():
            raise ChinwagError(f"--api-key-env {args.api_key_env}: that environment variable is not set or empty")
        key = check_key(key, f"the API key in ${args.api_key_env}")  # a trailing newline is stripped
    server = servers.add_server(args.name, args.url, key)
    where = f"; API key kept in {server.key_storage}" if server.key_storage else ""
    print(f"saved server {server.name} at {display_url(server.url)}{where}")
    infos = servers.models_of(server)
    if infos and infos[0].status == ModelStatus.UNUSABLE:
        state, reason = down_state(infos[0])
        what = "is not reachable now" if state == UNREACHABLE else "answered, but cannot be used now"
        print(f"warning: {printable(server.name)} {what} ({printable(reason, 500)})", file=sys.stderr)
    else:
        print("models: " + ", ".join(printable(info.id) for info in infos))
    return 0


def server_rows() -> list[dict[str, Any]]:
    from concurrent.futures import ThreadPoolExecutor

    from engine.remote import servers

    rows = []
    saved = servers.list_servers()
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(saved)))) as pool:  # ask them all at once
        answers = list(pool.map(servers.models_of, saved))
    for server, infos in zip(saved, answers):
        down = infos and infos[0].status == ModelStatus.UNUSABLE
        state, reason = down_state(infos[0]) if down else ("reachable", "")
        rows.append(
            {
                "name": server.name,
                "url": display_url(server.url),
                "has_api_key": bool(server.api_key),
                "status": state,  # reachable, unreachable or unusable (it answered, but refused or sent no list)
                "reason": reason,
                "models": [] if down else [info.id.split("/", 1)[1] for info in infos],
            }
        )
    return rows


def cmd_list(args: argparse.Namespace) -> int:
    rows = server_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no servers saved (add one: chinwag servers add NAME URL)")
    for r in rows:
        key = "key" if r["has_api_key"] else "no key"
        detail = printable(r["reason"], 500) if r["reason"] else ", ".join(printable(m) for m in r["models"])
        print(f"{printable(r['name']):20} {printable(r['url']):36} {key:7} {r['status']:12} {detail}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from engine.remote import servers

    servers.remove_server(args.name)
    print(f"removed server {printable(args.name)}")
    return 0


def add_commands(sub: "argparse._SubParsersAction[OneLineParser]") -> None:
    p = sub.add_parser("servers", help="model servers (mlx_lm.server, exo, vLLM, SGLang, llama.cpp, Ollama…)")
    ssub = p.add_subparsers(dest="servers_command", required=True, metavar="{add,list,remove}")
    a = ssub.add_parser("add", help="save a server: chinwag servers add NAME URL")
    a.add_argument("name")
    a.add_argument("url", help="the server's base URL, e.g. http://127.0.0.1:8080/v1")
    a.add_argument("--api-key-env", metavar="VAR", help="read the server's API key from this environment variable")
    a.set_defaults(func=cmd_add)
    ls = ssub.add_parser("list", help="the saved servers, whether they answer, and their models")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)
    rm = ssub.add_parser("remove", help="forget a server and its API key")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_remove)
