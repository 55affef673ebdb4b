"""Tools in `chinwag chat`: the servers enabled in mcp.json, a y / n / always question before each
call (unless --allow-tools), results in short blocks. No Qt."""

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable

from app.tools import config
from app.tools.client import ToolHost, ToolSpec
from app.tools.loop import RoundLimit, ToolRun, pretty_arguments
from app.tools.loop import reply as tool_reply
from app.tools.policy import Answer, Approvals
from app.tools.results import neutralise, shown_name
from engine.errors import one_line
from engine.protocol import EngineAPI
from engine.types import GenerationParams, ToolCall, TurnStats

# chinwag chat's streaming of one turn: (engine, conv, messages, params) -> (reply text, its stats)
Stream = Callable[[EngineAPI, str, list[dict], GenerationParams], Awaitable[tuple[str, TurnStats | None]]]
SHOWN_RESULT_CHARS = 600  # the terminal shows this much of a result; the model reads it all


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-tools", action="store_true", help="no MCP tools in this chat")
    p.add_argument("--allow-tools", action="store_true", help="run every tool call without asking (scripted use)")
    p.add_argument(
        "--max-tool-rounds",
        type=int,
        default=None,
        metavar="N",
        help=f"tool rounds in one reply before it stops (default: mcp settings, else {config.DEFAULT_MAX_ROUNDS})",
    )


class TerminalTools:
    def __init__(self, host: ToolHost, approvals: Approvals, rounds: int, stream: Stream) -> None:
        self.host, self.approvals, self.rounds, self.stream = host, approvals, rounds, stream
        self.said_off = False  # the tools-off or cost line was printed
        self.runs: dict = {}  # call id -> ToolRun, for the store

    @classmethod
    async def start(cls, args: argparse.Namespace, stream: Stream) -> "TerminalTools | None":
        cfg = config.load()
        if not cfg.enabled:
            return None
        host = ToolHost(cfg.enabled)
        for name, why in (await host.start()).items():
            print(f"[MCP server {name} failed: {one_line(why)}]", file=sys.stderr)
        names = ", ".join(shown_name(t.name) for t in host.tools)
        print(f"[tools: {names or 'none'}{'; every call allowed' if args.allow_tools else ''}]")
        rounds = args.max_tool_rounds or cfg.max_rounds
        return cls(host, Approvals(cfg, allow_all=args.allow_tools), rounds, stream)

    async def reply(
        self, engine: EngineAPI, conv: str, messages: list[dict], params: GenerationParams
    ) -> tuple[list[dict], TurnStats | None]:
        async def turn(msgs: list[dict], p: GenerationParams) -> tuple[str, TurnStats | None]:
            return await self.stream(engine, conv, msgs, p)

        added, stats = await tool_reply(
            turn, messages, params, self.host, self.approvals, self.ask, self.show, self.rounds
        )
        if stats is not None and not self.said_off and (stats.tools_off or stats.tools_tokens):
            # Once per chat: why tools are off, or what their definitions cost in context.
            note = stats.tools_off or f"the tool definitions take {stats.tools_tokens} tokens of context"
            print(f"\n[{note}]")
            self.said_off = True
        return added, stats

    async def ask(self, call: ToolCall, spec: ToolSpec) -> Answer:
        print(
            f"\n[tool call: {shown_name(spec.tool)} on {shown_name(spec.server)}]\n{neutralise(pretty_arguments(call))}"
        )
        loop = asyncio.get_running_loop()
        while True:
            try:
                text = await loop.run_in_executor(None, lambda: input("Run it? y = once, n = no, always = this tool: "))
            except EOFError:
                return Answer.DENY
            answer = {"y": Answer.ONCE, "yes": Answer.ONCE, "n": Answer.DENY, "no": Answer.DENY}.get(
                text.strip().lower()
            )
            if text.strip().lower() in ("a", "always"):
                answer = Answer.ALWAYS
            if answer is not None:
                return answer

    def show(self, event: object) -> None:
        if isinstance(event, RoundLimit):
            print(f"\n[{event.text}]")
        elif isinstance(event, ToolRun):
            self.runs[event.call.id] = event
            result = event.result
            head = shown_name(event.call.name) + (f" on {shown_name(event.server)}" if event.server else "")
            status = "error" if result.is_error else f"{result.seconds:.1f} s"
            text = result.text if len(result.text) <= SHOWN_RESULT_CHARS else result.text[:SHOWN_RESULT_CHARS] + " …"
            print(f"\n[{head} ({status})]\n{text}")

    async def close(self) -> None:
        await self.host.close()
