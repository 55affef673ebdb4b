"""What happens to a conversation: send, stream, save, stop, regenerate, edit, delete.

Conversations are never lost: the user message is committed before the engine sees
it, the reply is saved while it grows (at least once a second) and marked
complete/stopped/failed when it ends.
"""

import time
from dataclasses import asdict, dataclass

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QGuiApplication

from app.settings_dialog import PREFILL_KEY, effective, engine_messages, load_defaults, params_from_settings
from app.store import MessageStatus
from engine.errors import ChinwagError
from engine.types import FinishReason

SAVE_INTERVAL_MS = 1000
UNDO_DELETE_MS = 8000
FINISH_STATUS = {FinishReason.CANCELLED: MessageStatus.STOPPED, FinishReason.ERROR: MessageStatus.FAILED}


def reading_text(progress) -> str:
    """'Reading your message… 43%' from a PrefillProgress."""
    return f"Reading your message… {int(100 * progress.fraction)}%"


def stats_dict(stats) -> dict:
    """TurnStats for the store, without the (long) token id lists."""
    d = asdict(stats) if not isinstance(stats, dict) else dict(stats)
    d.pop("prompt_ids", None)
    d.pop("reply_ids", None)
    return d


@dataclass
class Generation:
    conv_id: str
    msg_id: int
    text: str = ""
    saved: str = ""
    started: float = 0.0
    reading: str = ""  # "Reading your message… 43%" until the first text arrives


