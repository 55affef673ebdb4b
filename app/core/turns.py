"""A finished turn as the store keeps it: the message status its finish reason means, and its
stats without the long token id lists. The window and the terminal chat save turns alike. No Qt."""

from dataclasses import asdict

from app.core.store import MessageStatus
from engine.types import FinishReason, TurnStats

FINISH_STATUS = {FinishReason.CANCELLED: MessageStatus.STOPPED, FinishReason.ERROR: MessageStatus.FAILED}


def status_of(stats: TurnStats) -> MessageStatus:
    """The reply's status from its TurnStats (complete unless stopped or failed)."""
    return FINISH_STATUS.get(stats.finish_reason, MessageStatus.COMPLETE)


def stats_dict(stats: TurnStats | dict) -> dict:
    """TurnStats for the store, without the (long) token id lists."""
    d = asdict(stats) if not isinstance(stats, dict) else dict(stats)
    d.pop("prompt_ids", None)
    d.pop("reply_ids", None)
    return d
