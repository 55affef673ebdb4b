"""Export a conversation as md, json, html, txt or pdf (app/transcripts/json_import.py reads the json back).

Markdown → HTML lives in app/transcripts/markdown_html.py and the Qt pdf writer in app/transcripts/export_pdf.py,
imported only for a pdf so that the CLI and tests of the other formats stay light.
Every file is written atomically (engine/atomic.py); a FIFO, device or folder target is refused.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.core.store import Conversation, Message, MessageRole, MessageStatus
from app.core.turns import PROMPT_KEY, cut_note, prompt_digest
from app.transcripts import attachments as attached_export
from app.transcripts import highlight
from app.transcripts.markdown_html import _close_fences, _esc, markdown_blocks, markdown_to_html
from engine.atomic import writable_target, write_atomic
from engine.errors import ChinwagError
from engine.text import split_think

FORMATS = ("md", "json", "html", "txt", "pdf")
FORMAT_MARKER = "chinwag-conversation"
FORMAT_VERSION = 1
# "tool": an MCP tool's result; tool_call_id and name say which call, `tool` how it went (app/core/messages.py).
ROLE_NAMES = {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool"}
SYSTEM_HEADING = "System prompt"
# Replies that do not say which prompt they were written with (saved before they did): the current one, first.
SYSTEM_NOTE = "read before every reply; this is the chat's current one"
# Where a prompt took effect, from the digest each reply's stats keep (app/core/turns.py).
PROMPT_FIRST = "read before every reply"
PROMPT_SET = "set here: the replies below were written with it"
PROMPT_REMOVED = "removed here: the replies below were written without one"
PROMPT_LOST = "changed here to one that is not kept (the chat keeps only its current prompt)"


def export_conversation(
    conv: Conversation, fmt: str, path: str | Path, model_name: Callable[[str], str] | None = None
) -> Path:
    """Write conv to path in fmt (one of FORMATS); returns the path written.

    model_name shows a model id as people know it (default: the registry's names); json keeps the ids."""
    fmt = str(fmt).lower().lstrip(".")
    if fmt == "markdown":
        fmt = "md"
    if fmt not in FORMATS:
        raise ChinwagError(f"unknown export format {fmt!r} (expected one of {', '.join(FORMATS)})")
    path = Path(path).expanduser()
    writable_target(path)  # before rendering, so a bad path fails fast (and pdf skips Qt)
    if fmt == "pdf":
        data = _pdf_bytes(conv, model_names(conv, model_name))
    elif fmt == "json":
        data = to_json(conv).encode("utf-8", "replace")
    else:
        renderers: dict[str, Callable[..., str]] = {"md": to_markdown, "html": to_html, "txt": to_text}
        text = renderers[fmt](conv, names=model_names(conv, model_name))
        data = text.encode("utf-8", "replace")  # a lone surrogate cannot be UTF-8
    write_atomic(path, data)
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
        "messages": [_message_json(m) for m in conv.messages],  # the shown path
    }
    if any(m.versions > 1 for m in conv.tree) or len(conv.tree) > len(conv.messages):
        # Every version: "parent" is an index into this list (null for a first message).
        # Readers that know only "messages" still import the shown path.
        data["tree"] = _tree_json(conv.tree)
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def _tree_json(tree: list[Message]) -> list[dict[str, Any]]:
    """Each message with its parent's index, which import requires to be an earlier one (see
    _parents_first); a message whose parent was dropped is a first message that is not shown."""
    order = _parents_first(tree)
    index: dict[int | None, int] = {m.id: i for i, (m, _) in enumerate(order)}
    return [
        {**_message_json(m), "parent": None if cut else index.get(m.parent_id), "active": m.active and not cut}
        for m, cut in order
    ]


