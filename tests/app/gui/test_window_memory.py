"""The status bar's memory (issue 32 items 3 and 6, issue 35): KV memory that follows a reply as
it is written, the memory in use against the limit, and a context capped by memory said so."""

import dataclasses

import pytest

from tests.app_helpers import FAKE_MODELS, FakeEngine, send

pytestmark = pytest.mark.qt

GiB = 1024**3
CAPPED = dataclasses.replace(FAKE_MODELS[1], id="fake-capped", name="Fake Capped", memory_context=3000)


@pytest.fixture
def engine():
    return FakeEngine(reply="one two three four five six seven eight nine ten " * 3)


def test_the_kv_figure_grows_while_a_reply_is_written(qtbot, window, engine):
    engine.token_delay = 0.05  # a reply written over 1.5 s: the bar shows its figure every 200 ms
    label = window.status.kv_label
    seen = []
    window.bridge.delta.connect(lambda _conv, _text: seen.append(label.text()))
    send(qtbot, window, "count to thirty")  # 30 tokens 50 ms apart: shown again every 200 ms
    assert len(set(seen)) >= 4, seen  # seen on X (issue 35): the first turn's figure all through the reply
    assert seen == sorted(seen, key=lambda t: float(t.split()[1]))
    assert label.text() == "KV 42.1 KB"  # at the end: 12,345 bytes and 1 KiB for each of the 30 tokens


def test_memory_in_use_is_shown_against_the_limit(qtbot, window, engine):
    engine.memory_limit_bytes = 8 * GiB
    send(qtbot, window, "hello")
    text = window.status.kv_label.text()
    assert text == "KV 42.1 KB · Memory 270.0 MB / 8.0 GB"  # Fake Small's 270 MB of weights, and its caches
    assert "memory limit (8.0 GB" in window.status.kv_label.toolTip()


def test_without_a_limit_only_the_kv_figure_is_shown(qtbot, window, engine):
    send(qtbot, window, "hello")
    assert window.status.kv_label.text() == "KV 42.1 KB"


def test_a_context_capped_by_memory_says_so(qtbot, window, engine):
    from tests.app_helpers import run

    engine.models.append(CAPPED)
    run(qtbot, window.bridge.load_model("fake-capped"))
    qtbot.waitUntil(lambda: window.bridge.current_model.id == "fake-capped", timeout=3000)
    send(qtbot, window, "hello")
    label = window.status.context_label
    assert label.text().endswith(" / 3,000 of 8,192: memory"), label.text()
    assert "memory limit" in label.toolTip() and "8 or 4 bits" in label.toolTip()


def test_a_context_capped_by_the_chat_setting_is_not_called_memory(qtbot, window, engine):
    send(qtbot, window, "hello")
    assert window.status.context_label.text().endswith(" / 2,048")
