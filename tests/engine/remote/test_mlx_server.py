"""The remote backend against real mlx_lm.server processes: the starter model on loopback (one
server for the module), and a tiny random llama served tensor-parallel by `mlx.launch --backend
ring -n 2`. Short prompts and few tokens: the starter runs at a few tokens/s on this CPU."""

import asyncio
import os
import signal
import sys

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from engine import ChinwagError, Engine, GenerationParams, TextDelta, TurnStats
from engine.models import registry
from engine.models.folders import STARTER_ID
from tests.app_helpers import dispose
from tests.remote_servers import MlxServer, mlx_launch_missing

GREEDY = GenerationParams(temperature=0.0, max_tokens=8)


@pytest.fixture(scope="module")
def starter_folder(tmp_path_factory):
    """The starter imported as an MLX folder once (each test still gets its own CHINWAG_HOME)."""
    home, old = tmp_path_factory.mktemp("remote-starter-home"), os.environ.get("CHINWAG_HOME")
    os.environ["CHINWAG_HOME"] = str(home)
    try:
        path, _ = registry.resolve_model(STARTER_ID)
    finally:
        os.environ["CHINWAG_HOME"] = old or ""
    return path


def start(folder, tmp_path_factory, ranks=0):
    server = MlxServer(folder, tmp_path_factory.mktemp("mlx-server") / "server.log", ranks=ranks)
    try:
        return server.wait_ready()
    except BaseException:
        server.kill()
        raise


@pytest.fixture(scope="module")
def mlx_server(starter_folder, tmp_path_factory):
    server = start(starter_folder, tmp_path_factory)
    yield server
    server.kill(signal.SIGTERM)


async def turn(engine, conv, messages, params=GREEDY, on_delta=None):
    text, stats = [], None
    async for ev in engine.chat(conv, messages, params):
        if isinstance(ev, TextDelta):
            text.append(ev.text)
            if on_delta:
                on_delta(text)
        elif isinstance(ev, TurnStats):
            stats = ev
    return "".join(text), stats


def with_engine(spec, body):
    async def go():
        engine = Engine()
        try:
            await engine.load_model(spec)
            return await body(engine)
        finally:
            await engine.close()

    return asyncio.run(go())


@pytest.mark.starter
def test_three_turn_greedy_chat_hits_the_servers_prefix_cache(mlx_server):
    async def body(engine):
        messages, out = [{"role": "system", "content": "You are terse."}], []
        for user in ("What is the capital of France?", "And of Germany?", "Thanks!"):
            messages.append({"role": "user", "content": user})
            text, stats = await turn(engine, "c", messages)
            messages.append({"role": "assistant", "content": text})
            out.append((text, stats))
        return out

    out = with_engine(mlx_server.url, body)
    assert all(text.strip() for text, _ in out)
    assert "Paris" in out[0][0]
    assert out[1][1].reused_tokens > 0 and out[2][1].reused_tokens > 0
    for _, stats in out:
        assert stats.prompt_tokens > stats.reused_tokens and stats.generated_tokens >= 1
        assert stats.finish_reason in ("stop", "length")


@pytest.mark.starter
def test_stop_mid_reply_and_the_next_turn_still_works(mlx_server):
    ask = [{"role": "user", "content": "Count from 1 to 50, one number per line."}]

    async def body(engine):
        stopped = await turn(
            engine,
            "s",
            ask,
            GenerationParams(temperature=0.0, max_tokens=200),
            on_delta=lambda text: len(text) == 2 and engine.stop("s"),
        )
        after = await turn(
            engine, "s2", [{"role": "user", "content": "Hi"}], GenerationParams(temperature=0.0, max_tokens=2)
        )  # the server is free again
        return stopped, after

    (text, stats), (after, after_stats) = with_engine(f"{mlx_server.url}#default_model", body)
    assert stats.finish_reason == "cancelled" and text and stats.error == ""
    assert after.strip() and after_stats.finish_reason in ("stop", "length")


@pytest.mark.starter
def test_server_killed_mid_reply_keeps_the_reply_marked_stopped(starter_folder, tmp_path_factory):
    server = start(starter_folder, tmp_path_factory)
    ask = [{"role": "user", "content": "Count from 1 to 50, one number per line."}]
    try:
        text, stats = with_engine(
            server.url,
            lambda engine: turn(
                engine,
                "k",
                ask,
                GenerationParams(temperature=0.0, max_tokens=200),
                on_delta=lambda t: len(t) == 2 and server.kill(),
            ),
        )
    finally:
        server.kill()
    assert text.strip()
    assert stats.finish_reason == "cancelled"
    assert stats.error.startswith("server 127.0.0.1:") and "\n" not in stats.error


