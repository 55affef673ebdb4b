"""Code highlighting: the lexer choice and guess, HTML for exports, colours in the window."""

import re

import pytest

from app.core.store import Conversation, Message
from app.transcripts.highlight import css, guess_language, highlight_html, resolve_language, spans
from app.transcripts.markdown_html import markdown_to_html

PY = 'def greet(name):\n    return f"hi {name}"  # say hi\n'


def _plain(html_text: str) -> str:
    return re.sub(r"</?span[^>]*>", "", html_text)


@pytest.mark.parametrize(
    "code, lang",
    [
        (PY, "python"),
        ('{"a": [1, 2], "b": null}', "json"),
        ("#include <stdio.h>\nint main(void) { return 0; }", "cpp"),
        ("$ pip install chinwag\n$ chinwag models", "bash"),
        ("SELECT name FROM users WHERE id = 1;", "sql"),
        ("x = 1", ""),  # too short to guess
        ("Hello there, how are you doing today? Fine.", ""),  # prose: no guess
        ("def f():\n    pass\nfn main() { let mut x = 1; }", ""),  # a tie: no guess
    ],
)
def test_guess_language(code, lang):
    assert guess_language(code) == lang


def test_fence_language_wins_and_unknown_names_stay_plain():
    assert resolve_language("x = 1", "Python") == "python"
    assert resolve_language(PY, "no-such-language") == ""
    assert resolve_language(PY, "text") == ""
    assert resolve_language(PY, "") == "python"
    assert spans(PY, "no-such-language") == []


def test_fenced_python_block_is_highlighted_in_html():
    out = markdown_to_html(f"```python\n{PY}```")
    assert out.startswith('<pre><code class="language-python">')
    assert '<span class="hl-k">def</span>' in out and 'class="hl-c1"' in out  # keyword, comment
    assert _plain(out) == markdown_to_html(f"```text\n{PY}```").replace("language-text", "language-python")


def test_unlabelled_block_is_guessed_and_text_is_escaped():
    out = markdown_to_html('```\nimport os\nprint("<b>&")\n```')
    assert 'class="hl-kn">import</span>' in out
    assert "&lt;b&gt;&amp;" in out and "<b>" not in out


def test_inline_colours_for_qt_rich_text_differ_by_palette():
    light, dark = highlight_html(PY, "python", False), highlight_html(PY, "python", True)
    assert 'style="color:#' in light and 'style="color:#' in dark and light != dark
    assert "class=" not in light and _plain(light) == _plain(highlight_html(PY, "python"))


def test_css_has_both_palettes():
    assert ".hl-k{color:#" in css()
    assert re.search(r"\.hl-k\{color:#[0-9a-fA-F]+;font-weight:\w+;font-style:\w+;\}", css(dark=True))


def test_spans_cover_the_code_exactly_and_astral_text_is_safe():
    code = 's = "🎉"\nprint(s)\n'
    runs = spans(code, "python")
    assert runs and all(0 <= r.start and r.start + r.length <= len(code) for r in runs)
    assert any(code[r.start : r.start + r.length] == "print" for r in runs)


def test_html_and_pdf_exports_highlight_code(tmp_path):
    from app.transcripts.export import export_conversation, to_html

    conv = Conversation(
        "c",
        "Code",
        0,
        0,
        messages=[
            Message(1, "c", 0, "user", "a function?"),
            Message(2, "c", 1, "assistant", f"Here:\n\n```python\n{PY}```"),
        ],
    )
    page = export_conversation(conv, "html", tmp_path / "c.html").read_text(encoding="utf-8")
    assert '<span class="hl-k">def</span>' in page
    assert ".hl-k{" in page and "@media (prefers-color-scheme: dark) {\n.hl-" in page
    printed = to_html(conv, for_print=True)
    assert re.search(r'<span style="color:#[0-9a-fA-F]{6}[^"]*">def</span>', printed)


@pytest.mark.qt
def test_code_block_in_the_window_is_coloured(qtbot):
    from PySide6.QtGui import QPalette

    from app.gui.chat.markdown_view import CodeBlock, MarkdownView

    view = MarkdownView()
    qtbot.addWidget(view)
    view.set_text(f"Look:\n\n```python\n{PY}```")
    block = next(w for w in view.widgets() if isinstance(w, CodeBlock))
    doc = block.editor.document()
    formats = doc.firstBlock().layout().formats()
    coloured = {
        doc.firstBlock().text()[f.start : f.start + f.length] for f in formats if f.format.foreground().style() != 0
    }
    assert "def" in coloured and "greet" in coloured
    default = block.editor.palette().color(QPalette.ColorRole.Text)
    assert any(f.format.foreground().color() != default for f in formats)


@pytest.mark.qt
def test_live_code_block_highlights_at_most_once_per_render(qtbot):
    from app.gui.chat.markdown_view import CodeBlock, MarkdownView

    view = MarkdownView()
    qtbot.addWidget(view)
    text = "```python\n"
    renders = 0
    for i in range(40):
        text += f"x{i} = {i}  # n\n"
        view.set_text(text)
        renders += 1
    block = next(w for w in view.widgets() if isinstance(w, CodeBlock))
    assert 1 <= block.highlights <= renders
    before = block.highlights
    view.set_text(text + "```", merge=True)  # the fence closes: one last, complete highlight
    assert block.highlights == before + 1
    assert block.editor.document().lastBlock().previous().layout().formats()


@pytest.mark.qt
def test_unlabelled_live_block_is_guessed_only_when_complete(qtbot):
    from app.gui.chat.markdown_view import CodeBlock, MarkdownView

    view = MarkdownView()
    qtbot.addWidget(view)
    view.set_text("```\nimport os\nprint(os.getcwd())\n")
    block = next(w for w in view.widgets() if isinstance(w, CodeBlock))
    assert block.highlights == 0
    view.set_text("```\nimport os\nprint(os.getcwd())\n```")
    assert block.highlights == 1 and block.editor.document().firstBlock().layout().formats()


@pytest.mark.qt
def test_guessed_language_is_shown_and_dark_palette_recolours(qtbot):
    from PySide6.QtGui import QGuiApplication

    from app.gui.chat.markdown_view import CodeBlock, MarkdownView
    from app.gui.theme import palette_for

    view = MarkdownView()
    qtbot.addWidget(view)
    view.set_text("```\nimport os\nprint(os.getcwd())\n```")
    block = next(w for w in view.widgets() if isinstance(w, CodeBlock))
    assert block.lang_label.text() == "python"

    def keyword_colour():
        formats = block.editor.document().firstBlock().layout().formats()
        return next(f.format.foreground().color().name() for f in formats if f.start == 0)

    light = keyword_colour()
    original = QGuiApplication.palette()
    QGuiApplication.setPalette(palette_for("dark"))
    try:
        qtbot.waitUntil(lambda: keyword_colour() != light, timeout=3000)
    finally:
        QGuiApplication.setPalette(original)
    qtbot.waitUntil(lambda: keyword_colour() == light, timeout=3000)


def test_html_export_without_code_carries_no_code_css():
    from app.transcripts.export import to_html

    conv = Conversation("c", "Prose", 0, 0, messages=[Message(1, "c", 0, "user", "just words")])
    assert ".hl-" not in to_html(conv)
