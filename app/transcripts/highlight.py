"""Code highlighting with Pygments, for the window and for exports; no Qt.

A fenced block is lexed by its language name, or by a cheap guess when the fence names none.
The guess looks at a few telltale patterns of common languages and refuses short or
ambiguous snippets: plain text is better than wrong colours. Output is either spans
(offsets + a colour/weight, for Qt) or HTML spans with short class names (CSS for both
palettes from `css()`, or inline styles for Qt's rich text).
"""

from __future__ import annotations

import functools
import html
import json
import re
from dataclasses import dataclass
from typing import Any

from pygments.lexers import get_lexer_by_name
from pygments.styles import get_style_by_name
from pygments.token import STANDARD_TYPES, Token
from pygments.util import ClassNotFound

LIGHT_STYLE = "default"
DARK_STYLE = "github-dark"
MAX_HIGHLIGHT_CHARS = 100_000  # past this a block stays plain: lexing it on every render costs too much
GUESS_MIN_CHARS = 20  # shorter snippets are never guessed
PLAIN_NAMES = {"", "text", "plain", "plaintext", "txt", "output", "console-output"}

# (language, pattern): each line matching a pattern counts for that language.
_GUESSES = [
    (
        "python",
        r"^\s*(def \w+\(.*\):|class \w+(\(.*\))?:|import \w+|from [\w.]+ import |if __name__ ==|print\(|elif |@\w+)",
    ),
    (
        "javascript",
        r"\b(const|let|var) \w+ = |\bfunction\s*\w*\s*\(|=>\s*[{(]|console\.log\(|\brequire\(|^\s*export (default )?",
    ),
    (
        "bash",
        r"^\s*(\$ |sudo |apt(-get)? |brew |pip3? install|npm (install|run) |cd |export \w+=|echo |mkdir |chmod |#!/bin/(ba|z)?sh)",
    ),
    ("cpp", r"^\s*#include\s*[<\"]|\bstd::|\bint main\s*\(|\bcout\s*<<"),
    ("rust", r"\bfn \w+\s*(<.*>)?\(|\blet mut |\bprintln!\(|^\s*impl\b|^\s*use \w+::"),
    ("go", r"^package \w+|^\s*func (\(.*\) )?\w+\(|\bfmt\.Print|:= "),
    ("java", r"\bpublic (static )?(final )?(class|void|int|String)\b|System\.out\.print"),
    ("sql", r"(?i)^\s*(select\b.*\bfrom\b|insert into\b|create table\b|update \w+ set\b|delete from\b)"),
    ("html", r"^\s*<(!DOCTYPE|html|head|body|div|span|p|a|ul|li|script|style)\b"),
    ("css", r"^\s*[.#]?[\w-]+\s*\{\s*$|^\s*[\w-]+:\s*[^;]+;\s*$"),
]
_GUESS_RES = [(lang, re.compile(pattern)) for lang, pattern in _GUESSES]


@dataclass(frozen=True)
class Span:
    start: int  # offset in the code (Python str indices)
    length: int
    color: str  # "#rrggbb" or "" for the default text colour
    bold: bool = False
    italic: bool = False


def guess_language(code: str) -> str:
    """A language name for code without a fence language, or "" when unsure."""
    text = code.strip()
    if len(text) < GUESS_MIN_CHARS:
        return ""
    if text[0] in "{[" and text[-1] in "}]":
        try:
            json.loads(text)
            return "json"
        except ValueError:
            pass
    lines = text.split("\n")[:200]
    scores = {lang: sum(1 for line in lines if rx.search(line)) for lang, rx in _GUESS_RES}
    best = max(scores, key=scores.__getitem__)
    ranked = sorted(scores.values(), reverse=True)
    # A clear winner only: at least one hit, and more than any other language.
    if ranked[0] == 0 or ranked[0] == ranked[1]:
        return ""
    return best


def resolve_language(code: str, lang: str) -> str:
    """The lexer name to use: the fence's language if Pygments knows it, else a guess."""
    lang = (lang or "").strip().lower()
    if lang in PLAIN_NAMES:
        return "" if lang else guess_language(code)
    return lang if _lexer(lang) is not None else ""


