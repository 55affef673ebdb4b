"""A reply cut into blocks: prose chunks, fenced code and `<think>` blocks, and the one fence parser.
No Qt: app/gui/chat/markdown_view.py renders each block as its own widget; app/transcripts/markdown_html.py
uses `fence_start` and `is_fence_close` for the exports."""

import re
from dataclasses import dataclass

from engine.text import split_think

# CommonMark: up to three spaces, then three or more backticks or tildes; a backtick fence's info has none.
_FENCE_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_FENCE_CLOSE = re.compile(r"^ {0,3}(`+|~+)[ \t]*$")
_LIST_OR_INDENT = re.compile(r"^(\s+\S|[-*+]\s|\d{1,9}[.)]\s)")


@dataclass(frozen=True)
class Fence:
    indent: int  # spaces before the opening fence
    mark: str  # the run of backticks or tildes that opened it
    info: str  # the rest of the opening line, stripped

    @property
    def lang(self) -> str:
        return self.info.split()[0] if self.info else ""


def fence_start(line: str) -> Fence | None:
    """The fence that line opens, or None."""
    m = _FENCE_OPEN.match(line)
    if not m or (m.group(2)[0] == "`" and "`" in m.group(3)):
        return None
    return Fence(len(m.group(1)), m.group(2), m.group(3).strip())


def is_fence_close(line: str, mark: str) -> bool:
    """Whether line closes a block opened by mark: the same character, at least as many."""
    m = _FENCE_CLOSE.match(line)
    return m is not None and m.group(1)[0] == mark[0] and len(m.group(1)) >= len(mark)


@dataclass(frozen=True)
class Block:
    kind: str  # "prose", "code" or "think"
    text: str
    lang: str = ""
    closed: bool = True
    parts: tuple[str, ...] = ()  # merged prose: the chunks its text joins


def split_blocks(text: str) -> list[Block]:
    """Cut text into prose, code and think blocks. Unclosed fences and think tags run to the end."""
    blocks: list[Block] = []
    for part in split_think(text):
        if part.kind == "think":
            blocks.append(Block("think", part.text.strip(), closed=part.closed))
        else:
            blocks += _markdown_blocks(part.text)
    return blocks


def merge_prose(blocks: list[Block]) -> list[Block]:
    """Fewer widgets for a message that will not change: one document per run of prose."""
    out: list[Block] = []
    for block in blocks:
        if block.kind == "prose" and out and out[-1].kind == "prose":
            parts = (out[-1].parts or (out[-1].text,)) + (block.text,)
            out[-1] = Block("prose", out[-1].text + "\n\n" + block.text, parts=parts)
        else:
            out.append(block)
    return out


def _markdown_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    prose: list[str] = []
    code: list[str] = []
    fence: Fence | None = None  # while inside a fenced block

    def flush_prose() -> None:
        chunk = "\n".join(prose).strip("\n")
        if chunk.strip():
            blocks.append(Block("prose", chunk))
        prose.clear()

    for line in text.split("\n"):
        if fence is None:
            fence = fence_start(line)
            if fence is not None:
                flush_prose()
                continue
            if prose and _starts_new_chunk(prose, line):
                flush_prose()
            prose.append(line)
        elif is_fence_close(line, fence.mark):
            blocks.append(Block("code", "\n".join(code), fence.lang))
            code.clear()
            fence = None
        else:
            code.append(line)
    if fence is not None:
        blocks.append(Block("code", "\n".join(code), fence.lang, closed=False))
    flush_prose()
    return blocks


def _starts_new_chunk(prose: list[str], line: str) -> bool:
    """A blank line then a line that cannot continue a list: safe to render apart."""
    if not line.strip() or prose[-1].strip():
        return False
    return not _LIST_OR_INDENT.match(line)
