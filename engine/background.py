"""Work done while nobody waits for it: a draft read while the user types, the next window after a turn.

Runs on the engine thread at low priority: `should_stop` turns true as soon as any other
job is queued (engine/api.py), and the work ends within one prefill chunk. What was
computed stays in the conversation's cache, which always holds exactly its `token_ids`;
the turn that follows reuses it through the longest common prefix.
"""

from engine.conversation import common_prefix
from engine.errors import ChinwagError
from engine.generation import prefill_ahead
from engine.types import BackgroundPrefill, GenerationParams

# Two stand-ins for the next user message: the prompt ids they share do not depend on it.
_NEXT_MESSAGES = ("", "?")


def _run(session, conv_id, conv, turn, target, params, should_stop) -> BackgroundPrefill:
    if conv is None:
        conv = session.new_cache(conv_id, turn, params)
    reused, done, finished = prefill_ahead(session.model, conv, target, should_stop)
    session.caches.enforce(keep=conv_id)
    return BackgroundPrefill(len(target), reused, done, finished, "" if finished else "preempted")


def prefill_draft(session, conv_id: str, messages, params: GenerationParams, should_stop) -> BackgroundPrefill:
    """Compute the prompt whose last user message is the unsent draft, all but its last token.

    The turn computes that last token itself (it needs its logits), so it reuses all of
    this without trimming, which some caches cannot do.
    """
    try:
        conv, turn = session.turn_input(conv_id, messages, params)
    except ChinwagError as e:  # a draft past the context, no model: sending will say so
        return BackgroundPrefill(0, 0, 0, False, str(e))
    return _run(session, conv_id, conv, turn, turn.prompt_ids[:-1], params, should_stop)


def next_window(session, conv_id: str, messages, params: GenerationParams):
    """(cache, TurnInput, the ids every next turn starts with) if the next turn must drop old
    turns to fit; None while it fits. The window policy is the turn's own (Session.turn_input)."""
    conv, turn = None, None
    prompts = []
    for text in _NEXT_MESSAGES:
        conv, turn = session.turn_input(conv_id, list(messages) + [{"role": "user", "content": text}], params)
        if not turn.dropped_messages:
            return None
        prompts.append(turn.prompt_ids)
    return conv, turn, prompts[0][: common_prefix(*prompts)]


def prepare_next_window(session, conv_id: str, messages, params: GenerationParams, should_stop) -> BackgroundPrefill:
    """After a turn near the context limit: drop and re-prefill now, not on the user's clock.

    `messages` end with the reply just written. The cache gives up the history that the
    next turn would drop anyway, and holds the window that turn will extend.
    """
    if should_stop():  # the next turn is already here: it will fit the window itself
        return BackgroundPrefill(0, 0, 0, False, "preempted")
    if session.caches.get(conv_id) is None:
        return BackgroundPrefill(0, 0, 0, False, "no cache for this conversation")
    try:
        found = next_window(session, conv_id, messages, params)
    except ChinwagError as e:
        return BackgroundPrefill(0, 0, 0, False, str(e))
    if found is None:
        return BackgroundPrefill(0, 0, 0, True, "the next turn fits")
    conv, turn, target = found
    return _run(session, conv_id, conv, turn, target, params, should_stop)
