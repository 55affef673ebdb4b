"""A reply's single newlines shown as line breaks, as the exports show them (a poem keeps its lines).

Qt's Markdown importer joins a paragraph's lines with a space (a CommonMark soft break), and
makes a Markdown hard break a new block, spaced like a paragraph. So each line that a soft break
would join to the next is marked before import, and the mark and the space after it become a
line separator (U+2028) in the document: one paragraph, its lines kept.
"""

from PySide6.QtGui import QTextCursor, QTextDocument

from app.transcripts.markdown_html import table_start

# A private-use character (Qt itself uses the noncharacters U+FDD0 and U+FDD1 for frames): a reply's own are dropped.
MARK = "\ue000"
LINE_SEPARATOR = "\u2028"


def mark_soft_breaks(text: str) -> str:
    """text with MARK at the end of every line followed by another non-blank line, except table rows."""
    lines = text.replace(MARK, "").split("\n")
    out, in_table = [], False
    for i, line in enumerate(lines):
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if not line.strip():
            in_table = False
        elif table_start(lines, i):
            in_table = True  # a table's header row: rows run to the next blank line
        if in_table or not line.strip() or not following.strip() or line.endswith(("  ", "\\")):
            out.append(line)
        else:
            out.append(line + MARK)
    return "\n".join(out)


def keep_line_breaks(doc: QTextDocument) -> None:
    """Turn the marks left in an imported document into line breaks (or nothing, at a block's end).

    One edit block, applied from the end: edits one by one re-lay the paragraph each time (a
    5,000-line poem took 20 s)."""
    spots = []  # (position, length, a line break?)
    block = doc.begin()
    while block.isValid():
        text, position = block.text(), block.position()
        at = text.find(MARK)
        while at >= 0:
            # Document positions count UTF-16 units: an emoji before the mark is two.
            units = position + len(text[:at].encode("utf-16-le")) // 2
            joined = text[at + 1 : at + 2] == " "  # the soft break's space: the line goes on after it
            spots.append((units, 2 if joined else 1, joined))
            at = text.find(MARK, at + 1)
        block = block.next()
    if not spots:
        return
    cursor = QTextCursor(doc)
    cursor.beginEditBlock()
    for units, length, joined in reversed(spots):
        cursor.setPosition(units)
        cursor.setPosition(units + length, QTextCursor.MoveMode.KeepAnchor)
        cursor.insertText(LINE_SEPARATOR if joined else "")
    cursor.endEditBlock()


def set_markdown(doc: QTextDocument, text: str, features: QTextDocument.MarkdownFeature) -> None:
    """doc.setMarkdown, with the text's single newlines kept as line breaks."""
    doc.setMarkdown(mark_soft_breaks(text), features)
    keep_line_breaks(doc)