def _parents_first(tree: list[Message]) -> list[tuple[Message, bool]]:
    """The messages with parents moved before their children, creation order kept otherwise, each
    with whether its parent was dropped: a parent that cannot come first (itself, a cycle, one in
    another chat: a hand-edited database) is, so the shown path stays what it was."""
    ids = {m.id: i for i, m in enumerate(tree)}
    waiting: dict[int | None, list[Message]] = {}  # parent id -> its children not placed yet, oldest first
    order: list[tuple[Message, bool]] = []  # (message, whether its parent was dropped)
    placed: set[int] = set()

    def place(m: Message, detached: bool = False) -> None:
        stack = [(m, detached)]
        while stack:
            node, cut = stack.pop()
            order.append((node, cut))
            placed.add(node.id)
            stack.extend((child, False) for child in reversed(waiting.pop(node.id, [])))

    for m in tree:
        if m.parent_id is None or m.parent_id in placed:
            place(m)
        elif m.parent_id in ids and m.parent_id != m.id:
            waiting.setdefault(m.parent_id, []).append(m)
        else:
            place(m, detached=True)
    while waiting:  # only cycles are left: cut each at its oldest message
        oldest = min((c for children in waiting.values() for c in children), key=lambda c: ids[c.id])
        waiting[oldest.parent_id].remove(oldest)
        waiting = {k: v for k, v in waiting.items() if v}
        place(oldest, detached=True)
    return order


def _message_json(m: Message) -> dict[str, Any]:
    return {
        "role": m.role,
        "content": m.content,
        "status": m.status,
        "created_at": m.created_at,
        "model_id": m.model_id,
        "stats": m.stats,
        **({"attachments": [a.to_json() for a in m.attachments]} if m.attachments else {}),
        **_tool_json(m),
    }


def _tool_json(m: Message) -> dict[str, Any]:
    """A message's tool round in OpenAI's shape (a reply's tool_calls; a result's tool_call_id and name), and
    how the call went (`tool`: server, arguments, is_error, allowed, seconds, note: those recorded)."""
    if m.tool_calls:
        return {"tool_calls": [c.to_openai() for c in m.tool_calls]}
    result = m.tool_result
    if result is None:
        return {}
    run = result.to_json()
    return {"tool_call_id": result.tool_call_id, "name": result.name, **({"tool": run} if run else {})}


def to_markdown(conv: Conversation, names: dict[str, str] | None = None) -> str:
    names = model_names(conv) if names is None else names
    out = [f"# {_one_line(conv.title)}", ""]
    out += [f"- **{k}:** {v}" for k, v in _metadata(conv, names)]
    marks = prompt_marks(conv)
    for i, m in enumerate(conv.messages):
        if i in marks:
            note, prompt = marks[i]
            out += ["", f"## {SYSTEM_HEADING}", "", f"*{note}*"]
            if prompt:
                out += [""] + ["> " + ln if ln else ">" for ln in prompt.splitlines()]
        out += ["", f"## {_role_name(m.role)}", ""]
        meta = _message_meta(m, names)
        if meta:
            out += [f"*{meta}*", ""]
        out.append(_markdown_body(m))
        if m.attachments:
            out += ["", attached_export.markdown(m.attachments)]
    return "\n".join(out) + "\n"


def _markdown_body(m: Message) -> str:
    if m.role != MessageRole.ASSISTANT or "think>" not in m.content:
        # An unclosed fence would swallow every later section.
        return _close_fences(m.content).rstrip("\n")
    parts = []
    for part in split_think(m.content):
        if not part.text.strip():
            continue
        text = _close_fences(part.text.strip("\n"))
        # Renderers like GitHub's show this collapsed, as the html export does.
        parts.append(f"<details><summary>Thinking</summary>\n\n{text}\n\n</details>" if part.kind == "think" else text)
    return "\n\n".join(parts)


