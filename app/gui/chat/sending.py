"""Sending from the window: a message saved, then its reply started or queued (app/gui/chat/queue.py),
its documents planned first by the one planner (app/gui/chat/outgoing.py, as the terminal plans them);
and the draft planned and read ahead (engine.prefill) when typing pauses. ChatController's part that
sends; the rest of the controller (its state, the reply) is declared below."""

import asyncio
from collections.abc import Callable
from typing import Any

from app.core.attachments import StoredAttachment
from app.core.document_block import Attachment
from app.core.settings import PREFILL_KEY, engine_messages, params_from_settings
from app.core.store import LAST, Message, MessageRole
from app.gui.chat.outgoing import Chat, Target, chat_before, draft_content, needs_plan, plan, stored
from engine.errors import ChinwagError
from engine.log import report_bug
from engine.types import GenerationParams

# The engine's id for a draft typed in a new chat, before the chat is saved (and gets its id).
NEW_CHAT_DRAFT = "new-chat-draft"


class Sending:
    """ChatController's sending (a mixin: the controller holds the state it reads)."""

    store: Any
    bridge: Any
    view: Any
    documents: Any  # the composer's AttachmentTray (None: messages without documents)
    tools: Any
    drafts: Any
    queue: Any
    gen: Any
    editing: int | None
    conv_id: str | None
    error: Any  # the controller's signals
    conversationChanged: Any
    _planning: "asyncio.Task[None] | None"
    _planning_conv: str | None
    _new_draft_read: bool
    ensure_conversation: Callable[[], str]
    _shown_messages: Callable[[], list[Message]]
    _queue: Callable[[str, int], None]
    _start_reply: Callable[..., bool]
    cancel_edit: Callable[[], None]
    refresh_list: Callable[[], None]
    send_queued: Callable[[], bool]

    def send(self, text: str) -> bool:
        """Save the message and start its reply; queue it (app/gui/chat/queue.py) while the model
        loads or a reply is being written, in this chat or another. Its documents (attached, or a
        follow-up's passages of the chat's big ones) are planned first, as the terminal plans them."""
        queue = self._must_queue()
        if not self._may_send(text, queue):
            return False
        documents: list[Attachment] = self.documents.attached() if self.documents is not None else []
        try:
            target = self._target()
            chat = chat_before(self.store, target.conv_id, target.replaced)
            if needs_plan(chat, documents):
                if self.documents is not None:
                    self.documents.keep_originals()
                self._planning = self._run_plan(target, chat, text, documents, queue)
                return True
        except ChinwagError as e:
            self._refused(text, str(e))
            return False
        return self._write(text, target, [], queue)

    def _must_queue(self) -> bool:
        """A message sent now waits: a reply is being written (or planned), or the model is loading."""
        busy = self.gen is not None or self._planning is not None or self.bridge.others_running()
        return busy or (self.bridge.current_model is None and self.view.can_queue())

    def _may_send(self, text: str, queue: bool) -> bool:
        """Something to send, and somewhere for it to go; if not, the text stays in the composer."""
        held = self.conv_id is not None and self.conv_id in self.queue  # one queued message per chat
        planning = self._planning is not None and self._planning_conv == self.conv_id
        missing = self.bridge.current_model is None and not queue
        if text.strip() and not (held or planning or missing):
            return True
        if text.strip() and not self.view.composer_text():
            self.view.set_composer_text(text)
        return False

    def _target(self) -> Target:
        """Where the message goes; a new chat is written now (it has a title once the message is)."""
        parent, replaced = LAST, None
        if self.editing is not None and self.conv_id is not None:
            # An edit is a new version beside the old message; the old branch is kept.
            replaced = self.editing
            parent = self.store.get_message(replaced).parent_id
        new_chat = self.conv_id is None
        first = new_chat or not self._shown_messages()
        return Target(self.ensure_conversation(), parent, replaced, new_chat, first)

    def _refused(self, text: str, error: str) -> None:
        self.error.emit(error)
        if not self.view.composer_text():
            self.view.set_composer_text(text)

    async def _model_ready(self) -> None:
        """Until a model is loaded, while the window says a message waits for one (starting, loading):
        planning counts tokens in the model's tokenizer. A load that fails ends the wait (planning says so)."""
        while self.bridge.current_model is None and self.view.can_queue():
            await asyncio.sleep(0.05)

    def _run_plan(
        self, target: Target, chat: Chat, text: str, documents: list[Attachment], queue: bool
    ) -> "asyncio.Task[None]":
        """The message's documents planned (the engine counts), then the message written and sent or queued."""
        params = self.documents.plan_params() if self.documents is not None else GenerationParams()

        async def run() -> None:
            try:
                await self._model_ready()
                turn = await plan(self.bridge.engine, chat, text, documents, params)
            except asyncio.CancelledError:  # the window closes: the question is kept as the chat's draft
                self._planning = None
                self.drafts.put(target.conv_id, text)
                raise
            except ChinwagError as e:
                error = str(e)
            except Exception as e:  # noqa: BLE001 - a bug: its traceback to the log, one line to the user
                error = report_bug(e, "planning a message's documents")
            else:
                self._planning = None
                self._write(text, target, stored(turn, chat, documents), queue)
                self.send_queued()  # what came free while this was planned (the model loaded) goes now
                return
            self._planning = None
            self._refused(text, error)  # nothing was written: the chips and the text stay
            self.send_queued()

        self._planning_conv = target.conv_id
        task: asyncio.Task[None]
        if queue:  # another reply is under way: the planning is not a reply of its own
            task = self.bridge.run(run())
        else:
            task = self.bridge.run_turn(target.conv_id, run())  # the chat is busy from Enter on
        return task

    def _write(self, text: str, target: Target, documents: list[StoredAttachment], queue: bool) -> bool:
        """The user's message saved (before the engine sees it) and shown; its reply started or queued."""
        try:
            msg = self.store.add_message(
                target.conv_id, MessageRole.USER, text, parent_id=target.parent, attachments=documents
            )
        except ChinwagError as e:
            self._refused(text, str(e))
            return False
        conv_id = target.conv_id
        if target.new_chat and self._new_draft_read:
            self._new_draft_read = False
            self.bridge.adopt(NEW_CHAT_DRAFT, conv_id)  # the draft read ahead becomes this chat's cache
        if target.replaced is not None:
            self.view.remove_messages_from(target.replaced)
            self.cancel_edit()
        if conv_id == self.conv_id:
            self.view.add_message(msg.id, MessageRole.USER, text, versions=(msg.version, msg.versions))
        if self.documents is not None:
            self.documents.sent(msg.id, msg.attachments)  # shown on the message; the chips go
        self._sent_drafts(conv_id, target.first)
        if queue:
            # The model is loading or busy: the message waits, visibly, and goes when it is free.
            self._queue(conv_id, msg.id)
            self.refresh_list()  # the list shows the chat's title, not "New chat"
            return True
        return self._start_reply(conv_id=conv_id)

    def _sent_drafts(self, conv_id: str, first: bool) -> None:
        """The draft became the message: cleared (a blank chat's too); the first message titles the chat."""
        if first:
            self.drafts.put(None, "")
        self.drafts.put(conv_id, "")
        if first:
            self.conversationChanged.emit(conv_id)

    def prefill_draft(self, text: str) -> "asyncio.Task[Any] | None":
        """Typing paused (or a document is ready): the draft's documents planned (the tray shows the
        plan) and the engine reads the open chat up to the draft (Preferences can turn it off).

        A new chat's draft is read under NEW_CHAT_DRAFT and handed to the chat when it is sent.
        """
        documents: list[Attachment] = self.documents.attached() if self.documents is not None else []
        if not (text.strip() or documents) or self.gen is not None or self._planning is not None:
            return None
        try:
            chat = chat_before(self.store, self.conv_id, self.editing)
        except ChinwagError:
            return None
        if needs_plan(chat, documents):
            planning: asyncio.Task[Any] = self.bridge.run(self._plan_draft(self.conv_id, chat, text, documents))
            return planning
        return self._read_draft(self.conv_id, chat, text)

    async def _plan_draft(
        self, conv_id: str | None, chat: Chat, text: str, documents: list[Attachment]
    ) -> "asyncio.Task[Any] | None":
        """The draft planned as sending it would plan it: shown on the chips, then read ahead."""
        assert self.documents is not None
        try:
            turn = await plan(self.bridge.engine, chat, text, documents, self.documents.plan_params())
        except ChinwagError:  # no model, or no passage fits: sending will say so
            return None
        if conv_id != self.conv_id or self.gen is not None:
            return None  # another chat opened, or a reply began, meanwhile
        self.documents.show_plan(turn, documents, text)
        return self._read_draft(conv_id, chat, draft_content(turn, text))

    def _read_draft(self, conv_id: str | None, chat: Chat, content: str) -> "asyncio.Task[Any] | None":
        """The engine reads the chat and `content` as the next user message, in the background."""
        if not chat.values.get(PREFILL_KEY, True):
            return None
        messages = engine_messages(chat.history, chat.system_prompt)
        messages.append({"role": MessageRole.USER.value, "content": content})
        task: asyncio.Task[Any] | None = self.bridge.prefill(
            conv_id or NEW_CHAT_DRAFT, messages, self._tool_params(conv_id, chat.values)
        )
        if conv_id is None:
            self._new_draft_read = self._new_draft_read or task is not None
        return task

    def _tool_params(self, conv_id: str | None, values: dict[str, Any]) -> GenerationParams:
        """A read-ahead's params: with the chat's tool definitions, so it reads the prompt the reply will have."""
        from app.tools.loop import with_tools

        host = self.tools.host_for(conv_id) if self.tools is not None else None
        return with_tools(params_from_settings(values), host)
