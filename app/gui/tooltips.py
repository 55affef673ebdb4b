"""Tooltips of text from elsewhere (an MCP server's description, a file's name, a chat imported from
a file, an API client's model name): Qt draws a tooltip that looks like HTML as rich text, so such a
text is shown escaped, as written."""

import html

from PySide6.QtGui import Qt


def plain(text: str) -> str:
    """`text` as a tooltip shows it literally: escaped inside a paragraph if Qt would read it as HTML."""
    if not Qt.mightBeRichText(text):
        return text
    return '<p style="white-space: pre-wrap">' + html.escape(text) + "</p>"