def to_text(conv: Conversation, names: dict[str, str] | None = None) -> str:
    names = model_names(conv) if names is None else names
    out = [_one_line(conv.title), "=" * min(60, max(3, len(_one_line(conv.title))))]
    out += [f"{k}: {v}" for k, v in _metadata(conv, names)]
    marks = prompt_marks(conv)
    for i, m in enumerate(conv.messages):
        if i in marks:
            note, prompt = marks[i]
            out += ["", f"--- {SYSTEM_HEADING} ({note}) ---"] + ([prompt.rstrip("\n")] if prompt else [])
        meta = _message_meta(m, names)
        out += ["", f"--- {_role_name(m.role)}" + (f" ({meta})" if meta else "") + " ---", m.content.rstrip("\n")]
        out += attached_export.text(m.attachments)
    return "\n".join(out) + "\n"


def to_html(conv: Conversation, for_print: bool = False, names: dict[str, str] | None = None) -> str:
    """One self-contained page: inline CSS, no scripts, images or fonts from elsewhere.

    for_print renders thinking as a plain block (Qt's rich text, used for pdf, has no <details>).
    """
    e = _esc
    names = model_names(conv) if names is None else names
    title = _one_line(conv.title)
    if for_print:  # Qt lays out <dl> poorly: one line of facts instead
        info = '<p class="info">' + e(" · ".join(f"{k}: {v}" for k, v in _metadata(conv, names))) + "</p>"
    else:
        info = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in _metadata(conv, names))
        info = f'<dl class="info">{info}</dl>'
    parts = []
    marks = prompt_marks(conv)
    for i, m in enumerate(conv.messages):
        if i in marks:  # before the exchange whose reply was the first written with it
            note, prompt = marks[i]
            role = f'<div class="role">{SYSTEM_HEADING} <span class="meta">{e(note)}</span></div>'
            block = f'<p class="prompt" dir="auto">{e(prompt).replace(chr(10), "<br>")}</p>' if prompt else ""
            parts.append(
                _print_message("system", role, [block] if block else [])
                if for_print
                else f'<section class="msg system">{role}<div class="body">{block}</div></section>'
            )
        details = _message_meta(m, names)
        role_class = re.sub(r"[^a-z]", "", m.role.lower()) or "other"
        role = (
            f'<div class="role">{e(_role_name(m.role))}'
            + (f' <span class="meta">{e(details)}</span>' if details else "")
            + "</div>"
        )
        blocks = _render_blocks(m, for_print) + (
            [attached_export.html(m.attachments, for_print)] if m.attachments else []
        )
        if for_print:
            parts.append(_print_message(role_class, role, blocks))
            continue
        body = "".join(blocks)
        parts.append(f'<section class="msg {role_class}">{role}<div class="body" dir="auto">{body}</div></section>')
    return (
        '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="Chinwag">\n<title>{e(title)}</title>\n'
        f"<style>{_PRINT_CSS if for_print else _CSS + _code_css(parts)}</style>\n</head>\n<body>\n"
        f'<header><h1 dir="auto">{e(title)}</h1>{info}</header>\n'
        "<main>\n" + "\n".join(parts) + "\n</main>\n</body>\n</html>\n"
    )


def _render_blocks(m: Message, for_print: bool) -> list[str]:
    """The message's HTML, one string per top-level block (a thinking section is one)."""
    # Qt's rich text (pdf) gets inline light-palette code colours; the page gets CSS classes.
    inline = False if for_print else None
    if m.role == MessageRole.USER:
        return _plain_blocks(m.content)
    if m.role != MessageRole.ASSISTANT:
        return markdown_blocks(m.content, inline)
    out = []
    for part in split_think(m.content):
        text = part.text
        if not text.strip():
            continue
        if part.kind == "text":
            out += markdown_blocks(text, inline)
        elif for_print:
            out.append(f'<div class="think"><p class="think-label">Thinking</p>{markdown_to_html(text, inline)}</div>')
        else:
            out.append(f'<details class="think"><summary>Thinking</summary>{markdown_to_html(text)}</details>')
    return out