class ChatController(QObject):
    conversationChanged = Signal(object)  # conv id or None
    statsChanged = Signal(object)  # TurnStats or a stats dict (context used, KV memory)
    generatingChanged = Signal(bool)
    editingChanged = Signal(bool)
    error = Signal(str)
    deletedUndoable = Signal(object, str)  # conv id, title
    readingProgress = Signal(object)  # PrefillProgress while the prompt is read, then None

    def __init__(self, store, bridge, chat_view, composer, sidebar, parent=None):
        super().__init__(parent)
        self.store, self.bridge = store, bridge
        self.chat_view, self.composer, self.sidebar = chat_view, composer, sidebar
        self.conv_id = None
        self.gen: Generation | None = None
        self.editing = None  # id of the user message being edited
        self.search = ""
        self._pending_delete: dict = {}  # conv id -> QTimer
        self._save_timer = QTimer(self)
        self._save_timer.setInterval(SAVE_INTERVAL_MS)
        self._save_timer.timeout.connect(self.save_partial)

        bridge.delta.connect(self._on_delta)
        bridge.turnFinished.connect(self._on_finished)
        bridge.turnFailed.connect(self._on_failed)
        bridge.prefillProgress.connect(self._on_prefill_progress)
        composer.draftPaused.connect(self.prefill_draft)
        composer.sendRequested.connect(self.send)
        composer.stopRequested.connect(self.stop)
        composer.editCancelled.connect(self.cancel_edit)
        chat_view.copyRequested.connect(self.copy_message)
        chat_view.editRequested.connect(self.edit_message)
        chat_view.regenerateRequested.connect(self.regenerate)
        sidebar.conversationSelected.connect(self.open_conversation)
        sidebar.newRequested.connect(self.new_conversation)
        sidebar.renameRequested.connect(self.rename)
        sidebar.deleteRequested.connect(self.delete)
        sidebar.searchChanged.connect(self.set_search)

    # --- the list -------------------------------------------------------
    def refresh_list(self):
        try:
            rows = self.store.list_conversations(self.search)
        except ChinwagError as e:
            self.error.emit(str(e))
            return
        rows = [r for r in rows if r.id not in self._pending_delete]
        self.sidebar.set_conversations(rows, self.conv_id)

    def set_search(self, text: str):
        self.search = text
        self.refresh_list()

    # --- opening --------------------------------------------------------
    def new_conversation(self):
        """A blank chat; it is written to the store with its first message."""
        self.cancel_edit()
        self.conv_id = None
        self.chat_view.clear()
        self.sidebar.list.clearSelection()
        self.sidebar.list.setCurrentItem(None)
        self.conversationChanged.emit(None)
        self.composer.editor.setFocus()

    def open_conversation(self, conv_id):
        if conv_id is None or conv_id in self._pending_delete:
            return
        try:
            conv = self.store.get_conversation(conv_id)
        except ChinwagError as e:
            self.error.emit(str(e))
            self.refresh_list()
            return
        self.cancel_edit()
        self.conv_id = conv.id
        self.chat_view.set_messages(conv.messages)
        if self.gen is not None and self.gen.conv_id == conv.id:
            widget = self.chat_view.widget_for(self.gen.msg_id)
            if widget is not None:
                widget.set_text(self.gen.text)
                widget.set_live_note(self.gen.reading)
                self.chat_view.begin_stream(widget)
        self.sidebar.select(conv.id)
        self._remember("last_conversation", conv.id)
        self.conversationChanged.emit(conv.id)
        last = next((m.stats for m in reversed(conv.messages) if m.role == "assistant" and m.stats), None)
        self.statsChanged.emit(last)

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

    # --- sending --------------------------------------------------------
    def send(self, text: str) -> bool:
        if not text.strip() or self.gen is not None or self.bridge.current_model is None:
            if text.strip() and not self.composer.text():
                self.composer.set_text(text)
            return False
        try:
            if self.editing is not None and self.conv_id is not None:
                self.store.delete_messages_from(self.conv_id, self.editing)
                self.chat_view.remove_from(self.editing)
                self.cancel_edit()
            first = self.conv_id is None or not self.chat_view.message_widgets()
            conv_id = self.ensure_conversation()
            msg = self.store.add_message(conv_id, "user", text)  # saved before the engine sees it
        except ChinwagError as e:
            self.error.emit(str(e))
            self.composer.set_text(text)
            return False
        self.chat_view.add_message(msg.id, "user", text)
        if first:
            self.conversationChanged.emit(conv_id)  # it has a title now
        return self._start_reply()

    def _start_reply(self) -> bool:
        model = self.bridge.current_model
        if model is None or self.conv_id is None:
            return False
        try:
            conv = self.store.get_conversation(self.conv_id)
            values = effective(conv.settings, load_defaults(self.store))
            messages = engine_messages(conv.messages, str(values.get("system_prompt") or ""))
            params = params_from_settings(values)  # a bad stored setting stops here, before the reply exists
            reply = self.store.add_message(conv.id, "assistant", "", status=MessageStatus.STREAMING, model_id=model.id)
            self.store.set_model(conv.id, model.id)
        except ChinwagError as e:
            self.error.emit(str(e))
            return False
        widget = self.chat_view.add_message(reply.id, "assistant", "", MessageStatus.STREAMING, model.name or model.id,
                                            model_id=model.id)
        self.chat_view.begin_stream(widget)
        self.gen = Generation(conv.id, reply.id, started=time.monotonic())
        self._save_timer.start()
        self.composer.set_generating(True)
        self.chat_view.set_actions_enabled(False)
        self.generatingChanged.emit(True)
        self.refresh_list()
        self.bridge.chat(conv.id, messages, params)
        return True

    def prefill_draft(self, text: str):
        """Typing paused: let the engine read the open chat up to the draft (Preferences can turn it off)."""
        if not text.strip() or self.gen is not None or self.conv_id is None:
            return None
        try:
            conv = self.store.get_conversation(self.conv_id)
        except ChinwagError:
            return None
        values = effective(conv.settings, load_defaults(self.store))
        if not values.get(PREFILL_KEY, True):
            return None
        history = conv.messages
        if self.editing is not None:  # the draft replaces the message being edited and what follows
            ids = [m.id for m in history]
            history = history[: ids.index(self.editing)] if self.editing in ids else history
        messages = engine_messages(history, str(values.get("system_prompt") or ""))
        messages.append({"role": "user", "content": text})
        return self.bridge.prefill(conv.id, messages, params_from_settings(values))

    def _on_prefill_progress(self, conv_id, progress):
        gen = self.gen
        if gen is None or gen.conv_id != conv_id:
            return
        gen.reading = reading_text(progress)
        widget = self.chat_view.widget_for(gen.msg_id) if conv_id == self.conv_id else None
        if widget is not None:
            widget.set_live_note(gen.reading)
        self.readingProgress.emit(progress)

    def _done_reading(self, gen):
        if gen.reading:
            gen.reading = ""
            widget = self.chat_view.widget_for(gen.msg_id)
            if widget is not None:
                widget.set_live_note("")
            self.readingProgress.emit(None)

    def _on_delta(self, conv_id, text):
        gen = self.gen
        if gen is None or gen.conv_id != conv_id:
            return
        self._done_reading(gen)
        gen.text += text
        if conv_id == self.conv_id:
            self.chat_view.append_delta(text)

    def save_partial(self):
        gen = self.gen
        if gen is None or gen.text == gen.saved:
            return
        try:
            self.store.update_message(gen.msg_id, content=gen.text)
            gen.saved = gen.text
        except ChinwagError as e:
            self.error.emit(str(e))

    def _on_finished(self, conv_id, stats):
        status = FINISH_STATUS.get(stats.finish_reason, MessageStatus.COMPLETE)
        self._end(conv_id, status, stats, stats.error)

    def _on_failed(self, conv_id, reason):
        status = MessageStatus.STOPPED if reason == FinishReason.CANCELLED else MessageStatus.FAILED
        self._end(conv_id, status, None, reason)

    def _end(self, conv_id, status, stats, error=""):
        gen = self.gen
        if gen is None or gen.conv_id != conv_id:
            return
        self._done_reading(gen)
        self.gen = None
        self._save_timer.stop()
        try:
            self.store.update_message(
                gen.msg_id, content=gen.text, status=status, stats=stats_dict(stats) if stats else None
            )
        except ChinwagError as e:
            self.error.emit(str(e))
        if conv_id == self.conv_id:
            self.chat_view.end_stream(status, stats, error)
        self.composer.set_generating(False)
        self.chat_view.set_actions_enabled(True)
        self.generatingChanged.emit(False)
        if stats is not None:
            self.statsChanged.emit(stats)
        if status == "failed" and error:
            self.error.emit(f"The reply failed: {error}")
        self.refresh_list()

    def stop(self):
        if self.gen is not None:
            self.bridge.stop(self.gen.conv_id)

    def abandon(self):
        """The window is closing: save what was generated as stopped, now."""
        if self.gen is not None:
            self.bridge.stop(self.gen.conv_id)
            self._end(self.gen.conv_id, MessageStatus.STOPPED, None)
        for conv_id in list(self._pending_delete):
            self._commit_delete(conv_id)

    # --- message actions ------------------------------------------------
    def regenerate(self, msg_id=None):
        if self.gen is not None or self.conv_id is None or self.bridge.current_model is None:
            return False
        widgets = self.chat_view.message_widgets()
        if widgets and widgets[-1].role == "user" and msg_id is None:
            return self._start_reply()  # the last message never got its reply
        if not widgets or widgets[-1].role != "assistant":
            return False
        msg_id = widgets[-1].message_id if msg_id is None else msg_id
        if msg_id != widgets[-1].message_id:
            return False
        try:
            self.store.delete_messages_from(self.conv_id, msg_id)
        except ChinwagError as e:
            self.error.emit(str(e))
            return False
        self.chat_view.remove_from(msg_id)
        return self._start_reply()

    def edit_message(self, msg_id):
        widget = self.chat_view.widget_for(msg_id)
        if self.gen is not None or widget is None or widget.role != "user":
            return
        self.editing = msg_id
        self.composer.set_text(widget.text())
        self.composer.set_editing(True)
        self.editingChanged.emit(True)

    def cancel_edit(self):
        if self.editing is not None:
            self.editing = None
            self.composer.set_editing(False)
            self.composer.editor.clear()
            self.editingChanged.emit(False)

    def copy_message(self, msg_id):
        widget = self.chat_view.widget_for(msg_id)
        if widget is not None:
            text = self.gen.text if self.gen and self.gen.msg_id == msg_id else widget.text()
            QGuiApplication.clipboard().setText(text)

    # --- conversations --------------------------------------------------
    def rename(self, conv_id, title):
        try:
            self.store.rename_conversation(conv_id, title)
        except ChinwagError as e:
            self.error.emit(str(e))
        self.refresh_list()
        if conv_id == self.conv_id:
            self.conversationChanged.emit(conv_id)

    def delete(self, conv_id):
        """Hide the conversation now; delete it for good when the Undo offer runs out."""
        if conv_id in self._pending_delete:
            return
        try:
            title = self.store.get_conversation(conv_id).title
        except ChinwagError as e:
            self.error.emit(str(e))
            return
        if self.store.read_only:
            self.error.emit("Conversations are read-only; nothing was deleted.")
            return
        if self.gen is not None and self.gen.conv_id == conv_id:
            self.stop()
        timer = QTimer(self)
        timer.setSingleShot(True)
        timer.setInterval(UNDO_DELETE_MS)
        timer.timeout.connect(lambda: self._commit_delete(conv_id))
        self._pending_delete[conv_id] = timer
        timer.start()
        if conv_id == self.conv_id:
            self.new_conversation()
        self.refresh_list()
        self.deletedUndoable.emit(conv_id, title)

    def undo_delete(self, conv_id):
        timer = self._pending_delete.pop(conv_id, None)
        if timer is not None:
            timer.stop()
            timer.deleteLater()
            self.refresh_list()
            self.open_conversation(conv_id)

    def _commit_delete(self, conv_id):
        timer = self._pending_delete.pop(conv_id, None)
        if timer is None:
            return
        timer.stop()
        timer.deleteLater()
        if self.gen is not None and self.gen.conv_id == conv_id:
            self._end(conv_id, MessageStatus.STOPPED, None)
        try:
            self.store.delete_conversation(conv_id)
        except ChinwagError as e:
            self.error.emit(str(e))
        self.bridge.forget(conv_id)
        if self.store.get_state("last_conversation") == conv_id:
            self._remember("last_conversation", None)
