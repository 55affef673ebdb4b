"""The Qt side of the async Engine: coroutines in, Qt signals out.

Every engine call runs as an asyncio task on the qasync loop (the GUI thread); the
bridge keeps a reference to each task (qasync keeps none, and an unreferenced task
can be garbage-collected mid-flight) and reports results and failures as signals.
The engine runs MLX on its own thread and hands results back to this loop, so the
GUI thread never waits on it.
"""

import asyncio
import logging
import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from app.gui.settings import fit as fit_settings
from engine.errors import ChinwagError, DoesNotFitError
from engine.log import report_bug
from engine.types import EngineStatus, TurnAnnounced, TurnOrigin

log = logging.getLogger(__name__)


def default_engine():
    from engine.api import Engine  # cheap by contract; mlx is imported on the engine thread

    return Engine()


class EngineBridge(QObject):
    stateChanged = Signal(str)  # an EngineStatus value
    started = Signal()
    startFailed = Signal(str)
    modelsListed = Signal(list)  # list[ModelInfo]
    loadProgress = Signal(object)  # LoadProgress
    modelLoaded = Signal(object)  # ModelInfo
    loadFailed = Signal(str, str)  # spec, one-line reason
    delta = Signal(object, str)  # conv_id, text
    prefillProgress = Signal(object, object)  # conv_id, PrefillProgress (reading the prompt)
    draftReading = Signal(object)  # conv_id: a draft is being read ahead
    draftPrefilled = Signal(object, object)  # conv_id, BackgroundPrefill (a draft read ahead)
    readingAhead = Signal(object, object)  # conv_id, PrefillProgress of a read ahead (a draft, a changed chat)
    readAheadEnded = Signal(object)  # conv_id: its read ahead ended (finished, preempted or refused)
    taskProgress = Signal(str, object)  # "import"/"download"/"folder", LoadProgress
    taskFinished = Signal(str, object)  # kind, ModelInfo
    taskFailed = Signal(str, str)  # kind, reason
    searchFinished = Signal(str, list)  # query, list[HubModel]
    searchFailed = Signal(str, str)  # query, one-line reason
    otherTurn = Signal(object)  # TurnAnnounced: a turn on this engine the window did not ask for (its API server's)

    def __init__(self, engine=None, engine_factory=default_engine, parent=None):
        super().__init__(parent)
        self._engine = engine
        self._listening = None  # the engine whose turns this bridge follows
        self._factory = engine_factory
        self._tasks: set[asyncio.Task] = set()
        self._generating: set = set()  # the window's turns, from asking until they end
        self._replies: dict = {}  # conv id -> the task of its reply run by the turn driver (run_turn)
        self._loading = False
        self._started = False
        self._start_failed = False
        self._cancel_download: threading.Event | None = None
        self.state = EngineStatus.STARTING
        self.last_error = ""
        # spec -> (KVQuantization | None, memory limit | None) given to engine.configure before each
        # load (the window's settings; a refused value raises ChinwagError: the load fails in one line).
        self.fit_options: Callable[[str], tuple] | None = None
        self.applied_fit: tuple | None = None  # what the loaded model was configured with

    # --- plumbing -------------------------------------------------------
    @property
    def engine(self):
        if self._engine is None:
            self._engine = self._factory()
        if self._engine is not self._listening:  # every turn's start and end (engine.turns), once per engine
            self._listening = self._engine
            self._engine.turns.subscribe(self._on_turn)
        return self._engine

    def _on_turn(self, event: TurnAnnounced):
        """A turn began or ended on the engine: the window's own are followed by _chat; another front
        end's (the window's API server) make the window busy while they run."""
        if event.origin != TurnOrigin.WINDOW:
            self._set_state()
            self.otherTurn.emit(event)

    def others_running(self) -> bool:
        """A turn the window did not ask for runs on the engine (its API server's)."""
        engine = self._engine
        return engine is not None and any(t.origin != TurnOrigin.WINDOW for t in engine.turns.running)

    @property
    def current_model(self):
        return getattr(self._engine, "current_model", None) if self._engine is not None else None

    def run(self, coro) -> asyncio.Task:
        """Schedule coro on the running loop and keep the task alive until it ends."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task):
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            report_bug(task.exception(), "an engine task")

    def pending(self) -> int:
        return len(self._tasks)

    def is_generating(self, conv_id=None) -> bool:
        return bool(self._generating) if conv_id is None else conv_id in self._generating

    def _status(self) -> EngineStatus:
        """The engine's state, but for what the bridge knows first: the start it awaits, and a
        load or a reply it has asked for before the engine's task has begun it."""
        if self._start_failed:
            return EngineStatus.ERROR
        if not self._started:
            return EngineStatus.STARTING
        if self._loading:
            return EngineStatus.LOADING
        if self._generating or self.others_running():
            return EngineStatus.GENERATING
        return self.engine.state.state

    def _set_state(self):
        state = self._status()
        if state != self.state:
            self.state = state
            self.stateChanged.emit(state)

    def kv_bytes(self) -> int:
        return int(getattr(self.engine.state, "kv_bytes_total", 0) or 0)

    # --- start and models ----------------------------------------------
    def start(self, model_spec: str | None = None, fallback: str | None = None) -> asyncio.Task:
        return self.run(self._start(model_spec, fallback))

    async def _start(self, spec, fallback):
        try:
            await self.engine.start()
        except Exception as e:  # noqa: BLE001 - the engine could not start at all: say why (a bug is logged)
            self.last_error = _reason(e, "starting the engine")
            self._start_failed = True
            self.startFailed.emit(self.last_error)
            self._set_state()
            return
        self._started = True
        self._set_state()
        self.started.emit()
        await self._list_models()
        if spec:
            ok = await self._load(spec)
            if not ok and fallback and fallback != spec:
                await self._load(fallback)

    def refresh_models(self) -> asyncio.Task:
        """List the models again (a server was added or removed); the task's result is the list."""
        return self.run(self._list_models())

    async def _list_models(self):
        try:
            models = await self.engine.list_models()
        except Exception as e:  # noqa: BLE001 - an empty menu, and the reason in the log
            log.warning("listing models failed: %s", _reason(e, "listing models"))
            models = []
        self.modelsListed.emit(list(models))
        return models

    def load_model(self, spec: str) -> asyncio.Task:
        return self.run(self._load(spec))

    async def _load(self, spec) -> bool:
        self._loading = True
        self._set_state()
        try:
            if self.fit_options is not None:  # the window's memory limit and this model's KV cache setting
                options = self.fit_options(spec)
                await self.engine.configure(*options)
                self.applied_fit = options
            info = await self.engine.load_model(spec, progress=self.loadProgress.emit)
        except Exception as e:  # noqa: BLE001 - one line for the user; a bug's traceback goes to the log
            self.last_error = _reason(e, "loading a model")
            self.loadFailed.emit(str(spec), self.last_error)
            return False
        finally:
            self._loading = False
            self._set_state()
        self.modelLoaded.emit(info)
        await self._list_models()
        return True

    def import_gguf(self, path: str) -> asyncio.Task:
        return self.run(self._model_task("import", self.engine.import_gguf, path, progress=True))

    def add_model_folder(self, path: str) -> asyncio.Task:
        return self.run(self._model_task("folder", self.engine.add_model_folder, path))

    def download_model(self, repo_id: str) -> asyncio.Task:
        self._cancel_download = threading.Event()
        return self.run(
            self._model_task(
                "download", self.engine.download_model, repo_id, progress=True, cancel=self._cancel_download
            )
        )

    def search_models(self, query: str) -> asyncio.Task:
        return self.run(self._search(query))

    async def _search(self, query):
        try:
            found = await self.engine.search_models(query)
        except ChinwagError as e:
            self.searchFailed.emit(query, str(e))
            return None
        self.searchFinished.emit(query, list(found))
        return found

    def cancel_download(self):
        if self._cancel_download is not None:
            self._cancel_download.set()

    async def _model_task(self, kind, method, arg, progress=False, **kwargs):
        if progress:
            kwargs["progress"] = lambda p: self.taskProgress.emit(kind, p)
        try:
            info = await method(arg, **kwargs)
        except Exception as e:  # noqa: BLE001 - one line for the user; a bug's traceback goes to the log
            self.taskFailed.emit(kind, _reason(e, f"the model {kind}"))
            return None
        self.taskFinished.emit(kind, info)
        await self._list_models()
        return info

    # --- chat ------------------------------------------------------------
    def run_turn(self, conv_id, coro) -> asyncio.Task:
        """A reply run by the turn driver (app/chat/turn.py): the engine is generating for conv_id
        until it ends (the state, the busy chat, no read-ahead meanwhile)."""
        self._generating.add(conv_id)
        self._set_state()
        task = self._replies[conv_id] = self.run(coro)
        task.add_done_callback(lambda t: self.turn_done(conv_id, t))
        return task

    def turn_done(self, conv_id, task):
        """The reply of `task` has ended (said by the reply before it tells the window, and when its task ends)."""
        if self._replies.get(conv_id) is task:  # not a reply that started in the chat as this one ended
            del self._replies[conv_id]
            self._generating.discard(conv_id)
            self._set_state()

    def prefill(self, conv_id, messages: list[dict], params) -> asyncio.Task | None:
        """Read ahead in the background (an unsent draft, or a chat whose history changed); only when
        idle with a model loaded. draftReading says it began; readingAhead carries its progress."""
        if self.state != EngineStatus.READY or self._generating or self.current_model is None:
            return None
        self.draftReading.emit(conv_id)
        return self.run(self._prefill(conv_id, messages, params))

    async def _prefill(self, conv_id, messages, params):
        try:
            result = await self.engine.prefill(
                conv_id, messages, params, progress=lambda p: self.readingAhead.emit(conv_id, p)
            )
        except ChinwagError as e:  # background work: a refusal costs speed, never the chat (bugs: _task_done)
            log.warning("prefill %s: %s", conv_id, e)
            self.draftPrefilled.emit(conv_id, None)
            return None
        finally:
            self.readAheadEnded.emit(conv_id)
        self.draftPrefilled.emit(conv_id, result)
        return result

    def fork(self, source_id, conv_id, messages: list[dict], params) -> asyncio.Task | None:
        """Give a fork a copy of its parent's cache; queued before any later chat()."""
        if self._engine is None or not self._started or self.current_model is None:
            return None
        return self.run(self._fork(self.engine.fork(source_id, conv_id, messages, params)))  # queued now

    async def _fork(self, queued):
        try:
            return await queued
        except ChinwagError as e:  # the fork then reads its chat on its first reply: slower, never lost
            log.warning("copying a fork's cache: %s", e)
            return None

    def adopt(self, draft_id, conv_id) -> asyncio.Task | None:
        """Hand a new chat's draft cache to the chat just created; queued before any later chat()."""
        if self._engine is None or not self._started:
            return None
        return self.run(self._adopt(self.engine.adopt(draft_id, conv_id)))  # adopt() queues it now

    async def _adopt(self, queued):
        try:
            return await queued
        except ChinwagError as e:
            log.warning("adopting a draft's cache: %s", e)
            return False

    def cancel_read_ahead(self):
        """End the background read (a draft's, a changed chat's) within one chunk; no reply is stopped."""
        if self._engine is not None and not self._generating:
            self._engine.stop("")  # no conversation has the id "": only the background work ends

    def stop(self, conv_id=None):
        if self._engine is not None:
            self._engine.stop(conv_id)

    def forget(self, conv_id):
        # Even before the engine has started: caches saved by an earlier run are deleted too.
        self.run(self._forget(conv_id))

    async def _forget(self, conv_id):
        try:
            await self.engine.forget(conv_id)
        except Exception as e:  # noqa: BLE001 - deleting the chat went on; the cache's trouble goes to the log
            log.warning("forget %s: %s", conv_id, _reason(e, "forgetting a chat's cache"))

    # --- shutdown -------------------------------------------------------
    async def aclose(self, timeout: float = 10.0):
        """Stop generating, let running tasks finish (briefly), then close the engine."""
        if self._engine is None:
            return
        self.cancel_download()
        self.stop(None)
        pending = [t for t in self._tasks if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=min(timeout, 5.0))
        try:
            await asyncio.wait_for(self._engine.close(), timeout)
        except TimeoutError:
            log.warning("closing the engine: still busy after %s s", timeout)
        for task in list(self._tasks):
            task.cancel()


def _reason(e: BaseException, where: str) -> str:
    """The user's one line: a ChinwagError's text, or for a bug (logged with its traceback)
    a line saying so and where the log is."""
    if isinstance(e, DoesNotFitError):  # the window's own settings, not the CLI's flags
        return e.advice(*fit_settings.SETTINGS)
    if isinstance(e, ChinwagError):
        return str(e)
    return report_bug(e, where)
