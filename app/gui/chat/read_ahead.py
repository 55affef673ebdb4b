"""Reading a changed chat ahead, so the next Enter pays only for the new message.

When a chat's history changes under it (new instructions in Chat Settings, another model, another
version of a message) the engine must read the chat again: exactness needs it. ReadAhead starts
that read in the background the moment the change is made (engine.prefill, low priority), and says
what it reads ("Re-reading the chat for the new instructions… 40%"). A fork gets a copy of its
parent's cache up to the fork point (engine.fork) instead of a re-read at all.

It reads the chat from the store, as the reply will (app/core/settings.py engine_messages), and
owns nothing but its label.
"""

import asyncio

from PySide6.QtCore import QObject, Signal

from app.core.settings import PREFILL_KEY, effective, engine_messages, load_defaults, params_from_settings
from engine.errors import ChinwagError

INSTRUCTIONS, MODEL, VERSION, FORK = "instructions", "model", "version", "fork"
# What the status bar says while a changed chat is read again, by what changed.
REREAD_LABELS = {
    INSTRUCTIONS: "Re-reading the chat for the new instructions…",
    MODEL: "Re-reading the chat for the new model…",
    VERSION: "Re-reading the chat from this version…",
    FORK: "Reading the forked chat…",  # its parent's cache was not there to copy (a restart, an eviction)
}
# A draft's read ahead that finds the chat itself to read again (after a change it preempted).
REREAD_LABEL = "Re-reading the chat…"


def reread_text(progress, why: str = "") -> str:
    """'Re-reading the chat for the new instructions… 40%' from a PrefillProgress."""
    return f"{REREAD_LABELS.get(why, REREAD_LABEL)} {int(100 * progress.fraction)}%"


class ReadAhead(QObject):
    labelChanged = Signal(str)  # what is being read ahead ("Re-reading the chat… 40%"); "" when done

    def __init__(self, store, bridge, chat, parent=None):
        super().__init__(parent)
        self.store, self.bridge, self.chat = store, bridge, chat
        self.label = ""
        self._why: dict = {}  # conv id -> what changed, while its re-read runs
        self.tasks: set[asyncio.Task] = set()  # qasync keeps no reference to tasks
        bridge.readingAhead.connect(self._on_progress)
        bridge.readAheadEnded.connect(self._on_ended)
        bridge.modelLoaded.connect(lambda _info: self.reread(chat.conv_id, MODEL))
        chat.forked.connect(self.fork)
        chat.versionSwitched.connect(lambda conv_id: self.reread(conv_id, VERSION))

    def _request(self, conv_id):
        """(messages, params) of the chat as its next reply will see it; None if it should not be read."""
        try:
            conv = self.store.get_conversation(conv_id)
            values = effective(conv.settings, load_defaults(self.store))
            params = params_from_settings(values)
        except ChinwagError:  # the reply will say what is wrong; reading ahead stays quiet
            return None
        if not values.get(PREFILL_KEY, True):
            return None
        messages = engine_messages(conv.messages, str(values.get("system_prompt") or ""))
        if not any(m["role"] == "user" for m in messages):
            return None
        return messages, params

    def _keep(self, task):
        if task is not None:
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return task

    def reread(self, conv_id, why: str) -> asyncio.Task | None:
        """The chat changed (`why`): read it again now, in the background, not on the next Enter."""
        if conv_id is None or self.chat.gen is not None or self.bridge.current_model is None:
            return None
        request = self._request(conv_id)
        if request is None:
            return None
        self._why[conv_id] = why
        task = self._keep(self.bridge.prefill(conv_id, *request))
        if task is None:
            self._why.pop(conv_id, None)
        return task

    def fork(self, source_id, conv_id) -> asyncio.Task | None:
        """A fork was made: it starts with its parent's cache up to the fork point, and what the
        copy could not give (no parent cache in memory or saved) is read ahead at once."""
        request = self._request(conv_id)
        if request is None:
            return None
        task = self.bridge.fork(source_id, conv_id, *request)
        if task is not None:
            task.add_done_callback(lambda done: self._after_fork(conv_id, done))
        return self._keep(task)

    def _after_fork(self, conv_id, task: asyncio.Task):
        copied = None if task.cancelled() or task.exception() is not None else task.result()
        # Nothing copied (the engine then does not measure the fork's prompt: 0 of 0), or only part
        if copied is None or not copied.copied_tokens or copied.copied_tokens < copied.prompt_tokens:
            self.reread(conv_id, FORK)

    def _on_progress(self, conv_id, progress):
        why = self._why.get(conv_id)
        if why is None and not progress.rereading:  # a draft read while typing: quick, and silent
            return
        self._show(reread_text(progress, why or ""))

    def _on_ended(self, conv_id):
        self._why.pop(conv_id, None)
        self._show("")

    def _show(self, text: str):
        if text != self.label:
            self.label = text
            self.labelChanged.emit(text)
