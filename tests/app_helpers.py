"""Shared by the window tests: a qasync loop on the pytest-qt app, and a fake engine.

The fake engine is for behaviour that belongs to the UI alone (streaming cadence, stop,
failures); the main flow runs on the real Engine with the tiny model.
"""

import asyncio
from typing import TYPE_CHECKING

import pytest

from engine.backend import StopSignal
from engine.errors import ChinwagError
from engine.turns import ChatTurn, Turns
from engine.types import (
    LOADED_STAGE,
    BackgroundPrefill,
    EngineState,
    EngineStatus,
    FinishReason,
    ForkedCache,
    HubModel,
    LoadProgress,
    MemoryReport,
    ModelInfo,
    ModelStatus,
    PrefillProgress,
    ServerInfo,
    TextDelta,
    TokenCount,
    TurnAnnounced,
    TurnOrigin,
    TurnStats,
)


@pytest.fixture
def qloop(qapp):
    """A qasync loop driven by Qt's own event processing (qtbot.waitUntil spins it)."""
    import qasync

    loop = qasync.QEventLoop(qapp, already_running=True)
    asyncio.set_event_loop(loop)
    yield loop
    # Let callbacks queued by finished tasks run, then detach the loop from this thread.
    qapp.processEvents()
    asyncio.events._set_running_loop(None)
    loop._QEventLoop__is_running = False  # qasync has no public way to end an already_running loop
    try:
        qapp.aboutToQuit.disconnect(loop._after_run_forever)
    except (RuntimeError, TypeError):
        pass
    loop._after_run_forever()
    timer = loop._timer
    loop.close()
    asyncio.set_event_loop(None)
    # qasync's timer object still holds Qt timers of cancelled handles (e.g. asyncio.wait
    # timeouts). Delete it here: collected later on another thread, Qt would complain or crash.
    import gc

    import shiboken6

    shiboken6.delete(timer)
    del loop
    gc.collect()


def dispose(qtbot, window, store=None):
    """Close a window, its engine and store, and delete the window now, on this thread.

    Left to Python's garbage collector, a window in a reference cycle could be deleted
    by whichever thread happens to run the collector (the engine's), which Qt forbids.
    """
    import gc

    from PySide6.QtCore import QCoreApplication, QEvent

    window.close()
    run(qtbot, window.shutdown(), timeout=60_000)
    window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    if store is not None:
        store.close()
    gc.collect()


def run(qtbot, coro, timeout=60_000):
    """Run a coroutine as a task on the qasync loop and wait for it without blocking it."""
    task = asyncio.ensure_future(coro)
    qtbot.waitUntil(task.done, timeout=timeout)
    return task.result()


FAKE_MODELS = [
    ModelInfo(
        "fake-small", "Fake Small", "/models/fake-small", "llama", 270 * 1024 * 1024, "Q8_0", 2048, source="starter"
    ),
    ModelInfo("fake-big", "Fake Big", "/models/fake-big", "llama", 4 * 1024**3, "4-bit", 8192, source="folder"),
    ModelInfo(
        "broken",
        "Broken Model",
        "/models/broken",
        status=ModelStatus.UNUSABLE,
        reason="config.json is missing",
        source="folder",
    ),
]


