"""A reply's tool calls, one at a time: approved (or not) and run (`run_call`), its result as a `tool`
message and what the store keeps of it, and the events front ends show. The turn driver
(app/chat/turn.py) runs the rounds. No Qt.
"""

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from app.tools.client import ToolHost, ToolResult, ToolSpec
from app.tools.config import Policy
from app.tools.policy import Answer, Approvals
from engine.types import GenerationParams, ToolCall


@dataclass(frozen=True)
class ToolRun:
    """A call the model made and what became of it (an event for front ends, and what the store keeps)."""

    call: ToolCall
    server: str  # "" if no server has that tool
    result: ToolResult
    allowed: bool


@dataclass(frozen=True)
class ToolStarted:
    """A call about to run, allowed by the user (`asked`) or by its policy: front ends can say that it runs."""

    call: ToolCall
    spec: ToolSpec
    asked: bool


@dataclass(frozen=True)
class RoundLimit:
    """The reply stopped calling tools because it reached the limit of rounds."""

    rounds: int

    @property
    def text(self) -> str:
        return f"stopped after {self.rounds} tool rounds (the limit for one reply): ask again to go on"


def pretty_arguments(call: ToolCall) -> str:
    """The call's arguments in full, as indented JSON."""
    try:
        return json.dumps(json.loads(call.arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return call.arguments


def with_tools(params: GenerationParams, host: ToolHost | None) -> GenerationParams:
    """`params` with the running servers' tool definitions (none without a host)."""
    return replace(params, tools=tuple(t.to_openai() for t in host.tools) if host else ())


async def run_call(
    host: ToolHost,
    approvals: Approvals,
    call: ToolCall,
    ask: Callable[[ToolCall, ToolSpec], Awaitable[Answer]],
    show: Callable[[object], None] = lambda event: None,
) -> ToolRun:
    spec = host.find(call.name)
    if spec is None:
        return ToolRun(call, "", ToolResult(f"error: there is no tool named {call.name!r}", True), False)
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        return ToolRun(call, spec.server, ToolResult("error: the arguments are not a JSON object", True), False)
    policy = approvals.decide(spec.server, spec.tool)
    allowed = policy == Policy.ALLOW or (
        policy == Policy.ASK and approvals.answer(spec.server, spec.tool, await ask(call, spec))
    )
    if not allowed:
        return ToolRun(call, spec.server, ToolResult("error: the user did not allow this call", True), False)
    show(ToolStarted(call, spec, policy == Policy.ASK))
    return ToolRun(call, spec.server, await host.call(spec, arguments), True)


def tool_message(run: ToolRun) -> dict[str, Any]:
    """The `tool` message that gives the model one call's result."""
    return {"role": "tool", "content": run.result.text, "tool_call_id": run.call.id, "name": run.call.name}


def stored_stats(message: dict[str, Any], run: "ToolRun | None" = None) -> dict[str, Any] | None:
    """A tool round's message's calls, or which call it answers and how it went, in the stats shape the store
    takes them in (it keeps them in their own tables: app/core/messages.py; Store.append takes them typed)."""
    if message["role"] == "assistant" and message.get("tool_calls"):
        return {"tool_calls": message["tool_calls"]}
    if message["role"] == "tool":
        out = {"tool_call_id": message.get("tool_call_id", ""), "name": message.get("name", "")}
        if run is not None:
            out.update(server=run.server, is_error=run.result.is_error, seconds=round(run.result.seconds, 3))
            out.update(arguments=run.call.arguments, allowed=run.allowed)
        return out
    return None
