"""One engine turn of a reply: streamed to a listener, stopped on demand (a Stop that comes before
the engine takes the turn up stops it as it begins), the engine's event stream closed when it ends.

The turn driver (turn.py) runs each of a reply's engine turns through it; the server (which keeps no
chat and runs no tool) runs its one turn through it as an async iterator. Imports only the engine.
"""

import asyncio
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass

from app.chat.events import Delta, Reading
from engine.errors import ChinwagError, ContextOverflowError
from engine.protocol import EngineAPI
from engine.turns import ChatTurn
from engine.types import ChatMessage, GenerationParams, PrefillProgress, TextDelta, TurnOrigin, TurnStats


@dataclass(frozen=True)
class Streamed:
    """An engine turn's end: its whole text, its stats (None: refused, with `error`, or cut short)."""

    text: str
    stats: TurnStats | None
    error: str = ""
    client_error: bool = False  # refused for what was asked (a history longer than the context)


class EngineTurn:
    def __init__(
        self,
        engine: EngineAPI,
        conv_id: str,
        on_event: Callable[[Reading | Delta], None] = lambda event: None,
        stop_wanted: bool = False,
        origin: TurnOrigin = TurnOrigin.SCRIPT,
    ) -> None:
        self.engine, self.conv_id, self.on_event = engine, conv_id, on_event
        self.stop_wanted, self.origin = stop_wanted, origin
        self.streaming = False
        self._handle: ChatTurn | None = None  # the engine's turn, once asked for

    def stop(self) -> bool:
        """Stop the turn (now, or as it begins). False: it is not streaming yet (or any more)."""
        self.stop_wanted = True
        if self._handle is not None:
            self._handle.stop()  # reaches the turn before its first event too
        return self.streaming

    async def run(
        self,
        messages: Sequence[ChatMessage],
        params: GenerationParams,
        text: str = "",
        grow: Callable[[str], None] = lambda text: None,
        kept: Callable[[str, bool], None] = lambda text, cancelled: None,
    ) -> Streamed:
        """The turn, streamed: `grow` gets the text so far after each piece; a cancelled task (Ctrl+C,
        a window that closes) or a bug stops the engine's turn and hands `kept` what was generated, and
        whether it was cancelled (a bug is not: its reply failed)."""
        parts, stats = [text], None
        self.streaming = True
        events = self._handle = self.engine.chat(self.conv_id, list(messages), params, origin=self.origin)
        if self.stop_wanted:  # Stop came before the engine was asked
            events.stop()
        try:
            async for ev in events:
                if isinstance(ev, PrefillProgress):
                    self.on_event(Reading(ev))
                elif isinstance(ev, TextDelta):
                    parts.append(ev.text)
                    self.on_event(Delta(ev.text))
                    grow("".join(parts))
                else:
                    stats = ev
        except ChinwagError as e:  # refused (a prompt longer than the context...): the reply fails, the chat goes on
            return Streamed("".join(parts), None, str(e), isinstance(e, ContextOverflowError))
        except BaseException as e:
            events.stop()
            kept("".join(parts), isinstance(e, (asyncio.CancelledError, KeyboardInterrupt)))
            raise
        finally:
            self.streaming = False
            self._handle = None
            await events.aclose()  # the turn's bookkeeping ends now, not when it is collected
        return Streamed("".join(parts), stats)

    async def events(
        self, messages: Sequence[ChatMessage], params: GenerationParams
    ) -> AsyncGenerator[Reading | Delta | Streamed, None]:
        """run() as an async iterator of its events, then its Streamed; closed early, the turn stops at once."""
        queue: asyncio.Queue[Reading | Delta | Streamed | None] = asyncio.Queue()
        listener = self.on_event

        def both(event: Reading | Delta) -> None:
            listener(event)
            queue.put_nowait(event)

        self.on_event = both
        task = asyncio.ensure_future(self.run(messages, params))
        task.add_done_callback(lambda t: queue.put_nowait(None if t.cancelled() or t.exception() else t.result()))
        try:
            while (event := await queue.get()) is not None:
                yield event
                if isinstance(event, Streamed):
                    return
            task.result()  # a bug in the turn is raised here
        finally:
            self.on_event = listener
            if not task.done():
                self.stop()  # now: the next turn on this conversation may start at once
                task.cancel()