@functools.lru_cache(maxsize=64)
def _lexer(lang: str) -> Any:  # a Pygments lexer, or None
    try:
        # Keep the text exactly as given: offsets must line up with the original.
        return get_lexer_by_name(lang, stripnl=False, stripall=False, ensurenl=False)
    except ClassNotFound:
        return None


def tokens(code: str, lang: str) -> list[tuple[object, str]]:
    """[(token type, text)...] covering code exactly; one plain token when not highlighted."""
    name = resolve_language(code, lang)
    lexer = _lexer(name) if name else None
    if lexer is None or not code or len(code) > MAX_HIGHLIGHT_CHARS:
        return [(Token.Text, code)]
    out: list[tuple[object, str]] = []
    for ttype, text in lexer.get_tokens(code):
        if out and out[-1][0] is ttype:  # one run per colour: smaller HTML, fewer Qt formats
            out[-1] = (ttype, out[-1][1] + text)
        else:
            out.append((ttype, text))
    if "".join(text for _, text in out) != code:  # a lexer that rewrote the text: stay plain
        return [(Token.Text, code)]
    return out


@functools.lru_cache(maxsize=4)
def _style(dark: bool) -> Any:  # a Pygments style class
    return get_style_by_name(DARK_STYLE if dark else LIGHT_STYLE)


@functools.lru_cache(maxsize=2048)
def _look(ttype: Any, dark: bool) -> tuple[str, bool, bool]:
    style = _style(dark).style_for_token(ttype)
    return ("#" + style["color"]) if style["color"] else "", bool(style["bold"]), bool(style["italic"])


def spans(code: str, lang: str, dark: bool = False) -> list[Span]:
    """The coloured runs of code, for a Qt highlighter."""
    out, pos = [], 0
    for ttype, text in tokens(code, lang):
        color, bold, italic = _look(ttype, dark)
        if text and not text.isspace() and (color or bold or italic):
            out.append(Span(pos, len(text), color, bold, italic))
        pos += len(text)
    return out


def _short(ttype: Any) -> str:
    while ttype not in STANDARD_TYPES:
        ttype = ttype.parent
    return str(STANDARD_TYPES[ttype])


def highlight_html(code: str, lang: str, inline_dark: bool | None = None) -> str:
    """Escaped code with <span class="hl-…"> runs (inline_dark=None), or inline colours
    of the light (False) or dark (True) palette for renderers without class CSS."""
    parts = []
    for ttype, text in tokens(code, lang):
        esc = html.escape(text, quote=True)
        short = _short(ttype)
        if not short or not text or text.isspace():
            parts.append(esc)
        elif inline_dark is None:
            parts.append(f'<span class="hl-{short}">{esc}</span>')
        else:
            color, bold, italic = _look(ttype, inline_dark)
            style = ";".join(
                s
                for s in (
                    f"color:{color}" if color else "",
                    "font-weight:bold" if bold else "",
                    "font-style:italic" if italic else "",
                )
                if s
            )
            parts.append(f'<span style="{style}">{esc}</span>' if style else esc)
    return "".join(parts)


def css(dark: bool = False, prefix: str = "") -> str:
    """Rules for every hl- class of highlight_html in one palette, each selector prefixed.
    The dark rules are complete (colour, weight, style) so they override the light ones."""
    rules = []
    for ttype, short in sorted(STANDARD_TYPES.items(), key=lambda kv: kv[1]):
        if not short:
            continue
        color, bold, italic = _look(ttype, dark)
        if dark:
            decl = (
                f"color:{color or 'inherit'};font-weight:{'bold' if bold else 'normal'};"
                f"font-style:{'italic' if italic else 'normal'};"
            )
        else:
            decl = "".join(
                d
                for d in (
                    f"color:{color};" if color else "",
                    "font-weight:bold;" if bold else "",
                    "font-style:italic;" if italic else "",
                )
                if d
            )
        if decl:
            rules.append(f"{prefix}.hl-{short}{{{decl}}}")
    return "\n".join(rules)
