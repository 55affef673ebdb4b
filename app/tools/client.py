"""MCP servers through the official SDK: start one, list its tools, call a tool with a timeout, stop it.

Each server's connection lives in one asyncio task that holds the SDK's context managers (their
anyio task groups must be left by the task that entered them); calls come from any task on the
same loop. A stdio server is a child process, stopped when its connection closes (`ToolHost.close`),
and started with only the SDK's minimal environment (PATH, HOME, USER, SHELL, TERM, LOGNAME) plus
the env of its configuration: none of Chinwag's own environment leaks to it.

A result's structured content is checked against the tool's output schema here, not by the SDK (on
the loop, with no time bound): in a child process, within the call's timeout (app/tools/schema_check.py).
"""

import asyncio
import contextlib
import functools
import json
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from app.core.sizes import format_bytes
from app.tools.config import ServerConfig
from app.tools.results import clip, neutralise, result_text, shown_name
from app.tools.schema_check import CheckerBug, SchemaChecker
from engine.log import report_bug

if TYPE_CHECKING:
    from mcp.client.session import ClientSession
    from mcp.types import CallToolResult

log = logging.getLogger(__name__)

START_TIMEOUT_S = 20.0  # a server that has not listed its tools by then is reported as hanging
CALL_TIMEOUT_S = 60.0
MAX_TOOLS = 128  # a server's tools offered to a model: each one costs prompt tokens every turn
MAX_TOOL_NAME = 64  # OpenAI's limit on a function's name
MAX_SCHEMA_BYTES = 16_384  # a tool's input schema as JSON: written into every prompt
MAX_DESCRIPTION = 2000  # characters of a tool's description offered to a model (cut, not left out)
STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ToolSpec:
    """One tool of one server, as the model is shown it (`name` is unique among the tools on)."""

    server: str
    tool: str  # the server's own name for it
    name: str  # the name the model calls it by: the tool's, or server__tool when another tool has it (model_names)
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI / chat-template function definition."""
        schema = self.input_schema or {"type": "object", "properties": {}}
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": schema},
        }


@dataclass(frozen=True)
class ToolResult:
    text: str  # bounded and neutralised
    is_error: bool = False
    seconds: float = 0.0
    truncated: bool = False


def _closed(e: BaseException) -> bool:
    from mcp.shared.exceptions import MCPError
    from mcp.types import CONNECTION_CLOSED

    return isinstance(e, MCPError) and e.error.code == CONNECTION_CLOSED


@functools.cache
def _session_class() -> "type[ClientSession]":
    """The SDK's ClientSession without its own check of results against output schemas (see `_checked`)."""
    from mcp.client.session import ClientSession

    class UncheckedSession(ClientSession):
        async def validate_tool_result(self, name: str, result: "CallToolResult") -> None:
            """Not here, on the loop: ServerConnection checks it in a child process, in time."""

    return UncheckedSession


def _short(e: BaseException) -> str:
    text = neutralise(str(e)).strip() or type(e).__name__
    return clip(" ".join(text.split()), 300)


def _within_bounds(server: str, tools: list[Any]) -> tuple[list[Any], list[str]]:
    """The tools a model may be offered, and a line for each left out: a name past MAX_TOOL_NAME, an
    input schema past MAX_SCHEMA_BYTES (it would be written into every prompt), past MAX_TOOLS."""
    kept: list[Any] = []
    left: list[str] = []
    for t in tools:
        schema = len(json.dumps(t.input_schema or {}, ensure_ascii=False, default=str).encode())
        if len(t.name) > MAX_TOOL_NAME:
            left.append(
                f"{shown_name(t.name[:MAX_TOOL_NAME])}…: its name is {len(t.name):,} characters (at most {MAX_TOOL_NAME})"
            )
        elif schema > MAX_SCHEMA_BYTES:
            left.append(
                f"{shown_name(t.name)}: its input schema is {format_bytes(schema)} (at most {format_bytes(MAX_SCHEMA_BYTES)})"
            )
        elif len(kept) == MAX_TOOLS:
            left.append(f"{shown_name(t.name)} and later tools: the server lists over {MAX_TOOLS}")
            break
        else:
            kept.append(t)
    for line in left:
        log.warning("MCP server %s: tool %s left out", server, line)
    return kept, left


