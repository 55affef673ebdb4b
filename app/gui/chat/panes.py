"""What the chat controller shows and reads, and nothing else: the ChatWindowView Protocol, and
ChatPanes, the window's widgets (the message view, the composer, the chat list) behind it.

ChatController talks only to a ChatWindowView, so it is unit-tested with a fake made from the
Protocol (`create_autospec(ChatWindowView, instance=True)`), without a MainWindow. A new thing
the controller must show is a method here, implemented once in ChatPanes.
"""

from typing import Protocol

from PySide6.QtCore import Qt

from app.core.store import MessageRole, MessageStatus
from app.gui.chat.attachments import chat_history, chat_params
from app.gui.chat.sent_attachments import show_on_message


class ChatWindowView(Protocol):
    # --- the chat list ------------------------------------------------------
    def show_conversations(self, rows: list, current_id: str | None, search: str) -> None: ...

    def select_conversation(self, conv_id: str | None) -> None:
        """Mark the open chat in the list; None: no chat is selected (a new, unsaved one)."""

    def set_busy_conversation(self, conv_id: str | None) -> None:
        """The chat whose reply is being written (None: none)."""

    # --- the messages -----------------------------------------------------------
    def show_messages(self, messages: list) -> None:
        """Show a stored conversation's messages."""

    def clear_messages(self) -> None:
        """The empty chat (its welcome)."""

    def add_message(
        self,
        msg_id: int,
        role: str,
        text: str,
        status: str = MessageStatus.COMPLETE,
        model_name: str = "",
        model_id: str = "",
        versions: tuple[int, int] = (1, 1),
    ) -> None: ...

    def has_message(self, msg_id: int) -> bool: ...

    def remove_messages_from(self, msg_id: int) -> None:
        """Remove a message and every one shown below it."""

    def replace_messages_from(self, msg_id: int, messages: list) -> None: ...

    def set_message_status(self, msg_id: int, status: str) -> None: ...

    def set_message_text(self, msg_id: int, text: str) -> None: ...

    def set_live_note(self, msg_id: int, text: str) -> None:
        """What a streaming reply says before its text ("Reading your message… 43%"); "" is "Writing…"."""

    def begin_stream(self, msg_id: int) -> None: ...

    def append_delta(self, text: str) -> None: ...

    def end_stream(self, status: str, stats, error: str) -> None: ...

    def set_message_actions_enabled(self, on: bool) -> None: ...

    # --- tool rounds (app/gui/chat/reply.py) -----------------------------------------------
    def add_approval(self, msg_id: int, call, server: str, tool: str):
        """Show a call's ApprovalCard in the reply msg_id; returns the card (its `answered` signal), or None."""

    def add_tool_result(self, msg_id: int, text: str, stats: dict) -> None:
        """Show a stored `tool` message (its result block) at the end of the chat."""

    def set_tool_note(self, msg_id: int, text: str) -> None:
        """A line under a tool message (the round limit was reached, Stop)."""

    # --- the composer -------------------------------------------------------------
    def composer_text(self) -> str: ...

    def set_composer_text(self, text: str) -> None:
        """Put text in the composer to send again or edit (it takes the focus)."""

    def set_draft(self, text: str) -> None:
        """Show a saved draft without taking the focus."""

    def can_queue(self) -> bool:
        """A message sent now may wait for the model that is loading."""

    def set_generating(self, mine: bool, elsewhere: str, queued: str) -> None:
        """mine: the open chat's reply is being written (Stop instead of Send; Enter queues the next
        message); elsewhere: another chat's is, so a message sent now is queued (why, or "");
        queued: the open chat's message is queued (when it goes, or ""): Stop cancels it, and
        nothing more is sent here until it goes."""

    def set_editing(self, on: bool) -> None: ...

    def focus_composer(self) -> None: ...


