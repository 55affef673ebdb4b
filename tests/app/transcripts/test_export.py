"""Exports in every format, the json round trip, and the small markdown → HTML converter."""

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.transcripts.export import (
    export_conversation,
    suggested_filename,
)
from app.transcripts.json_import import import_conversation
from app.transcripts.markdown_html import markdown_to_html
from engine.errors import ChinwagError

ROOT = Path(__file__).resolve().parents[3]

ASSISTANT_TEXT = """<think>The user wants a loop. Keep it short.</think>Here is **a loop** in `Python`:

```python
for i in range(3):
    print("<b>", i)  # not bold
```

| Name | Value |
|:-----|------:|
| a    | 1     |

- one
- two with [a link](https://example.com/a_b)

<script>alert("x")</script>"""


@pytest.fixture
def conv(store):
    c = store.create_conversation(
        model_id="smollm2-135m-instruct",
        settings={
            "system_prompt": "You are terse.",
            "temperature": 0.3,
            "top_k": 40,
            "max_tokens": 256,
        },
    )
    store.add_message(c.id, "user", "How do I loop? 🎉 שלום مرحبا 你好")
    store.add_message(
        c.id,
        "assistant",
        ASSISTANT_TEXT,
        model_id="smollm2-135m-instruct",
        stats={"generated_tokens": 42, "decode_tps": 31.5, "finish_reason": "stop", "prompt_ids": [1, 2]},
    )
    store.add_message(c.id, "user", "And again?")
    store.add_message(c.id, "assistant", "Half an answ", status="stopped", model_id="other")
    store.add_message(c.id, "assistant", "", status="failed")
    return store.get_conversation(c.id)


@pytest.fixture
def out(tmp_path):
    """An empty folder for exports (tmp_path also holds the data dir)."""
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


def strip_ids(conv):
    """What must survive a round trip: every version, with parents as indices."""
    index = {m.id: i for i, m in enumerate(conv.tree)}
    return (
        replace(conv, id="", messages=[], tree=[]),
        [replace(m, id=0, conversation_id="", parent_id=index.get(m.parent_id)) for m in conv.messages],
        [replace(m, id=0, conversation_id="", parent_id=index.get(m.parent_id)) for m in conv.tree],
    )


# -- json ----------------------------------------------------------------------