class ServerConnection:
    """One MCP server: `start()` connects and lists its tools; `call()`; `stop()`."""

    def __init__(self, config: ServerConfig, start_timeout: float = START_TIMEOUT_S) -> None:
        self.config = config
        self.start_timeout = start_timeout
        self.tools: list[Any] = []  # mcp Tool objects
        self.left_out: list[str] = []  # why a listed tool is not offered (past a bound), one line each
        self.error = ""  # why it is not running
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._errlog: TextIO | None = None
        self._checker = SchemaChecker()

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def running(self) -> bool:
        return self._session is not None and self._task is not None and not self._task.done()

    async def start(self) -> bool:
        """Connect; False (and `error` says why) if it fails or hangs."""
        self._stop = asyncio.Event()
        self.error = ""
        if self._errlog is not None:  # a restart: the last run's words are no reason now
            self._errlog.seek(0)
            self._errlog.truncate()
        ready: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp {self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.start_timeout)
            return True
        except TimeoutError:
            self.error = f"did not answer within {self.start_timeout:g} s of starting"
        except Exception as e:  # noqa: BLE001 - a server that fails to start in any way is one line (its error); the chat goes on
            self.error = self._why(e)
        await self.stop()
        return False

    def _why(self, e: BaseException) -> str:
        """The reason a server failed: the last line it wrote to stderr if it died, else the error."""
        tail = self._stderr_tail()
        while isinstance(e, BaseExceptionGroup) and e.exceptions:  # anyio wraps the real error
            e = e.exceptions[0]
        base = "it closed the connection" if _closed(e) else _short(e)
        return f"{base} (its last words: {tail})" if tail else base

    def _stderr_tail(self) -> str:
        if self._errlog is None:
            return ""
        try:
            self._errlog.seek(0)
            lines = [ln.strip() for ln in self._errlog.read()[-4000:].splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        return clip(neutralise(lines[-1]), 300) if lines else ""

    async def _hold(self, ready: asyncio.Future[bool]) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.config.url:
                    from mcp.client.streamable_http import streamable_http_client
                    from mcp.shared._httpx_utils import create_mcp_http_client

                    http = await stack.enter_async_context(create_mcp_http_client(headers=dict(self.config.headers)))
                    streams = await stack.enter_async_context(streamable_http_client(self.config.url, http_client=http))
                else:
                    from mcp.client.stdio import StdioServerParameters, stdio_client

                    if self._errlog is None:  # kept open after a failure: its last line says why
                        self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
                    params = StdioServerParameters(
                        command=self.config.command, args=list(self.config.args), env=dict(self.config.env)
                    )
                    streams = await stack.enter_async_context(stdio_client(params, errlog=self._errlog))
                session = await stack.enter_async_context(_session_class()(streams[0], streams[1]))
                await session.initialize()
                tools, cursor = [], None
                while True:
                    from mcp.types import PaginatedRequestParams

                    page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor or len(tools) > MAX_TOOLS:
                        break
                self.tools, self.left_out = _within_bounds(self.name, tools)
                self._session = session
                ready.set_result(True)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as e:  # noqa: BLE001 - the starter awaiting `ready` learns every way the connection ended
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else RuntimeError(str(e)))
            else:
                self.error = self._why(e)
                log.warning("MCP server %s stopped: %s", self.name, self.error)
        finally:
            self._session = None

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float = CALL_TIMEOUT_S) -> ToolResult:
        """Run one tool; a failure, a timeout or a dead server is a result with is_error (never raises)."""
        started = time.monotonic()

        def failed(text: str) -> ToolResult:
            return ToolResult(f"error: {text}", True, time.monotonic() - started)

        if not self.running:
            return failed(f"the MCP server {self.name} is not running" + (f": {self.error}" if self.error else ""))
        session = self._session
        assert session is not None
        try:
            result = await asyncio.wait_for(session.call_tool(tool, arguments, read_timeout_seconds=timeout), timeout)
        except TimeoutError:
            return failed(f"{self.name}/{shown_name(tool)} did not answer within {timeout:g} s")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever a server does to a call is one failed tool result, not a crash of the chat
            if _closed(e) or not self.running:
                await asyncio.sleep(0.2)  # its last words reach the stderr file
                self.error = self.error or self._why(e)
                await self.stop()
                return failed(f"the MCP server {self.name} stopped: {self.error}")
            return failed(f"{self.name}/{shown_name(tool)}: {_short(e)}")
        if not result.is_error:
            wrong = await self._checked(tool, result, timeout, timeout - (time.monotonic() - started))
            if wrong:
                return failed(f"{self.name}/{shown_name(tool)}: {wrong}")
        text, cut = result_text(result)
        return ToolResult(text, bool(result.is_error), time.monotonic() - started, cut)

    async def _checked(self, tool: str, result: "CallToolResult", timeout: float, seconds: float) -> str:
        """Why `result` does not conform to the tool's output schema ("" if it does, or it has none),
        found in the `seconds` left of the call's `timeout`."""
        schema: Any = next((t.output_schema for t in self.tools if t.name == tool), None)
        if schema is None:
            return ""
        if result.structured_content is None:
            return "it has an output schema but returned no structured content"
        try:
            return await self._checker.check(schema, result.structured_content, max(seconds, 0.0))
        except TimeoutError:
            return f"its result could not be checked against its output schema within {timeout:g} s"
        except CheckerBug as e:
            return report_bug(e, "checking a tool's result against its output schema")
        except OSError as e:  # the checker's process could not start (no memory, no processes left)
            return f"its result could not be checked against its output schema: {e.strerror or e}"

    async def stop(self) -> None:
        """Close the connection; a stdio server's process is ended (the SDK terminates it if needed)."""
        await self._checker.close()
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        if self._session is not None:  # connected: _hold ends when it sees _stop
            with contextlib.suppress(TimeoutError, Exception):  # one that ends badly is cancelled below all the same
                await asyncio.wait_for(asyncio.shield(task), STOP_TIMEOUT_S)
        if not task.done():  # still starting (it awaits the server, never _stop), or too slow to close
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, STOP_TIMEOUT_S)
        self._session = None

    def close_log(self) -> None:
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None