@pytest.mark.starter
def test_an_unknown_model_name_is_one_clear_line(mlx_server):
    ask = [{"role": "user", "content": "Hi"}]
    with pytest.raises(ChinwagError) as e:
        with_engine(f"{mlx_server.url}#no-such-model", lambda engine: turn(engine, "u", ask))
    assert "unknown model 'no-such-model'" in str(e.value) and str(e.value).startswith("server 127.0.0.1:")


def test_distributed_mlx_lm_server_streams_through_chinwag(tiny_model_path, tmp_path_factory):
    missing = mlx_launch_missing()
    if missing:
        pytest.skip(missing)
    server = start(tiny_model_path, tmp_path_factory, ranks=2)
    try:
        if sys.platform.startswith("linux"):
            assert server.server_processes() == 2  # rank 0 answers HTTP, rank 1 holds the other half
        events = []

        async def body(engine):
            async for ev in engine.chat(
                "d", [{"role": "user", "content": "Hello"}], GenerationParams(temperature=0.0, max_tokens=6)
            ):
                events.append(ev)

        with_engine(server.url, body)
    finally:
        server.kill(signal.SIGTERM)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert deltas and isinstance(events[-1], TurnStats)
    assert events[-1].generated_tokens == 6 and events[-1].finish_reason == "length"


@pytest.mark.starter
@pytest.mark.qt
def test_window_connects_to_a_server_picks_its_model_and_chats(qtbot, qloop, mlx_server, monkeypatch):
    from app.core.settings import DEFAULTS_KEY
    from app.core.store import Store
    from app.gui.window import MainWindow

    monkeypatch.setenv("CHINWAG_KEYRING", "0")
    store = Store()
    store.set_state(DEFAULTS_KEY, {"max_tokens": 8, "temperature": 0.0})
    window = MainWindow(store, Engine())
    window.show()
    task = window.start_engine()
    qtbot.waitUntil(task.done, timeout=120_000)

    # Model › Connect to Server…
    connect = next(a for a in window.model_menu.actions() if a.text() == "Connect to Server…")
    connect.trigger()
    dialog = window.dialogs.open_dialogs[-1]
    dialog.name_edit.setText("loopback")
    dialog.url_edit.setText(mlx_server.url.removesuffix("/v1"))
    dialog.save_button.click()
    qtbot.waitUntil(
        lambda: dialog.message.text().startswith(("Connected", "Saved")) and not dialog.busy, timeout=30_000
    )
    assert dialog.message.text().startswith("Connected to loopback: 1 model(s) (default_model)")
    assert dialog.server_list.count() == 1
    dialog.reject()

    # The server's model is in the Model menu under its name; pick it.
    action = window.model_menu.action_for("loopback/default_model")
    assert action is not None and action.isEnabled() and action.text() == "default_model"
    assert "loopback" in [a.text() for a in window.model_menu.actions() if a.isSeparator()]
    action.trigger()
    qtbot.waitUntil(
        lambda: (
            getattr(window.bridge.current_model, "id", "") == "loopback/default_model"
            and window.bridge.state == "ready"
        ),
        timeout=30_000,
    )
    assert window.model_menu.action_for("loopback/default_model").isChecked()
    # The chat header's picker is the same menu: it shows and checks the server's model too.
    assert window.model_picker.action_for("loopback/default_model").isChecked()
    assert window.model_picker.text() == "default_model on loopback"

    for text in ("What is the capital of France?", "And of Germany?"):
        window.composer.set_text(text)
        QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: window.chat.gen is None and not window.bridge.is_generating(), timeout=120_000)
    msgs = store.get_conversation(window.chat.conv_id).messages
    assert [(m.role, m.status) for m in msgs] == [("user", "complete"), ("assistant", "complete")] * 2
    assert "Paris" in msgs[1].content and msgs[3].content.strip()
    assert msgs[3].model_id == "loopback/default_model" and msgs[3].stats["reused_tokens"] > 0
    assert window.chat_view.message_widgets()[-1].text() == msgs[3].content
    assert "tok/s" in window.chat_view.message_widgets()[-1].stats_label.text()
    dispose(qtbot, window, store)
