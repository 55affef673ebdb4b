"""Reading an OpenAI chat-completions stream: server-sent events in, TextDelta events and a TurnStats out.

`EventLines` frames the text/event-stream (data lines joined into one payload per event,
keepalive comments read as prefill progress); `decode` turns one payload into the reply's
text, its reasoning shown as a <think> block; `stats` makes the TurnStats from what a
`Turn` gathered. Pure: no network, no threads.
"""

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import ChinwagError
from engine.remote.errors import PastMaxTokens, StreamLimit, server_message
from engine.text import THINK_CLOSE, THINK_OPEN
from engine.types import FinishReason, TextDelta, ToolCall, TurnStats

_KEEPALIVE = re.compile(r"keepalive\s+(\d{1,15})\s*/\s*(\d{1,15})")
# Pieces of a reply a server may send past max_tokens (a piece is at least one token, but a
# server may count differently) before the reply is cut off there.
EXTRA_PIECES = 64
# The server's finish_reason -> ours; anything else that ends a reply normally is a stop.
FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "tool_calls": FinishReason.TOOL_CALLS}
# A token count past this is no model's: a server that sends one is not believed (the figure is 0).
MAX_COUNT = 1 << 40
_BOM = "\ufeff"


class EventLines:
    """The lines of a text/event-stream, one at a time; each event's data once the event ends."""

    def __init__(self, max_bytes: int) -> None:
        """`max_bytes`: the most one event's data lines may hold together (network.Limits)."""
        self._data: list[str] = []
        self._size = 0
        self._first = True
        self._kind = ""
        self.max_bytes = max_bytes
        self.kind = ""  # the `event:` field of the event feed last returned ("" for a plain one)

    def feed(self, line: str) -> str | None:
        """The event's payload when `line` ends one (a blank line after data lines), else None."""
        if self._first:  # the standard drops one byte order mark at the start of the stream
            line, self._first = line.removeprefix(_BOM), False
        if line.startswith("data:"):
            self._data.append(line[5:].removeprefix(" "))
            self._size += len(line)
            if self._size > self.max_bytes:
                raise StreamLimit(f"sent an event over {self.max_bytes:,} bytes: Chinwag stopped reading the reply")
        elif line.startswith("event:"):
            self._kind = line[6:].strip()[:40]
        elif not line.strip() and self._data:
            payload, self._data, self._size = "\n".join(self._data), [], 0
            self.kind, self._kind = self._kind, ""
            return payload
        elif not line.strip():
            self._kind = ""  # an event without data is not dispatched
        return None


def keepalive(line: str) -> tuple[int, int] | None:
    """(done, total) from mlx_lm.server's keepalive comment while it reads the prompt, else None."""
    if not line.startswith(":"):
        return None
    m = _KEEPALIVE.search(line)
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass
class Turn:
    """What one streamed reply has gathered."""

    content: list[str] = field(default_factory=list)  # exactly as received
    shown: list[str] = field(default_factory=list)  # what the UI got (reasoning wrapped in <think>)
    in_reasoning: bool = False
    finish: str = ""
    usage: dict[str, Any] = field(default_factory=dict)
    first: float = 0.0
    last: float = 0.0
    deltas: int = 0
    tool_calls: dict[int | str, dict[str, str]] = field(
        default_factory=dict
    )  # index -> {"id", "name", "arguments" (JSON text so far)}

    def arrive(self) -> None:
        now = time.perf_counter()
        self.first = self.first or now
        self.last = now
        self.deltas += 1

    def show(self, text: str) -> TextDelta:
        self.shown.append(text)
        return TextDelta(text)

    def close_reasoning(self) -> TextDelta | None:
        """The </think> a reply that ended mid-reasoning still needs."""
        return self.show(THINK_CLOSE) if self.in_reasoning else None


