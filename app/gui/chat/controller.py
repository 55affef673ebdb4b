"""What happens to a conversation: send, stream, save, stop, regenerate, edit, delete.

Conversations are never lost: the user message is committed before the engine sees
it, the reply is saved while it grows (at least once a second) and marked
complete/stopped/failed when it ends.

The controller reads the conversation from the store and shows it through a ChatWindowView
(app/gui/chat/panes.py), never touching widgets, so tests drive it without a MainWindow.
"""

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QGuiApplication

from app.core.drafts import Drafts
from app.core.settings import effective, engine_messages, load_defaults, params_from_settings
from app.core.store import LAST, Message, MessageRole, MessageStatus
from app.core.turns import stats_dict
from app.gui.chat.conversations import Conversations
from app.gui.chat.generation import Generation, last_reply_stats, reading_text
from app.gui.chat.message_widget import QUEUED, QUEUED_NEXT
from app.gui.chat.panes import ChatWindowView
from app.gui.chat.queue import SendQueue, composer_notes
from app.gui.chat.sending import NEW_CHAT_DRAFT, Sending
from engine.errors import ChinwagError
from engine.types import ChatMessage

if TYPE_CHECKING:
    from app.gui.chat.reply import WindowReply
    from app.gui.tools.host import WindowTools

DRAFT_SAVE_MS = 1000  # a draft is written this long after typing stops