class FakeEngine:
    """The Engine contract (engine/protocol.py, checked by mypy) with scripted replies."""

    def __init__(self, reply="Hello **there**! How can I help?", token_delay=0.005, models=None):
        self.reply = reply
        self.token_delay = token_delay
        self.models = list(models or FAKE_MODELS)
        self.current_model: ModelInfo | None = None
        self.calls: list = []  # (conv_id, messages, params)
        self.started = False
        self.closed = False
        self.fail_load: dict = {}  # spec -> reason
        self.load_delay = 0.0
        self._stops: dict = {}
        self._generating = 0
        self.forgotten: list = []
        self.hub_results: list | None = None  # list[HubModel] for search_models; None: offline
        self.prefills: list = []  # (conv_id, messages, params) of each draft read ahead
        self.adopted: list = []  # (draft id, conv id) of each new chat's draft cache handed over
        self.progress: tuple = ()  # PrefillProgress events a turn yields before its text
        self.reading: asyncio.Event | None = None  # a turn (or a read ahead) waits for it after its progress events
        self.prefill_progress: tuple = ()  # PrefillProgress events a read ahead reports
        self.forks: list = []  # (source id, fork id, messages) of each cache copied for a fork
        self.servers: dict = {}  # name -> ServerInfo
        self.kv_total = 12345  # every cache's bytes: grows 1 KiB a generated token, as a real cache may
        self.memory_limit_bytes = 0  # the limit the loaded model was planned against (0: the status shows none)
        self.configured: list = []  # (KVQuantization or None, limit or None) before each load the window asks for
        self.turns = Turns()

    @property
    def state(self):
        name = EngineStatus.READY if self.current_model else EngineStatus.IDLE
        name = EngineStatus.GENERATING if self._generating else name
        model = self.current_model
        return EngineState(
            name,
            model,
            kv_bytes_total=self.kv_total if model else 0,
            weight_bytes=model.size_bytes if model else 0,
            memory_limit_bytes=self.memory_limit_bytes if model else 0,
        )

    async def start(self):
        self.started = True

    async def list_models(self):
        return list(self.models)

    async def configure(self, kv_quantization, memory_limit_bytes):
        self.configured.append((kv_quantization, memory_limit_bytes))

    async def load_model(self, spec, progress=None):
        if progress:
            progress(LoadProgress("Loading weights", 1, 2))
        await asyncio.sleep(self.load_delay)
        if spec in self.fail_load:
            reason = self.fail_load[spec]  # a line, or the engine's own error
            raise reason if isinstance(reason, ChinwagError) else ChinwagError(reason)
        info = next((m for m in self.models if m.id == spec), None)
        if info is None:
            info = ModelInfo(str(spec), str(spec).rsplit("/", 1)[-1], str(spec), context_length=2048)
        if info.status == ModelStatus.UNUSABLE:
            raise ChinwagError(f"{info.name}: {info.reason}")
        if progress:
            progress(LoadProgress("Loading weights", 2, 2))
            progress(LoadProgress(LOADED_STAGE, 1, 1))  # as the real engine ends a load
        self.current_model = info
        return info

    def tokens(self, text):
        out, word = [], ""
        for ch in text:
            word += ch
            if ch in " \n":
                out.append(word)
                word = ""
        return out + ([word] if word else [])

    def chat(self, conv_id, messages, params=None, /, origin=TurnOrigin.SCRIPT):
        stop = StopSignal()  # the real engine's handle and announcements (engine/turns.py)
        return ChatTurn(
            conv_id, origin, stop, self._announced(conv_id, origin, self._chat(conv_id, messages, params, stop))
        )

    async def _announced(self, conv_id, origin, events):
        """As Engine._turn: the start before the first event, the end (with its TurnStats) after the last."""
        self.turns.announce(TurnAnnounced(conv_id, origin))
        stats = None
        try:
            async for event in events:
                stats = event if isinstance(event, TurnStats) else stats
                yield event
        finally:
            self.turns.announce(TurnAnnounced(conv_id, origin, ended=True, stats=stats))

    async def _chat(self, conv_id, messages, params, stop):
        if self.current_model is None:
            raise ChinwagError("no model is loaded")
        messages = _wire(messages)  # the real engine's edge takes ChatMessages or dicts
        self.calls.append((conv_id, messages, params))
        self._stops[conv_id] = stop
        self._generating += 1
        reply = self.reply(messages) if callable(self.reply) else self.reply
        n = 0
        reason = FinishReason.STOP
        try:
            for event in self.progress:
                yield event
            if self.progress and self.reading is not None:
                await self.reading.wait()
            for piece in self.tokens(reply):
                if stop.is_set():
                    reason = FinishReason.CANCELLED
                    break
                if params is not None and n >= params.max_tokens:  # as the real engine ends a long reply
                    reason = FinishReason.LENGTH
                    break
                await asyncio.sleep(self.token_delay)
                if stop.is_set():
                    reason = FinishReason.CANCELLED
                    break
                n += 1
                self.kv_total += 1024
                yield TextDelta(piece, (n,))
            prompt = sum(len(m["content"]) // 4 + 4 for m in messages)
            yield TurnStats(
                prompt,
                0,
                prompt,
                n,
                0.05,
                40.0,
                400.0,
                4096,
                prompt + n,
                65536,
                self.current_model.memory_context or self.current_model.context_length or 2048,  # as Session caps it
                reason,
            )
        finally:
            self._generating -= 1
            if self._stops.get(conv_id) is stop:
                del self._stops[conv_id]

    def stop(self, conv_id=None):
        for key, event in list(self._stops.items()):
            if conv_id is None or key == conv_id:
                event.set()

    async def forget(self, conv_id):
        self.forgotten.append(conv_id)

    async def memory_stats(self):
        return MemoryReport(0, 0, 0, 0, 0, 0, 0, 0.0, 0.0)  # the fake holds no KV caches

    async def count_tokens(self, text, params=None):
        if self.current_model is None:
            raise ChinwagError("no model is loaded")
        return TokenCount(len(self.tokens(text)), (params and params.context_cap) or self.current_model.context_length)

    async def count_prompt(self, messages, params=None):
        return await self.count_tokens("".join(m["content"] for m in _wire(messages)), params)

    async def prefill(self, conv_id, messages, params=None, progress=None):
        messages = _wire(messages)
        self.prefills.append((conv_id, messages, params))
        total = len(self.tokens(messages[-1]["content"])) if messages else 0
        # The real engine reports before the first chunk and after each one.
        events = self.prefill_progress or [PrefillProgress(done, total, total) for done in (0, total // 2, total)]
        for event in events:
            if progress is not None:
                progress(event)
        if self.prefill_progress and self.reading is not None:
            await self.reading.wait()
        return BackgroundPrefill(len(messages), 0, len(messages), True)

    def fork(self, source_id, conv_id, messages, params=None):
        self.forks.append((source_id, conv_id, list(messages)))
        return asyncio.sleep(0, ForkedCache(len(messages), len(messages)))

    def adopt(self, draft_id, conv_id):
        self.adopted.append((draft_id, conv_id))
        return asyncio.sleep(0, True)

    async def import_gguf(self, path, progress=None):
        if progress:
            progress(LoadProgress("Converting", 1, 1))
        if not str(path).endswith(".gguf"):
            raise ChinwagError(f"{path}: not a GGUF file")
        info = ModelInfo("imported-x", "Imported X", str(path), source="imported")
        self.models.append(info)
        return info

    async def add_model_folder(self, path):
        info = ModelInfo("folder-x", "Folder X", str(path), source="folder")
        self.models.append(info)
        return info

    async def download_model(self, repo_id, progress=None, cancel=None):
        if progress:
            progress(LoadProgress(f"Connecting to Hugging Face for {repo_id}", 0, 0))
        await asyncio.sleep(0.01)
        raise ChinwagError(f"cannot download {repo_id}: offline (no network connection to huggingface.co)")

    async def search_models(self, query: str, /) -> list[HubModel]:
        await asyncio.sleep(0.01)
        if self.hub_results is None:
            raise ChinwagError("cannot reach Hugging Face to search for models (offline?)")
        return [m for m in self.hub_results if query.lower() in m.repo.lower()]

    async def list_servers(self):
        return list(self.servers.values())

    async def save_server(self, name, url, api_key=None, replace=""):
        self.servers.pop(replace, None)
        self.servers[name] = ServerInfo(name, url, bool(api_key), "the fake engine's memory" if api_key else "")
        return self.servers[name]

    async def remove_server(self, name):
        if self.servers.pop(name, None) is None:
            raise ChinwagError(f"no saved server named '{name}'")

    async def close(self):
        self.stop()
        self.closed = True


if TYPE_CHECKING:  # mypy: the fake keeps the real engine's API
    from engine.protocol import EngineAPI

    _fake: EngineAPI = FakeEngine()


@pytest.fixture
def engine():
    return FakeEngine()


@pytest.fixture
def window(qtbot, qloop, store, engine):
    """A shown main window on the fake engine, with the fake model loaded."""
    from app.gui.window import MainWindow

    w = MainWindow(store, engine)
    qtbot.addWidget(w)
    w.show()
    run(qtbot, w.start_engine("fake-small"))
    yield w
    w.close()
    run(qtbot, w.shutdown())


def send(qtbot, w, text, wait=True):
    """Type `text` and press Enter; by default wait until the reply has finished."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    w.composer.set_text(text)
    QTest.keyClick(w.composer.editor, Qt.Key.Key_Return)
    if wait:
        qtbot.waitUntil(lambda: w.chat.gen is None and not w.bridge.is_generating(), timeout=10_000)


def _wire(messages) -> list[dict]:
    """What the engine was given, in OpenAI's shape whether it came as ChatMessages or dicts (the engine's edge takes both)."""
    from engine.types import ChatMessage

    return [ChatMessage.from_openai(m).to_openai() for m in messages]
