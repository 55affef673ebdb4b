"""A tool's result as safe, bounded text: what the model reads and what the user sees.

An MCP server's output is untrusted: it is cut to a size, terminal escapes and control characters
are neutralised, and binary content (images, audio, blobs) is described, never dumped.
"""

import json
import re
import unicodedata
from typing import TYPE_CHECKING, Any

from app.core.sizes import format_bytes

if TYPE_CHECKING:
    from mcp.types import CallToolResult

MAX_RESULT_CHARS = 16_000  # a result longer than this is cut (a 4K-context model could not read it anyway)
# ANSI escape sequences: CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), and two-byte ESC sequences.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]")
# Every other C0/C1 control character except tab and newline.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# Blank or invisible characters of other categories than the ones `_hidden` escapes by category:
# the combining grapheme joiner, Hangul fillers, Khmer and Mongolian vowel marks and selectors,
# the braille blank, variation selectors.
_BLANK = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\uffa0\ufe00-\ufe0f\U000e0100-\U000e01ef]")
MAX_NAME_CHARS = 80


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, an ellipsis saying where it was cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)].rstrip() + "…"


def shown_name(name: str, limit: int = MAX_NAME_CHARS) -> str:
    """A name from an MCP server (a tool's) as a terminal or the window shows it: every control, bidi
    or invisible character written as its escape (`\\x1b`), so a name can neither act on the terminal
    nor pass for another name; cut with an ellipsis."""

    return clip("".join(_escaped(c) if _hidden(c) else c for c in name[: limit + 1]), limit)


def _hidden(c: str) -> bool:
    """Whether a character is not shown as itself: a control, format (bidi, zero-width, tag), surrogate,
    private or unassigned character, a line or paragraph separator (Qt breaks the line there), a space
    other than ' ', or a blank one (`_BLANK`)."""
    kind = unicodedata.category(c)
    return kind[0] == "C" or kind in ("Zl", "Zp") or (kind == "Zs" and c != " ") or bool(_BLANK.match(c))


def _escaped(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def neutralise(text: str) -> str:
    """`text` without terminal escapes; other control characters shown as U+FFFD."""
    text = _ANSI.sub("", text.replace("\r\n", "\n"))
    return _SURROGATE.sub("\ufffd", _CONTROLS.sub("\ufffd", text))


def _b64_size(data: str) -> int:
    return len(data) * 3 // 4


def describe_block(block: Any) -> str:  # an mcp content block (text, image, audio, resource)
    """One content block of a CallToolResult as text."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {format_bytes(_b64_size(block.data))}, not shown]"
    if kind == "resource_link":
        return f"[link: {block.uri}]"
    if kind == "resource":
        res = block.resource
        text = getattr(res, "text", None)
        if isinstance(text, str):
            return f"[resource {res.uri}]\n{text}"
        mime = getattr(res, "mime_type", None) or "binary"
        return f"[resource {res.uri}: {mime}, {format_bytes(_b64_size(getattr(res, 'blob', '')))}, not shown]"
    return f"[{kind or 'unknown'} content, not shown]"


def bound(text: str, limit: int = MAX_RESULT_CHARS) -> tuple[str, bool]:
    """(text cut to `limit` characters with a note saying how much was cut, whether it was cut)."""
    if len(text) <= limit:
        return text, False
    return text[:limit] + f"\n[… cut: the result was {len(text)} characters, the first {limit} are shown]", True


def result_text(result: "CallToolResult", limit: int = MAX_RESULT_CHARS) -> tuple[str, bool]:
    """A CallToolResult as (bounded, neutralised text, whether it was cut)."""
    parts = [describe_block(b) for b in result.content]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False)]
    # Cut before neutralising so a 10 MB result costs no 10 MB regex pass.
    text, cut = bound("\n".join(parts), limit)
    return neutralise(text), cut
