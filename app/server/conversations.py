"""Which engine conversation a request continues, without the client naming one.

The map holds, for each conversation the server made, a digest of every message it has seen
(the request's messages and the reply it sent). A request whose messages begin with all of a
conversation's messages continues it (the longest such one), so its cache holds nothing the
new prompt does not contain; the engine then reuses the exact token-id prefix. Anything else
starts a new conversation, which the engine starts from the longest token-id prefix any cache
holds (engine/context/memory.py `shared`): a tool call sent back with another id or
re-serialized arguments costs only the tokens from where it differs. Only digests are kept (persisted in <data>/server_conversations.json),
never the text: the caches themselves are the engine's, saved under the same ids.
"""

import hashlib
import json
import logging
import uuid
from collections import OrderedDict
from collections.abc import Container, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine import paths
from engine.atomic import write_atomic
from engine.errors import ChinwagError
from engine.types import ChatMessage

log = logging.getLogger("chinwag.server")

FILE_NAME = "server_conversations.json"
MAX_CONVERSATIONS = 256  # the least recently used past this are forgotten (caches too)
ID_PREFIX = "api-"  # never a store id (a UUID): the window's chats and the server's never share a cache
_VERSION = 1


def digest(message: ChatMessage) -> str:
    """A message's role and text (tool calls are in the text by then: ChatService.written_back)."""
    text = json.dumps([str(message.role), message.content], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass
class Entry:
    model: str  # the model id the conversation's cache belongs to
    digests: list[str]


class ConversationMap:
    def __init__(self, path: Path | None = None, limit: int = MAX_CONVERSATIONS) -> None:
        self.path = path or paths.data_dir() / FILE_NAME
        self.limit = limit
        self.entries: OrderedDict[str, Entry] = OrderedDict()

    def route(self, model: str, messages: Sequence[ChatMessage], pin: str = "", busy: Container[str] = ()) -> str:
        """The conversation id for this request: pinned, the longest known prefix, or a new one.
        A `busy` conversation (generating for another request now) is not continued: a request
        that shares its messages starts its own (from the shared prefix, engine/context/prefixes.py)."""
        if pin:
            return ID_PREFIX + "pin-" + hashlib.sha256(f"{model}\0{pin}".encode()).hexdigest()[:24]
        wanted = [digest(m) for m in messages]
        best, best_len = "", -1
        for conv_id, entry in self.entries.items():
            n = len(entry.digests)
            if conv_id in busy:
                continue
            if entry.model == model and n > best_len and n <= len(wanted) and wanted[:n] == entry.digests:
                best, best_len = conv_id, n
        return best or ID_PREFIX + uuid.uuid4().hex[:24]

    def record(self, conv_id: str, model: str, messages: Sequence[ChatMessage]) -> list[str]:
        """Remember what conv_id's cache was computed from; returns the ids forgotten to stay in the limit."""
        self.entries[conv_id] = Entry(model, [digest(m) for m in messages])
        self.entries.move_to_end(conv_id)
        dropped = []
        while len(self.entries) > self.limit:
            dropped.append(self.entries.popitem(last=False)[0])
        return dropped

    def load(self) -> None:
        """Read the map a previous run saved; a damaged file is logged and ignored (caches re-prefill)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("version") != _VERSION:
                raise ValueError("not a conversation map of this version")
            for conv_id, item in data["conversations"].items():
                model, digests = item["model"], item["digests"]
                if not (
                    isinstance(conv_id, str)
                    and conv_id.startswith(ID_PREFIX)
                    and isinstance(model, str)
                    and isinstance(digests, list)
                    and all(isinstance(d, str) for d in digests)
                ):
                    raise ValueError(f"bad entry {conv_id!r:.40}")
                self.entries[conv_id] = Entry(model, digests)
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("ignoring %s: %s", self.path, e)
            self.entries.clear()

    def dumps(self) -> str:
        """The map as saved: taken on the event loop, which alone changes it, then written off it."""
        data = {
            "version": _VERSION,
            "conversations": {cid: {"model": e.model, "digests": list(e.digests)} for cid, e in self.entries.items()},
        }
        return json.dumps(data)

    def save(self, text: str | None = None) -> None:
        """Write the map (or `text`, a `dumps` taken earlier)."""
        try:
            write_atomic(self.path, self.dumps() if text is None else text, mode=0o600)
        except ChinwagError as e:  # costs a re-prefill after a restart, never a failed request
            log.warning("conversation map not saved: %s", e)
