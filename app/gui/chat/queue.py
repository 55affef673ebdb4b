"""Messages that wait for their reply: sent while the model loads, or while a reply is being written.

The window writes one reply at a time (one engine thread). A message sent meanwhile, in any chat
(the one writing too), is saved like any other, shown "Queued", and its reply starts when the
model is ready or the reply being written ends (finished, stopped or failed), in the order the
messages were sent. A chat has at most one queued message: its last one.

Nothing of a queued message is half-written: it is a stored user message whose reply does not
exist yet. Cancelled (Stop, editing it, switching its version, deleting the chat) or left when the
window closes, it stays a message without a reply, and the composer offers Generate Reply for it;
nothing is sent behind the user's back on the next start.
"""

from dataclasses import dataclass

from app.core.store import MessageRole
from engine.errors import ChinwagError


@dataclass(frozen=True)
class Queued:
    conv_id: str
    msg_id: int  # the user message that waits for its reply


class SendQueue:
    """The queued messages, oldest first; owned by the ChatController."""

    def __init__(self):
        self._items: list[Queued] = []

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, conv_id) -> bool:
        return self.get(conv_id) is not None

    def add(self, conv_id: str, msg_id: int) -> Queued:
        self.cancel(conv_id)  # one per chat
        item = Queued(conv_id, msg_id)
        self._items.append(item)
        return item

    def get(self, conv_id) -> Queued | None:
        return next((q for q in self._items if q.conv_id == conv_id), None)

    def cancel(self, conv_id) -> Queued | None:
        """Take the chat's queued message off the queue (it stays, unanswered); None: it had none."""
        item = self.get(conv_id)
        if item is not None:
            self._items.remove(item)
        return item

    def clear(self) -> list[Queued]:
        items, self._items = self._items, []
        return items

    def take_next(self, store) -> Queued | None:
        """The oldest message still waiting as its chat's last message; entries that no longer are
        (the chat was deleted, the message edited or its branch switched away) are dropped."""
        while self._items:
            item = self._items.pop(0)
            if still_waiting(store, item):
                return item
        return None


def still_waiting(store, item: Queued) -> bool:
    """The queued message is still its chat's last shown message, a user message without a reply."""
    try:
        messages = store.get_conversation(item.conv_id).messages
    except ChinwagError:  # deleted meanwhile, or unreadable: nothing to send
        return False
    shown = [m for m in messages if m.role != MessageRole.SYSTEM]
    return bool(shown) and shown[-1].id == item.msg_id and shown[-1].role == MessageRole.USER


def composer_notes(writing: bool, here: bool, queued: bool, model_ready: bool) -> tuple[str, str]:
    """What the open chat's composer says: (why a message sent now is queued, why nothing more is
    sent here until the queued one goes); "" when it does not apply.

    writing: a reply is being written; here: in the open chat; queued: the open chat's message waits.
    """
    if queued and here:
        return "", "Your next message is queued for when this reply ends; Stop ends the reply and leaves it unsent."
    if queued:
        when = "the reply being written ends" if model_ready else "the model is ready"
        return "", f"Your message is queued: it is sent when {when}. Stop (Esc) cancels it."
    if writing and not here:
        return "Another chat is writing its reply: a message sent now is queued and sent when it ends.", ""
    return "", ""
