"""One probe of MCP servers: start each enabled one, list its tools, stop it (`chinwag mcp list` and
the window's MCP Servers dialog show the same rows)."""

import asyncio
from collections.abc import Sequence
from typing import Any

from app.tools.config import ServerConfig
from app.tools.results import neutralise, shown_name
from engine.errors import one_line


async def server_rows(configs: Sequence[ServerConfig]) -> list[dict[str, Any]]:
    """Start each enabled server, list its tools, stop it: one row per server."""
    from app.tools.client import ServerConnection

    async def probe(c: ServerConfig) -> dict[str, Any]:
        row: dict[str, Any] = {
            "name": c.name,
            "transport": c.transport,
            "target": c.describe(),
            "enabled": c.enabled,
            "policy": c.policy.value,
            "status": "disabled",
            "reason": "",
            "tools": [],
            "left_out": [],  # a line for each tool past a bound (app/tools/client.py MAX_*)
        }
        if not c.enabled:
            return row
        conn = ServerConnection(c)
        try:
            if await conn.start():
                row["status"] = "ok"
                row["tools"] = [
                    {"name": t.name, "description": _description(t.description), "policy": c.policy_for(t.name)}
                    for t in conn.tools
                ]
                row["left_out"] = conn.left_out
            else:
                row["status"], row["reason"] = "failed", conn.error
        finally:
            await conn.stop()
            conn.close_log()
        return row

    return list(await asyncio.gather(*(probe(c) for c in configs)))


def _description(text: str | None) -> str:
    return shown_name(one_line(neutralise(text or "")), 500)  # bidi, zero-width, tag characters escaped too
