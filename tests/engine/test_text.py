"""The <think> splitter every reader of a reply uses (the window, the exports)."""

import pytest

from engine.text import THINK_CLOSE, THINK_OPEN, ThinkPart, split_think


@pytest.mark.parametrize(
    "text, parts",
    [
        ("<think>a</think>b", [("think", "a"), ("text", "b")]),
        ("no thinking", [("text", "no thinking")]),
        ("<think>still going", [("think", "still going")]),
        ("opened by the template</think>answer", [("think", "opened by the template"), ("text", "answer")]),
        ("<think></think>just text", [("text", "just text")]),
    ],
)
def test_split_think(text, parts):
    assert [(p.kind, p.text) for p in split_think(text) if p.text.strip()] == parts


def test_parts_keep_empties_and_say_whether_closed():
    # A bare <think> while streaming is a reply starting to think: the window shows a block for it.
    assert split_think(THINK_OPEN) == [
        ThinkPart("text", ""),
        ThinkPart("think", "", closed=False),
        ThinkPart("text", ""),
    ]
    assert split_think(f"a{THINK_OPEN}b{THINK_CLOSE}c{THINK_OPEN}d") == [
        ThinkPart("text", "a"),
        ThinkPart("think", "b"),
        ThinkPart("text", "c"),
        ThinkPart("think", "d", closed=False),
        ThinkPart("text", ""),
    ]
    # The text is as written: callers strip what they show.
    assert split_think(" x </think>\n") == [ThinkPart("think", " x "), ThinkPart("text", "\n")]
