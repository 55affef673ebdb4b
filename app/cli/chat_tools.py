"""Tools in `chinwag chat`: the servers enabled in mcp.json, a y / n / always question before each
call (unless --allow-tools), results in short blocks. The calls run in the turn driver
(app/chat/turn.py); this is the terminal's side of them. No Qt."""

import argparse
import asyncio
import sys

from app.chat.turn import Tools
from app.tools import config
from app.tools.client import ToolHost, ToolSpec
from app.tools.loop import ToolRun, pretty_arguments
from app.tools.policy import Answer, Approvals
from app.tools.results import neutralise, shown_name
from engine.errors import one_line
from engine.types import ToolCall, TurnStats

SHOWN_RESULT_CHARS = 600  # the terminal shows this much of a result; the model reads it all
ANSWERS = {"y": Answer.ONCE, "yes": Answer.ONCE, "n": Answer.DENY, "no": Answer.DENY, "a": Answer.ALWAYS}


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
    def __init__(self, host: ToolHost, approvals: Approvals, rounds: int) -> None:
        self.host, self.approvals, self.rounds = host, approvals, rounds
        self.said_off = False  # the tools-off or cost line was printed

    @classmethod
    async def start(cls, args: argparse.Namespace) -> "TerminalTools | None":
        cfg = config.load()
        if not cfg.enabled:
            return None
        host = ToolHost(cfg.enabled)
        for name, why in (await host.start()).items():
            print(f"[MCP server {name} failed: {one_line(why)}]", file=sys.stderr)
        names = ", ".join(shown_name(t.name) for t in host.tools)
        print(f"[tools: {names or 'none'}{'; every call allowed' if args.allow_tools else ''}]")
        rounds = args.max_tool_rounds or cfg.max_rounds
        return cls(host, Approvals(cfg, allow_all=args.allow_tools), rounds)

    def for_driver(self) -> Tools:
        return Tools(self.host, self.approvals, self.ask, self.rounds)

    def ended(self, stats: TurnStats | None) -> None:
        """Once per chat: why tools are off, or what their definitions cost in context."""
        if stats is not None and not self.said_off and (stats.tools_off or stats.tools_tokens):
            note = stats.tools_off or f"the tool definitions take {stats.tools_tokens} tokens of context"
            print(f"\n[{note}]")
            self.said_off = True

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
            answer = ANSWERS.get(text.strip().lower(), Answer.ALWAYS if text.strip().lower() == "always" else None)
            if answer is not None:
                return answer

    def show(self, run: ToolRun) -> None:
        result = run.result
        head = shown_name(run.call.name) + (f" on {shown_name(run.server)}" if run.server else "")
        status = "error" if result.is_error else f"{result.seconds:.1f} s"
        text = result.text if len(result.text) <= SHOWN_RESULT_CHARS else result.text[:SHOWN_RESULT_CHARS] + " …"
        print(f"\n[{head} ({status})]\n{text}")

    async def close(self) -> None:
        await self.host.close()
