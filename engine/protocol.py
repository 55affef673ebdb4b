"""The engine's API as front ends see it (docs/ARCHITECTURE.md), as a typing.Protocol.

`Engine` and the tests' fake engine (tests/app_helpers.py) both satisfy it; mypy checks both
(`make check`), so neither can drift from the other. Ids are positional-only: the fake names
them differently, and every caller passes them by position.
"""

import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from engine.turns import ChatTurn, Turns
from engine.types import (
    BackgroundPrefill,
    EngineState,
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
    TurnOrigin,
)

Progress = Callable[[LoadProgress], None] | None


class EngineAPI(Protocol):
    current_model: ModelInfo | None

    @property
    def state(self) -> EngineState: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def list_models(self) -> list[ModelInfo]: ...

    async def configure(self, kv_quantization: KVQuantization | None, memory_limit_bytes: int | None, /) -> None: ...

    async def load_model(self, spec: str, /, progress: Progress = None) -> ModelInfo: ...

    async def import_gguf(self, path: str, /, progress: Progress = None) -> ModelInfo: ...

    async def add_model_folder(self, path: str, /) -> ModelInfo: ...

    async def download_model(
        self, repo_id: str, /, progress: Progress = None, cancel: threading.Event | None = None
    ) -> ModelInfo: ...

    async def search_models(self, query: str, /) -> list[HubModel]: ...

    turns: Turns  # every turn's start and end, with its origin (engine/turns.py)

    def chat(
        self,
        conversation_id: str,
        messages: Messages,
        params: GenerationParams | None = None,
        /,
        origin: TurnOrigin = TurnOrigin.SCRIPT,
    ) -> ChatTurn:
        """The turn's handle, at once: it yields PrefillProgress while reading the prompt, TextDelta
        events, then one TurnStats; its stop() ends the turn, before its first event too."""
        ...

    async def prefill(
        self,
        conversation_id: str,
        messages: Messages,
        params: GenerationParams | None = None,
        /,
        progress: Callable[[PrefillProgress], None] | None = None,
    ) -> BackgroundPrefill:
        """Reads the prompt up to its last message ahead, in the background (a draft, or a changed history)."""
        ...

    def fork(
        self, source_id: str, conversation_id: str, messages: Messages, params: GenerationParams | None = None, /
    ) -> Awaitable[ForkedCache]:
        """Gives a fork a copy of its parent's cache up to the fork point; queued at once."""
        ...

    def adopt(self, draft_id: str, conversation_id: str, /) -> Awaitable[bool]:
        """Gives a draft's cache (read before its chat was saved) to the chat; queued at once."""
        ...

    async def count_tokens(self, text: str, /, params: GenerationParams | None = None) -> TokenCount:
        """The text's size in the current model's tokens (an attached document's, before sending)."""
        ...

    async def count_prompt(self, messages: Messages, /, params: GenerationParams | None = None) -> TokenCount:
        """The tokens a turn's prompt of these messages would take (template and tools included)."""
        ...

    async def memory_stats(self) -> MemoryReport: ...

    def stop(self, conversation_id: str | None = None, /) -> None: ...

    async def forget(self, conversation_id: str, /) -> None: ...

    async def list_servers(self) -> list[ServerInfo]: ...

    async def save_server(self, name: str, url: str, api_key: str | None = None, replace: str = "") -> ServerInfo: ...

    async def remove_server(self, name: str, /) -> None: ...


if TYPE_CHECKING:  # mypy: the real engine keeps this API
    from engine.api import Engine

    _engine: EngineAPI = Engine()
