"""A finished turn as the store keeps it: the message status its finish reason means, and its
stats without the long token id lists, with a digest of the system prompt it was written with (the
store keeps only a chat's current prompt; exports show a prompt where it took effect). The window and
the terminal chat save turns alike. No Qt."""

import hashlib
from dataclasses import asdict
from typing import Any

from app.core.store import MessageStatus
from engine.types import FinishReason, TurnStats

FINISH_STATUS = {FinishReason.CANCELLED: MessageStatus.STOPPED, FinishReason.ERROR: MessageStatus.FAILED}
PROMPT_KEY = "system_prompt_sha"  # in a reply's stats: prompt_digest of the system prompt it was written with
PROMPT_DIGEST_CHARS = 16  # tells prompts apart; the text itself stays in the chat's settings only


def status_of(stats: TurnStats) -> MessageStatus:
    """The reply's status from its TurnStats (complete unless stopped or failed)."""
    return FINISH_STATUS.get(stats.finish_reason, MessageStatus.COMPLETE)


def stat(stats: TurnStats | dict[str, Any] | None, key: str, default: Any = 0) -> Any:
    """One value of a TurnStats or of its stored dict; `default` when it has none (or no stats)."""
    if not stats:
        return default
    return stats.get(key, default) if isinstance(stats, dict) else getattr(stats, key, default)


# Why a reply ends early, in the words of the window's stats line and of exports.
CUT_NOTES = {FinishReason.LENGTH: "hit max tokens", FinishReason.CONTEXT: "hit the context limit"}


def cut_note(stats: TurnStats | dict[str, Any] | None) -> str:
    """ "hit max tokens" for a reply cut at its length limit (at the context's: "hit the context limit"), else ""."""
    return CUT_NOTES.get(stat(stats, "finish_reason", ""), "")


def prompt_digest(system_prompt: str) -> str:
    """The system prompt's digest; "" for none (a blank prompt is not sent: app/core/settings.py)."""
    if not system_prompt.strip():
        return ""
    return hashlib.sha256(system_prompt.encode("utf-8", "replace")).hexdigest()[:PROMPT_DIGEST_CHARS]


def stats_dict(
    stats: TurnStats | dict[str, Any], system_prompt: str | None = None, earlier_tokens: int = 0
) -> dict[str, Any]:
    """TurnStats for the store, without the (long) token id lists; with system_prompt (the one the
    reply was written with, "" for none) its digest under PROMPT_KEY. A continued reply passes
    the tokens it had before (`earlier_tokens`): its count is the whole reply's."""
    d = asdict(stats) if not isinstance(stats, dict) else dict(stats)
    d.pop("prompt_ids", None)
    d.pop("reply_ids", None)
    if system_prompt is not None:
        d[PROMPT_KEY] = prompt_digest(system_prompt)
    if earlier_tokens:
        d["generated_tokens"] = earlier_tokens + int(d.get("generated_tokens") or 0)
    return d