class ChatController(QObject, Sending, Conversations):
    conversationChanged = Signal(object)  # conv id or None
    statsChanged = Signal(object)  # TurnStats or a stored reply's stats dict with its "model_id"
    generatingChanged = Signal(bool)
    editingChanged = Signal(bool)
    error = Signal(str)
    deletedUndoable = Signal(object, str)  # conv id, title
    readingProgress = Signal(object)  # PrefillProgress while the prompt is read, then None
    forked = Signal(object, object)  # parent conv id, fork's conv id: its cache is copied (read_ahead.py)
    versionSwitched = Signal(object)  # conv id: another version is shown, the chat is read ahead
    queueChanged = Signal()  # a message was queued, sent or taken off the queue (app/gui/chat/queue.py)

    def __init__(self, store, bridge, view: ChatWindowView, parent=None):
        super().__init__(parent)
        self.store, self.bridge, self.view = store, bridge, view
        self.conv_id: str | None = None
        self.gen: Generation | None = None
        self.editing = None  # id of the user message being edited
        self.search = ""
        self._pending_delete: dict = {}  # conv id -> QTimer
        self._new_draft_read = False  # the engine holds a cache under NEW_CHAT_DRAFT
        self.last_status = ""  # how the last reply ended
        # Messages waiting for the model to load or for the reply being written (app/gui/chat/queue.py).
        self.queue = SendQueue()
        self.drafts = Drafts(store)
        # The composer's documents (app/gui/chat/attachments.py AttachmentTray), set by ChatPanes.wire;
        # None: messages without documents (the controller's unit tests).
        self.documents = None
        # The window's MCP host (app/gui/tools/host.py WindowTools), set by the window; None: no tools.
        self.tools: WindowTools | None = None
        # The reply under way, run by the turn driver (app/gui/chat/reply.py), which writes the store.
        self.turn: WindowReply | None = None
        # A message's documents being planned (the engine counts them) before it is written, and its chat.
        self._planning = None
        self._planning_conv: str | None = None
        self._draft_timer = QTimer(self)
        self._draft_timer.setSingleShot(True)
        self._draft_timer.setInterval(DRAFT_SAVE_MS)
        self._draft_timer.timeout.connect(self.save_draft)
        view.set_draft(self.drafts.get(None))

        bridge.delta.connect(self._on_delta)  # the reply's events, as signals (app/gui/chat/reply.py)
        bridge.prefillProgress.connect(self._on_prefill_progress)
        bridge.otherTurn.connect(lambda event: event.ended and self.send_queued())  # the API server's turn ended

    def draft_edited(self):
        """The composer's text changed: the draft is saved when typing stops."""
        self._draft_timer.start()

    def _shown_messages(self) -> list[Message]:
        """The open chat's messages as shown (its active path, without system turns), from the store."""
        if self.conv_id is None:
            return []
        messages = self.store.get_conversation(self.conv_id).messages
        return [m for m in messages if m.role != MessageRole.SYSTEM]

    # --- the list -------------------------------------------------------
    def refresh_list(self):
        try:
            rows = self.store.list_conversations(self.search)
        except ChinwagError as e:
            self.error.emit(str(e))
            return
        rows = [r for r in rows if r.id not in self._pending_delete]
        self.view.show_conversations(rows, self.conv_id, self.search)

    def set_search(self, text: str):
        self.search = text
        self.refresh_list()

    # --- opening --------------------------------------------------------
    def new_conversation(self):
        """A blank chat; it is written to the store with its first message."""
        self.save_draft()
        self.cancel_edit()
        self.conv_id = None
        self.view.clear_messages()
        self.view.select_conversation(None)
        self.view.set_draft(self.drafts.get(None))
        self._sync_generation()
        self.conversationChanged.emit(None)
        self.view.focus_composer()

    def open_conversation(self, conv_id):
        if conv_id is None or conv_id in self._pending_delete:
            return
        try:
            conv = self.store.get_conversation(conv_id)
        except ChinwagError as e:
            self.error.emit(str(e))
            self.refresh_list()
            return
        self.save_draft()
        self.cancel_edit()
        self._forget_new_draft()
        self.conv_id = conv.id
        self.view.show_messages(conv.messages)
        gen = self.gen
        if gen is not None and gen.conv_id == conv.id and self.view.has_message(gen.msg_id):
            self.view.set_message_text(gen.msg_id, gen.text)
            self.view.set_live_note(gen.msg_id, gen.reading)
            self.view.begin_stream(gen.msg_id)
        queued = self.queue.get(conv.id)
        if queued is not None and self.view.has_message(queued.msg_id):
            self._mark_queued(queued.msg_id)
        if self.turn is not None and self.turn.conv_id == conv.id:
            self.turn.reshow()  # a call that waits for its answer
        self.view.set_draft(self.drafts.get(conv.id))
        self._sync_generation()
        self.view.select_conversation(conv.id)
        self._remember("last_conversation", conv.id)
        self.conversationChanged.emit(conv.id)
        self.statsChanged.emit(last_reply_stats(conv.messages))

    def ensure_conversation(self) -> str:
        if self.conv_id is None:
            model = self.bridge.current_model
            conv = self.store.create_conversation(model_id=model.id if model else "")
            self.conv_id = conv.id
            self._remember("last_conversation", conv.id)
            self.refresh_list()
            self.conversationChanged.emit(conv.id)
            self.statsChanged.emit(None)
        return self.conv_id

    def _remember(self, key, value):
        if not self.store.read_only:
            try:
                self.store.set_state(key, value)
            except ChinwagError:
                pass

    def _queue(self, conv_id, msg_id):
        self.queue.add(conv_id, msg_id)
        self._mark_queued(msg_id)
        self._sync_generation()
        self.queueChanged.emit()

    def _mark_queued(self, msg_id):
        self.view.set_message_status(msg_id, QUEUED if self.bridge.current_model is None else QUEUED_NEXT)

    def _cancel_queued(self, conv_id) -> bool:
        """Take the chat's queued message off the queue: it stays, a message without a reply."""
        item = self.queue.cancel(conv_id)
        if item is None:
            return False
        if conv_id == self.conv_id:
            self.view.set_message_status(item.msg_id, MessageStatus.COMPLETE)
        self._sync_generation()
        self.queueChanged.emit()
        return True

    def _last_shown(self) -> Message | None:
        """The open chat's last message, or None (none, or the store cannot be read: reported)."""
        try:
            shown = self._shown_messages()
        except ChinwagError as e:
            self.error.emit(str(e))
            return None
        return shown[-1] if shown else None

    def unqueue(self):
        """No model came: the queued messages stay as messages without a reply (Regenerate sends them)."""
        for item in list(self.queue.clear()):
            if item.conv_id == self.conv_id:
                self.view.set_message_status(item.msg_id, MessageStatus.COMPLETE)
        self._sync_generation()
        self.queueChanged.emit()

    def send_queued(self) -> bool:
        """The model is ready, or the reply being written ended: start the oldest queued message's
        reply, in its own chat (the open chat stays open)."""
        busy = self.gen is not None or self._planning is not None or self.bridge.others_running()
        if busy or self.bridge.current_model is None or not self.queue:
            return False
        started = False
        while not started and (item := self.queue.take_next(self.store)) is not None:
            if item.conv_id == self.conv_id:
                self.view.set_message_status(item.msg_id, MessageStatus.COMPLETE)
            started = self._start_reply(conv_id=item.conv_id)
        self._sync_generation()
        self.queueChanged.emit()
        return started

    def _start_reply(self, parent_id=LAST, conv_id=None) -> bool:
        """A reply after parent_id (default: the last message shown; a regenerate passes the
        old reply's parent, so the new reply is another version of it), in conv_id (default:
        the open chat; a queued message's reply may start in a chat that is not open)."""
        model = self.bridge.current_model
        conv_id = conv_id or self.conv_id
        if model is None or conv_id is None:
            return False
        shown = conv_id == self.conv_id
        try:
            conv = self.store.get_conversation(conv_id)
            values = effective(conv.settings, load_defaults(self.store))
            ids = [m.id for m in conv.messages]
            history = (
                conv.messages
                if parent_id is LAST
                else conv.messages[: ids.index(parent_id) + 1 if parent_id in ids else 0]
            )
            system_prompt = str(values.get("system_prompt") or "")
            messages = engine_messages(history, system_prompt)
            params = params_from_settings(values)  # a bad stored setting stops here, before the reply exists
            reply = self.store.begin_reply(conv.id, model.id, parent_id)
        except ChinwagError as e:
            self.error.emit(str(e))
            return False
        if shown:
            self.view.add_message(
                reply.id,
                MessageRole.ASSISTANT,
                "",
                MessageStatus.STREAMING,
                model.name or model.id,
                model_id=model.id,
                versions=(reply.version, reply.versions),
            )
            self.view.begin_stream(reply.id)
        self.gen = Generation(conv.id, reply.id, started=time.monotonic(), system_prompt=system_prompt)
        self._sync_generation()
        self.generatingChanged.emit(True)
        self.refresh_list()
        self._drive(conv.id, system_prompt).start(_typed(messages), params, reply.id)
        return True

    def _drive(self, conv_id, system_prompt) -> "WindowReply":
        """The reply's run by the turn driver, with the chat's tools if they are on."""
        from app.gui.chat.reply import WindowReply

        host = self.tools.host_for(conv_id) if self.tools is not None else None
        self.turn = WindowReply(self, conv_id, host, system_prompt)
        return self.turn

    def next_round(self, conv_id, msg_id) -> None:
        """After a round's results the reply goes on: a new assistant message (written by the driver) streams below them."""
        gen, model = self.gen, self.bridge.current_model
        if gen is None or gen.conv_id != conv_id or msg_id is None:
            return
        self.gen = Generation(gen.conv_id, msg_id, started=time.monotonic(), system_prompt=gen.system_prompt)
        if gen.conv_id == self.conv_id:
            name, model_id = (model.name or model.id, model.id) if model is not None else ("", "")
            self.view.add_message(msg_id, MessageRole.ASSISTANT, "", MessageStatus.STREAMING, name, model_id=model_id)
            self.view.begin_stream(msg_id)

    def end_round(self, conv_id, stats):
        """A turn ended with tool calls (the driver wrote it as the round's message): shown; the reply goes on."""
        from app.gui.tools.messages import visible_text

        gen = self.gen
        if gen is None or gen.conv_id != conv_id:
            return
        self._done_reading(gen)
        gen.saved = gen.text
        if conv_id == self.conv_id:
            self.view.end_stream(MessageStatus.COMPLETE, stats, "")
            self.view.set_message_text(gen.msg_id, visible_text(gen.text))  # the calls show as their cards and blocks
        self.statsChanged.emit(stats)

    def end_tool_reply(self, conv_id, status):
        """A reply with tools ended between turns (the round limit, Stop at a card or a call, a failure)."""
        gen = self.gen
        self.turn = None
        if gen is None or gen.conv_id != conv_id:
            return
        self.gen = None
        self.last_status = status
        self._sync_generation()
        self.generatingChanged.emit(False)
        self.refresh_list()
        self.send_queued()  # the next message waiting for the model, if any

    def _on_prefill_progress(self, conv_id, progress):
        gen = self.gen
        if gen is None or gen.conv_id != conv_id:
            return
        if progress.done < progress.total:  # still reading (a prompt read at once only gives its size)
            gen.reading = reading_text(progress)
            if conv_id == self.conv_id:
                self.view.set_live_note(gen.msg_id, gen.reading)
        self.readingProgress.emit(progress)

    def _done_reading(self, gen):
        if gen.reading:
            gen.reading = ""
            self.view.set_live_note(gen.msg_id, "")
            self.readingProgress.emit(None)

    def _on_delta(self, conv_id, text):
        gen = self.gen
        if gen is None or gen.conv_id != conv_id:
            return
        self._done_reading(gen)
        gen.text += text
        if conv_id == self.conv_id:
            self.view.append_delta(text)

    def save_partial(self):
        """The reply's text so far, written now (the driver writes it at least once a second as it streams)."""
        gen, turn = self.gen, self.turn
        if gen is not None and turn is not None and gen.text != gen.saved:
            turn.save_now(gen.msg_id, gen.text)
            gen.saved = gen.text

    def end(self, conv_id, status, stats, error=""):
        """The reply ended (the driver wrote its last message): shown."""
        self._end(conv_id, status, stats, error, written=True)

    def _end(self, conv_id, status, stats, error="", written=False):
        gen = self.gen
        if gen is None or gen.conv_id != conv_id:
            return
        self._done_reading(gen)
        self.gen = None
        if self.turn is not None and self.turn.conv_id == conv_id:
            self.turn = None  # its last turn ended (or failed, or was stopped)
        self.last_status = status
        saved = stats_dict(stats, gen.system_prompt, gen.earlier_tokens) if stats else None
        if not written:  # the window closes, or the chat is deleted: the driver writes no more
            try:
                self.store.update_message(gen.msg_id, content=gen.text, status=status, stats=saved)
            except ChinwagError as e:
                self.error.emit(str(e))
        if conv_id == self.conv_id:
            self.view.end_stream(status, saved if gen.earlier_tokens else stats, error)
        self._sync_generation()
        self.generatingChanged.emit(False)
        if stats is not None:
            self.statsChanged.emit(stats)
        if status == MessageStatus.FAILED and error:
            self.error.emit(f"The reply failed: {error}")
        self.refresh_list()
        self.send_queued()  # the next message waiting for the model, if any

    def _sync_generation(self):
        """Stop, Send and the message actions follow the open chat; the sidebar marks the busy one."""
        gen = self.gen
        mine = gen is not None and gen.conv_id == self.conv_id
        queued = self.conv_id is not None and self.conv_id in self.queue
        elsewhere, held = composer_notes(gen is not None, mine, queued, self.bridge.current_model is not None)
        self.view.set_generating(mine, elsewhere, held)
        self.view.set_message_actions_enabled(gen is None)
        self.view.set_busy_conversation(gen.conv_id if gen is not None else None)

    def save_draft(self):
        self._draft_timer.stop()
        if self.editing is None:  # the text of a message being edited is not a draft
            self.drafts.put(self.conv_id, self.view.composer_text())

    def stop(self) -> bool:
        """Stop (Esc): the open chat's queued message is taken off the queue (it stays, unanswered),
        and the reply being written ends if it is this chat's or this chat queued nothing.
        False: there was nothing to stop."""
        gen = self.gen
        cancelled = self._cancel_queued(self.conv_id)
        if cancelled and (gen is None or gen.conv_id != self.conv_id):
            return True  # another chat's reply goes on
        return self._stop_reply() or cancelled

    def _stop_reply(self) -> bool:
        if self.turn is not None and self.turn.stop():
            return True  # the engine's turn, a waiting card or a running call
        if self.gen is not None:
            self.bridge.stop(self.gen.conv_id)
            return True
        return False

    def abandon(self):
        """The window is closing: save what was generated as stopped, now. Queued messages stay
        as messages without a reply (nothing starts now, nor on the next start); a message whose
        documents are being planned is kept as its chat's draft."""
        self.queue.clear()
        if self._planning is not None:
            self._planning.cancel()
        if self.turn is not None:
            self.turn.abandon()
        if self.gen is not None:
            self.bridge.stop(self.gen.conv_id)
            self._end(self.gen.conv_id, MessageStatus.STOPPED, None)
        for conv_id in list(self._pending_delete):
            self._commit_delete(conv_id)
        self._forget_new_draft()

    def _forget_new_draft(self):
        """A new chat's draft that was read ahead and never sent: its cache goes."""
        if self._new_draft_read:
            self._new_draft_read = False
            self.bridge.forget(NEW_CHAT_DRAFT)

    # --- message actions ------------------------------------------------
    def regenerate(self, msg_id=None):
        if self.conv_id is None or self.bridge.current_model is None or self.conv_id in self.queue:
            return False
        if self.gen is not None:
            return self._queue_missing_reply(msg_id)
        last = self._last_shown()
        if last is not None and last.role == MessageRole.USER and msg_id is None:
            return self._start_reply()  # the last message never got its reply
        if last is None or last.role != MessageRole.ASSISTANT:
            return False
        msg_id = last.id if msg_id is None else msg_id
        if msg_id != last.id:
            return False
        try:
            parent = self.store.get_message(msg_id).parent_id  # the new reply is a version beside it
        except ChinwagError as e:
            self.error.emit(str(e))
            return False
        self.view.remove_messages_from(msg_id)
        if not self._start_reply(parent_id=parent):
            self.open_conversation(self.conv_id)  # show what the store holds
            return False
        return True

    def continue_reply(self, msg_id) -> bool:
        """Write on from the end of the chat's last reply, which hit max tokens, in the same message
        (the engine reads nothing again: its cache holds the reply)."""
        if self.conv_id is None or self.bridge.current_model is None or self.gen is not None:
            return False
        last = self._last_shown()
        if last is None or last.id != msg_id or last.role != MessageRole.ASSISTANT or not last.content:
            return False
        conv_id = self.conv_id
        try:
            conv = self.store.get_conversation(conv_id)
            values = effective(conv.settings, load_defaults(self.store))
            system_prompt = str(values.get("system_prompt") or "")
            messages = engine_messages(conv.messages, system_prompt)
            params = replace(params_from_settings(values), continue_reply=True)
        except ChinwagError as e:
            self.error.emit(str(e))
            return False
        self.view.set_message_status(msg_id, MessageStatus.STREAMING)
        self.view.begin_stream(msg_id)
        earlier = int((last.stats or {}).get("generated_tokens") or 0)
        self.gen = Generation(
            conv_id,
            msg_id,
            text=last.content,
            saved=last.content,
            started=time.monotonic(),
            system_prompt=system_prompt,
            earlier_tokens=earlier,
        )
        self._sync_generation()
        self.generatingChanged.emit(True)
        self.refresh_list()
        self._drive(conv_id, system_prompt).continue_reply(_typed(messages), params, msg_id, earlier)
        return True

    def _queue_missing_reply(self, msg_id) -> bool:
        """Generate Reply while another chat writes: the open chat's unanswered message is queued."""
        last = self._last_shown()
        if msg_id is not None or last is None or last.role != MessageRole.USER or self.gen is None:
            return False
        self._queue(self.conv_id, last.id)
        return True

    def switch_version(self, msg_id, step: int) -> bool:
        """Show the previous (-1) or next (+1) version of a message, and the branch below it
        as it was last shown; the conversation continues from there."""
        if self.gen is not None or self.conv_id is None:
            return False
        try:
            ids = self.store.versions(msg_id)
            i = ids.index(msg_id) + step
            if not 0 <= i < len(ids):
                return False
            self._cancel_queued(self.conv_id)  # the queued message is not the chat's last one any more
            self.store.select_version(ids[i])
            conv = self.store.get_conversation(self.conv_id)
        except ChinwagError as e:
            self.error.emit(str(e))
            return False
        shown = [m.id for m in conv.messages]
        if ids[i] not in shown:
            self.open_conversation(self.conv_id)
            self.versionSwitched.emit(self.conv_id)
            return True
        self.view.replace_messages_from(msg_id, conv.messages[shown.index(ids[i]) :])
        self.statsChanged.emit(last_reply_stats(conv.messages))
        self.refresh_list()
        self.versionSwitched.emit(self.conv_id)
        return True

    def fork(self, msg_id) -> bool:
        """A new conversation with this one's shown messages up to msg_id; it opens."""
        if self.conv_id is None or (self.gen is not None and self.gen.msg_id == msg_id):
            return False
        try:
            new = self.store.fork_conversation(self.conv_id, msg_id)
        except ChinwagError as e:
            self.error.emit(str(e))
            return False
        self.forked.emit(self.conv_id, new.id)  # before anything can ask the fork for a reply
        self.refresh_list()
        self.open_conversation(new.id)
        return True

    def _shown_message(self, msg_id) -> Message | None:
        """A message of the open chat, from the store (None: not shown there)."""
        try:
            return next((m for m in self._shown_messages() if m.id == msg_id), None)
        except ChinwagError as e:
            self.error.emit(str(e))
            return None

    def edit_message(self, msg_id):
        if self.gen is not None:
            return
        msg = self._shown_message(msg_id)
        if msg is None or msg.role != MessageRole.USER:
            return
        self._cancel_queued(self.conv_id)  # the edit is sent (or queued) again as a new version
        self.save_draft()
        self.editing = msg_id
        self.view.set_composer_text(msg.content)
        self.view.set_editing(True)
        self.editingChanged.emit(True)

    def cancel_edit(self):
        if self.editing is not None:
            self.editing = None
            self.view.set_editing(False)
            self.view.set_draft(self.drafts.get(self.conv_id))  # what was typed before the edit
            self.editingChanged.emit(False)

    def copy_message(self, msg_id):
        if self.gen is not None and self.gen.msg_id == msg_id:
            text = self.gen.text  # the reply being written: all of it so far, saved or not
        else:
            msg = self._shown_message(msg_id)
            if msg is None:
                return
            text = msg.content
        QGuiApplication.clipboard().setText(text)


def _typed(messages: list) -> list[ChatMessage]:
    """The engine's messages as the turn driver takes them."""
    return [ChatMessage.from_openai(m, f"messages[{i}]") for i, m in enumerate(messages)]
