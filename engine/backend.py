"""What `Engine` (engine/api.py) asks of the backend that runs the current model's turns.

Two implement it: `LocalBackend` (engine/local/backend.py: MLX on the engine thread) and
`RemoteBackend` (engine/remote/backend.py: a model on a server). `Engine` keeps one and
delegates; what is common to both (the stop of each running turn, the engine's state) stays
in `Engine`. mypy checks both against this Protocol where `Engine` holds them (`Engine._backend`
in engine/api.py: an import from here would tie the backends' files in a circle).
"""

import concurrent.futures
import threading
from collections.abc import AsyncIterator, Awaitable
from typing import Protocol

from engine.types import BackgroundPrefill, GenerationParams, PrefillProgress, TextDelta, TurnStats

ChatEvent = PrefillProgress | TextDelta | TurnStats


class StopSignal:
    """One turn's stop: `Engine.stop()` sets it from any thread; it also cancels a watched request at once."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._request: concurrent.futures.Future | None = None

    def watch(self, request: concurrent.futures.Future) -> None:
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
        self, conversation_id: str, messages: list, params: GenerationParams, stop: StopSignal, /
    ) -> AsyncIterator[ChatEvent]:
        """PrefillProgress while the prompt is read, TextDelta events, then one TurnStats; ends soon after `stop`."""
        ...

    async def prefill(self, conversation_id: str, messages: list, params: GenerationParams, /) -> BackgroundPrefill:
        """Read an unsent draft ahead (a backend that cannot says why in the result)."""
        ...

    def adopt(self, draft_id: str, conversation_id: str, /) -> Awaitable[bool]:
        """Give what was read under `draft_id` to `conversation_id`; queued at once. False if nothing was."""
        ...

    async def forget(self, conversation_id: str, /) -> None:
        """Drop what this backend keeps for the conversation (the chat was deleted)."""
        ...
