"""Fork from Here on the engine thread: the new chat starts with a copy of its parent's cache.

A fork's messages are its parent's up to the fork point, so its prompt begins with ids the
parent's cache already holds. Copying that valid prefix (and the pieces the parent's History
remembers for those messages) makes the fork's first reply cost only what follows it, instead
of a re-read of the whole chat. The copy is exact: it holds exactly the common prefix of the
parent's `token_ids` and what reading the fork ahead would compute (engine/local/background.py).
"""

from typing import TYPE_CHECKING, Any

from engine.context.conversation import common_prefix
from engine.context.prompt import History, template_messages
from engine.errors import ChinwagError
from engine.local.background import ahead_ids
from engine.types import ForkedCache, GenerationParams

if TYPE_CHECKING:
    from engine.local.session import Session


def fork(session: "Session", src_id: str, dst_id: str, messages: list[Any], params: GenerationParams) -> ForkedCache:
    """Give `dst_id` a copy of `src_id`'s cache up to where the fork's prompt leaves it."""
    src = session.caches.get(src_id)
    if src is None or not src.token_ids:
        return ForkedCache(0, 0, "the chat forked has no cache in memory or saved")
    # The parent's pieces for the messages the fork keeps (Spans are never changed in place). A
    # window that slid starts again at 0: the fork's first turn plans its own window.
    spans = src.history.spans[: len(messages)] if src.history.start == 0 else []
    history = History(spans=list(spans))
    try:
        messages = template_messages(messages)
        plan, turn = session.plan(messages, params, history)
    except ChinwagError as e:  # past the context, no model: the fork's first turn will say so
        return ForkedCache(0, 0, str(e))
    target = ahead_ids(messages, plan)  # session.plan checked the messages
    n = common_prefix(src.token_ids, target)
    if n == 0:
        return ForkedCache(0, len(target), "the fork's prompt shares nothing with its parent's cache")
    dst = src.fork(n, history)
    if not dst.token_ids:
        return ForkedCache(0, len(target), "no checkpoint of this model's state lies before the fork")
    session.caches.put(dst_id, dst)
    session.caches.enforce(keep=dst_id)
    return ForkedCache(len(dst.token_ids), len(target))
