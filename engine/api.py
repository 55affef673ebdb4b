"""The engine's async API (engine/protocol.py), over the backend that runs the current model's turns.

`Engine` keeps one backend (engine/backend.py): the local one (engine/local/backend.py, MLX on
the engine thread) or a server's (engine/remote/backend.py), chosen by `load_model`, and
delegates to it without asking which it has. What both share stays here: each running turn's
stop, the engine's state, and the announcements of every turn's start and end (`turns`,
engine/turns.py). Messages arrive as ChatMessages or OpenAI-shaped dicts and are checked here,
at the edge (engine/context/prompt.py check_messages); the backends are given ChatMessages.
"""

import asyncio
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar

from engine.backend import Backend, ChatEvent, StopSignal
from engine.context.prompt import check_messages
from engine.errors import ChinwagError
from engine.local.backend import IDLE_WORK, LocalBackend
from engine.turns import ChatTurn, Turns
from engine.types import (
    MAX_KV_INITIAL_CAPACITY,
    BackgroundPrefill,
    EngineState,
    EngineStatus,
    ForkedCache,
    GenerationParams,
    HubModel,
    KVQuantization,
    LoadProgress,
    MemoryReport,
    Messages,
    ModelInfo,
    PrefillProgress,
    ServerInfo,
    TokenCount,
    TurnAnnounced,
    TurnOrigin,
    TurnStats,
)

T = TypeVar("T")  # what a progress callback is given


