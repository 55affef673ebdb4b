"""Renaming and deleting chats from the window: a deleted chat is hidden at once and deleted for good
when the Undo offer runs out (its queued message, reply, cache and draft go with it). ChatController's
part for chats; the rest of the controller is declared below."""

from collections.abc import Callable
from typing import Any, cast

from PySide6.QtCore import QObject, QTimer

from app.core.store import MessageStatus, NotFoundError
from engine.errors import ChinwagError
from engine.log import report_bug

UNDO_DELETE_MS = 8000


class Conversations:
    """ChatController's renaming and deleting (a mixin: the controller holds the state it reads)."""

    store: Any
    bridge: Any
    drafts: Any
    gen: Any
    conv_id: str | None
    _pending_delete: dict[str, QTimer]
    error: Any  # the controller's signals
    conversationChanged: Any
    deletedUndoable: Any
    refresh_list: Callable[[], None]
    new_conversation: Callable[[], None]
    open_conversation: Callable[[str], None]
    _cancel_queued: Callable[[str | None], bool]
    _stop_reply: Callable[[], bool]
    _end: Callable[..., None]
    _remember: Callable[[str, Any], None]

    def rename(self, conv_id: str, title: str) -> None:
        try:
            self.store.rename_conversation(conv_id, title)
        except ChinwagError as e:
            self.error.emit(str(e))
        self.refresh_list()
        if conv_id == self.conv_id:
            self.conversationChanged.emit(conv_id)

    def delete(self, conv_id: str) -> None:
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
        self._cancel_queued(conv_id)  # never sent into a chat that is going
        if self.gen is not None and self.gen.conv_id == conv_id:
            self._stop_reply()
        timer = QTimer(cast(QObject, self))  # the controller, a QObject
        timer.setSingleShot(True)
        timer.setInterval(UNDO_DELETE_MS)
        timer.timeout.connect(lambda: self._commit_delete(conv_id))
        self._pending_delete[conv_id] = timer
        timer.start()
        if conv_id == self.conv_id:
            self.new_conversation()
        self.refresh_list()
        self.deletedUndoable.emit(conv_id, title)

    def undo_delete(self, conv_id: str) -> None:
        timer = self._pending_delete.pop(conv_id, None)
        if timer is not None:
            timer.stop()
            timer.deleteLater()
            self.refresh_list()
            self.open_conversation(conv_id)

    def undo_last_delete(self) -> bool:
        """Ctrl/Cmd+Z outside a text field: bring back the chat deleted last, if Undo still can."""
        if not self._pending_delete:
            return False
        self.undo_delete(list(self._pending_delete)[-1])
        return True

    def _commit_delete(self, conv_id: str) -> None:
        timer = self._pending_delete.pop(conv_id, None)
        if timer is None:
            return
        timer.stop()
        timer.deleteLater()
        if self.gen is not None and self.gen.conv_id == conv_id:
            self._end(conv_id, MessageStatus.STOPPED, None)
        try:
            self.store.delete_conversation(conv_id)
        except NotFoundError:
            pass  # deleted meanwhile (another window): its cache and draft go all the same
        except Exception as e:  # noqa: BLE001 - nothing was deleted (one transaction): the chat stays whole, listed again
            self.error.emit(str(e) if isinstance(e, ChinwagError) else report_bug(e, "deleting a chat"))
            self.refresh_list()
            return
        self.bridge.forget(conv_id)
        self.drafts.put(conv_id, "")  # a deleted chat's text is gone, its draft too
        if self.store.get_state("last_conversation") == conv_id:
            self._remember("last_conversation", None)