def _plain_blocks(text: str) -> list[str]:
    """A user's message as the window shows it, the text as typed: its spaces (pasted code's
    indentation) and line breaks kept, markdown marks left as they are; one block per paragraph."""
    text = str(text).replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd").strip("\n")
    paragraphs = [p for p in re.split(r"\n[ \t]*\n", text) if p.strip()]
    return [f'<p class="plain" dir="auto" style="white-space: pre-wrap">{_esc(p)}</p>' for p in paragraphs]


_PRE = re.compile(r"<pre><code[^>]*>(.*?)</code></pre>", re.S)
_FIRST_CODE_LINES = 3  # of a long first code block, these go with the heading
_CODE_PAD = 6  # px around code, inside its background
# Qt prints a block's CSS margins in the pdf writer's device pixels, at QPdfWriter's default 1,200
# dpi: a quote's 16 px indent was a third of a millimetre. Margins are written in those pixels.
PDF_DEVICE_DPI = 1200


def _print_margin(css_px: float) -> str:
    """A CSS pixel length (1/96 inch) of a block margin, as the pdf writer's device pixels."""
    return f"{round(css_px * PDF_DEVICE_DPI / 96)}px"


def _code_table(code_html: str, tail: bool = False) -> str:
    """Code in a one-cell table: Qt paints a <pre>'s background line by line, each over the line
    above's underscores, but a cell's once behind the whole block (a cell's, not the table's: Qt
    keeps a cell's out of the page margins when it spans pages; export_pdf takes back the colour
    Qt's import gives each line of it); long lines wrap inside it.
    tail: the rest of a block whose first lines end the cell above, in one box with them."""
    table, cell = (' style="margin-top: 0"', ' style="padding-top: 0"') if tail else ("", "")
    return (
        f'<table class="code"{table} width="100%" cellspacing="0" cellpadding="{_CODE_PAD}">'
        f'<tr><td bgcolor="{_PRINT_CODE_BG}"{cell}><pre>{code_html}</pre></td></tr></table>'
    )


def _print_block(block: str) -> str:
    """A block as Qt's rich text prints it well."""
    block = _PRE.sub(lambda m: _code_table(m.group(1)), block)
    # Qt's rich text draws table borders from attributes, not CSS.
    return block.replace("<table>", '<table border="1" cellspacing="0" cellpadding="3">')


def _split_code(block: str) -> tuple[str, str] | None:
    """A long code block as (its first lines, a code table of the rest), cut outside any colour span."""
    m = _PRE.fullmatch(block.strip())
    if m is None:
        return None
    depth, pos, code = 0, 0, m.group(1)
    for n, line in enumerate(code.split("\n")[:-1], 1):
        depth += line.count("<span") - line.count("</span>")
        pos += len(line) + 1
        if n >= _FIRST_CODE_LINES and depth == 0:
            return f"<pre>{code[: pos - 1]}</pre>", _code_table(code[pos:], tail=True)
    return None


def _print_message(role_class: str, role: str, blocks: list[str]) -> str:
    """The role heading as the header row of a table whose body is the first block: when that block
    cannot start on the page, Qt moves the whole table to the next one, so a heading never ends a page.
    Qt repeats a header row on every page its table spans: of a long first code block, only the
    first lines go in the table (the cell paints their background), the rest follows in one box."""
    split = _split_code(blocks[0]) if blocks else None
    first, cell = (
        (split[0], f' bgcolor="{_PRINT_CODE_BG}" style="padding: {_CODE_PAD}px; padding-bottom: 0"')
        if split
        else ("", "")
    )
    rest = [split[1]] if split else []
    if not split:
        first = _print_block(blocks[0]) if blocks else ""
    rest += [_print_block(b) for b in blocks[1:]]
    return (
        f'<table class="msg {role_class}" width="100%" border="0" cellspacing="0" cellpadding="0">'
        f'<thead><tr><td style="padding-bottom: 4px">{role}</td></tr></thead><tr><td dir="auto"{cell}>{first}</td></tr></table>\n'
        + "".join(rest)
    )


