"""The engine's async API: one long-lived MLX thread, a job queue, per-request event queues.

Like mlx-lm's server: exceptions go back to the awaiting caller and the thread never dies.
Only ints, strings and the dataclasses of engine/types.py reach the caller's loop.
"""

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from engine.errors import ChinwagError
from engine.log import report_bug
from engine.types import (
    MAX_KV_INITIAL_CAPACITY,
    BackgroundPrefill,
    EngineState,
    EngineStatus,
    GenerationParams,
    HubModel,
    LoadProgress,
    MemoryReport,
    ModelInfo,
    PrefillProgress,
    ServerInfo,
    TextDelta,
    TurnStats,
)

if TYPE_CHECKING:
    from engine.local.session import Session
    from engine.remote.backend import RemoteBackend

_DONE = object()
# After a turn near the context limit, prepare the next window while the user reads.
IDLE_WORK = True


class EngineThread:
    """Runs submitted callables one at a time on a single thread that owns every MLX array."""

    def __init__(self):
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="chinwag-engine", daemon=True)
        self._thread.start()

    def submit(self, fn, *args) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((future, fn, args))
        return future

    def _run(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as e:  # never let a job kill the thread
                if isinstance(e, Exception) and not isinstance(e, ChinwagError):
                    # Logged here, on the thread it happened on, even if nobody awaits the result.
                    report_bug(e, f"the engine thread ({getattr(fn, '__name__', 'a job')})")
                future.set_exception(e)

    def waiting(self) -> bool:
        """True while a job waits in the queue: background work yields to it."""
        return not self._jobs.empty()

    def shutdown(self, timeout: float = 10.0):
        self._jobs.put(None)
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


class Engine:
    def __init__(
        self,
        kv_initial_capacity: int | None = None,
        memory_budget_bytes: int | None = None,
        idle_work: bool = IDLE_WORK,
    ):
        if kv_initial_capacity is not None and not 1 <= kv_initial_capacity <= MAX_KV_INITIAL_CAPACITY:
            raise ChinwagError(
                f"the initial KV capacity must be from 1 to {MAX_KV_INITIAL_CAPACITY} positions, got {kv_initial_capacity}"
            )
        self._options = (kv_initial_capacity, memory_budget_bytes)
        self.idle_work = idle_work
        # The background job (a draft's prefill, the next window) and the event that cancels it.
        self._background: concurrent.futures.Future | None = None
        self._cancel_background = threading.Event()
        self._thread: EngineThread | None = None
        self._session: Session | None = None
        self._started: concurrent.futures.Future | None = None
        self._stops: dict = {}
        self._generating = 0
        self._loading = False
        self.current_model: ModelInfo | None = None
        self.last_kv_bytes = 0
        self._remote: RemoteBackend | None = None  # while the current model is a server's

    # --- lifecycle ---------------------------------------------------------

    def _ensure_thread(self) -> concurrent.futures.Future:
        if self._thread is None or self._started is None:
            from engine.local import blas

            blas.preload_openblas()  # must precede the first `import mlx` (Linux only)
            self._thread = EngineThread()
            self._started = self._thread.submit(self._create_session)
        return self._started

    def _create_session(self) -> None:
        # engine.local.session imports mlx_lm (seconds of imports): on the engine thread, so the
        # caller's thread (the window's) keeps painting meanwhile.
        from engine.local.session import Session

        self._session = Session(*self._options)
        self._session.warm_up()

    def _running(self) -> tuple[EngineThread, "Session"]:
        """The thread and session of a started engine; calling before start() is a bug."""
        if self._thread is None or self._session is None:
            raise RuntimeError("the engine thread is not running")
        return self._thread, self._session

    def _queued_session(self) -> "Session":
        """The session, for a job already queued on the engine thread: it may run while close() is
        under way (the thread no longer takes new jobs), where `_running` would call it a bug."""
        if self._session is None:
            raise RuntimeError("the engine session was never created")
        return self._session

    async def start(self) -> None:
        """Start the thread and import MLX there; cheap to call again."""
        await asyncio.wrap_future(self._ensure_thread())

    async def _call(self, fn, *args):
        await self.start()
        return await asyncio.wrap_future(self._running()[0].submit(fn, *args))

    async def close(self) -> None:
        self.stop()
        if self._thread is not None:
            thread, self._thread = self._thread, None
            try:  # save the recent caches (engine/context/memory.py) so the next start reuses them
                if self._session is not None:
                    await asyncio.wrap_future(thread.submit(self._session.close))
            finally:
                await asyncio.get_running_loop().run_in_executor(None, thread.shutdown)

    # --- state -------------------------------------------------------------

    @property
    def state(self) -> EngineState:
        if self._loading:
            name = EngineStatus.LOADING
        elif self._generating:
            name = EngineStatus.GENERATING
        elif self.current_model is not None:
            name = EngineStatus.READY
        else:
            name = EngineStatus.IDLE
        return EngineState(name, self.current_model, kv_bytes_total=self.last_kv_bytes)

    @staticmethod
    def _on_loop(callback):
        """Wrap a callback so the engine thread can call it and it runs on this loop."""
        if callback is None:
            return None
        loop = asyncio.get_running_loop()

        def call(*args):
            try:
                loop.call_soon_threadsafe(callback, *args)
            except RuntimeError:  # the loop has closed; nobody is listening
                pass

        return call

    # --- models ------------------------------------------------------------

    async def list_models(self) -> list:
        from engine.models import registry
        from engine.remote import servers

        # Off the engine thread: listing reads files only, and must not wait for a reply.
        local, remote = await asyncio.gather(
            asyncio.to_thread(registry.list_models), asyncio.to_thread(servers.server_models)
        )
        return local + remote

    # --- model servers (engine/remote/servers.py: files and the keychain, no MLX) ----------

    async def list_servers(self) -> list:
        from engine.remote import servers

        return await asyncio.to_thread(servers.server_infos)

    async def save_server(self, name: str, url: str, api_key: str | None = None, replace: str = ""):
        """Add a server, or update the one named `replace`; api_key None keeps the stored key."""
        from engine.remote import servers

        server = await asyncio.to_thread(servers.add_server, name, url, api_key, replace)
        return ServerInfo(server.name, servers.display_url(server.url), bool(server.api_key))

    async def remove_server(self, name: str) -> None:
        from engine.remote import servers

        await asyncio.to_thread(servers.remove_server, name)

    async def load_model(self, spec: str, progress: Callable[[LoadProgress], None] | None = None) -> ModelInfo:
        """Load a model (registry id, MLX folder or GGUF file); stops generation first.

        A model that fails to load leaves the previous one loaded.
        """
        from engine.remote import backend as remote

        self.stop()
        self._loading = True
        try:
            target = await asyncio.to_thread(remote.resolve, spec)  # None for a local model
            if target is not None:
                self._remote, self.current_model = remote.RemoteBackend(target), target.info()
                return self.current_model
            info = await self._call(self._session_load, spec, self._on_loop(progress))
            self._remote, self.current_model = None, info
            self.last_kv_bytes = 0
            return info
        finally:
            self._loading = False

    def _session_load(self, spec, progress):
        return self._running()[1].load(spec, progress)

    async def import_gguf(self, path: str, progress=None) -> ModelInfo:
        from engine.models.gguf.importer import import_gguf

        return await self._call(import_gguf, str(path), self._on_loop(progress))

    async def add_model_folder(self, path: str) -> ModelInfo:
        from engine.models import registry

        return await asyncio.to_thread(registry.add_model_folder, str(path))

    async def download_model(self, repo_id: str, progress=None, cancel: threading.Event | None = None) -> ModelInfo:
        from engine.models.download import download_model

        # Network only, no MLX: its own thread, so chats go on while it downloads.
        return await asyncio.to_thread(download_model, repo_id, self._on_loop(progress), cancel)

    async def search_models(self, query: str) -> list[HubModel]:
        """list[HubModel]: MLX models on the Hugging Face Hub matching query (network only)."""
        from engine.models.download import search_models

        return await asyncio.to_thread(search_models, query)

    # --- chat --------------------------------------------------------------

    async def chat(
        self, conversation_id: str, messages: list, params: GenerationParams | None = None
    ) -> AsyncIterator[PrefillProgress | TextDelta | TurnStats]:
        """Yield PrefillProgress while a long prompt is read, TextDelta events, then one TurnStats.

        Problems found before generation starts (no model, bad messages, a prompt
        longer than the context) raise ChinwagError. A failure mid-generation ends the
        stream with TurnStats(finish_reason="error", error=...), the cache repaired.
        """
        if self._remote is not None:  # a server's model: the same events, from the network
            async for event in self._chat_remote(self._remote, conversation_id, messages, params):
                yield event
            return
        await self.start()
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        self.stop(conversation_id)  # a new turn replaces a running one
        stop = threading.Event()
        self._stops[conversation_id] = stop

        def emit(event):
            try:
                loop.call_soon_threadsafe(events.put_nowait, event)
            except RuntimeError:  # the loop is gone: stop generating for nobody
                stop.set()

        thread, session = self._running()
        future = thread.submit(session.chat, conversation_id, messages, params or GenerationParams(), stop.is_set, emit)
        future.add_done_callback(lambda f: emit(_DONE))
        self._generating += 1
        reply = []
        try:
            while True:
                event = await events.get()
                if event is _DONE:
                    break
                if isinstance(event, TextDelta):
                    reply.append(event.text)
                yield event
            stats = future.result()  # raises what the engine thread raised
            self.last_kv_bytes = await asyncio.wrap_future(thread.submit(session.kv_bytes))
            if self.idle_work and stats.finish_reason in ("stop", "length", "context"):
                after = list(messages) + [{"role": "assistant", "content": "".join(reply)}]
                self._start_background(self._session_prepare, conversation_id, after, params or GenerationParams())
            yield stats
        finally:
            if not future.done():
                stop.set()
            if self._stops.get(conversation_id) is stop:
                del self._stops[conversation_id]
            self._generating -= 1

    # --- background work ----------------------------------------------------

    async def prefill(
        self, conversation_id: str, messages: list, params: GenerationParams | None = None
    ) -> BackgroundPrefill:
        """Prefill the prompt up to an unsent draft (the last user message), in the background.

        Never while a reply generates or a model loads; a newer draft, any `chat`, `stop`
        or model load preempts it within one prefill chunk. The turn that sends the draft
        then computes only what is not in the cache yet (the longest common prefix).
        """
        if self._generating or self._loading or self.current_model is None:
            return BackgroundPrefill(0, 0, 0, False, "the engine is busy or has no model")
        if self._remote is not None:  # a server's model reads the prompt itself
            return BackgroundPrefill(0, 0, 0, False, "the model is served elsewhere")
        await self.start()
        future = self._start_background(self._session_prefill, conversation_id, messages, params or GenerationParams())
        return await asyncio.wrap_future(future)

    def adopt(self, draft_id: str, conversation_id: str) -> Awaitable[bool]:
        """Give the cache of a draft read under `draft_id` (a chat not saved yet) to `conversation_id`.

        Queued at once, so a `chat` called after this finds the cache. False if there was none.
        """
        if self._thread is None or self._remote is not None:
            return asyncio.sleep(0, False)
        return asyncio.wrap_future(self._running()[0].submit(self._session_adopt, draft_id, conversation_id))

    def _session_adopt(self, draft_id, conversation_id):
        from engine.local.background import adopt

        return adopt(self._queued_session(), draft_id, conversation_id)

    async def wait_background(self) -> BackgroundPrefill | None:
        """The current background job's result once it ends (None if there is none)."""
        future = self._background
        return None if future is None else await asyncio.wrap_future(future)

    def background_result(self) -> BackgroundPrefill | None:
        """The last background job's result if it has ended (None while it runs, or if none ran)."""
        future = self._background
        if future is None or not future.done() or future.cancelled() or future.exception() is not None:
            return None
        return future.result()

    def _start_background(self, fn, *args) -> concurrent.futures.Future:
        """Submit low-priority work: it yields as soon as any other job is queued or it is cancelled."""
        self._cancel_background.set()  # a newer background job replaces the older one
        cancel = self._cancel_background = threading.Event()
        thread = self._running()[0]

        def should_stop() -> bool:
            return cancel.is_set() or thread.waiting()

        self._background = future = thread.submit(fn, *args, should_stop)
        future.add_done_callback(_log_failure)  # nobody awaits the next window's preparation
        return future

    def _session_prefill(self, conv_id, messages, params, should_stop):
        from engine.local.background import prefill_draft

        return prefill_draft(self._queued_session(), conv_id, messages, params, should_stop)

    def _session_prepare(self, conv_id, messages, params, should_stop):
        from engine.local.background import prepare_next_window

        return prepare_next_window(self._queued_session(), conv_id, messages, params, should_stop)

    async def _chat_remote(self, backend, conversation_id, messages, params):
        from engine.remote import backend as remote

        self.stop(conversation_id)
        stop = remote.StopSignal()
        self._stops[conversation_id] = stop
        self._generating += 1
        try:
            async for event in backend.chat(
                conversation_id, messages, params or GenerationParams(), stop, progress=remote.prefill_progress
            ):
                yield event
        finally:
            if self._stops.get(conversation_id) is stop:
                del self._stops[conversation_id]
            self._generating -= 1

    async def memory_stats(self) -> MemoryReport:
        """Every conversation's KV cache against the memory budget, with evictions and restores."""
        await self.start()
        return await self._call(self._running()[1].caches.report)

    def stop(self, conversation_id: str | None = None) -> None:
        """Stop one conversation's reply (or all) and any background work; within one token. Thread-safe."""
        self._cancel_background.set()
        targets = list(self._stops.values()) if conversation_id is None else [self._stops.get(conversation_id)]
        for event in targets:
            if event is not None:
                event.set()

    async def forget(self, conversation_id: str) -> None:
        """Drop a conversation's cache, in memory and on disk (the chat was deleted)."""
        self.stop(conversation_id)
        if self._remote is not None:
            self._remote.forget(conversation_id)
        if self._thread is not None:
            await self.start()  # the session exists once start has finished
            await self._call(self._running()[1].forget, conversation_id)
        else:  # not started: no cache in memory, but files saved by an earlier run may be there
            from engine.paths import forget_saved_caches

            await asyncio.to_thread(forget_saved_caches, conversation_id)


def _log_failure(future: concurrent.futures.Future) -> None:
    error = None if future.cancelled() else future.exception()
    if error is not None:
        from engine.log import report_bug

        report_bug(error, "background work on the engine thread")