def piece_limit(max_tokens: int) -> int:
    """How many pieces a reply of at most `max_tokens` tokens may arrive in before it is cut off."""
    return max_tokens + max(EXTRA_PIECES, max_tokens // 4)


def check_length(turn: Turn, max_tokens: int) -> None:
    if turn.deltas > piece_limit(max_tokens):
        raise PastMaxTokens(
            f"kept sending past max_tokens ({max_tokens}): Chinwag stopped reading after {turn.deltas} pieces"
        )


class WrongShape(ChinwagError):
    """Well-formed JSON that is not a chat-completions chunk."""


def decode(
    payload: str, turn: Turn, put: Callable[[TextDelta], None], redact: Callable[[str], str] = str, kind: str = ""
) -> bool:
    """Handle one event's payload: its text goes to `put`; True at [DONE]. `redact` cleans what a
    server sent before a message quotes it; `kind` is the event's `event:` field."""
    if kind == "error":  # whatever its payload holds, it is the server's message
        raise ChinwagError(f"failed mid-reply: {server_message(redact(payload).encode())}")
    if payload.strip() == "[DONE]":
        return True
    try:
        event = json.loads(payload)
        if not isinstance(event, dict):
            raise ValueError("not an object")
    except (ValueError, RecursionError):  # nested deeper than the parser goes is malformed too
        raise ChinwagError(f"sent malformed stream data: {redact(payload)[:80]!r}") from None
    if event.get("error"):
        raise ChinwagError(f"failed mid-reply: {server_message(redact(payload).encode())}")
    if isinstance(event.get("usage"), dict):
        turn.usage = event["usage"]
    choices = event.get("choices") or []
    if not isinstance(choices, list):
        raise WrongShape(f"sent a stream event of the wrong shape ('choices' is not a list): {redact(payload)[:80]!r}")
    for choice in choices:
        try:
            _choice(_object(choice, "a choice"), turn, put)
        except WrongShape as e:
            raise WrongShape(f"sent a stream event of the wrong shape ({e}): {redact(payload)[:80]!r}") from None
    return False


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(value: str) -> str:
    """A server's string with its lone surrogates (JSON's "\\ud800", which no UTF-8 can hold: the
    store, the terminal and the window would raise on them) as U+FFFD."""
    return _LONE_SURROGATE.sub("\ufffd", value)


def _object(value: object, what: str) -> dict[str, Any]:
    """`value` if it is a JSON object; nothing (null) is an empty one."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WrongShape(f"{what} is not an object")
    return value


def _choice(choice: dict[str, Any], turn: Turn, put: Callable[[TextDelta], None]) -> None:
    delta = _object(choice.get("delta") or choice.get("message"), "a delta")
    reasoning = delta.get("reasoning") or delta.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        reasoning = _text(reasoning)
        turn.arrive()
        if not turn.in_reasoning:
            turn.in_reasoning = True
            reasoning = THINK_OPEN + reasoning
        put(turn.show(reasoning))
    content = _content(delta.get("content"))
    if content:
        content = _text(content)
        turn.arrive()
        turn.content.append(content)
        shown = content
        if turn.in_reasoning:
            turn.in_reasoning = False
            shown = THINK_CLOSE + content
        put(turn.show(shown))
    calls = delta.get("tool_calls") or []
    if not isinstance(calls, list):
        raise WrongShape("'tool_calls' is not a list")
    for call in calls:
        _tool_delta(turn, call)
    finish = choice.get("finish_reason")
    if finish:
        turn.finish = FINISH.get(finish, FinishReason.STOP) if isinstance(finish, str) else FinishReason.STOP


def _content(value: object) -> str:
    """A delta's content: text, or a list of text parts (as in a request); None is no text."""
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in value):
        return "".join(p["text"] for p in value)
    raise WrongShape("a delta's 'content' is not text")


