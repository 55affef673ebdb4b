"""What `Engine` (engine/api.py) asks of the backend that runs the current model's turns.

Two implement it: `LocalBackend` (engine/local/backend.py: MLX on the engine thread) and
`RemoteBackend` (engine/remote/backend.py: a model on a server). Every backend answers every
method, a server's with its own "not here" results (nothing read ahead, no cache to copy, an
estimated token count, an empty memory report), so `Engine` keeps one and delegates without
asking which it has; what is common to both (each running turn's stop, the engine's state, the
turn announcements) stays in `Engine`. mypy checks both against this Protocol where `Engine`
holds them (`Engine._backend` in engine/api.py: an import from here would tie the backends' files
in a circle).
"""

import concurrent.futures
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from engine.types import (
    BackgroundPrefill,
    ChatMessage,
    ForkedCache,
    GenerationParams,
    MemoryReport,
    PrefillProgress,
    TextDelta,
    TokenCount,
    TurnStats,
)

ChatEvent = PrefillProgress | TextDelta | TurnStats


class StopSignal:
    """One turn's stop: `Engine.stop()` sets it from any thread; it also cancels a watched request at once."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._request: concurrent.futures.Future[Any] | None = None

    def watch(self, request: concurrent.futures.Future[Any]) -> None:
        """Cancel `request` when the stop comes (now, if it already came)."""
        self._request = request
        if self._event.is_set():
            request.cancel()

    def set(self) -> None:
        self._event.set()
        if self._request is not None:
            self._request.cancel()  # thread-safe: a request on another loop is cancelled there

    def is_set(self) -> bool:
        return self._event.is_set()


class Backend(Protocol):
    def chat(
        self, conversation_id: str, messages: list[ChatMessage], params: GenerationParams, stop: StopSignal, /
    ) -> AsyncIterator[ChatEvent]:
        """PrefillProgress while the prompt is read, TextDelta events, then one TurnStats; ends soon after `stop`."""
        ...

    async def prefill(
        self,
        conversation_id: str,
        messages: list[ChatMessage],
        params: GenerationParams,
        progress: Callable[[PrefillProgress], None] | None = None,
        /,
    ) -> BackgroundPrefill:
        """Read an unsent draft ahead (a backend that cannot says why in the result); `progress` may
        be called on any thread."""
        ...

    def fork(
        self, source_id: str, conversation_id: str, messages: list[ChatMessage], params: GenerationParams, /
    ) -> Awaitable[ForkedCache]:
        """Give a fork a copy of its parent's cache up to the fork point; queued at once."""
        ...

    def adopt(self, draft_id: str, conversation_id: str, /) -> Awaitable[bool]:
        """Give what was read under `draft_id` to `conversation_id`; queued at once. False if nothing was."""
        ...

    async def forget(self, conversation_id: str, /) -> None:
        """Drop what this backend keeps for the conversation (the chat was deleted)."""
        ...

    async def wait_background(self) -> BackgroundPrefill | None:
        """The background job's result once it ends (None: there is none)."""
        ...

    def background_result(self) -> BackgroundPrefill | None:
        """The last background job's result if it has ended (None while it runs, or if none ran)."""
        ...

    def cancel_background(self) -> None:
        """End the background job within one chunk; thread-safe."""
        ...

    async def count_tokens(self, text: str, params: GenerationParams, /) -> TokenCount:
        """The text's size in the model's tokens (an estimate where its tokenizer is not here)."""
        ...

    async def count_prompt(self, messages: list[ChatMessage], params: GenerationParams, /) -> TokenCount:
        """A turn's prompt tokens for `messages` (template and tools included), against the context limit."""
        ...

    async def memory_stats(self) -> MemoryReport:
        """The caches this backend holds in memory, against its budget (empty: it holds none)."""
        ...

    def loaded_memory(self) -> tuple[int, int]:
        """(the loaded model's weight bytes, the memory limit it was planned against); 0s: none here."""
        ...