class Engine:
    def __init__(
        self,
        kv_initial_capacity: int | None = None,
        memory_budget_bytes: int | None = None,
        idle_work: bool = IDLE_WORK,
        save_seconds: float | None = None,
        kv_quantization: KVQuantization | None = None,
        memory_limit_bytes: int | None = None,
    ) -> None:
        """`save_seconds`: how long close() may spend saving caches (None: the window's short default,
        engine/context/memory.py; the most recent one is saved whatever the time). `kv_quantization`:
        store plain attention layers' caches quantized (`--kv-bits`); None: at full precision.
        `memory_limit_bytes`: the memory a model may need (`--memory-limit`); a model whose weights and a
        short chat need more is refused before its weights are read. None: what this machine has available."""
        if kv_initial_capacity is not None and not 1 <= kv_initial_capacity <= MAX_KV_INITIAL_CAPACITY:
            raise ChinwagError(
                f"the initial KV capacity must be from 1 to {MAX_KV_INITIAL_CAPACITY} positions, got {kv_initial_capacity}"
            )
        # The engine thread: it runs local models, imports GGUFs, and keeps every local cache.
        self._local = LocalBackend(
            kv_initial_capacity, memory_budget_bytes, idle_work, save_seconds, kv_quantization, memory_limit_bytes
        )
        self._backend: Backend = self._local  # the current model's: local, or a server's
        self._stops: dict[str, StopSignal] = {}
        self._generating = 0
        self._loading = False
        self.current_model: ModelInfo | None = None
        # Every turn's start and end, with the front end that asked for it (engine/turns.py).
        self.turns = Turns()

    # --- lifecycle ---------------------------------------------------------

    async def start(self) -> None:
        """Start the engine thread and import MLX there; cheap to call again."""
        await self._local.start()

    async def close(self) -> None:
        self.stop()
        await self._local.close()

    # --- state -------------------------------------------------------------

    @property
    def state(self) -> EngineState:
        if self._loading:
            name = EngineStatus.LOADING
        elif self._generating:
            name = EngineStatus.GENERATING
        elif self._local.failed:
            name = EngineStatus.ERROR
        elif self._local.starting:
            name = EngineStatus.STARTING
        elif self.current_model is not None:
            name = EngineStatus.READY
        else:
            name = EngineStatus.IDLE
        weights, limit = self._backend.loaded_memory() if self.current_model else (0, 0)
        return EngineState(
            name,
            self.current_model,
            kv_bytes_total=self._local.kv_bytes,  # the engine thread's caches, kept while a server's model is loaded
            weight_bytes=weights,
            memory_limit_bytes=limit,
        )

    @staticmethod
    def _on_loop(callback: Callable[[T], None] | None) -> Callable[[T], None] | None:
        """Wrap a callback so the engine thread can call it and it runs on this loop."""
        if callback is None:
            return None
        loop = asyncio.get_running_loop()

        def call(arg: T) -> None:
            try:
                loop.call_soon_threadsafe(callback, arg)
            except RuntimeError:  # the loop has closed; nobody is listening
                pass

        return call

    # --- models ------------------------------------------------------------

    async def list_models(self) -> list[ModelInfo]:
        from engine.models import registry
        from engine.remote import servers

        # Off the engine thread: listing reads files only, and must not wait for a reply. Each local
        # model says whether it fits this engine's memory limit (ModelInfo.fit_reason).
        local, remote = await asyncio.gather(
            asyncio.to_thread(lambda: self._local.with_fit(registry.list_models())),
            asyncio.to_thread(servers.server_models),
        )
        return local + remote

    # --- model servers (engine/remote/servers.py: files and the keychain, no MLX) ----------

    async def list_servers(self) -> list[ServerInfo]:
        from engine.remote import servers

        return await asyncio.to_thread(servers.server_infos)

    async def save_server(self, name: str, url: str, api_key: str | None = None, replace: str = "") -> ServerInfo:
        """Add a server, or update the one named `replace`; api_key None keeps the stored key."""
        from engine.remote import servers

        server = await asyncio.to_thread(servers.add_server, name, url, api_key, replace)
        return servers.server_info(server)

    async def remove_server(self, name: str) -> None:
        from engine.remote import servers

        await asyncio.to_thread(servers.remove_server, name)

    async def configure(self, kv_quantization: KVQuantization | None, memory_limit_bytes: int | None) -> None:
        """The KV quantization and memory limit the next `load_model` uses (the window's settings,
        per model); the loaded model keeps its own until it is loaded again."""
        await self._local.configure(kv_quantization, memory_limit_bytes)

    async def load_model(self, spec: str, progress: Callable[[LoadProgress], None] | None = None) -> ModelInfo:
        """Load a model (registry id, MLX folder, GGUF file or a server's model); stops generation first.

        A model that fails to load leaves the previous one loaded.
        """
        from engine.remote.backend import RemoteBackend
        from engine.remote.spec import resolve

        self.stop()
        self._loading = True
        try:
            target = await asyncio.to_thread(resolve, spec)  # None for a local model
            backend: Backend
            if target is None:
                backend, info = self._local, await self._local.load(spec, self._on_loop(progress))
            else:
                backend, info = RemoteBackend(target), target.info()
            self._backend, self.current_model = backend, info
            return info
        finally:
            self._loading = False

    async def import_gguf(self, path: str, progress: Callable[[LoadProgress], None] | None = None) -> ModelInfo:
        from engine.models.gguf.importer import import_gguf

        info: ModelInfo = await self._local.call(import_gguf, str(path), self._on_loop(progress))
        return info

    async def add_model_folder(self, path: str) -> ModelInfo:
        from engine.models import registry

        return await asyncio.to_thread(registry.add_model_folder, str(path))

    async def download_model(
        self,
        repo_id: str,
        progress: Callable[[LoadProgress], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> ModelInfo:
        from engine.models.download import download_model

        # Network only, no MLX: its own thread, so chats go on while it downloads.
        return await asyncio.to_thread(download_model, repo_id, self._on_loop(progress), cancel)

    async def search_models(self, query: str) -> list[HubModel]:
        """list[HubModel]: MLX models on the Hugging Face Hub matching query (network only)."""
        from engine.models.download import search_models

        return await asyncio.to_thread(search_models, query)

    # --- chat --------------------------------------------------------------

    def chat(
        self,
        conversation_id: str,
        messages: Messages,
        params: GenerationParams | None = None,
        origin: TurnOrigin = TurnOrigin.SCRIPT,
    ) -> ChatTurn:
        """The turn's handle, at once: iterate it for PrefillProgress while a long prompt is read,
        TextDelta events, then one TurnStats; its `stop()` ends the turn, even before it begins.

        Problems found before generation starts (no model, bad messages, a prompt longer than
        the context) raise ChinwagError from the iteration. A failure mid-generation ends the
        stream with TurnStats(finish_reason="error", error=...), the cache repaired. `origin`
        names the front end in the turn's announcements (`turns`).
        """
        stop = StopSignal()
        events = self._turn(conversation_id, messages, params or GenerationParams(), origin, stop)
        return ChatTurn(conversation_id, origin, stop, events)

    async def _turn(
        self, conversation_id: str, messages: Messages, params: GenerationParams, origin: TurnOrigin, stop: StopSignal
    ) -> AsyncGenerator[ChatEvent, None]:
        backend = self._backend
        self.stop(conversation_id)  # a new turn replaces a running one
        self._stops[conversation_id] = stop
        self._generating += 1
        # Announced once counted, and its end once no longer: a listener reading `state` sees the turn.
        self.turns.announce(TurnAnnounced(conversation_id, origin))
        stats = None
        try:
            checked = check_messages(messages)  # raised from the iteration, as every refusal before generating
            async for event in backend.chat(conversation_id, checked, params, stop):
                if isinstance(event, TurnStats):
                    stats = event
                yield event
        finally:
            if self._stops.get(conversation_id) is stop:
                del self._stops[conversation_id]
            self._generating -= 1
            self.turns.announce(TurnAnnounced(conversation_id, origin, ended=True, stats=stats))

    # --- background work ----------------------------------------------------

    async def prefill(
        self,
        conversation_id: str,
        messages: Messages,
        params: GenerationParams | None = None,
        progress: Callable[[PrefillProgress], None] | None = None,
    ) -> BackgroundPrefill:
        """Prefill the prompt up to its last message, in the background: an unsent draft (the last
        user message), or the chat as it stands (ending with a reply) after its system prompt,
        model or branch changed.

        Never while a reply generates or a model loads; a newer draft, any `chat`, `stop`
        or model load preempts it within one prefill chunk. The turn that follows then
        computes only what is not in the cache yet (the longest common prefix). `progress`
        gets PrefillProgress events on this loop while the prompt is read (a local model's).
        """
        if self._generating or self._loading or self.current_model is None:
            return BackgroundPrefill(0, 0, 0, False, "the engine is busy or has no model")
        try:
            checked = check_messages(messages)
        except ChinwagError as e:  # a draft that cannot be sent yet: sending will say why
            return BackgroundPrefill(0, 0, 0, False, str(e))
        return await self._backend.prefill(
            conversation_id, checked, params or GenerationParams(), self._on_loop(progress)
        )

    def fork(
        self, source_id: str, conversation_id: str, messages: Messages, params: GenerationParams | None = None
    ) -> Awaitable[ForkedCache]:
        """A fork (`messages`: its parent's up to the fork point) starts with a copy of the
        parent's cache: exactly the ids its next prompt begins with, under the memory budget.

        Queued at once, so a `chat` called after this finds the copy. Nothing is copied for a
        server's model (it keeps its own cache) or while a model loads.
        """
        if self._loading or self.current_model is None:
            return asyncio.sleep(0, ForkedCache(0, 0, "no model is loaded"))
        try:
            checked = check_messages(messages)
        except ChinwagError as e:  # the fork's first reply will say why
            return asyncio.sleep(0, ForkedCache(0, 0, str(e)))
        return self._backend.fork(source_id, conversation_id, checked, params or GenerationParams())

    def adopt(self, draft_id: str, conversation_id: str) -> Awaitable[bool]:
        """Give the cache of a draft read under `draft_id` (a chat not saved yet) to `conversation_id`.

        Queued at once, so a `chat` called after this finds the cache. False if there was none.
        """
        return self._backend.adopt(draft_id, conversation_id)

    async def wait_background(self) -> BackgroundPrefill | None:
        """The current background job's result once it ends (None if there is none)."""
        return await self._backend.wait_background()

    def background_result(self) -> BackgroundPrefill | None:
        """The last background job's result if it has ended (None while it runs, or if none ran)."""
        return self._backend.background_result()

    async def count_tokens(self, text: str, params: GenerationParams | None = None) -> TokenCount:
        """The text's size in the current model's tokens, and the context limit it must fit in
        (an estimate for a server's model: its tokenizer is not here)."""
        if self.current_model is None:
            raise ChinwagError("no model is loaded: load one to count tokens")
        return await self._backend.count_tokens(text, params or GenerationParams())

    async def count_prompt(self, messages: Messages, params: GenerationParams | None = None) -> TokenCount:
        """The tokens a turn's prompt of `messages` would take (chat template and tools included, no
        message dropped), against the context limit; an estimate for a server's model."""
        if self.current_model is None:
            raise ChinwagError("no model is loaded: load one to count tokens")
        return await self._backend.count_prompt(check_messages(messages), params or GenerationParams())

    async def memory_stats(self) -> MemoryReport:
        """Every conversation's KV cache against the memory budget, with evictions and restores
        (an empty report for a server's model: it keeps its own)."""
        return await self._backend.memory_stats()

    def stop(self, conversation_id: str | None = None) -> None:
        """Stop one conversation's reply (or all) and any background work; within one token. Thread-safe."""
        self._backend.cancel_background()
        targets = list(self._stops.values()) if conversation_id is None else [self._stops.get(conversation_id)]
        for event in targets:
            if event is not None:
                event.set()

    async def forget(self, conversation_id: str) -> None:
        """Drop a conversation's cache, in memory and on disk (the chat was deleted)."""
        self.stop(conversation_id)
        # The current backend's, and the engine thread's: local caches outlive a switch to a server's model.
        backends: list[Backend] = [self._backend, self._local]
        for backend in dict.fromkeys(backends):
            await backend.forget(conversation_id)