def _code_css(parts: list[str]) -> str:
    """Highlighted code in both palettes, following the reader's colour scheme (if any code)."""
    if not any('class="hl-' in part for part in parts):
        return ""
    return f"\n{highlight.css()}\n@media (prefers-color-scheme: dark) {{\n{highlight.css(dark=True)}\n}}\n"


def _pdf_bytes(conv: Conversation, names: dict[str, str]) -> bytes:
    from app.transcripts.export_pdf import html_to_pdf  # lazy: the only path that loads Qt

    return html_to_pdf(to_html(conv, for_print=True, names=names), _one_line(conv.title))


# -- small helpers -------------------------------------------------------------


def _one_line(text: object) -> str:
    return " ".join(str(text or "").split()) or "Untitled"


def _role_name(role: str) -> str:
    return ROLE_NAMES.get(role, str(role).title() or "Unknown")


def _when(ts: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))
    except (OverflowError, OSError, ValueError, TypeError):
        return str(ts)


def model_names(conv: Conversation, model_name: Callable[[str], str] | None = None) -> dict[str, str]:
    """{model id: the name people know it by} for every model in conv (the registry's names by default)."""
    ids = {conv.model_id, *(m.model_id for m in conv.messages)} - {""}
    if model_name is None and ids:
        from engine.models.registry import display_name, list_models  # lazy: reads the model folders

        models = list_models()
        return {i: display_name(i, models) for i in ids}
    return {i: model_name(i) for i in ids} if model_name else {}


def _system_prompt(conv: Conversation) -> str:
    """The chat's own system prompt: the store keeps only the current one, not what earlier replies had."""
    prompt = (conv.settings or {}).get("system_prompt")
    return str(prompt) if prompt and str(prompt).strip() else ""


def prompt_marks(conv: Conversation) -> dict[int, tuple[str, str]]:
    """Where each system prompt took effect: {index of the message it goes before: (note, text)}.

    Each reply's stats keep the digest of the prompt it was written with; a change goes before the
    question of the first reply written under it. Only the chat's current prompt has its text; a
    chat whose replies keep no digest (saved before they did) shows the current prompt first."""
    current = _system_prompt(conv)
    messages = conv.messages
    written = [
        (i, m.stats[PROMPT_KEY])
        for i, m in enumerate(messages)
        if m.role == MessageRole.ASSISTANT and isinstance(m.stats, dict) and isinstance(m.stats.get(PROMPT_KEY), str)
    ]
    if not written:
        return {0: (SYSTEM_NOTE, current)} if current and messages else {}
    marks: dict[int, tuple[str, str]] = {}
    above = None  # the digest the replies above were written with (None: no reply above says)
    for i, digest in written:
        if digest == above:
            continue
        start = i
        while start > 0 and messages[start].role != MessageRole.USER:
            start -= 1  # back to the question (past tool rounds) of this reply
        mark = _prompt_mark(digest, above, current, start)
        if mark is not None:
            marks[start] = mark
        above = digest
    return marks


def _prompt_mark(digest: str, above: str | None, current: str, start: int) -> tuple[str, str] | None:
    """The mark before message `start`, whose reply was written under the prompt of `digest` ("": none)
    where the replies above were written under `above`: (note, the prompt's text if it is `current`)."""
    if digest and current and digest == prompt_digest(current):
        return (PROMPT_FIRST if start == 0 else PROMPT_SET, current)
    if digest:
        return (PROMPT_LOST, "")
    if above is not None:
        return (PROMPT_REMOVED, "")
    return None


