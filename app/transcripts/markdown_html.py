"""A small Markdown → HTML converter for exported conversations.

Covers what chat models write: headings, paragraphs, lists (nested, ordered, tasks),
block quotes, fenced code, tables, rules, code spans, bold/italic/strike, links.
Every piece of text is escaped; only http(s)/mailto/# links are kept.
"""

from __future__ import annotations

import html
import re
import unicodedata

from app.transcripts.blocks import Fence, fence_start, is_fence_close
from app.transcripts.highlight import highlight_html

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_HR = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_ITEM = re.compile(r"^( *)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$")
_QUOTE = re.compile(r"^ {0,3}> ?(.*)$")
_TABLE_SEP = re.compile(r"^ *\|? *:?-+:? *(?:\| *:?-+:? *)*\|? *$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_MAX_DEPTH = 20


def markdown_to_html(text: str, inline_colors: bool | None = None) -> str:
    """HTML for text. Code is highlighted with hl- classes (see app.transcripts.highlight.css), or with
    inline colours of the light (False) or dark (True) palette for Qt's rich text."""
    return "".join(markdown_blocks(text, inline_colors))


def markdown_blocks(text: str, inline_colors: bool | None = None) -> list[str]:
    """The top-level blocks of markdown_to_html, one HTML string each (the pdf keeps a heading with the first)."""
    lines = str(text).replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd").split("\n")
    return _blocks(lines, hl=inline_colors)


def _close_fences(text: str) -> str:
    """Text with any unclosed code fence closed at the end (app.transcripts.export's markdown uses it)."""
    fence = None
    for line in text.split("\n"):
        if fence is None:
            opened = fence_start(line)
            fence = opened.mark if opened else None
        elif is_fence_close(line, fence):
            fence = None
    if fence is None:
        return text
    return text.rstrip("\n") + "\n" + fence


def table_start(lines: list[str], i: int) -> bool:
    """Whether line i is a table's header row (GFM: the delimiter row below has as many cells)."""
    return (
        "|" in lines[i]
        and i + 1 < len(lines)
        and _TABLE_SEP.match(lines[i + 1]) is not None
        and "-" in lines[i + 1]
        and len(_cells(lines[i])) == len(_cells(lines[i + 1]))
    )


def _starts_block(lines: list[str], i: int) -> bool:
    """Whether line i interrupts a paragraph."""
    line = lines[i]
    if fence_start(line) or _HEADING.match(line) or _HR.match(line) or _QUOTE.match(line):
        return True
    m = _ITEM.match(line)
    if m and m.group(3) and (not m.group(2)[0].isdigit() or m.group(2)[:-1] == "1"):
        return True
    return table_start(lines, i)


def _blocks(lines: list[str], depth: int = 0, hl: bool | None = None) -> list[str]:
    if depth > _MAX_DEPTH:  # "> > > > ..." a thousand deep must not blow the stack
        return [f'<p dir="auto">{_esc(chr(10).join(lines).strip())}</p>\n']
    out, i = [], 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        block, i = _block(lines, i, depth, hl)
        out.append(block)
    return out


def _block(lines: list[str], i: int, depth: int, hl: bool | None) -> tuple[str, int]:
    """The block that starts at line i (not blank) as HTML, and the line after it."""
    line = lines[i]
    fence = fence_start(line)
    if fence:
        return _code_block(lines, i, fence, hl)
    m = _HEADING.match(line)
    if m:
        level = len(m.group(1))
        return f'<h{level} dir="auto">{_inline(m.group(2) or "")}</h{level}>\n', i + 1
    if _HR.match(line):
        return "<hr>\n", i + 1
    if _QUOTE.match(line):
        return _quote(lines, i, depth, hl)
    if _ITEM.match(line):
        return _list(lines, i, depth, hl)
    if table_start(lines, i):
        return _table(lines, i)
    return _paragraph(lines, i)


def _code_block(lines: list[str], i: int, fence: Fence, hl: bool | None) -> tuple[str, int]:
    """A fenced code block opened at line i; an unclosed one runs to the end."""
    body, i = [], i + 1
    while i < len(lines) and not is_fence_close(lines[i], fence.mark):
        body.append(re.sub(f"^ {{0,{fence.indent}}}", "", lines[i]))
        i += 1
    cls = f' class="language-{_esc(fence.lang)}"' if fence.lang else ""
    return f"<pre><code{cls}>{highlight_html(chr(10).join(body), fence.lang, hl)}</code></pre>\n", i + 1


def _quote(lines: list[str], i: int, depth: int, hl: bool | None) -> tuple[str, int]:
    """A block quote from line i: its quoted lines and the lazy ones that continue its paragraph."""
    inner = []
    while i < len(lines) and lines[i].strip() and (_QUOTE.match(lines[i]) or not _starts_block(lines, i)):
        q = _QUOTE.match(lines[i])
        inner.append(q.group(1) if q else lines[i])
        i += 1
    return f"<blockquote>{''.join(_blocks(inner, depth + 1, hl))}</blockquote>\n", i


def _paragraph(lines: list[str], i: int) -> tuple[str, int]:
    """A paragraph from line i, up to a blank line or a block that interrupts it; a setext
    underline (=== or ---) makes it a heading."""
    para = [lines[i].strip()]
    i += 1
    heading = 0
    while i < len(lines) and lines[i].strip():
        s = _SETEXT.match(lines[i])
        if s:
            heading = 1 if s.group(1)[0] == "=" else 2
            i += 1
            break
        if _starts_block(lines, i):
            break
        para.append(lines[i].strip())
        i += 1
    content = "<br>\n".join(_inline(p) for p in para)
    return (f'<h{heading} dir="auto">{content}</h{heading}>\n' if heading else f'<p dir="auto">{content}</p>\n'), i


def _list(lines: list[str], i: int, depth: int, hl: bool | None = None) -> tuple[str, int]:
    first = _ITEM.match(lines[i])
    assert first is not None  # _block calls this on a list item
    base, ordered = len(first.group(1)), first.group(2)[0].isdigit()
    start = int(first.group(2)[:-1]) if ordered else 1
    items, tight = [], True
    while i < len(lines):
        m = _ITEM.match(lines[i])
        if not m or len(m.group(1)) != base or m.group(2)[0].isdigit() != ordered:
            break
        body, i, loose = _item(lines, i, m, ordered)
        tight = tight and not loose
        items.append(body)
    parts = []
    for body in items:
        html_item = "".join(_blocks(body, depth + 1, hl))
        if tight:
            html_item = re.sub(r'^<p dir="auto">(.*?)</p>\n', r"\1", html_item, count=1, flags=re.S)
        html_item = re.sub(r"^\[ \] ", "☐ ", html_item)
        html_item = re.sub(r"^\[[xX]\] ", "☑ ", html_item)
        parts.append(f'<li dir="auto">{html_item}</li>\n')
    tag = "ol" if ordered else "ul"
    attr = f' start="{start}"' if ordered and start != 1 else ""
    return f"<{tag}{attr}>\n{''.join(parts)}</{tag}>\n", i


def _item(lines: list[str], i: int, m: re.Match[str], ordered: bool) -> tuple[list[str], int, bool]:
    """The lines of the list item whose marker `m` matched line i, the line after it, and whether a
    blank line inside it makes the list loose."""
    base = len(m.group(1))
    content_col = base + len(m.group(2)) + 1
    body, loose, n = [m.group(3) or ""], False, len(lines)
    i += 1
    while i < n:
        line = lines[i]
        lead = len(line) - len(line.lstrip(" "))
        if not line.strip():
            # A blank line continues the item only if the list goes on after it.
            j = i
            while j < n and not lines[j].strip():
                j += 1
            if j < n and (len(lines[j]) - len(lines[j].lstrip(" ")) > base or _same_list(lines[j], base, ordered)):
                loose = True
                body += [""] * (j - i)
                i = j
                continue
            break
        if lead > base:
            body.append(line[min(lead, content_col) :])
        elif _ITEM.match(line) or _starts_block(lines, i):
            break
        else:
            body.append(line.strip())  # lazy continuation of the item's paragraph
        i += 1
    return body, i, loose


def _same_list(line: str, base: int, ordered: bool) -> bool:
    m = _ITEM.match(line)
    return m is not None and len(m.group(1)) == base and m.group(2)[0].isdigit() == ordered


def _cells(line: str) -> list[str]:
    """Split a table row on pipes outside code spans; a trailing pipe ends the row."""
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    cells, cur, i, ticks = [], "", 0, 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and line[i + 1 : i + 2] == "|":
            cur, i = cur + "|", i + 2
        elif ch == "`":
            run = len(line[i:]) - len(line[i:].lstrip("`"))
            ticks = run if not ticks else (0 if run == ticks else ticks)
            cur, i = cur + line[i : i + run], i + run
        elif ch == "|" and not ticks:
            cells.append(cur.strip())
            cur, i = "", i + 1
        else:
            cur, i = cur + ch, i + 1
    if ticks:  # an unclosed code span: fall back to splitting on every pipe
        return [c.strip() for c in line.rstrip("|").split("|")]
    if cur.strip() or not line.endswith("|"):
        cells.append(cur.strip())
    return cells


def _table(lines: list[str], i: int) -> tuple[str, int]:
    header, seps = _cells(lines[i]), _cells(lines[i + 1])
    aligns = []
    for s in seps:
        left, right = s.startswith(":"), s.endswith(":")
        aligns.append("center" if left and right else "right" if right else "left" if left else "")

    styles = [f' style="text-align:{a}"' if a else "" for a in aligns]

    def row(cells: list[str], tag: str) -> str:
        cells = (cells + [""] * len(aligns))[: len(aligns)]
        return "<tr>" + "".join(f"<{tag}{st}>{_inline(c)}</{tag}>" for c, st in zip(cells, styles)) + "</tr>\n"

    body, i = [], i + 2
    while i < len(lines) and lines[i].strip() and "|" in lines[i]:
        body.append(row(_cells(lines[i]), "td"))
        i += 1
    html_table = f"<table>\n<thead>{row(header, 'th')}</thead>\n<tbody>\n{''.join(body)}</tbody>\n</table>\n"
    return html_table, i


_INLINE = re.compile(
    r"(?P<esc>\\[!-/:-@\[-`{-~])"
    r"|(?P<code>(?<!`)(?P<ticks>`+)(?P<code_text>.{1,4000}?)(?<!`)(?P=ticks)(?!`))"
    r"|<(?P<auto>(?:https?://|mailto:)[^\s<>]+)>"
    r"|(?P<bang>!?)\[(?P<text>(?:[^\[\]]|\[[^\[\]]*\])*)\]"
    r"\(\s*<?(?P<url>[^\s()<>]*(?:\([^\s()]*\)[^\s()<>]*)*)>?(?:\s+\"(?P<title>[^\"]*)\")?\s*\)"
    r"|(?P<bare>\bhttps?://[^\s<>\"]+)"
)


def _punct(ch: str) -> bool:
    # \x00 marks a placeholder (code, link): it counts as punctuation, like the markup it stands for.
    return ch == "\x00" or unicodedata.category(ch)[0] in "PS"


class _Run:
    """A run of *, _ or ~ that may open or close emphasis."""

    def __init__(self, char: str, count: int, index: int) -> None:
        self.char, self.count, self.index = char, count, index
        self.opens: list[str] = []
        self.closes: list[str] = []

    def render(self) -> str:
        return "".join(self.closes) + self.char * self.count + "".join(reversed(self.opens))


def _flanking(prev: str, nxt: str) -> tuple[bool, bool]:
    """Whether a delimiter run between the characters prev and nxt is left- and right-flanking."""
    left = not nxt.isspace() and (not _punct(nxt) or prev.isspace() or _punct(prev))
    right = not prev.isspace() and (not _punct(prev) or nxt.isspace() or _punct(nxt))
    return left, right


def _may_open_close(text: str, start: int, end: int) -> tuple[bool, bool]:
    """Whether the delimiter run text[start:end] may open and may close emphasis: flanking, _ never
    inside a word (snake_case stays as it is), ~ only as a pair."""
    prev = text[start - 1] if start else " "
    nxt = text[end] if end < len(text) else " "
    left, right = _flanking(prev, nxt)
    if text[start] == "_":
        return left and (not right or _punct(prev)), right and (not left or _punct(nxt))
    if text[start] == "~" and end - start != 2:
        return False, False
    return left, right


def _close(run: _Run, stacks: dict[str, list[_Run]]) -> None:
    """Pair a closing run with the open runs of its character, innermost first."""
    stack = stacks[run.char]
    while run.count and stack:
        opener = stack[-1]
        k = 2 if opener.count >= 2 and run.count >= 2 else 1
        tag = "del" if run.char == "~" else "strong" if k == 2 else "em"
        opener.opens.append(f"<{tag}>")
        run.closes.append(f"</{tag}>")
        opener.count -= k
        run.count -= k
        if not opener.count:
            stack.pop()
        # Other openers inside this span can no longer close outside it: tags stay nested.
        for other, rest in stacks.items():
            while other != run.char and rest and rest[-1].index > opener.index:
                rest.pop()


def _emphasis(text: str) -> str:
    """Bold, italic and strike-through by matching delimiter runs with a stack per character
    (CommonMark's flanking rules, simplified). Linear, so a megabyte line stays fast."""
    pieces: list[str | _Run] = []
    stacks: dict[str, list[_Run]] = {"*": [], "_": [], "~": []}
    pos = 0
    for m in re.finditer(r"\*+|_+|~+", text):
        pieces.append(text[pos : m.start()])
        pos = m.end()
        can_open, can_close = _may_open_close(text, m.start(), m.end())
        run = _Run(m.group()[0], len(m.group()), len(pieces))
        pieces.append(run)
        if can_close:
            _close(run, stacks)
        if can_open and run.count:
            stacks[run.char].append(run)
    pieces.append(text[pos:])
    return "".join(p if isinstance(p, str) else p.render() for p in pieces)


def _safe_url(url: str) -> str:
    url = re.sub(r"[\x00-\x20\x7f]", "", url)
    return url if re.match(r"^(?:https?://|mailto:|#)", url, re.I) else ""


def _link(url: str, inner_html: str, title: str = "") -> str:
    url = _safe_url(url)
    if not url:
        return inner_html
    t = f' title="{_esc(title)}"' if title else ""
    return f'<a href="{_esc(url)}"{t}>{inner_html}</a>'


def _inline(text: str, links: bool = True) -> str:
    """Escape text and render code spans, links and emphasis (placeholders keep code literal)."""
    stash: list[str] = []

    def keep(fragment: str) -> str:
        stash.append(fragment)
        return f"\x00{len(stash) - 1}\x00"

    def replace(m: re.Match[str]) -> str:
        if m.group("esc"):
            return keep(_esc(m.group("esc")[1]))
        if m.group("code"):
            return keep(_code_span(m.group("code_text")))
        if not links:
            return keep(_esc(m.group(0)))
        if m.group("auto"):
            return keep(_link(m.group("auto"), _esc(m.group("auto"))))
        if m.group("bare"):
            url, trail = _bare_url(m.group("bare"))
            return keep(_link(url, _esc(url))) + _esc(trail)
        label = _inline(m.group("text"), links=False)
        if m.group("bang"):  # images stay links: the page must not load anything
            label = label or _esc(m.group("url"))
        return keep(_link(m.group("url"), label, m.group("title") or ""))

    out = _emphasis(_esc(_INLINE.sub(replace, text)))
    return re.sub(r"\x00(\d+)\x00", lambda m: stash[int(m.group(1))], out)


def _code_span(code: str) -> str:
    """A code span's HTML: one space each side is stripped, when both are there around other text."""
    if len(code) > 2 and code[0] == code[-1] == " " and code.strip():
        code = code[1:-1]
    return f"<code>{_esc(code)}</code>"


def _bare_url(url: str) -> tuple[str, str]:
    """A bare URL without the punctuation that ends the sentence around it, and that punctuation."""
    trail = ""
    while url and (url[-1] in ".,;:!?'\"" or (url[-1] == ")" and url.count("(") < url.count(")"))):
        url, trail = url[:-1], url[-1] + trail
    return url, trail


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)
