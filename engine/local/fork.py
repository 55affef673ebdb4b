"""Fork from Here on the engine thread: the new chat starts with a copy of its parent's cache.

A fork's messages are its parent's up to the fork point, so its prompt begins with ids the
parent's cache already holds. Copying that valid prefix (and the pieces the parent's History
remembers for those messages) makes the fork's first reply cost only what follows it, instead
of a re-read of the whole chat. The copy is exact: it holds exactly the common prefix of the
parent's `token_ids` and what reading the fork ahead would compute (engine/local/background.py).
"""

from typing import TYPE_CHECKING

import mlx.core as mx

from engine.context.conversation import ConversationCache, common_prefix, initial_capacity
from engine.context.kv_cache import ContiguousAttentionKVCache
from engine.context.prompt import History
from engine.errors import ChinwagError
from engine.local.background import ahead_ids
from engine.types import ForkedCache, GenerationParams

if TYPE_CHECKING:
    from engine.local.session import Session


def fork(session: "Session", src_id: str, dst_id: str, messages: list, params: GenerationParams) -> ForkedCache:
    """Give `dst_id` a copy of `src_id`'s cache up to where the fork's prompt leaves it."""
    src = session.caches.get(src_id)
    if src is None or not src.token_ids:
        return ForkedCache(0, 0, "the chat forked has no cache in memory or saved")
    # The parent's pieces for the messages the fork keeps (Spans are never changed in place). A
    # window that slid starts again at 0: the fork's first turn plans its own window.
    spans = src.history.spans[: len(messages)] if src.history.start == 0 else []
    history = History(spans=list(spans))
    try:
        plan, turn = session.plan(messages, params, history)
    except ChinwagError as e:  # past the context, no model: the fork's first turn will say so
        return ForkedCache(0, 0, str(e))
    target = ahead_ids(messages, plan)  # session.plan checked the messages
    n = common_prefix(src.token_ids, target)
    if n == 0:
        return ForkedCache(0, len(target), "the fork's prompt shares nothing with its parent's cache")
    if not all(isinstance(c, ContiguousAttentionKVCache) for c in src.layers):
        return ForkedCache(0, len(target), "this model's cache cannot be cut at the fork (sliding window)")
    capacity = session.kv_initial_capacity or initial_capacity(
        len(turn.prompt_ids) + params.max_tokens, turn.context_limit
    )
    layers = []
    for c in src.layers:
        keys, values = c.get_kv()
        layers.append(ContiguousAttentionKVCache.from_state((keys[..., :n, :], values[..., :n, :]), max(n, capacity)))
    mx.eval([x for c in layers for x in (c.keys, c.values)])  # independent of the parent's arrays from here
    session.caches.put(dst_id, ConversationCache(layers, list(src.token_ids[:n]), history))
    session.caches.enforce(keep=dst_id)
    return ForkedCache(n, len(target))
