"""`chinwag serve`: the OpenAI-compatible API on the local models, headless (app/server/). No Qt."""

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

from app.cli import fit
from app.cli.parser import MODEL_HELP, OneLineParser

if TYPE_CHECKING:
    from app.server.run import ApiServer


def add_commands(sub: "argparse._SubParsersAction[OneLineParser]") -> None:
    from engine.models.folders import STARTER_ID

    p = sub.add_parser("serve", help="serve the local models over an OpenAI-compatible API")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default: 8080; 0 picks a free one)")
    p.add_argument("--model", default=STARTER_ID, help=MODEL_HELP)
    key = p.add_mutually_exclusive_group()
    key.add_argument("--api-key", default="", metavar="KEY", help="require this key (visible in the process list)")
    key.add_argument("--api-key-env", default="", metavar="VAR", help="require the key held in this variable")
    p.add_argument("--allow-switch", action="store_true", help="let a request for another model load it")
    p.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let web pages from this origin in (e.g. http://localhost:3000; others get 403)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="answer requests whose Host is NAME too (a proxy's or a machine's name; *.example.com; others get 421)",
    )
    fit.add_flags(p)
    p.set_defaults(func=lambda a: asyncio.run(_serve(a)))


async def _serve(args: argparse.Namespace) -> int:
    from app.core import serving
    from app.server.http import ServerConfig
    from app.server.run import SAVE_ON_STOP_S, check_config, serve_forever
    from engine import Engine
    from engine.errors import ChinwagError

    api_key = args.api_key
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env, "")
        if not api_key:
            raise ChinwagError(f"--api-key-env {args.api_key_env}: that environment variable is not set or empty")
    config = ServerConfig(
        args.host,
        args.port,
        args.model,
        api_key,
        args.allow_switch,
        cors_origins=tuple(o.rstrip("/") for o in args.cors_origin),
        allowed_hosts=tuple(args.allowed_host),
    )
    check_config(config)  # before the model loads: a refused address fails at once
    options = fit.engine_options(args)  # bad --kv-bits or --memory-limit: one line, before anything starts
    check_alone()  # a second server on this data folder would load a second model and share its kv/

    def ready(server: "ApiServer") -> None:
        model = server.engine.current_model
        serving.claim(serving.CLI, server.url)  # the window on this data folder says where this is
        print(f"Serving {model.id if model else 'no model'} at {server.url} (Ctrl+C stops)", flush=True)
        if model is not None and fit.context_note(model):
            print(f"chinwag serve: {fit.context_note(model)}", file=sys.stderr, flush=True)

    try:
        await serve_forever(config, Engine(save_seconds=SAVE_ON_STOP_S, **options), ready)
    finally:
        serving.release()
    print("stopped; caches saved", file=sys.stderr)
    return 0


def check_alone() -> None:
    """Refuse (one line) when another Chinwag serves this data folder, or its window has it open."""
    from app.core import serving
    from engine.errors import ChinwagError

    other = serving.current()
    if other is not None:
        raise ChinwagError(f"{other.line()}: stop it there, or give chinwag serve another data folder (CHINWAG_HOME)")
    if serving.window_open():
        raise ChinwagError(
            "the Chinwag window is open on this data folder: serve from it (File › Server…), "
            "or give chinwag serve another data folder (CHINWAG_HOME)"
        )
