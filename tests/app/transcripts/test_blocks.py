"""How replies are cut into prose, code and think blocks, and the one fence parser."""

from app.transcripts.blocks import Block, fence_start, is_fence_close, split_blocks


def kinds(text):
    return [(b.kind, b.text) for b in split_blocks(text)]


def test_prose_code_and_think_blocks():
    text = "<think>hmm\nok</think>\n\n# Title\n\nPara one.\n\n```python\nx = 1\n\ny = 2\n```\nAfter."
    assert kinds(text) == [
        ("think", "hmm\nok"),
        ("prose", "# Title"),
        ("prose", "Para one."),
        ("code", "x = 1\n\ny = 2"),
        ("prose", "After."),
    ]
    assert split_blocks(text)[3].lang == "python"


def test_unclosed_fence_and_think_run_to_the_end():
    assert split_blocks("a\n```js\nlet x") == [Block("prose", "a"), Block("code", "let x", "js", closed=False)]
    assert split_blocks("<think>still going") == [Block("think", "still going", closed=False)]
    # A reply that starts inside the reasoning (the template opened <think>).
    assert kinds("plan it</think>answer") == [("think", "plan it"), ("prose", "answer")]


def test_lists_and_tables_stay_whole():
    assert kinds("1. a\n\n2. b\n\n   more of b\n\nnext") == [
        ("prose", "1. a\n\n2. b\n\n   more of b"),
        ("prose", "next"),
    ]
    assert kinds("|a|b|\n|-|-|\n|1|2|") == [("prose", "|a|b|\n|-|-|\n|1|2|")]
    assert kinds("~~~\n```\n~~~") == [("code", "```")]


def test_one_fence_parser():
    fence = fence_start("   ```python  title")
    assert fence is not None and (fence.indent, fence.mark, fence.lang) == (3, "```", "python")
    assert fence_start("    ```") is None  # four spaces: indented code, not a fence
    assert fence_start("```a`b") is None  # a backtick fence's info has no backtick
    assert is_fence_close("````", "```") and not is_fence_close("``", "```") and not is_fence_close("~~~", "```")
    assert not is_fence_close("``` x", "```")
