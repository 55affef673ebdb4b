"""The engine's async API (engine/protocol.py), over the backend that runs the current model's turns.

`Engine` keeps one backend (engine/backend.py): the local one (engine/local/backend.py, MLX on
the engine thread) or a server's (engine/remote/backend.py), chosen by `load_model`, and
delegates to it. What both share stays here: each running turn's stop, and the engine's state.
"""

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable

from engine.backend import Backend, ChatEvent, StopSignal
from engine.errors import ChinwagError
from engine.local.backend import IDLE_WORK, LocalBackend
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
    ModelInfo,
    PrefillProgress,
    ServerInfo,
    TokenCount,
)


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
        session = self._local.session if self._backend is self._local else None
        return EngineState(
            name,
            self.current_model,
            kv_bytes_total=self._local.kv_bytes,
            weight_bytes=session.weight_bytes if session and self.current_model else 0,
            memory_limit_bytes=session.limit_bytes if session and self.current_model else 0,
        )

    @staticmethod
    def _on_loop(callback: Callable | None) -> Callable | None:
        """Wrap a callback so the engine thread can call it and it runs on this loop."""
        if callback is None:
            return None
        loop = asyncio.get_running_loop()

        def call(*args: object) -> None:
            try:
                loop.call_soon_threadsafe(callback, *args)
            except RuntimeError:  # the loop has closed; nobody is listening
                pass

        return call

    # --- models ------------------------------------------------------------

    async def list_models(self) -> list:
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

    async def list_servers(self) -> list:
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

        return await self._local.call(import_gguf, str(path), self._on_loop(progress))

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

    async def chat(
        self, conversation_id: str, messages: list, params: GenerationParams | None = None
    ) -> AsyncIterator[ChatEvent]:
        """Yield PrefillProgress while a long prompt is read, TextDelta events, then one TurnStats.

        Problems found before generation starts (no model, bad messages, a prompt
        longer than the context) raise ChinwagError. A failure mid-generation ends the
        stream with TurnStats(finish_reason="error", error=...), the cache repaired.
        """
        backend = self._backend
        self.stop(conversation_id)  # a new turn replaces a running one
        stop = self._stops[conversation_id] = StopSignal()
        self._generating += 1
        try:
            async for event in backend.chat(conversation_id, messages, params or GenerationParams(), stop):
                yield event
        finally:
            if self._stops.get(conversation_id) is stop:
                del self._stops[conversation_id]
            self._generating -= 1

    # --- background work ----------------------------------------------------

    async def prefill(
        self,
        conversation_id: str,
        messages: list,
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
        params = params or GenerationParams()
        if self._backend is self._local:
            return await self._local.prefill(conversation_id, messages, params, self._on_loop(progress))
        return await self._backend.prefill(conversation_id, messages, params)

    def fork(
        self, source_id: str, conversation_id: str, messages: list, params: GenerationParams | None = None
    ) -> Awaitable[ForkedCache]:
        """A fork (`messages`: its parent's up to the fork point) starts with a copy of the
        parent's cache: exactly the ids its next prompt begins with, under the memory budget.

        Queued at once, so a `chat` called after this finds the copy. Nothing is copied for a
        server's model (it keeps its own cache) or while a model loads.
        """
        if self._loading or self.current_model is None or self._backend is not self._local:
            return asyncio.sleep(0, ForkedCache(0, 0, "no local model is loaded"))
        return self._local.fork(source_id, conversation_id, messages, params or GenerationParams())

    def adopt(self, draft_id: str, conversation_id: str) -> Awaitable[bool]:
        """Give the cache of a draft read under `draft_id` (a chat not saved yet) to `conversation_id`.

        Queued at once, so a `chat` called after this finds the cache. False if there was none.
        """
        return self._backend.adopt(draft_id, conversation_id)

    async def wait_background(self) -> BackgroundPrefill | None:
        """The current background job's result once it ends (None if there is none)."""
        return await self._local.wait_background()

    def background_result(self) -> BackgroundPrefill | None:
        """The last background job's result if it has ended (None while it runs, or if none ran)."""
        return self._local.background_result()

    async def count_tokens(self, text: str, params: GenerationParams | None = None) -> TokenCount:
        """The text's size in the current model's tokens, and the context limit it must fit in."""
        if self.current_model is None:
            raise ChinwagError("no model is loaded: load one to count tokens")
        if self._backend is not self._local:  # the server's tokenizer is not here: about 4 characters a token
            limit = (params or GenerationParams()).context_cap or self.current_model.context_length or 0
            return TokenCount((len(text) + 3) // 4, limit, exact=False)
        return await self._local.call(self._session_count, text, params or GenerationParams())

    def _session_count(self, text: str, params: GenerationParams) -> TokenCount:
        session = self._local.queued_session()
        return TokenCount(session.count_tokens(text), session.context_limit(params))

    async def count_prompt(self, messages: list[dict], params: GenerationParams | None = None) -> TokenCount:
        """The tokens a turn's prompt of `messages` would take (chat template and tools included, no
        message dropped), against the context limit; an estimate for a server's model."""
        if self.current_model is None:
            raise ChinwagError("no model is loaded: load one to count tokens")
        params = params or GenerationParams()
        if self._backend is not self._local:
            text = "".join(str(m.get("content", "")) for m in messages) + (
                json.dumps(params.tools) if params.tools else ""
            )
            return await self.count_tokens(text, params)
        return await self._local.call(self._session_prompt_count, list(messages), params)

    def _session_prompt_count(self, messages: list[dict], params: GenerationParams) -> TokenCount:
        session = self._local.queued_session()
        return TokenCount(session.count_prompt(messages, params), session.context_limit(params))

    async def memory_stats(self) -> MemoryReport:
        """Every conversation's KV cache against the memory budget, with evictions and restores."""
        return await self._local.memory_stats()

    def stop(self, conversation_id: str | None = None) -> None:
        """Stop one conversation's reply (or all) and any background work; within one token. Thread-safe."""
        self._local.cancel_background()
        targets = list(self._stops.values()) if conversation_id is None else [self._stops.get(conversation_id)]
        for event in targets:
            if event is not None:
                event.set()

    async def forget(self, conversation_id: str) -> None:
        """Drop a conversation's cache, in memory and on disk (the chat was deleted)."""
        self.stop(conversation_id)
        await self._backend.forget(conversation_id)
        if self._backend is not self._local:  # the local caches outlive a switch to a server's model
            await self._local.forget(conversation_id)