def _tool_delta(turn: Turn, call: object) -> None:
    """One streamed piece of a tool call: its id and name come once, its arguments in pieces."""
    call = _object(call, "a tool call")
    index = call.get("index", len(turn.tool_calls))
    if not isinstance(index, (int, str)) or isinstance(index, bool):
        raise WrongShape("a tool call's 'index' is not a number")
    function = _object(call.get("function"), "a tool call's 'function'")
    name, arguments = function.get("name"), function.get("arguments")
    if name is not None and not isinstance(name, str):
        raise WrongShape("a tool call's 'name' is not text")
    if arguments is not None and not isinstance(arguments, (str, dict)):
        raise WrongShape("a tool call's 'arguments' are not text")
    turn.arrive()
    known = turn.tool_calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
    if isinstance(call.get("id"), str) and call["id"]:
        known["id"] = _text(call["id"])
    if name:
        known["name"] = _text(name)
    if isinstance(arguments, str):
        known["arguments"] += _text(arguments)
    elif isinstance(arguments, dict):
        known["arguments"] = json.dumps(arguments)


def _arguments(text: str) -> dict[str, Any] | None:
    """A tool call's arguments as a JSON object, or None (not JSON, NaN or Infinity in it, not an object)."""
    try:
        arguments = json.loads(text or "{}", parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None
    return arguments if isinstance(arguments, dict) else None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def tool_calls(turn: Turn) -> tuple[ToolCall, ...]:
    """The streamed tool calls, complete ones only (arguments that are a JSON object)."""
    out = []
    for index in sorted(turn.tool_calls, key=str):
        c = turn.tool_calls[index]
        arguments = _arguments(c["arguments"])
        if c["name"] and arguments is not None:
            text = _text(json.dumps(arguments, ensure_ascii=False))  # "\ud800" in the JSON is a lone surrogate now
            out.append(ToolCall(c["id"] or f"call_{index}", c["name"], text))
    return tuple(out)


def unusable_call(turn: Turn) -> str:
    """Why a reply that ended with tool calls has one that cannot run ("" if every call can; a reply
    cut at its length is only cut)."""
    if turn.finish not in (FinishReason.TOOL_CALLS, FinishReason.STOP):
        return ""
    for c in turn.tool_calls.values():
        if not c["name"]:
            return "sent a tool call without a name"
        if _arguments(c["arguments"]) is None:
            return f"sent a tool call to {c['name'][:60]!r} whose arguments are not a JSON object"
    return ""


def stats(turn: Turn, started: float, dropped: int, error: str) -> TurnStats:
    usage = turn.usage
    prompt = _int(usage.get("prompt_tokens"))
    generated = _int(usage.get("completion_tokens")) or turn.deltas
    details = usage.get("prompt_tokens_details") or {}
    cached = _int(details.get("cached_tokens") if isinstance(details, dict) else 0)
    ttft = (turn.first - started) if turn.first else 0.0
    span = turn.last - turn.first
    calls = tool_calls(turn) if turn.finish not in (FinishReason.CANCELLED, FinishReason.ERROR) else ()
    return TurnStats(
        prompt_tokens=prompt,
        reused_tokens=cached,
        prefilled_tokens=max(0, prompt - cached),
        generated_tokens=generated,
        ttft_s=ttft,
        decode_tps=(generated - 1) / span if generated > 1 and span > 0 else 0.0,
        prefill_tps=(prompt - cached) / ttft if ttft > 0 else 0.0,
        kv_capacity=0,
        kv_offset=prompt + generated,
        kv_bytes=0,
        context_limit=0,
        finish_reason=FinishReason.TOOL_CALLS if calls else FinishReason(turn.finish or FinishReason.STOP),
        dropped_messages=dropped,
        error=error,
        tool_calls=calls,
    )


def without_reasoning(text: str) -> str:
    """A reply as the server sent it, for one shown with its reasoning as a leading <think> block."""
    if text.startswith(THINK_OPEN) and THINK_CLOSE in text:
        return text[text.index(THINK_CLOSE) + len(THINK_CLOSE) :]
    return text


def _int(value: object) -> int:
    """A count the server sent, if it is one a model could reach (else 0: not known)."""
    return value if type(value) is int and 0 < value <= MAX_COUNT else 0