def test_json_round_trip_is_identical(store, conv, tmp_path):
    path = export_conversation(conv, "json", tmp_path / "chat.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == "chinwag-conversation" and data["version"] == 1
    assert data["conversation"]["settings"]["system_prompt"] == "You are terse."
    assert data["messages"][1]["stats"]["decode_tps"] == 31.5

    imported = import_conversation(store, path)
    assert imported.id != conv.id
    again = store.get_conversation(imported.id)
    assert strip_ids(again) == strip_ids(conv)
    assert strip_ids(imported) == strip_ids(conv)
    assert len(store.list_conversations()) == 2


def test_json_round_trip_of_awkward_text(store, tmp_path):
    c = store.create_conversation(title="Ünïcode ✨ עברית")
    texts = ["x" * 1_000_000, "👨‍👩‍👧 🇯🇵", "RTL עברית mixed العربية 123", "nul\x00char", 'quote " and \\ backslash']
    for t in texts:
        store.add_message(c.id, "user", t)
    c = store.get_conversation(c.id)
    imported = import_conversation(store, export_conversation(c, "json", tmp_path / "big.json"))
    assert strip_ids(store.get_conversation(imported.id)) == strip_ids(c)


def test_import_is_one_transaction(store, conv):
    broken = replace(conv, messages=conv.messages[:2] + [replace(conv.messages[2], status="bogus")])
    with pytest.raises(ChinwagError):
        store.insert_conversation(broken)
    assert [s.id for s in store.list_conversations()] == [conv.id]


# -- the text formats ----------------------------------------------------------


def test_markdown_export(conv, tmp_path):
    text = export_conversation(conv, "md", tmp_path / "chat.md").read_text(encoding="utf-8")
    assert text.startswith(f"# {conv.title}\n")
    assert "- **Model:** SmolLM2 135M Instruct" in text and "## System prompt" in text and "> You are terse." in text
    assert text.count("## User") == 2 and text.count("## Assistant") == 3
    assert "*SmolLM2 135M Instruct · 42 tokens · 31.5 tok/s*" in text
    assert "*other · stopped*" in text and "*failed*" in text
    assert "<details><summary>Thinking</summary>" in text and "```python\nfor i in range(3):" in text


@pytest.mark.parametrize("fmt", ["md", "html", "txt"])
def test_a_reply_cut_at_max_tokens_says_so(store, tmp_path, fmt):
    c = store.create_conversation(title="cut")
    store.add_message(c.id, "user", "Tell me a story")
    stats = {"generated_tokens": 20, "decode_tps": 11.7, "finish_reason": "length"}
    store.add_message(c.id, "assistant", "Once upon a time, in their", model_id="m", stats=stats)
    store.add_message(c.id, "user", "Another")
    store.add_message(c.id, "assistant", "The end.", model_id="m", stats=dict(stats, finish_reason="stop"))
    text = export_conversation(store.get_conversation(c.id), fmt, tmp_path / f"cut.{fmt}").read_text(encoding="utf-8")
    # seen in a PDF export: a reply ending "in their" with nothing to say it was cut
    assert text.count("hit max tokens") == 1 and "20 tokens · 11.7 tok/s · hit max tokens" in text


def test_markdown_export_closes_an_unclosed_fence(store, tmp_path):
    c = store.create_conversation(title="fence")
    store.add_message(c.id, "assistant", "```python\nprint('cut off")
    store.add_message(c.id, "user", "next")
    text = export_conversation(store.get_conversation(c.id), "md", tmp_path / "f.md").read_text()
    assert "print('cut off\n```\n\n## User\n\nnext" in text


def test_text_export(conv, tmp_path):
    text = export_conversation(conv, "txt", tmp_path / "chat.txt").read_text(encoding="utf-8")
    assert text.startswith(conv.title + "\n")
    assert "--- User ---\nHow do I loop?" in text and "--- Assistant (other · stopped) ---\nHalf an answ" in text
    assert "--- System prompt (read before every reply; this is the chat's current one) ---\nYou are terse." in text


@pytest.mark.parametrize("fmt", ["md", "txt", "html", "pdf"])
def test_exports_name_models_and_put_the_system_prompt_before_the_first_message(qapp, fmt, tmp_path):
    from app.core.store import Conversation, Message

    hf_id, remote = "mlx-community/Qwen2.5-0.5B-Instruct-4bit", "http://127.0.0.1:9/v1#served-model"
    conv = Conversation(
        "c",
        "Names",
        0,
        0,
        model_id="smollm2-135m-instruct",
        settings={"system_prompt": "Answer in French."},
        messages=[
            Message(1, "c", 0, "user", "Zfirst question"),
            Message(2, "c", 1, "assistant", "Oui.", model_id=hf_id),
            Message(3, "c", 2, "assistant", "Non.", model_id=remote),
        ],
    )
    path = export_conversation(conv, fmt, tmp_path / f"n.{fmt}")
    if fmt == "pdf":
        pdfium = pytest.importorskip("pypdfium2")
        text = "".join(page.get_textpage().get_text_range() for page in pdfium.PdfDocument(str(path)))
    else:
        text = path.read_text(encoding="utf-8")
    assert "SmolLM2 135M Instruct" in text and "Qwen2.5-0.5B-Instruct-4bit" in text and "served-model" in text
    for raw in ("smollm2-135m-instruct", "mlx-community/", "127.0.0.1"):
        assert raw not in text
    assert text.index("Model") < text.index("Answer in French.") < text.index("Zfirst question")
    json_text = export_conversation(conv, "json", tmp_path / "n.json").read_text(encoding="utf-8")
    assert hf_id in json_text and "smollm2-135m-instruct" in json_text  # json keeps the ids for import
    named = export_conversation(conv, "txt", tmp_path / "w.txt", model_name=lambda i: f"<{i[-4:]}>")
    assert "<4bit>" in named.read_text(encoding="utf-8")


def test_html_export_is_self_contained_and_renders_markdown(conv, tmp_path):
    page = export_conversation(conv, "html", tmp_path / "chat.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page and "<style>" in page
    for external in ("<script", "<link", " src=", "url(", "@import", "<img", "<iframe"):
        assert external not in page.lower()
    code = re.search(r'<pre><code class="language-python">(.*?)</code></pre>', page, re.S).group(1)
    assert re.sub(r"</?span[^>]*>", "", code).startswith("for i in range(3):\n    print(&quot;&lt;b&gt;&quot;, i)")
    assert '<span class="hl-k">for</span>' in code and ".hl-k{" in page  # highlighted, with its CSS
    assert "<strong>a loop</strong>" in page and "<code>Python</code>" in page
    assert '<th style="text-align:left">Name</th>' in page and '<td style="text-align:right">1</td>' in page
    assert '<a href="https://example.com/a_b">a link</a>' in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert '<details class="think"><summary>Thinking</summary>' in page and "<details open" not in page
    assert "The user wants a loop." in page and "<think>" not in page
    assert "שלום مرحبا 你好" in page and 'dir="auto"' in page


def test_suggested_filename():
    from app.core.store import Conversation

    assert suggested_filename(Conversation("i", 'a/b: "c"?', 0, 0), "md") == "a b c.md"
    assert suggested_filename(Conversation("i", "  ", 0, 0), "pdf") == "conversation.pdf"


def test_unknown_format(conv, tmp_path):
    with pytest.raises(ChinwagError, match="format"):
        export_conversation(conv, "docx", tmp_path / "x.docx")


# -- atomic writes -------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["md", "json", "html", "txt", "pdf"])
def test_unwritable_targets_fail_in_one_line_and_leave_nothing(conv, out, fmt):
    targets = [out / "no-such-folder" / f"x.{fmt}", out]
    for target in targets:
        before = sorted(out.rglob("*"))
        with pytest.raises(ChinwagError) as info:
            export_conversation(conv, fmt, target)
        assert str(target) in str(info.value) and "\n" not in str(info.value)
        assert sorted(out.rglob("*")) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_permission_denied(conv, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(ChinwagError, match="locked"):
            export_conversation(conv, "md", locked / "x.md")
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


def test_permission_denied_simulated(conv, out, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    from engine import atomic

    monkeypatch.setattr(atomic.os, "open", denied)
    with pytest.raises(ChinwagError, match="Permission denied") as info:
        export_conversation(conv, "html", out / "x.html")
    assert str(out / "x.html") in str(info.value)
    assert list(out.iterdir()) == []


def test_failed_write_keeps_the_old_file_and_no_temp(conv, out, monkeypatch):
    target = out / "chat.md"
    target.write_text("old contents")
    target.chmod(0o640)

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(ChinwagError, match="No space left"):
        export_conversation(conv, "md", target)
    assert target.read_text() == "old contents"
    assert [p.name for p in out.iterdir()] == ["chat.md"]
    monkeypatch.undo()
    export_conversation(conv, "md", target)
    assert target.read_text().startswith("# ") and (target.stat().st_mode & 0o777) == 0o640


@pytest.mark.timing
def test_big_message_exports_quickly(store, tmp_path):
    import time

    c = store.create_conversation(title="big")
    store.add_message(c.id, "assistant", ("Some **bold** `code` text 🎉 عربى\n\n" * 30000)[:1_000_000])
    c = store.get_conversation(c.id)
    for fmt in ("md", "json", "html", "txt"):
        start = time.perf_counter()
        path = export_conversation(c, fmt, tmp_path / f"big.{fmt}")
        assert path.stat().st_size > 900_000
        assert time.perf_counter() - start < 60  # a few seconds here; generous for a loaded machine


# -- pdf (Qt) ------------------------------------------------------------------


@pytest.mark.qt
def test_pdf_export(qapp, conv, out):
    path = export_conversation(conv, "pdf", out / "chat.pdf")
    data = path.read_bytes()
    assert data.startswith(b"%PDF") and data.rstrip().endswith(b"%%EOF") and len(data) > 1000
    assert [p.name for p in out.iterdir()] == ["chat.pdf"]


@pytest.mark.qt
def test_pdf_of_awkward_text(qapp, store, tmp_path):
    c = store.create_conversation(title="עברית mixed 🎉")
    store.add_message(c.id, "user", "مرحبا بالعالم 你好 👨‍👩‍👧\n\n" + "long line " * 10000)
    store.add_message(c.id, "assistant", "<think>unclosed thinking\n```\nunclosed fence")
    data = export_conversation(store.get_conversation(c.id), "pdf", tmp_path / "odd.pdf").read_bytes()
    assert data.startswith(b"%PDF")


def test_only_pdf_imports_qt(tmp_path):
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from app.core.store import Conversation, Message\n"
        "from app.transcripts import export\n"
        "from app.cli import transcripts as transcripts_cli\n"
        "c = Conversation('i', 't', 0, 0, messages=[Message(1, 'i', 0, 'user', '**hi**')])\n"
        "for f in ('md', 'json', 'html', 'txt'): export.export_conversation(c, f, sys.argv[2] + '/x.' + f)\n"
        "assert not [m for m in sys.modules if m.startswith('PySide6')], 'Qt was imported'\n"
    )
    subprocess.run([sys.executable, "-c", script, str(ROOT), str(tmp_path)], check=True, timeout=60)


# -- markdown → html -----------------------------------------------------------


def test_unclosed_code_fence_runs_to_the_end():
    out = markdown_to_html("Intro\n\n```js\nlet a = '<div>';\n\n# not a heading")
    assert re.sub(r"</?span[^>]*>", "", out) == (
        '<p dir="auto">Intro</p>\n'
        '<pre><code class="language-js">let a = &#x27;&lt;div&gt;&#x27;;\n\n# not a heading</code></pre>\n'
    )


@pytest.mark.parametrize(
    "md, expected",
    [
        ("# Title", '<h1 dir="auto">Title</h1>'),
        ("### C# tips ###", '<h3 dir="auto">C# tips</h3>'),
        ("#hashtag", '<p dir="auto">#hashtag</p>'),
        ("a\nb", '<p dir="auto">a<br>\nb</p>'),
        (
            "*it* **bold** ***both*** ~~gone~~",
            "<em>it</em> <strong>bold</strong> <em><strong>both</strong></em> <del>gone</del>",
        ),
        ("snake_case_name and 2 * 3 * 4", "snake_case_name and 2 * 3 * 4"),
        ("`a < b` and ``x ` y``", "<code>a &lt; b</code> and <code>x ` y</code>"),
        (r"\*literal\*", "*literal*"),
        ("[x](javascript:alert(1))", '<p dir="auto">x</p>'),
        ("![cat](https://e.com/cat.png)", '<a href="https://e.com/cat.png">cat</a>'),
        ("see https://e.com/x.", '<a href="https://e.com/x">https://e.com/x</a>.'),
        ('[q](https://e.com/?a=1&b="2")', '<a href="https://e.com/?a=1&amp;b=&quot;2&quot;">q</a>'),
        (
            "- a\n  - b\n- c",
            '<ul>\n<li dir="auto">a<ul>\n<li dir="auto">b</li>\n</ul>\n</li>\n<li dir="auto">c</li>\n</ul>',
        ),
        ("3. x\n4. y", '<ol start="3">'),
        ("- [x] done", "☑ done"),
        ("> quoted\n> text", '<blockquote><p dir="auto">quoted<br>\ntext</p>\n</blockquote>'),
        ("---", "<hr>"),
        ("| a | b |\n|---|---|\n| `x|y` | 2 |", "<td><code>x|y</code></td><td>2</td>"),
        ("<img src=x onerror=alert(1)>", "&lt;img src=x onerror=alert(1)&gt;"),
    ],
)
def test_markdown_to_html(md, expected):
    assert expected in markdown_to_html(md)


def test_deep_nesting_does_not_crash():
    assert "x" in markdown_to_html("> " * 3000 + "x")
    assert "x" in markdown_to_html("".join("  " * i + "- x\n" for i in range(300)))


@pytest.mark.timing
def test_megabyte_of_unmatched_emphasis_is_fast():
    import time

    for text in ("**a " * 250_000, "_a " * 300_000, "`a ``b " * 100_000, "[a " * 300_000):
        start = time.perf_counter()
        markdown_to_html(text)
        # ~1 s here; a quadratic scan of a megabyte takes hours: a bound no machine load reaches.
        assert time.perf_counter() - start < 60


ALLOWED_TAGS = {
    "span",
    "p",
    "br",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "pre",
    "code",
    "em",
    "strong",
    "del",
    "a",
    "ul",
    "ol",
    "li",
    "blockquote",
    "hr",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(list("ab <>&\"'`*_~#->|[]()!:/\\\n1. \t\u202eé") + ["https://", "javascript:", "```"]),
        max_size=120,
    ).map("".join)
)
def test_markdown_to_html_only_emits_known_tags(text):
    out = markdown_to_html(text)
    for tag in re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", out):
        assert tag.lower() in ALLOWED_TAGS
    for href in re.findall(r'href="([^"]*)"', out):
        assert href.startswith(("https://", "http://", "mailto:", "#"))


@pytest.mark.parametrize("fmt", ["md", "txt", "html", "pdf"])
def test_a_system_prompt_set_mid_chat_goes_where_it_took_effect(qapp, fmt, tmp_path):
    """Two replies written without a prompt, then one set in Chat Settings: the export shows it
    before the question of the first reply written with it, not above replies that never saw it;
    a prompt changed since (only its digest is kept) and a removed one say so where they changed."""
    from app.core.store import Conversation, Message
    from app.core.turns import stats_dict
    from app.transcripts.export import PROMPT_LOST, PROMPT_REMOVED, PROMPT_SET

    def reply(n, text, prompt):
        return Message(n, "c", n - 1, "assistant", text, stats=stats_dict({"generated_tokens": 2}, prompt))

    pirate = "Talk like a pirate."
    conv = Conversation(
        "c",
        "Prompts",
        0,
        0,
        settings={"system_prompt": pirate},
        messages=[
            Message(1, "c", 0, "user", "Zq one"),
            reply(2, "Za one", ""),
            Message(3, "c", 2, "user", "Zq two"),
            reply(4, "Za two", ""),
            Message(5, "c", 4, "user", "Zq three"),
            reply(6, "Za three", pirate),
            Message(7, "c", 6, "user", "Zq four"),
            reply(8, "Za four", "Talk like a poet."),
            Message(9, "c", 8, "user", "Zq five"),
            reply(10, "Za five", ""),
        ],
    )
    path = export_conversation(conv, fmt, tmp_path / f"p.{fmt}")
    if fmt == "pdf":
        pdfium = pytest.importorskip("pypdfium2")
        text = "".join(page.get_textpage().get_text_range() for page in pdfium.PdfDocument(str(path)))
        text = " ".join(text.split())
    else:
        text = path.read_text(encoding="utf-8")
    assert text.count(pirate) == 1 and "Talk like a poet." not in text
    order = ["Za two", PROMPT_SET, pirate, "Zq three", "Za three", PROMPT_LOST, "Zq four", PROMPT_REMOVED, "Zq five"]
    at = [text.find(" ".join(part.split())) for part in order]
    assert -1 not in at and at == sorted(at), dict(zip(order, at))
    assert text.find(pirate) > text.find("Za two")  # not above the replies written without it
