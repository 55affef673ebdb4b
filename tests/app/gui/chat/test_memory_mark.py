"""After a turn dropped old messages to fit the context, the transcript shows where the model's
memory starts: the dropped messages are dimmed, a line marks the first one it still sees."""

import pytest

from tests.app.gui.chat.test_view import open_window

pytestmark = pytest.mark.qt


def dimmed(widget) -> bool:
    effect = widget.graphicsEffect()
    return effect is not None and effect.opacity() < 1


def chat_with_a_dropping_reply(store, dropped: int, hidden: int = 0):
    conv = store.create_conversation("Long chat")
    for i in range(hidden + 3):
        store.add_message(conv.id, "user", f"question {i}")
        store.add_message(conv.id, "assistant", f"answer {i}")
    store.add_message(conv.id, "user", "the last question")
    last = store.add_message(conv.id, "assistant", "the last answer")
    store.update_message(last.id, stats={"generated_tokens": 3, "dropped_messages": dropped})
    store.set_state("last_conversation", conv.id)
    return conv


def test_dropped_messages_are_dimmed_below_a_line_where_memory_starts(qtbot, qloop, store, engine):
    chat_with_a_dropping_reply(store, dropped=4)
    w = open_window(qtbot, store, engine)
    view = w.chat_view
    widgets = view.message_widgets()
    assert [dimmed(x) for x in widgets] == [True] * 4 + [False] * 4
    line = view.memory_mark.line
    assert line.isVisible() and line.text().startswith("The model's memory starts here")
    layout = view._layout
    assert layout.indexOf(line) == layout.indexOf(widgets[4]) - 1  # just above "question 2"
    assert widgets[4].text() == "question 2"
    assert "dropped 4 old messages to fit the context" in widgets[-1].stats_label.text()
    assert "message(s)" not in widgets[-1].stats_label.text()


def test_one_dropped_message_is_said_in_the_singular_and_none_dims_nothing(qtbot, qloop, store, engine):
    from app.gui.chat.message_widget import format_stats
    from tests.app.tools.test_tool_transcripts import stats

    assert format_stats({"dropped_messages": 1}).endswith("dropped 1 old message to fit the context")
    assert stats(dropped_messages=1).note == "dropped 1 oldest message to fit the context"
    chat_with_a_dropping_reply(store, dropped=0)
    w = open_window(qtbot, store, engine)
    assert not any(dimmed(x) for x in w.chat_view.message_widgets())
    assert not w.chat_view.memory_mark.line.isVisible()


def test_messages_not_shown_yet_count_before_the_shown_ones(qtbot, qloop, store, engine):
    from app.gui.chat.view import PAGE

    chat_with_a_dropping_reply(store, dropped=PAGE + 2, hidden=PAGE // 2 + 1)
    w = open_window(qtbot, store, engine)
    view = w.chat_view
    widgets = view.message_widgets()
    hidden = len(view._hidden)
    assert hidden and [dimmed(x) for x in widgets].count(True) == PAGE + 2 - hidden
    view.show_earlier()
    widgets = view.message_widgets()
    assert [dimmed(x) for x in widgets] == [True] * (PAGE + 2) + [False] * (len(widgets) - PAGE - 2)
