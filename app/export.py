"""Export a conversation as md, json, html, txt or pdf; import the json back.

Qt is imported only for pdf (lazily), so the CLI and tests of the other formats stay light.
Every file is written atomically: a temp file in the same folder, then os.replace.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

from app.store import STATUSES, Conversation, Message
from engine.errors import ChinwagError

FORMATS = ("md", "json", "html", "txt", "pdf")
FORMAT_MARKER = "chinwag-conversation"
FORMAT_VERSION = 1
ROLE_NAMES = {"user": "User", "assistant": "Assistant", "system": "System"}

_qt_app = None  # a QGuiApplication we had to create for pdf; kept alive for the process


def export_conversation(conv: Conversation, fmt: str, path) -> Path:
    """Write conv to path in fmt (one of FORMATS); returns the path written."""
    fmt = str(fmt).lower().lstrip(".")
    if fmt == "markdown":
        fmt = "md"
    if fmt not in FORMATS:
        raise ChinwagError(f"unknown export format {fmt!r} (expected one of {', '.join(FORMATS)})")
    path = Path(path).expanduser()
    _check_target(path)  # before rendering, so a bad path fails fast (and pdf skips Qt)
    if fmt == "pdf":
        data = _pdf_bytes(conv)
    else:
        text = {"md": to_markdown, "json": to_json, "html": to_html, "txt": to_text}[fmt](conv)
        data = text.encode("utf-8", "replace")  # a lone surrogate cannot be UTF-8
    _write_atomic(path, data)
    return path


def suggested_filename(conv: Conversation, fmt: str) -> str:
    """A safe file name from the title, for save dialogs."""
    name = re.sub(r'[\\/:*?"<>|\x00-\x1f]+', " ", conv.title or "")
    name = " ".join(name.split()).strip(" .")[:80] or "conversation"
    return f"{name}.{fmt}"


# -- formats -------------------------------------------------------------------


def to_json(conv: Conversation) -> str:
    """Everything needed to rebuild the conversation with import_conversation."""
    data = {
        "format": FORMAT_MARKER,
        "version": FORMAT_VERSION,
        "exported_at": time.time(),
        "conversation": {
            "id": conv.id,  # informational; import assigns a new id
            "title": conv.title,
            "created_at": conv.created_at,
            "updated_at": conv.updated_at,
            "model_id": conv.model_id,
            "settings": conv.settings,
        },
        "messages": [
            {
                "role": m.role,
                "content": m.content,
                "status": m.status,
                "created_at": m.created_at,
                "model_id": m.model_id,
                "stats": m.stats,
            }
            for m in conv.messages
        ],
    }
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def to_markdown(conv: Conversation) -> str:
    out = [f"# {_one_line(conv.title)}", ""]
    out += [f"- **{k}:** {v}" for k, v in _metadata(conv)]
    prompt = (conv.settings or {}).get("system_prompt")
    if prompt:
        out += ["", "**System prompt:**", ""] + ["> " + ln if ln else ">" for ln in str(prompt).splitlines()]
    for m in conv.messages:
        out += ["", f"## {_role_name(m.role)}", ""]
        meta = _message_meta(m)
        if meta:
            out += [f"*{meta}*", ""]
        out.append(_markdown_body(m))
    return "\n".join(out) + "\n"


def _markdown_body(m: Message) -> str:
    if m.role != "assistant" or "think>" not in m.content:
        # An unclosed fence would swallow every later section.
        return _close_fences(m.content).rstrip("\n")
    parts = []
    for kind, text in split_think(m.content):
        text = _close_fences(text.strip("\n"))
        # Renderers like GitHub's show this collapsed, as the html export does.
        parts.append(f"<details><summary>Thinking</summary>\n\n{text}\n\n</details>" if kind == "think" else text)
    return "\n\n".join(parts)


def to_text(conv: Conversation) -> str:
    out = [_one_line(conv.title), "=" * min(60, max(3, len(_one_line(conv.title))))]
    out += [f"{k}: {v}" for k, v in _metadata(conv)]
    prompt = (conv.settings or {}).get("system_prompt")
    if prompt:
        out += ["", "System prompt:", str(prompt)]
    for m in conv.messages:
        meta = _message_meta(m)
        out += ["", f"--- {_role_name(m.role)}" + (f" ({meta})" if meta else "") + " ---", m.content.rstrip("\n")]
    return "\n".join(out) + "\n"


def to_html(conv: Conversation, for_print: bool = False) -> str:
    """One self-contained page: inline CSS, no scripts, images or fonts from elsewhere.

    for_print renders thinking as a plain block (Qt's rich text, used for pdf, has no <details>).
    """
    e = _esc
    title = _one_line(conv.title)
    prompt = (conv.settings or {}).get("system_prompt")
    if for_print:  # Qt lays out <dl> poorly: one line of facts instead
        info = '<p class="info">' + e(" · ".join(f"{k}: {v}" for k, v in _metadata(conv))) + "</p>"
        if prompt:
            info += f'<p class="info" dir="auto"><b>System prompt:</b> {e(str(prompt))}</p>'
    else:
        info = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in _metadata(conv))
        if prompt:
            info += f'<dt>System prompt</dt><dd dir="auto">{e(str(prompt))}</dd>'
        info = f'<dl class="info">{info}</dl>'
    parts = []
    for m in conv.messages:
        details = _message_meta(m)
        body = _render_content(m, for_print)
        if for_print:  # Qt's rich text draws table borders from attributes, not CSS
            body = body.replace("<table>", '<table border="1" cellspacing="0" cellpadding="4">')
        role_class = re.sub(r"[^a-z]", "", m.role.lower()) or "other"
        parts.append(
            f'<section class="msg {role_class}">'
            f'<div class="role">{e(_role_name(m.role))}'
            + (f' <span class="meta">{e(details)}</span>' if details else "")
            + f'</div><div class="body" dir="auto">{body}</div></section>'
        )
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="Chinwag">\n<title>{e(title)}</title>\n'
        f"<style>{_PRINT_CSS if for_print else _CSS}</style>\n</head>\n<body>\n"
        f'<header><h1 dir="auto">{e(title)}</h1>{info}</header>\n'
        "<main>\n" + "\n".join(parts) + "\n</main>\n</body>\n</html>\n"
    )


def _render_content(m: Message, for_print: bool) -> str:
    if m.role != "assistant":
        return markdown_to_html(m.content)
    out = []
    for kind, text in split_think(m.content):
        if kind == "text":
            out.append(markdown_to_html(text))
        elif for_print:
            out.append(f'<div class="think"><p class="think-label">Thinking</p>{markdown_to_html(text)}</div>')
        else:
            out.append(f'<details class="think"><summary>Thinking</summary>{markdown_to_html(text)}</details>')
    return "".join(out)


def split_think(text: str) -> list[tuple[str, str]]:
    """[("think"|"text", part)...]; an unclosed <think> runs to the end, and a lone
    leading </think> closes a block the chat template opened."""
    parts = []
    close, opening = text.find("</think>"), text.find("<think>")
    if close >= 0 and (opening < 0 or close < opening):
        parts.append(("think", text[:close]))
        text = text[close + len("</think>"):]
    pos = 0
    for m in re.finditer(r"<think>(.*?)(?:</think>|\Z)", text, re.S):
        parts += [("text", text[pos:m.start()]), ("think", m.group(1))]
        pos = m.end()
    parts.append(("text", text[pos:]))
    return [(k, t) for k, t in parts if t.strip()]


def _pdf_bytes(conv: Conversation) -> bytes:
    global _qt_app
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    try:
        from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMarginsF
        from PySide6.QtGui import QGuiApplication, QPageLayout, QPageSize, QPdfWriter, QTextDocument
    except ImportError as e:
        raise ChinwagError(f"pdf export needs PySide6, which could not be loaded: {e}") from e

    if QGuiApplication.instance() is None:
        _qt_app = QGuiApplication([sys.argv[0] if sys.argv else "chinwag"])
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    writer = QPdfWriter(buffer)
    writer.setTitle(_one_line(conv.title))
    writer.setCreator("Chinwag")
    writer.setPageSize(QPageSize(QPageSize.PageSizeId.A4))
    writer.setPageMargins(QMarginsF(16, 16, 16, 16), QPageLayout.Unit.Millimeter)
    doc = QTextDocument()
    doc.setHtml(to_html(conv, for_print=True))
    doc.print_(writer)
    del writer  # finishes the pdf
    buffer.close()
    return bytes(data.data())


# -- import --------------------------------------------------------------------


def import_conversation(store, path) -> Conversation:
    """Read a json export into the store as a new conversation (new id, all else equal).

    Everything is checked before anything is written, and the write is one transaction.
    """
    path = Path(path).expanduser()
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ChinwagError(f"cannot import {path}: {e.strerror or e}") from e
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ChinwagError(f"cannot import {path}: not UTF-8 text (bad byte at offset {e.start})") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ChinwagError(f"cannot import {path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from e
    try:
        conv = _conversation_from_json(data)
    except ValueError as e:
        raise ChinwagError(f"cannot import {path}: {e}") from e
    return store.insert_conversation(conv)


def _conversation_from_json(data) -> Conversation:
    if not isinstance(data, dict) or data.get("format") != FORMAT_MARKER:
        raise ValueError("not a Chinwag conversation export (no \"format\": \"chinwag-conversation\")")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError("missing or invalid format version")
    if version > FORMAT_VERSION:
        raise ValueError(f"made by a newer Chinwag (format version {version}, this one reads {FORMAT_VERSION})")
    c = data.get("conversation")
    if not isinstance(c, dict):
        raise ValueError('"conversation" is missing or not an object')
    now = time.time()
    conv = Conversation(
        id="",
        title=_field(c, "title", str, "conversation", default="Imported chat"),
        created_at=_number(c, "created_at", "conversation", now),
        updated_at=_number(c, "updated_at", "conversation", now),
        model_id=_field(c, "model_id", str, "conversation", default=""),
        settings=_field(c, "settings", dict, "conversation", default={}),
    )
    messages = data.get("messages")
    if not isinstance(messages, list):
        raise ValueError('"messages" is missing or not a list')
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise ValueError(f"{where} is not an object")
        status = _field(m, "status", str, where, default="complete")
        if status not in STATUSES:
            raise ValueError(f"{where}.status {status!r} is not one of {', '.join(STATUSES)}")
        stats = m.get("stats")
        if stats is not None and not isinstance(stats, dict):
            raise ValueError(f"{where}.stats is not an object")
        conv.messages.append(Message(
            id=0, conversation_id="", position=i,
            role=_field(m, "role", str, where),
            content=_field(m, "content", str, where),
            status=status,
            created_at=_number(m, "created_at", where, now),
            model_id=_field(m, "model_id", str, where, default=""),
            stats=stats,
        ))
    _check_text(data)
    return conv


_MISSING = object()


def _field(obj: dict, key: str, kind: type, where: str, default=_MISSING):
    value = obj.get(key, _MISSING)
    if value is _MISSING or (value is None and default is not _MISSING):
        if default is _MISSING:
            raise ValueError(f"{where}.{key} is missing")
        return default
    if not isinstance(value, kind):
        raise ValueError(f"{where}.{key} is not {'text' if kind is str else 'an object'}")
    return value


def _number(obj: dict, key: str, where: str, default: float) -> float:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}.{key} is not a finite number")
    return value


def _check_text(value):
    """JSON may spell lone surrogates (\\ud800) that no UTF-8 database can store."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"text contains an invalid character (lone surrogate) near {value[max(0, e.start - 20):e.start]!r}")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_text(k)
            _check_text(v)
    elif isinstance(value, list):
        for v in value:
            _check_text(v)


# -- writing files -------------------------------------------------------------


def _check_target(path: Path):
    if path.is_dir():
        raise ChinwagError(f"cannot write {path}: it is a folder")
    if not path.parent.is_dir():
        raise ChinwagError(f"cannot write {path}: folder {path.parent} does not exist")


def _write_atomic(path: Path, data: bytes):
    """Write data to path via a temp file in the same folder; never leaves a partial file."""
    _check_target(path)
    try:
        # Short prefix: the temp name must fit even when path's own name is near the limit.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:40]}.", suffix=".part")
    except OSError as e:
        raise ChinwagError(f"cannot write {path}: {e.strerror or e}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _file_mode(path))
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise ChinwagError(f"cannot write {path}: {e.strerror or e}") from e
        raise


def _file_mode(path: Path) -> int:
    """Keep an overwritten file's mode; new files get the usual umask mode, not mkstemp's 0600."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


# -- small helpers -------------------------------------------------------------


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _one_line(text) -> str:
    return " ".join(str(text or "").split()) or "Untitled"


def _role_name(role: str) -> str:
    return ROLE_NAMES.get(role, str(role).title() or "Unknown")


def _when(ts) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))
    except (OverflowError, OSError, ValueError, TypeError):
        return str(ts)


def _metadata(conv: Conversation) -> list[tuple[str, str]]:
    rows = []
    if conv.model_id:
        rows.append(("Model", conv.model_id))
    rows += [("Created", _when(conv.created_at)), ("Updated", _when(conv.updated_at)),
             ("Messages", str(len(conv.messages)))]
    return rows


def _message_meta(m: Message) -> str:
    """e.g. "smollm2 · stopped · 120 tokens · 31.2 tok/s"."""
    bits = []
    if m.role == "assistant" and m.model_id:
        bits.append(m.model_id)
    if m.status != "complete":
        bits.append(m.status)
    stats = m.stats or {}
    if isinstance(stats.get("generated_tokens"), int) and stats["generated_tokens"]:
        bits.append(f"{stats['generated_tokens']} tokens")
    tps = stats.get("decode_tps")
    if isinstance(tps, (int, float)) and not isinstance(tps, bool) and tps > 0:
        bits.append(f"{tps:.1f} tok/s")
    return " · ".join(bits)


def _close_fences(text: str) -> str:
    fence = None
    for line in text.split("\n"):
        m = _FENCE_OPEN.match(line)
        if fence is None:
            if m and not (m.group(2)[0] == "`" and "`" in m.group(3)):
                fence = m.group(2)
        elif _is_fence_close(line, fence):
            fence = None
    if fence is None:
        return text
    return text.rstrip("\n") + "\n" + fence


# -- a small markdown → HTML converter -------------------------------------------
# Covers what chat models write: headings, paragraphs, lists (nested, ordered, tasks),
# block quotes, fenced code, tables, rules, code spans, bold/italic/strike, links.
# Every piece of text is escaped; only http(s)/mailto/# links are kept.

_FENCE_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_HR = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_ITEM = re.compile(r"^( *)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$")
_QUOTE = re.compile(r"^ {0,3}> ?(.*)$")
_TABLE_SEP = re.compile(r"^ *\|? *:?-+:? *(?:\| *:?-+:? *)*\|? *$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_MAX_DEPTH = 20


def markdown_to_html(text: str) -> str:
    lines = str(text).replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd").split("\n")
    return "".join(_blocks(lines))


def _is_fence_close(line: str, fence: str) -> bool:
    m = re.match(r"^ {0,3}(`+|~+)[ \t]*$", line)
    return bool(m) and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)


def _fence_start(line: str):
    m = _FENCE_OPEN.match(line)
    if not m or (m.group(2)[0] == "`" and "`" in m.group(3)):
        return None
    return m


def _table_start(lines, i) -> bool:
    return (
        "|" in lines[i] and i + 1 < len(lines) and _TABLE_SEP.match(lines[i + 1]) is not None
        and "-" in lines[i + 1] and len(_cells(lines[i])) == len(_cells(lines[i + 1]))
    )


def _starts_block(lines, i) -> bool:
    """Whether line i interrupts a paragraph."""
    line = lines[i]
    if _fence_start(line) or _HEADING.match(line) or _HR.match(line) or _QUOTE.match(line):
        return True
    m = _ITEM.match(line)
    if m and m.group(3) and (not m.group(2)[0].isdigit() or m.group(2)[:-1] == "1"):
        return True
    return _table_start(lines, i)


def _blocks(lines: list[str], depth: int = 0) -> list[str]:
    if depth > _MAX_DEPTH:  # "> > > > ..." a thousand deep must not blow the stack
        return [f'<p dir="auto">{_esc(chr(10).join(lines).strip())}</p>\n']
    out, i, n = [], 0, len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        fence = _fence_start(line)
        if fence:
            indent, mark, info = len(fence.group(1)), fence.group(2), fence.group(3).strip()
            body, i = [], i + 1
            while i < n and not _is_fence_close(lines[i], mark):
                body.append(re.sub(f"^ {{0,{indent}}}", "", lines[i]))
                i += 1
            i += 1  # the closing fence; an unclosed block simply runs to the end
            lang = info.split()[0] if info else ""
            cls = f' class="language-{_esc(lang)}"' if lang else ""
            out.append(f"<pre><code{cls}>{_esc(chr(10).join(body))}</code></pre>\n")
            continue
        m = _HEADING.match(line)
        if m:
            level = len(m.group(1))
            out.append(f'<h{level} dir="auto">{_inline(m.group(2) or "")}</h{level}>\n')
            i += 1
            continue
        if _HR.match(line):
            out.append("<hr>\n")
            i += 1
            continue
        if _QUOTE.match(line):
            inner = []
            while i < n and lines[i].strip() and (_QUOTE.match(lines[i]) or not _starts_block(lines, i)):
                q = _QUOTE.match(lines[i])
                inner.append(q.group(1) if q else lines[i])
                i += 1
            out.append(f"<blockquote>{''.join(_blocks(inner, depth + 1))}</blockquote>\n")
            continue
        if _ITEM.match(line):
            html_list, i = _list(lines, i, depth)
            out.append(html_list)
            continue
        if _table_start(lines, i):
            html_table, i = _table(lines, i)
            out.append(html_table)
            continue
        para = [line.strip()]
        i += 1
        heading = 0
        while i < n and lines[i].strip():
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
        out.append(f'<h{heading} dir="auto">{content}</h{heading}>\n' if heading else f'<p dir="auto">{content}</p>\n')
    return out


def _list(lines, i, depth):
    first = _ITEM.match(lines[i])
    base, ordered = len(first.group(1)), first.group(2)[0].isdigit()
    start = int(first.group(2)[:-1]) if ordered else 1
    items, tight, n = [], True, len(lines)
    while i < n:
        m = _ITEM.match(lines[i])
        if not m or len(m.group(1)) != base or m.group(2)[0].isdigit() != ordered:
            break
        content_col = base + len(m.group(2)) + 1
        body = [m.group(3) or ""]
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
                    tight = False
                    body += [""] * (j - i)
                    i = j
                    continue
                break
            if lead > base:
                body.append(line[min(lead, content_col):])
            elif _ITEM.match(line) or _starts_block(lines, i):
                break
            else:
                body.append(line.strip())  # lazy continuation of the item's paragraph
            i += 1
        items.append(body)
    parts = []
    for body in items:
        html_item = "".join(_blocks(body, depth + 1))
        if tight:
            html_item = re.sub(r'^<p dir="auto">(.*?)</p>\n', r"\1", html_item, count=1, flags=re.S)
        html_item = re.sub(r"^\[ \] ", "☐ ", html_item)
        html_item = re.sub(r"^\[[xX]\] ", "☑ ", html_item)
        parts.append(f'<li dir="auto">{html_item}</li>\n')
    tag = "ol" if ordered else "ul"
    attr = f' start="{start}"' if ordered and start != 1 else ""
    return f"<{tag}{attr}>\n{''.join(parts)}</{tag}>\n", i


def _same_list(line, base, ordered) -> bool:
    m = _ITEM.match(line)
    return bool(m) and len(m.group(1)) == base and m.group(2)[0].isdigit() == ordered


def _cells(line: str) -> list[str]:
    """Split a table row on pipes outside code spans; a trailing pipe ends the row."""
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    cells, cur, i, ticks = [], "", 0, 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and line[i + 1:i + 2] == "|":
            cur, i = cur + "|", i + 2
        elif ch == "`":
            run = len(line[i:]) - len(line[i:].lstrip("`"))
            ticks = run if not ticks else (0 if run == ticks else ticks)
            cur, i = cur + line[i:i + run], i + run
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


def _table(lines, i):
    header, seps = _cells(lines[i]), _cells(lines[i + 1])
    aligns = []
    for s in seps:
        left, right = s.startswith(":"), s.endswith(":")
        aligns.append("center" if left and right else "right" if right else "left" if left else "")

    styles = [f' style="text-align:{a}"' if a else "" for a in aligns]

    def row(cells, tag):
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

    def __init__(self, char: str, count: int, index: int):
        self.char, self.count, self.index = char, count, index
        self.opens: list[str] = []
        self.closes: list[str] = []

    def render(self) -> str:
        return "".join(self.closes) + self.char * self.count + "".join(reversed(self.opens))


def _emphasis(text: str) -> str:
    """Bold, italic and strike-through by matching delimiter runs with a stack per character
    (CommonMark's flanking rules, simplified). Linear, so a megabyte line stays fast."""
    pieces: list = []
    stacks: dict[str, list[_Run]] = {"*": [], "_": [], "~": []}
    pos = 0
    for m in re.finditer(r"\*+|_+|~+", text):
        pieces.append(text[pos:m.start()])
        pos = m.end()
        ch, n = m.group()[0], len(m.group())
        prev = text[m.start() - 1] if m.start() else " "
        nxt = text[m.end()] if m.end() < len(text) else " "
        left = not nxt.isspace() and (not _punct(nxt) or prev.isspace() or _punct(prev))
        right = not prev.isspace() and (not _punct(prev) or nxt.isspace() or _punct(nxt))
        can_open, can_close = left, right
        if ch == "_":  # snake_case stays as it is
            can_open, can_close = left and (not right or _punct(prev)), right and (not left or _punct(nxt))
        elif ch == "~" and n != 2:
            can_open = can_close = False
        run = _Run(ch, n, len(pieces))
        pieces.append(run)
        stack = stacks[ch]
        while can_close and run.count and stack:
            opener = stack[-1]
            k = 2 if opener.count >= 2 and run.count >= 2 else 1
            tag = "del" if ch == "~" else "strong" if k == 2 else "em"
            opener.opens.append(f"<{tag}>")
            run.closes.append(f"</{tag}>")
            opener.count -= k
            run.count -= k
            if not opener.count:
                stack.pop()
            # Other openers inside this span can no longer close outside it: tags stay nested.
            for other, rest in stacks.items():
                while other != ch and rest and rest[-1].index > opener.index:
                    rest.pop()
        if can_open and run.count:
            stack.append(run)
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

    def replace(m: re.Match) -> str:
        if m.group("esc"):
            return keep(_esc(m.group("esc")[1]))
        if m.group("code"):
            code = m.group("code_text")
            if len(code) > 2 and code[0] == code[-1] == " " and code.strip():
                code = code[1:-1]
            return keep(f"<code>{_esc(code)}</code>")
        if not links:
            return keep(_esc(m.group(0)))
        if m.group("auto"):
            return keep(_link(m.group("auto"), _esc(m.group("auto"))))
        if m.group("bare"):
            url = m.group("bare")
            trail = ""
            while url and (url[-1] in ".,;:!?'\"" or (url[-1] == ")" and url.count("(") < url.count(")"))):
                url, trail = url[:-1], url[-1] + trail
            return keep(_link(url, _esc(url))) + _esc(trail)
        label = _inline(m.group("text"), links=False)
        if m.group("bang"):  # images stay links: the page must not load anything
            label = label or _esc(m.group("url"))
        return keep(_link(m.group("url"), label, m.group("title") or ""))

    out = _emphasis(_esc(_INLINE.sub(replace, text)))
    return re.sub(r"\x00(\d+)\x00", lambda m: stash[int(m.group(1))], out)


_CSS = """
:root { color-scheme: light dark; --fg: #1d1d1f; --muted: #6e6e73; --bg: #ffffff;
  --user: #eef4ff; --assistant: #f6f6f7; --code: #f0f0f2; --border: #d9d9de; --accent: #0a64d8; }
@media (prefers-color-scheme: dark) { :root { --fg: #ececf0; --muted: #a0a0a8; --bg: #1b1b1f;
  --user: #1f2a3d; --assistant: #26262b; --code: #2f2f35; --border: #3a3a42; --accent: #6aa8ff; } }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 16px/1.55 -apple-system, BlinkMacSystemFont, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; }
header, main { max-width: 52rem; margin: 0 auto; padding: 1.5rem 1.25rem 0; }
h1 { font-size: 1.6rem; margin: 0 0 .5rem; }
dl.info { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; margin: 0;
  color: var(--muted); font-size: .9rem; }
dl.info dt { font-weight: 600; } dl.info dd { margin: 0; white-space: pre-wrap; }
main { padding-bottom: 3rem; }
.msg { border: 1px solid var(--border); border-radius: 12px; padding: .75rem 1rem; margin: 1rem 0; }
.msg.user { background: var(--user); } .msg.assistant { background: var(--assistant); }
.role { font-weight: 700; font-size: .85rem; text-transform: uppercase; letter-spacing: .04em; margin-bottom: .35rem; }
.role .meta { font-weight: 400; text-transform: none; letter-spacing: 0; color: var(--muted); margin-left: .5rem; }
.body { overflow-wrap: anywhere; }
.body > :first-child { margin-top: 0; } .body > :last-child { margin-bottom: 0; }
pre { background: var(--code); border: 1px solid var(--border); border-radius: 8px; padding: .75rem;
  overflow-x: auto; font-size: .88rem; line-height: 1.45; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; }
:not(pre) > code { background: var(--code); border-radius: 4px; padding: .1em .3em; font-size: .9em; }
pre code { white-space: pre; }
blockquote { margin: .5rem 0; padding: 0 1rem; border-left: 3px solid var(--border); color: var(--muted); }
table { border-collapse: collapse; margin: .75rem 0; display: block; overflow-x: auto; }
th, td { border: 1px solid var(--border); padding: .3rem .6rem; }
a { color: var(--accent); }
details.think { border-left: 3px solid var(--border); padding: .1rem .75rem; margin: .5rem 0; color: var(--muted); }
details.think summary { cursor: pointer; font-style: italic; }
@media print { .msg { break-inside: avoid-page; } details.think { display: none; } }
"""

# Qt's rich text understands a small CSS subset: keep to it for pdf.
_PRINT_CSS = """
body { font-family: "Helvetica", "Arial", "DejaVu Sans", sans-serif; font-size: 10.5pt; color: #1d1d1f; }
h1 { font-size: 18pt; }
.info { color: #6e6e73; font-size: 9pt; }
.role { font-weight: bold; font-size: 9pt; color: #0a64d8; margin-top: 14px; }
.msg.assistant .role { color: #6a3fb5; }
.meta { font-weight: normal; color: #6e6e73; }
pre { background-color: #f0f0f2; font-family: "DejaVu Sans Mono", "Menlo", "Courier New", monospace; font-size: 9pt; }
code { font-family: "DejaVu Sans Mono", "Menlo", "Courier New", monospace; background-color: #f0f0f2; }
blockquote { color: #555555; margin-left: 16px; }
th, td { padding: 3px; }
.think { color: #6e6e73; margin-left: 12px; }
.think-label { font-style: italic; }
"""