def model_names(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The name the model calls each (server, tool) by, all different: the tool's own name while no
    other tool has it, else `server__tool`; a tool whose own name is another's qualified name is
    qualified too (a and b have `x`, c has `a__x`: `a__x`, `b__x`, `c__a__x`); a name shared even
    so (`x` of `a__b` and of `d`, `b__x` of `a` and of `e`) is numbered after its first (`a__b__x_2`)."""
    names = [tool for _, tool in pairs]
    changed = True
    while changed:  # each name is qualified at most once
        counts = Counter(names)
        changed = False
        for i, (server, tool) in enumerate(pairs):
            if counts[names[i]] > 1 and names[i] == tool:
                names[i], changed = f"{server}__{tool}", True
    counts, taken, first = Counter(names), set(names), set()
    for i, name in enumerate(names):
        if counts[name] > 1 and name in first:
            n = 2
            while f"{name}_{n}" in taken:
                n += 1
            names[i] = f"{name}_{n}"
            taken.add(names[i])
        first.add(name)
    return names


class ToolHost:
    """The MCP servers of one chat session: their tools under unique names, calls routed by name."""

    def __init__(self, configs: Sequence[ServerConfig], start_timeout: float = START_TIMEOUT_S) -> None:
        self.connections = {c.name: ServerConnection(c, start_timeout) for c in configs}

    async def start(self) -> dict[str, str]:
        """Start every server at once; {name: error} for the ones that failed."""
        results = await asyncio.gather(*(c.start() for c in self.connections.values()))
        return {c.name: c.error for c, ok in zip(self.connections.values(), results) if not ok}

    async def restart(self, name: str) -> bool:
        conn = self.connections[name]
        await conn.stop()
        return await conn.start()

    @property
    def tools(self) -> list[ToolSpec]:
        """Every running server's tools (ToolSpec) under names that are all different (`model_names`)."""
        pairs = []
        for c in self.connections.values():
            if c.running:
                own: set[str] = set()
                for t in c.tools:
                    if t.name not in own:  # a server that lists a name twice has one tool of that name
                        own.add(t.name)
                        pairs.append((c.name, t))
        names = model_names([(server, t.name) for server, t in pairs])
        return [
            ToolSpec(
                server, t.name, name, neutralise(t.description or "")[:MAX_DESCRIPTION], dict(t.input_schema or {})
            )
            for (server, t), name in zip(pairs, names)
        ]

    def subset(self, names: Collection[str]) -> "ToolHost":
        """The same running connections, only those named (one chat's choice); close the full host, not this."""
        part = ToolHost(())
        part.connections = {n: c for n, c in self.connections.items() if n in names}
        return part

    def find(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)

    async def call(self, spec: ToolSpec, arguments: dict[str, Any], timeout: float = CALL_TIMEOUT_S) -> ToolResult:
        return await self.connections[spec.server].call(spec.tool, arguments, timeout)

    async def close(self) -> None:
        await asyncio.gather(*(c.stop() for c in self.connections.values()))
        for c in self.connections.values():
            c.close_log()
