"""What a turn tells its front end, in order: Planned (documents), TurnStarted, then Reading / Delta while each engine
turn streams, the tool rounds' events (tool_events.py) for each round of calls, and one Ended. Imports only the engine."""

from dataclasses import dataclass

from engine.types import PrefillProgress, TurnStats


@dataclass(frozen=True)
class Planned:
    """The documents of the user's message, planned (app/documents/turn.py): whole, or passages."""

    notes: tuple[str, ...]  # one line per document sent as passages
    references: tuple[str, ...]  # "report.pdf: page 4" for each passage used
    summary: str  # "report.pdf 6,812 tokens · 83% of the context"


@dataclass(frozen=True)
class TurnStarted:
    """An assistant message starts streaming (the reply, or the next one after a round's results).
    `msg_id`: its row in the store (None for a chat that is not saved)."""

    conv_id: str
    msg_id: int | None
    round: int  # 0 for the reply's first message, 1 after the first round of calls...


@dataclass(frozen=True)
class Reading:
    """The engine reads the prompt (a long one: "Reading your message… 43%")."""

    progress: PrefillProgress


@dataclass(frozen=True)
class Delta:
    """A piece of the reply's text, as the model wrote it (a front end neutralises what it prints)."""

    text: str


@dataclass(frozen=True)
class Ended:
    """The reply ended: how (a MessageStatus), its last engine turn's stats (None: stopped or failed
    before the engine sent them), why it failed, and a note ("Stopped after 8 tool rounds…")."""

    status: str
    stats: TurnStats | None
    error: str = ""
    note: str = ""
