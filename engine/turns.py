"""A turn's handle (what `Engine.chat` returns) and the announcements of every turn's start and end.

`Engine.chat` returns a `ChatTurn` at call time: its `stop()` works before the turn's first event
as after it, and iterating it (`async for event in engine.chat(...)`) runs the turn. `Turns`
(`engine.turns`) tells its listeners when each turn begins and ends, and which front end asked for
it (TurnOrigin), so a window learns of the turns its own API server runs on the same engine.
"""

from collections.abc import AsyncGenerator, Callable

from engine.backend import ChatEvent, StopSignal
from engine.log import report_bug
from engine.types import TurnAnnounced, TurnOrigin

Listener = Callable[[TurnAnnounced], None]


class ChatTurn:
    """One turn: PrefillProgress while the prompt is read, TextDelta events, then one TurnStats.

    Nothing runs until it is iterated; `stop()` may come first (the turn then ends at once, as
    cancelled) or at any time after, from any thread.
    """

    def __init__(
        self, conversation_id: str, origin: TurnOrigin, stop: StopSignal, events: AsyncGenerator[ChatEvent, None]
    ) -> None:
        self.conversation_id = conversation_id
        self.origin = origin
        self._stop = stop
        self._events = events

    def stop(self) -> None:
        """End the turn within one token (before its first event: as soon as it begins)."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def __aiter__(self) -> "ChatTurn":
        return self

    async def __anext__(self) -> ChatEvent:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        """End the iteration (a client went away): the turn stops, as when a generator is closed."""
        await self._events.aclose()


class Turns:
    """Every turn's start and end, announced on the loop that runs it, in order, with its origin."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._running: list[TurnAnnounced] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` with each TurnAnnounced from now on; returns what unsubscribes it."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    @property
    def running(self) -> tuple[TurnAnnounced, ...]:
        """The start of each turn begun and not yet ended, oldest first."""
        return tuple(self._running)

    def announce(self, event: TurnAnnounced) -> None:
        if event.ended:
            begun = next(
                (t for t in self._running if (t.conversation_id, t.origin) == (event.conversation_id, event.origin)),
                None,
            )
            if begun is not None:
                self._running.remove(begun)
        else:
            self._running.append(event)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception as e:  # noqa: BLE001 - a listener's bug is logged; the turn goes on
                report_bug(e, "a turn announcement's listener")
