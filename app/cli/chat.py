"""`chinwag chat`: the terminal's adapter over the turn driver (app/chat/turn.py). It reads lines,
prints the driver's events, and keeps the chat's messages for the next turn; the driver writes
the store (unless --no-save) as the window does, the reply as it streams. No Qt."""

import argparse
import asyncio
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.chat.events import Delta, Ended, Planned, Reading
from app.chat.tool_events import Event, ToolRan
from app.chat.transcript import StoreTranscript, Transcript
from app.chat.turn import Reply, TurnDriver
from app.cli import fit
from app.cli.parser import PROG, fail
from app.cli.progress import TerminalProgress
from app.core.document_block import Attachment
from app.documents.retrieval import Index
from app.tools.results import neutralise  # a reply (a server's, or a model's) may hold terminal escapes
from engine import Engine, GenerationParams, TurnStats
from engine.errors import ChinwagError
from engine.types import ChatMessage, FinishReason, Role, TurnOrigin

if TYPE_CHECKING:
    from app.cli.chat_tools import TerminalTools
    from app.core.store import Store

READING_SHOWN_TOKENS = 256  # a prompt longer than this says how far it is read


class Printer:
    """The driver's events on the terminal: the reply as it streams, documents and tool calls in brackets."""

    def __init__(self, tools: "TerminalTools | None") -> None:
        self.tools = tools
        self.reading = False  # a "[reading your message… 43%]" line is shown

    def __call__(self, ev: Event) -> None:
        if isinstance(ev, Reading):
            # A long prompt: say how far it is read, on one terminal line that the reply replaces.
            if sys.stderr.isatty() and ev.progress.total > READING_SHOWN_TOKENS:
                self.reading = True
                print(
                    f"\r[reading your message… {int(100 * ev.progress.fraction)}%]", end="", file=sys.stderr, flush=True
                )
        elif isinstance(ev, Delta):
            self._done_reading()
            print(neutralise(ev.text), end="", flush=True)
        elif isinstance(ev, Planned):
            for note in ev.notes:
                print(f"{PROG}: {note}", file=sys.stderr)
            if ev.references:
                print("passages used: " + "; ".join(ev.references), file=sys.stderr)
        elif isinstance(ev, ToolRan) and self.tools is not None:
            self.tools.show(ev.run)
        elif isinstance(ev, Ended):
            self._ended(ev)

    def _done_reading(self) -> None:
        if self.reading:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
            self.reading = False

    def _ended(self, ev: Ended) -> None:
        self._done_reading()
        if self.tools is not None:
            self.tools.ended(ev.stats)
        if ev.note:
            print(f"\n[{ev.note}]")
        if ev.stats is not None:
            print_stats(ev.stats)
        elif ev.error:
            fail(ev.error)


def print_stats(stats: TurnStats) -> None:
    print(
        f"\n[{stats.generated_tokens} tokens, {stats.decode_tps:.1f} tok/s, "
        f"first token {stats.ttft_s:.2f}s, {stats.finish_reason}]" + (f" [{stats.note}]" if stats.note else "")
    )
    if stats.error:  # why the reply ended short: a server's timeout or cut stream, a bug's one line
        fail(stats.error)


