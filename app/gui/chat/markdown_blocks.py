"""A reply cut into blocks for rendering: prose chunks, fenced code and `<think>` blocks.
No Qt: app/gui/chat/markdown_view.py renders each block as its own widget."""

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")
_LIST_OR_INDENT = re.compile(r"^(\s+\S|[-*+]\s|\d{1,9}[.)]\s)")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class Block:
    kind: str  # "prose", "code" or "think"
    text: str
    lang: str = ""
    closed: bool = True


def split_blocks(text: str) -> list[Block]:
    """Cut text into prose, code and think blocks. Unclosed fences and think tags run to the end."""
    blocks: list[Block] = []
    pos = 0
    # A reply can start inside the reasoning when the chat template opened <think> itself.
    close_first = text.find(THINK_CLOSE)
    open_first = text.find(THINK_OPEN)
    if close_first != -1 and (open_first == -1 or open_first > close_first):
        blocks.append(Block("think", text[:close_first].strip()))
        pos = close_first + len(THINK_CLOSE)
    while pos < len(text):
        start = text.find(THINK_OPEN, pos)
        if start == -1:
            blocks += _markdown_blocks(text[pos:])
            break
        blocks += _markdown_blocks(text[pos:start])
        end = text.find(THINK_CLOSE, start)
        if end == -1:
            blocks.append(Block("think", text[start + len(THINK_OPEN) :].strip(), closed=False))
            break
        blocks.append(Block("think", text[start + len(THINK_OPEN) : end].strip()))
        pos = end + len(THINK_CLOSE)
    return blocks


def merge_prose(blocks: list[Block]) -> list[Block]:
    """Fewer widgets for a message that will not change: one document per run of prose."""
    out: list[Block] = []
    for block in blocks:
        if block.kind == "prose" and out and out[-1].kind == "prose":
            out[-1] = Block("prose", out[-1].text + "\n\n" + block.text)
        else:
            out.append(block)
    return out


def _markdown_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    prose: list[str] = []
    code: list[str] = []
    fence = None  # (char, length, lang) while inside a fenced block

    def flush_prose():
        chunk = "\n".join(prose).strip("\n")
        if chunk.strip():
            blocks.append(Block("prose", chunk))
        prose.clear()

    for line in text.split("\n"):
        if fence is None:
            m = _FENCE.match(line)
            if m:
                flush_prose()
                fence = (m.group(1)[0], len(m.group(1)), m.group(2))
                continue
            if prose and _starts_new_chunk(prose, line):
                flush_prose()
            prose.append(line)
        else:
            stripped = line.strip()
            if (
                len(line) - len(line.lstrip(" ")) <= 3
                and stripped
                and set(stripped) == {fence[0]}
                and len(stripped) >= fence[1]
            ):
                blocks.append(Block("code", "\n".join(code), fence[2]))
                code.clear()
                fence = None
            else:
                code.append(line)
    if fence is not None:
        blocks.append(Block("code", "\n".join(code), fence[2], closed=False))
    flush_prose()
    return blocks


def _starts_new_chunk(prose: list[str], line: str) -> bool:
    """A blank line then a line that cannot continue a list: safe to render apart."""
    if not line.strip() or prose[-1].strip():
        return False
    return not _LIST_OR_INDENT.match(line)
