"""Continue on a reply that hit max tokens: the same message writes on, exactly as one longer
reply would have, with nothing read again (the real Engine and the tiny model)."""

import pytest

from tests.app.gui.test_window_engine import close_window, idle, open_window, send

pytestmark = pytest.mark.qt


def test_continue_writes_on_in_the_same_message_as_one_longer_reply(qtbot, qloop, tiny_model_path):
    from app.core.settings import DEFAULTS_KEY

    store, window = open_window(qtbot, tiny_model_path)
    try:
        store.set_state(DEFAULTS_KEY, {"max_tokens": 6, "temperature": 0.0})
        send(qtbot, window, "Tell me a long story about a lighthouse keeper.")
        reply = window.chat_view.message_widgets()[-1]
        assert "hit max tokens" in reply.stats_label.text()
        qtbot.waitUntil(reply.continue_button.isVisible, timeout=2000)
        first = reply.text()
        reply.continue_button.click()
        assert not reply.continue_button.isVisible()  # not while it writes
        qtbot.waitUntil(lambda: idle(window), timeout=60_000)
        conv_id = window.chat.conv_id
        messages = store.get_conversation(conv_id).messages
        assert len(messages) == 2  # the same message, not a new reply
        assert messages[1].content == reply.text() and reply.text().startswith(first) and reply.text() != first
        assert messages[1].stats["generated_tokens"] == 12
        assert reply.stats_label.text().startswith("12 tokens")
        assert messages[1].stats["reused_tokens"] >= messages[1].stats["prompt_tokens"] - 1  # nothing read again
        # One reply of 12 tokens says the same.
        window.new_action.trigger()
        store.set_state(DEFAULTS_KEY, {"max_tokens": 12, "temperature": 0.0})
        send(qtbot, window, "Tell me a long story about a lighthouse keeper.")
        assert window.chat_view.message_widgets()[-1].text() == messages[1].content
    finally:
        close_window(qtbot, store, window)
