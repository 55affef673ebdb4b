"""The local backend: one long-lived MLX thread, a job queue, per-request event queues.

Like mlx-lm's server: exceptions go back to the awaiting caller and the thread never dies.
Only ints, strings and the dataclasses of engine/types.py reach the caller's loop. Also the
engine thread's low-priority work (engine/local/background.py) and its memory report.
"""

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from engine.backend import ChatEvent, StopSignal
from engine.local.batcher import Batcher
from engine.local.thread import EngineThread
from engine.log import report_bug
from engine.types import (
    BackgroundPrefill,
    ChatMessage,
    ForkedCache,
    GenerationParams,
    KVQuantization,
    LoadProgress,
    MemoryReport,
    ModelInfo,
    PrefillProgress,
    Role,
    TextDelta,
    TokenCount,
)

if TYPE_CHECKING:
    from engine.local.session import Session

_DONE = object()
# After a turn near the context limit, prepare the next window while the user reads.
IDLE_WORK = True


class LocalBackend:
    """The engine thread and its Session; started lazily, and kept while a server's model is loaded
    (its caches, saved or in memory, outlive a switch)."""

    def __init__(
        self,
        kv_initial_capacity: int | None = None,
        memory_budget_bytes: int | None = None,
        idle_work: bool = IDLE_WORK,
        save_seconds: float | None = None,
        kv_quantization: KVQuantization | None = None,
        memory_limit_bytes: int | None = None,
    ) -> None:
        self._options = (kv_initial_capacity, memory_budget_bytes, kv_quantization, memory_limit_bytes)
        self.idle_work = idle_work
        self.save_seconds = save_seconds
        # The background job (a draft's prefill, the next window) and the event that cancels it.
        self._background: concurrent.futures.Future[BackgroundPrefill] | None = None
        self._cancel_background = threading.Event()
        self.thread: EngineThread | None = None
        self.session: Session | None = None
        self.batcher: Batcher | None = None  # concurrent turns decode together (engine/local/batcher.py)
        self._started: concurrent.futures.Future[Any] | None = None
        self.kv_bytes = 0  # every cache's bytes, as of the last local turn's latest token

    def with_fit(self, models: list[ModelInfo]) -> list[ModelInfo]:
        """`models` with each local one's `fit_reason` under this backend's limit and KV setting, as
        Session.load will check it (without a limit: what is available, plus the loaded weights).
        Reads config.json and safetensors headers: call it off the engine and event-loop threads."""
        import dataclasses

        from engine.models import fit
        from engine.types import ModelSource, ModelStatus

        session = self.session
        kv = session.kv_quantization if session else self._options[2]
        limit = session.memory_limit_bytes if session else self._options[3]
        if limit is None:
            limit = fit.available_bytes() + (session.weight_bytes if session else 0)
        out = []
        for m in models:
            if m.source != ModelSource.SERVER and m.status == ModelStatus.READY:
                m = dataclasses.replace(m, fit_reason=fit.fit_reason(m.path, limit, kv, m.name or m.id))
            out.append(m)
        return out

    # --- lifecycle ---------------------------------------------------------

    def _ensure_thread(self) -> concurrent.futures.Future[Any]:
        if self.thread is None or self._started is None:
            from engine.local import blas

            blas.preload_openblas()  # must precede the first `import mlx` (Linux only)
            self.thread = EngineThread()
            self.batcher = Batcher(self.thread, self.queued_session)
            self._started = self.thread.submit(self._create_session)
        return self._started

    def _create_session(self) -> None:
        # engine.local.session imports mlx_lm (seconds of imports): on the engine thread, so the
        # caller's thread (the window's) keeps painting meanwhile.
        from engine.local.session import Session

        self.session = Session(*self._options)
        self.session.warm_up()

    def running(self) -> tuple[EngineThread, "Session"]:
        """The thread and session of a started backend; calling before start() is a bug."""
        if self.thread is None or self.session is None:
            raise RuntimeError("the engine thread is not running")
        return self.thread, self.session

    @property
    def starting(self) -> bool:
        """True from start() until the thread has imported MLX (or failed to)."""
        return self._started is not None and not self._started.done()

    @property
    def failed(self) -> bool:
        """True once starting has failed: every later start() raises the same error."""
        started = self._started
        return started is not None and started.done() and not started.cancelled() and started.exception() is not None

    def queued_session(self) -> "Session":
        """The session, for a job already queued on the engine thread: it may run while close() is
        under way (the thread no longer takes new jobs), where `running` would call it a bug."""
        if self.session is None:
            raise RuntimeError("the engine session was never created")
        return self.session

    async def start(self) -> None:
        """Start the thread and import MLX there; cheap to call again."""
        await asyncio.wrap_future(self._ensure_thread())

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run fn(*args) on the engine thread (started if need be); its result or its exception."""
        await self.start()
        return await asyncio.wrap_future(self.running()[0].submit(fn, *args))

    async def close(self) -> None:
        if self.thread is not None:
            thread, self.thread = self.thread, None
            try:  # save the recent caches (engine/context/memory.py) so the next start reuses them
                if self.session is not None:
                    await asyncio.wrap_future(thread.submit(self.drained(self.session.close), self.save_seconds))
            finally:
                await asyncio.get_running_loop().run_in_executor(None, thread.shutdown)

    async def configure(self, kv: KVQuantization | None, limit: int | None) -> None:
        """The options the next load uses: the thread's own copy, changed on the thread."""
        self._options = (self._options[0], self._options[1], kv, limit)
        if self.session is not None or self.thread is not None:
            await self.call(self.drained(lambda: self.running()[1].configure(kv, limit)))

    async def load(self, spec: str, progress: Callable[[LoadProgress], None] | None) -> ModelInfo:
        """Load a model on the engine thread; `progress` is called there."""
        info: ModelInfo = await self.call(self.drained(self._session_load), spec, progress)
        self.kv_bytes = 0
        return info

    def _session_load(self, spec: str, progress: Callable[[LoadProgress], None] | None) -> ModelInfo:
        return self.running()[1].load(spec, progress)

    # --- chat --------------------------------------------------------------

    async def chat(
        self, conversation_id: str, messages: list[ChatMessage], params: GenerationParams, stop: StopSignal
    ) -> AsyncIterator[ChatEvent]:
        await self.start()
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Any] = asyncio.Queue()

        thread, session = self.running()

        def emit(event: Any) -> None:
            if isinstance(event, (TextDelta, PrefillProgress)):  # on the engine thread: KV grows with the reply
                self.kv_bytes = session.kv_bytes()
            try:
                loop.call_soon_threadsafe(events.put_nowait, event)
            except RuntimeError:  # the loop is gone: stop generating for nobody
                stop.set()

        assert self.batcher is not None, "started with its thread"
        future = self.batcher.submit(conversation_id, messages, params, stop.is_set, emit)
        future.add_done_callback(lambda f: emit(_DONE))
        try:
            while True:
                event = await events.get()
                if event is _DONE:
                    break
                yield event
            result = future.result()  # raises what the engine thread raised
            self.kv_bytes = await asyncio.wrap_future(thread.submit(session.kv_bytes))
            if self.idle_work and result.stats.finish_reason in ("stop", "length", "context"):
                after = [*messages, ChatMessage(Role.ASSISTANT, result.text)]
                self.start_background(self.session_prepare, conversation_id, after, params)
            yield result.stats
        finally:
            if not future.done():
                stop.set()

    def drained(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` as a job that first decodes the batch's turns to their ends: a load, a fork, a
        forget or closing never runs in the middle of a reply (as when a turn was one job)."""

        def job(*args: Any) -> Any:
            if self.batcher is not None:
                self.batcher.drain()
            return fn(*args)

        job.__name__ = getattr(fn, "__name__", "a job")
        return job

    # --- background work ----------------------------------------------------

    async def prefill(
        self,
        conversation_id: str,
        messages: list[ChatMessage],
        params: GenerationParams,
        progress: Callable[[PrefillProgress], None] | None = None,
    ) -> BackgroundPrefill:
        """`progress`, if given, gets PrefillProgress events on the engine thread."""
        await self.start()
        future = self.start_background(self.session_prefill, conversation_id, messages, params, progress)
        return await asyncio.wrap_future(future)

    def fork(
        self, src_id: str, dst_id: str, messages: list[ChatMessage], params: GenerationParams
    ) -> Awaitable[ForkedCache]:
        """A normal job, not background work: queued now, so the fork's first `chat` finds the copy."""
        if self.thread is None:
            return asyncio.sleep(0, ForkedCache(0, 0, "the engine has not started"))
        fork = self.drained(self._session_fork)
        return asyncio.wrap_future(self.running()[0].submit(fork, src_id, dst_id, messages, params))

    def _session_fork(
        self, src_id: str, dst_id: str, messages: list[ChatMessage], params: GenerationParams
    ) -> ForkedCache:
        from engine.local.fork import fork

        return fork(self.queued_session(), src_id, dst_id, messages, params)

    def adopt(self, draft_id: str, conversation_id: str) -> Awaitable[bool]:
        if self.thread is None:
            return asyncio.sleep(0, False)
        adopt = self.drained(self._session_adopt)
        return asyncio.wrap_future(self.running()[0].submit(adopt, draft_id, conversation_id))

    def _session_adopt(self, draft_id: str, conversation_id: str) -> bool:
        from engine.local.background import adopt

        return adopt(self.queued_session(), draft_id, conversation_id)

    async def wait_background(self) -> BackgroundPrefill | None:
        future = self._background
        if future is None:
            return None
        return await asyncio.wrap_future(future)

    def background_result(self) -> BackgroundPrefill | None:
        future = self._background
        if future is None or not future.done() or future.cancelled() or future.exception() is not None:
            return None
        return future.result()

    def cancel_background(self) -> None:
        """Thread-safe: the running background job ends within one prefill chunk."""
        self._cancel_background.set()

    def background_cancelled(self) -> bool:
        return self._cancel_background.is_set()

    def start_background(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Submit low-priority work: it yields as soon as any other job is queued or it is cancelled."""
        self._cancel_background.set()  # a newer background job replaces the older one
        cancel = self._cancel_background = threading.Event()
        thread = self.running()[0]

        def should_stop() -> bool:
            return cancel.is_set() or thread.waiting() or bool(self.batcher and self.batcher.rows)

        self._background = future = thread.submit(fn, *args, should_stop)
        future.add_done_callback(_log_failure)  # nobody awaits the next window's preparation
        return future

    def session_prefill(
        self,
        conv_id: str,
        messages: list[ChatMessage],
        params: GenerationParams,
        progress: Callable[[PrefillProgress], None] | None,
        should_stop: Callable[[], bool],
    ) -> BackgroundPrefill:
        from engine.local.background import prefill_draft

        return prefill_draft(self.queued_session(), conv_id, messages, params, should_stop, progress)

    def session_prepare(
        self, conv_id: str, messages: list[ChatMessage], params: GenerationParams, should_stop: Callable[[], bool]
    ) -> BackgroundPrefill:
        from engine.local.background import prepare_next_window

        return prepare_next_window(self.queued_session(), conv_id, messages, params, should_stop)

    # --- tokens and caches ----------------------------------------------------

    async def count_tokens(self, text: str, params: GenerationParams) -> TokenCount:
        count: TokenCount = await self.call(self._session_count, text, params)
        return count

    def _session_count(self, text: str, params: GenerationParams) -> TokenCount:
        session = self.queued_session()
        return TokenCount(session.count_tokens(text), session.context_limit(params))

    async def count_prompt(self, messages: list[ChatMessage], params: GenerationParams) -> TokenCount:
        count: TokenCount = await self.call(self._session_prompt_count, list(messages), params)
        return count

    def _session_prompt_count(self, messages: list[ChatMessage], params: GenerationParams) -> TokenCount:
        session = self.queued_session()
        return TokenCount(session.count_prompt(messages, params), session.context_limit(params))

    def loaded_memory(self) -> tuple[int, int]:
        session = self.session
        if session is None or session.model is None:
            return 0, 0
        return session.weight_bytes, session.limit_bytes

    async def memory_stats(self) -> MemoryReport:
        await self.start()
        report: MemoryReport = await self.call(self.running()[1].caches.report)
        return report

    async def forget(self, conversation_id: str) -> None:
        if self.thread is not None:
            try:
                await self.start()  # the session exists once start has finished
            except Exception:  # noqa: BLE001 - start's own failure (said where it was asked for) holds no cache
                if not self.failed:
                    raise
            else:
                await self.call(self.drained(self.running()[1].forget), conversation_id)
                return
        # Not started (or it failed to): no cache in memory, but files saved by an earlier run may be there.
        from engine.context.erase import erase_saved

        await asyncio.to_thread(erase_saved, conversation_id)


def _log_failure(future: concurrent.futures.Future[Any]) -> None:
    error = None if future.cancelled() else future.exception()
    if error is not None:
        report_bug(error, "background work on the engine thread")
