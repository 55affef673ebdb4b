"""Attached documents in exports: a section in Markdown and text (and PDF), a collapsed block in HTML."""

import re

from app.core.attachments import StoredAttachment
from app.core.sizes import format_bytes
from app.transcripts.markdown_html import _esc


def _label(a: StoredAttachment) -> str:
    size = format_bytes(a.size)
    return f"{a.name} ({a.kind.upper() if a.kind != 'text' else 'text'}, {size})"


def markdown(attachments: list[StoredAttachment]) -> str:
    parts = []
    for a in attachments:
        longest = max((len(run) for run in re.findall(r"`+", a.text)), default=0)
        fence = "`" * max(3, longest + 1)  # no run of backticks in the text can close it
        parts.append(f"### Attachment: {_label(a)}\n\n{fence}text\n{a.text.rstrip()}\n{fence}")
    return "\n\n".join(parts)


def text(attachments: list[StoredAttachment]) -> list[str]:
    out = []
    for a in attachments:
        out += ["", f"[Attachment: {_label(a)}]", a.text.rstrip("\n"), f"[End of {a.name}]"]
    return out


def html(attachments: list[StoredAttachment], for_print: bool) -> str:
    out = []
    for a in attachments:
        body = f'<pre class="attachment-text">{_esc(a.text.rstrip())}</pre>'
        if for_print:  # Qt's rich text (PDF) has no <details>: a titled section
            out.append(f'<div class="attachment"><p class="think-label">Attachment: {_esc(_label(a))}</p>{body}</div>')
        else:
            out.append(f'<details class="attachment"><summary>📎 {_esc(_label(a))}</summary>{body}</details>')
    return "".join(out)
