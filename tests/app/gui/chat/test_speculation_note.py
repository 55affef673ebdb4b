"""The stats tooltip's speculative-decoding line (app/gui/chat/message_widget.py)."""

import pytest

from engine.local.generation import SPECULATION_OFF

pytestmark = pytest.mark.qt


def test_a_model_that_cannot_speculate_says_why_in_the_tooltip():
    from app.gui.chat.message_widget import format_speculation

    assert format_speculation({"drafted_tokens": 0, "speculation_off": SPECULATION_OFF}) == (
        "Speculative decoding is off for this model: its recurrent state cannot go back a rejected draft."
    )
    assert format_speculation({"drafted_tokens": 4, "accepted_tokens": 2}).endswith("(50%)")
    assert format_speculation({"drafted_tokens": 0}) == ""
