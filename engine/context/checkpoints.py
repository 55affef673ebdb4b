"""A conversation's checkpoints: copies of the caches that cannot trim, taken at message boundaries.

Recurrent state (and a sliding window once it has dropped its oldest positions) cannot go back
a token. A checkpoint holds, at one position, a copy of every such leaf (engine/context/kinds.py):
going back restores the latest checkpoint at or before the first differing token, trims the
other layers to it, and the turn prefills the rest. Taken before each message of a prompt, before
its last token (a regenerate), after each turn and at the end of a read-ahead; at most
MAX_CHECKPOINTS per conversation: the first (after the system prompt: a context cap's slide goes
back to it), the newest, and older ones spaced out (the most crowded goes first). Engine thread only.
"""

from dataclasses import dataclass
from typing import Any

MAX_CHECKPOINTS = 8
KEEP_NEWEST = 4  # the last turn's: before its message, before its last prompt token, after it


@dataclass(frozen=True)
class Checkpoint:
    position: int  # tokens held when it was taken
    states: tuple[Any, ...]  # kinds.save() of each leaf that needs one, in leaf order
    nbytes: int


@dataclass
class Checkpoints:
    items: list[Checkpoint]

    def __init__(self) -> None:
        self.items = []

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.items)

    def positions(self) -> list[int]:
        return [c.position for c in self.items]

    def add(self, checkpoint: Checkpoint) -> None:
        self.items = [c for c in self.items if c.position != checkpoint.position]
        self.items.append(checkpoint)
        self.items.sort(key=lambda c: c.position)
        while len(self.items) > MAX_CHECKPOINTS:
            del self.items[self._crowded()]

    def _crowded(self) -> int:
        """The older checkpoint whose loss leaves the smallest gap: the rest stay spaced out (the
        first, after the system prompt, and the KEEP_NEWEST newest always stay)."""
        at = [c.position for c in self.items]
        older = range(1, len(at) - KEEP_NEWEST)
        return min(older, key=lambda i: (at[i + 1] - at[i - 1], i))

    def at_or_before(self, position: int) -> Checkpoint | None:
        found = [c for c in self.items if c.position <= position]
        return found[-1] if found else None

    def drop_after(self, position: int) -> None:
        """Checkpoints past `position` were of ids the cache no longer holds."""
        self.items = [c for c in self.items if c.position <= position]

    def clear(self) -> None:
        self.items = []