@dataclass
class TerminalChat:
    """One terminal chat (a new one per /new): its messages, its driver, its documents."""

    engine: Engine
    store: "Store | None"  # None: --no-save
    system: str
    model_id: str
    printer: Printer
    tools: "TerminalTools | None"
    draft: str = "cli"  # the engine's id for the chat until it is saved
    history: list[ChatMessage] = field(default_factory=list)
    pending: list[Attachment] = field(default_factory=list)  # documents for the next message
    indexes: list[Index] = field(default_factory=list)  # documents too big for the context
    last: Reply | None = None  # the last reply (/continue needs it to have hit max tokens)
    driver: TurnDriver = field(init=False)

    def __post_init__(self) -> None:
        self.history = [ChatMessage(Role.SYSTEM, self.system)] if self.system else []
        transcript: Transcript = Transcript(self.draft)
        if self.store is not None:
            settings = {"system_prompt": self.system} if self.system else None
            transcript = StoreTranscript(self.store, "", self.model_id, self.system, settings)
        tools = self.tools.for_driver() if self.tools is not None else None
        self.driver = TurnDriver(
            self.engine, transcript, self.printer, tools, conv_id=self.draft, origin=TurnOrigin.TERMINAL
        )

    @property
    def conv_id(self) -> str:
        return self.driver.conv_id

    def wire(self) -> list[dict[str, object]]:
        return [m.to_openai() for m in self.history]

    async def send(self, line: str, params: GenerationParams) -> None:
        documents, self.pending = self.pending, []
        self.last = await self.driver.send(self.history, line, params, documents, self.indexes)
        self.history += self.last.added

    async def continue_reply(self, params: GenerationParams) -> None:
        """/continue: the last reply, cut at max tokens, written on (the engine reads nothing again)."""
        last = self.last
        stats = last.stats if last is not None else None
        if last is None or stats is None or stats.finish_reason != FinishReason.LENGTH:
            fail("/continue: the last reply did not stop at max tokens: there is nothing to continue")
            return
        earlier = stats.generated_tokens
        if self.store is not None and last.msg_id is not None:
            earlier = int((self.store.get_message(last.msg_id).stats or {}).get("generated_tokens") or earlier)
        reply = await self.driver.continue_reply(self.history, params, last.msg_id, earlier)
        self.history[-1] = reply.added[-1]
        self.last = reply


async def run(args: argparse.Namespace, params: GenerationParams) -> int:
    from app.documents import cli as documents

    pending = documents.read_all(args.attach)  # bad files fail here, before the model loads
    engine = Engine(kv_initial_capacity=args.kv_initial_capacity, **fit.engine_options(args))
    # Saved like the window's chats (and its cache kept, so the window resumes it), unless --no-save.
    store = None
    if not args.no_save:
        from app.core.store import Store

        store = Store()
    chat: TerminalChat | None = None
    reading = None  # the task reading attached documents ahead (kept: asyncio holds weak references)
    tools = None
    try:
        progress = TerminalProgress()
        try:
            info = await engine.load_model(args.model, progress=progress)
        finally:
            progress.finish()
        print(
            f"Chatting with {info.name}. /attach FILE adds a document, /continue writes more of a reply cut at"
            " its length limit, /new starts over, /exit or Ctrl+D quits, Ctrl+C stops a reply."
        )
        if fit.context_note(info):
            print(f"[{fit.context_note(info)}]")
        if not args.no_tools:
            from app.cli.chat_tools import TerminalTools

            tools = await TerminalTools.start(args)
        chat = TerminalChat(engine, store, args.system, info.id, Printer(tools), tools, pending=pending)
        reading = await documents.read_ahead(engine, chat.draft, chat.wire(), chat.pending, params)
        turns = 0
        loop = asyncio.get_running_loop()
        while True:
            try:
                line = await loop.run_in_executor(None, lambda: input("> "))
            except EOFError:
                print()
                return 0
            command = line.strip()
            if not command:
                continue
            if command == "/exit":
                return 0
            if command == "/new":
                if store is None:
                    await engine.forget(chat.conv_id)
                turns += 1
                chat = TerminalChat(engine, store, args.system, info.id, chat.printer, tools, draft=f"cli-{turns}")
            elif command == "/continue":
                await chat.continue_reply(params)
            elif line.startswith("/attach "):
                attached = _attach(line.removeprefix("/attach ").strip())
                if attached:
                    chat.pending += attached
                    reading = await documents.read_ahead(engine, chat.conv_id, chat.wire(), chat.pending, params)
            else:
                await chat.send(line, params)
    finally:
        await _end_chat(engine, chat, store, tools, reading)


def _attach(path: str) -> list[Attachment]:
    """The documents /attach read, or none after one line saying why (the chat goes on)."""
    from app.documents import cli as documents

    try:
        return documents.read_all([path])
    except ChinwagError as e:
        fail(str(e))
        return []


async def _end_chat(
    engine: Engine,
    chat: TerminalChat | None,
    store: "Store | None",
    tools: "TerminalTools | None",
    reading: "asyncio.Task[object] | None",
) -> None:
    if reading is not None and not reading.done():
        reading.cancel()
    if store is None:
        if chat is not None:
            await engine.forget(chat.conv_id)  # an unsaved chat cannot be resumed: keep no saved cache for it
    else:
        store.close()
    if tools is not None:
        await tools.close()  # stdio MCP servers stop with the chat
    await engine.close()