def _metadata(conv: Conversation, names: dict[str, str]) -> list[tuple[str, str]]:
    rows = []
    if conv.model_id:
        rows.append(("Model", names.get(conv.model_id, conv.model_id)))
    rows += [
        ("Created", _when(conv.created_at)),
        ("Updated", _when(conv.updated_at)),
        ("Messages", str(len(conv.messages))),
    ]
    return rows


def _tool_meta(m: Message) -> list[str]:
    """What a tool round adds to a message's line: the calls a reply made, or which call a result answers."""
    result = m.tool_result
    if m.role == MessageRole.TOOL:
        if result is None:
            return ["tool"]
        bits = [(result.name or "tool") + (f" on {result.server}" if result.server else "")]
        if result.is_error:
            bits.append("error")
        if result.seconds is not None:
            bits.append(f"{result.seconds:.1f} s")
        return bits
    if m.tool_calls:
        return ["called " + ", ".join(c.name for c in m.tool_calls)]
    return []


def _message_meta(m: Message, names: dict[str, str]) -> str:
    """e.g. "SmolLM2 135M Instruct · stopped · 120 tokens · 31.2 tok/s", "… · hit max tokens"."""
    bits = []
    if m.role == MessageRole.ASSISTANT and m.model_id:
        bits.append(names.get(m.model_id, m.model_id))
    if m.status != MessageStatus.COMPLETE:
        bits.append(m.status)
    if m.versions > 1:  # the export shows this one; JSON keeps the others
        bits.append(f"version {m.version} of {m.versions}")
    stats = m.stats or {}
    bits += _tool_meta(m)
    if isinstance(stats.get("generated_tokens"), int) and stats["generated_tokens"]:
        bits.append(f"{stats['generated_tokens']} tokens")
    tps = stats.get("decode_tps")
    if isinstance(tps, (int, float)) and not isinstance(tps, bool) and tps > 0:
        bits.append(f"{tps:.1f} tok/s")
    note = cut_note(stats) if m.role == MessageRole.ASSISTANT and m.status == MessageStatus.COMPLETE else ""
    if note:
        bits.append(note)  # a reader sees why it ends mid-sentence
    return " · ".join(bits)


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
.msg.system { color: var(--muted); } .msg.system .prompt { white-space: pre-wrap; }
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
details.attachment { border: 1px solid var(--border); border-radius: 6px; padding: .25rem .75rem; margin: .5rem 0; }
details.attachment summary { cursor: pointer; }
pre.attachment-text { white-space: pre-wrap; max-height: 30rem; overflow: auto; }
@media print { .msg { break-inside: avoid-page; } details.think { display: none; } }
"""

# Qt's rich text understands a small CSS subset: keep to it for pdf.
_PRINT_CODE_BG = "#f0f0f2"
_PRINT_CSS = """
body { font-family: "Helvetica", "Arial", "DejaVu Sans", sans-serif; font-size: 10.5pt; color: #1d1d1f; }
h1 { font-size: 18pt; }
.info { color: #6e6e73; font-size: 9pt; }
table.msg { margin-top: 12px; }
.role { font-weight: bold; font-size: 9pt; color: #0a64d8; }
.msg.assistant .role { color: #6a3fb5; }
.msg.system .role { color: #6e6e73; }
.prompt { color: #444444; }
.meta { font-weight: normal; color: #6e6e73; }
pre { font-family: "DejaVu Sans Mono", "Menlo", "Courier New", monospace; font-size: 9pt; white-space: pre-wrap;
  margin-top: 0; margin-bottom: 0; }
table.code { margin-top: 4px; margin-bottom: 4px; }
code { font-family: "DejaVu Sans Mono", "Menlo", "Courier New", monospace; background-color: #f0f0f2; }
blockquote { color: #555555; margin-left: QUOTE_INDENT; }
.think { color: #6e6e73; margin-left: THINK_INDENT; }
.think-label { font-style: italic; }
""".replace("QUOTE_INDENT", _print_margin(16)).replace("THINK_INDENT", _print_margin(12))