class ChatPanes:
    """ChatWindowView over the window's ChatView, Composer and Sidebar."""

    def __init__(self, chat_view, composer, sidebar):
        self.chat_view, self.composer, self.sidebar = chat_view, composer, sidebar

    def wire(self, chat):
        """The widgets' requests go to the controller (chat: a ChatController)."""
        composer, chat_view, sidebar = self.composer, self.chat_view, self.sidebar
        composer.editor.textChanged.connect(chat.draft_edited)
        documents = chat.documents = composer.attachments  # app/gui/chat/attachments.py
        documents.engine = lambda: chat.bridge.engine  # sizes in the current model's tokens
        documents.params = lambda: chat_params(chat.store, chat.conv_id)  # and within the chat's settings
        documents.history = lambda: chat_history(chat.store, chat.conv_id)  # a follow-up's own passages
        documents.show_sent = lambda msg_id, items: show_on_message(chat_view.widget_for(msg_id), items)
        documents.stop_reading = chat.bridge.cancel_read_ahead  # the status bar's Cancel
        documents.readyToRead.connect(lambda: chat.prefill_draft(composer.text()))  # read at attach
        chat.bridge.modelLoaded.connect(lambda _info: documents.recount())
        chat.bridge.readingAhead.connect(
            lambda _conv, p: documents.read_progress(p.prompt_tokens - p.total + p.done, p.prompt_tokens)
        )
        chat.bridge.draftPrefilled.connect(lambda _conv, result: documents.read_ended(result))
        composer.draftPaused.connect(chat.prefill_draft)
        composer.sendRequested.connect(chat.send)
        composer.stopRequested.connect(chat.stop)
        composer.editCancelled.connect(chat.cancel_edit)
        composer.editLastRequested.connect(lambda: self._edit_last(chat))
        chat_view.copyRequested.connect(chat.copy_message)
        chat_view.editRequested.connect(chat.edit_message)
        chat_view.regenerateRequested.connect(chat.regenerate)
        chat_view.continueRequested.connect(chat.continue_reply)
        chat_view.continueRequested.connect(lambda *_: self.focus_composer())
        chat_view.promptChosen.connect(chat.send)
        chat_view.versionRequested.connect(chat.switch_version)
        # After ‹ › or Regenerate the keys still go to the message box (the clicked widget may be gone).
        chat_view.versionRequested.connect(lambda *_: self.focus_composer())
        chat_view.regenerateRequested.connect(lambda *_: self.focus_composer())
        chat_view.forkRequested.connect(chat.fork)
        chat_view.replyMissing.connect(composer.set_reply_missing)
        composer.generateRequested.connect(chat.regenerate)  # a chat ending with the user's message
        sidebar.conversationSelected.connect(chat.open_conversation)
        sidebar.newRequested.connect(chat.new_conversation)
        sidebar.renameRequested.connect(chat.rename)
        sidebar.deleteRequested.connect(chat.delete)
        sidebar.searchChanged.connect(chat.set_search)

    def _edit_last(self, chat):
        """Up in the empty message box: edit the last message you sent (if there is one)."""
        mine = [w for w in self.chat_view.message_widgets() if w.role == MessageRole.USER]
        if mine and chat.editing is None:
            chat.edit_message(mine[-1].message_id)

    # --- the chat list ------------------------------------------------------
    def show_conversations(self, rows, current_id, search):
        self.sidebar.set_conversations(rows, current_id, search)

    def select_conversation(self, conv_id):
        if conv_id is None:
            self.sidebar.list.clearSelection()
            self.sidebar.list.setCurrentItem(None)
        else:
            self.sidebar.select(conv_id)

    def set_busy_conversation(self, conv_id):
        self.sidebar.set_generating(conv_id)

    # --- the messages -----------------------------------------------------------
    def show_messages(self, messages):
        self.chat_view.set_messages(messages)

    def clear_messages(self):
        self.chat_view.clear()

    def add_message(
        self, msg_id, role, text, status=MessageStatus.COMPLETE, model_name="", model_id="", versions=(1, 1)
    ):
        self.chat_view.add_message(msg_id, role, text, status, model_name, model_id=model_id, versions=versions)

    def has_message(self, msg_id):
        return self.chat_view.widget_for(msg_id) is not None

    def remove_messages_from(self, msg_id):
        self.chat_view.remove_from(msg_id)

    def replace_messages_from(self, msg_id, messages):
        self.chat_view.replace_from(msg_id, messages)

    def set_message_status(self, msg_id, status):
        widget = self.chat_view.widget_for(msg_id)
        if widget is not None:
            widget.set_status(status)

    def set_message_text(self, msg_id, text):
        widget = self.chat_view.widget_for(msg_id)
        if widget is not None:
            widget.set_text(text)

    def set_live_note(self, msg_id, text):
        widget = self.chat_view.widget_for(msg_id)
        if widget is not None:
            widget.set_live_note(text)

    def begin_stream(self, msg_id):
        widget = self.chat_view.widget_for(msg_id)
        if widget is not None:
            self.chat_view.begin_stream(widget)

    def append_delta(self, text):
        self.chat_view.append_delta(text)

    def end_stream(self, status, stats, error):
        self.chat_view.end_stream(status, stats, error)

    def set_message_actions_enabled(self, on):
        self.chat_view.set_actions_enabled(on)

    def add_approval(self, msg_id, call, server, tool):
        return self.chat_view.add_approval(msg_id, call, server, tool)

    def add_tool_result(self, msg_id, text, stats):
        self.chat_view.add_message(msg_id, "tool", text, MessageStatus.COMPLETE, stats=stats)

    def set_tool_note(self, msg_id, text):
        widget = self.chat_view.widget_for(msg_id)
        if widget is not None and hasattr(widget, "set_note"):
            widget.set_note(text)

    # --- the composer -------------------------------------------------------------
    def composer_text(self):
        return self.composer.text()

    def set_composer_text(self, text):
        self.composer.set_text(text)

    def set_draft(self, text):
        self.composer.set_draft(text)

    def can_queue(self):
        return self.composer.can_queue()

    def set_generating(self, mine, elsewhere, queued):
        self.composer.set_generating(mine or bool(queued), cancels_queued=bool(queued) and not mine)
        self.composer.set_waiting(queued)
        self.composer.set_behind(elsewhere)

    def set_editing(self, on):
        self.composer.set_editing(on)

    def focus_composer(self):
        self.composer.editor.setFocus(Qt.FocusReason.OtherFocusReason)
