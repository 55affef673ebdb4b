"""A reply's `<think>` reasoning: the tags and the one splitter every reader of a reply uses.

The remote backend wraps a server's reasoning in these tags, the window shows them as a
collapsible block (app/transcripts/blocks.py) and the exports as a Thinking section. Pure text.
"""

import re
from dataclasses import dataclass

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_THINK = re.compile(re.escape(THINK_OPEN) + r"(.*?)(?:" + re.escape(THINK_CLOSE) + r"|\Z)", re.S)


@dataclass(frozen=True)
class ThinkPart:
    kind: str  # "text" or "think"
    text: str  # as written: callers strip what they show
    closed: bool = True  # False for a <think> still running at the end


def split_think(text: str) -> list[ThinkPart]:
    """Text and think parts in order, empty ones included (a bare <think> is a reply starting to think).
    An unclosed <think> runs to the end; a lone leading </think> closes a block the chat template opened."""
    parts: list[ThinkPart] = []
    close, opening = text.find(THINK_CLOSE), text.find(THINK_OPEN)
    if close >= 0 and (opening < 0 or close < opening):
        parts.append(ThinkPart("think", text[:close]))
        text = text[close + len(THINK_CLOSE) :]
    pos = 0
    for m in _THINK.finditer(text):
        closed = m.group(0).endswith(THINK_CLOSE)
        parts += [ThinkPart("text", text[pos : m.start()]), ThinkPart("think", m.group(1), closed)]
        pos = m.end()
    parts.append(ThinkPart("text", text[pos:]))
    return parts
