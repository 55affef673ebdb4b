"""Unsent text, per chat, kept in the store's state table so it survives a restart."""

from typing import TYPE_CHECKING

from app.core.chats import UNSAVED, chat_key
from engine.errors import ChinwagError

if TYPE_CHECKING:
    from app.core.store import Store

DRAFTS_KEY = "drafts"
NEW_CHAT = UNSAVED  # the key of the blank chat's draft (it has no id until its first message)


class Drafts:
    def __init__(self, store: "Store") -> None:
        self.store = store
        try:
            saved = store.get_state(DRAFTS_KEY, {})
        except ChinwagError:
            saved = {}
        self._drafts = {str(k): str(v) for k, v in saved.items()} if isinstance(saved, dict) else {}

    def get(self, conv_id: str | None) -> str:
        return self._drafts.get(chat_key(conv_id), "")

    def put(self, conv_id: str | None, text: str) -> None:
        key = chat_key(conv_id)
        if text.strip():
            if self._drafts.get(key) == text:
                return
            self._drafts[key] = text
        elif self._drafts.pop(key, None) is None:
            return
        self._save()

    def _save(self) -> None:
        if self.store.read_only:
            return
        try:
            self.store.set_state(DRAFTS_KEY, self._drafts)
        except ChinwagError:
            pass  # a draft is a convenience: losing one is not worth an error banner
