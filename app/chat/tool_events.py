"""The events of a reply's tool rounds (the turn driver's, app/chat/turn.py): ToolRound when an engine
turn ends with calls, then for each call ApprovalNeeded (if it is asked), ToolStarted (app/tools/loop.py)
and ToolRan."""

from dataclasses import dataclass

from app.chat.events import Delta, Ended, Planned, Reading, TurnStarted
from app.tools.client import ToolSpec
from app.tools.loop import ToolRun, ToolStarted
from engine.types import ToolCall, TurnStats


@dataclass(frozen=True)
class ToolRound:
    """The engine turn ended with tool calls: its message is saved with them; the calls run next."""

    msg_id: int | None
    text: str  # the turn's text as generated (the calls' markup included)
    stats: TurnStats


@dataclass(frozen=True)
class ApprovalNeeded:
    """A call waits for the user's answer (the driver's `ask` callback is asked next)."""

    call: ToolCall
    spec: ToolSpec


@dataclass(frozen=True)
class ToolRan:
    """A call's result (run, refused or stopped), saved as a `tool` message."""

    msg_id: int | None
    run: ToolRun


Event = Planned | TurnStarted | Reading | Delta | ToolRound | ApprovalNeeded | ToolStarted | ToolRan | Ended
