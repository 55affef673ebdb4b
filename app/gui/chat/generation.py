"""The reply the window is writing, as the controller follows it (`Generation`), and the lines it
shows of replies: how far the prompt is read, the last reply's stats."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.core.store import Message, MessageRole
from engine.types import PrefillProgress


def reading_text(progress: PrefillProgress) -> str:
    """'Reading your message… 43%' from a PrefillProgress; 'Re-reading the chat… 43%' while the
    earlier messages are read again (a changed system prompt, model or version not read ahead)."""
    what = "Re-reading the chat…" if progress.rereading else "Reading your message…"
    return f"{what} {int(100 * progress.fraction)}%"


def last_reply_stats(messages: Sequence[Message]) -> dict[str, Any] | None:
    """The stats of the last reply shown, with the model that wrote it (its context limit is
    that model's: the status bar uses the loaded model's once another is loaded)."""
    last = next((m for m in reversed(messages) if m.role == MessageRole.ASSISTANT and m.stats), None)
    return {**(last.stats or {}), "model_id": last.model_id} if last is not None else None


@dataclass
class Generation:
    conv_id: str
    msg_id: int
    text: str = ""
    saved: str = ""
    started: float = 0.0
    reading: str = ""  # "Reading your message… 43%" until the first text arrives
    system_prompt: str = ""  # the one this reply is written with (its digest is saved in the stats)
    earlier_tokens: int = 0  # a continued reply: the tokens it had before (its stats count them all)
