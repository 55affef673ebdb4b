"""Work done while nobody waits for it: a draft read while the user types, the next window after a turn.

Runs on the engine thread at low priority: `should_stop` turns true as soon as any other
job is queued (engine/api.py), and the work ends within one prefill chunk. What was
computed stays in the conversation's cache, which always holds exactly its `token_ids`;
the turn that follows reuses it through the longest common prefix.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.context.conversation import ConversationCache
from engine.context.policy import (
    WindowPlan,
    expected_next_tokens,
    history_ids,
    needs_slide,
    plan_next_window,
    reply_room,
)
from engine.context.prompt import History, template_messages
from engine.errors import ChinwagError
from engine.local.generation import TurnInput, prefill_ahead
from engine.types import BackgroundPrefill, GenerationParams, Messages, PrefillProgress

if TYPE_CHECKING:
    from engine.local.session import Session

# Tokens a chat template may add after a reply (end of turn, next role header): a generous bound.
TEMPLATE_SLACK = 32


def _run(
    session: "Session",
    conv_id: str,
    conv: ConversationCache | None,
    history: History,
    turn: TurnInput | None,
    target: list[int],
    params: GenerationParams,
    should_stop: Callable[[], bool],
    progress: Callable[[PrefillProgress], None] | None = None,
    history_ids: int = 0,
) -> BackgroundPrefill:
    if conv is None:
        assert turn is not None  # a new chat (prefill_draft) always brings its turn
        conv = session.new_cache(conv_id, history, turn, params, target)
    report = None
    if progress is not None:
        limit = session.context_limit(params)

        def report(done: int, total: int) -> None:
            earlier = max(0, history_ids - (len(target) - total))  # the earlier messages' ids still to read
            progress(PrefillProgress(done, total, len(target), limit, earlier))

    marks = turn.marks if turn is not None else ()
    reused, done, finished = prefill_ahead(session.model, conv, target, should_stop, report, marks)
    session.caches.enforce(keep=conv_id)
    return BackgroundPrefill(len(target), reused, done, finished, "" if finished else "preempted")


def ahead_ids(messages: list[dict[str, Any]], plan: WindowPlan) -> list[int]:
    """What reading ahead computes of a prompt, all of it a prefix of the next turn's prompt.

    Ending with the user's message (a draft, a fork): all but its last token, which the turn
    computes itself for its logits (so it reuses all of this without trimming, which some caches
    cannot do). Ending with a reply (a changed system prompt or model, another version): the
    messages' own pieces, since the next prompt goes on with a user message, not this
    prompt's generation prompt.
    """
    if messages[-1]["role"] == "assistant":
        return plan.prompt_ids[: sum(plan.prompt.lengths)]
    return plan.prompt_ids[:-1]


def prefill_draft(
    session: "Session",
    conv_id: str,
    messages: Messages,
    params: GenerationParams,
    should_stop: Callable[[], bool],
    progress: Callable[[PrefillProgress], None] | None = None,
) -> BackgroundPrefill:
    """Read the prompt up to the last message ahead (`ahead_ids`): an unsent draft, or the chat
    as it stands after its system prompt, model or branch changed.

    `progress` gets PrefillProgress events on the engine thread. The window's start is not
    committed: the turn plans it again from the same messages.
    """
    try:
        messages = template_messages(messages)
        conv, history, plan, turn = session.turn_input(conv_id, messages, params)
    except ChinwagError as e:  # a draft past the context, no model: sending will say so
        return BackgroundPrefill(0, 0, 0, False, str(e))
    target = ahead_ids(messages, plan)  # turn_input checked the messages
    earlier = len(target) if messages[-1]["role"] == "assistant" else history_ids(plan, messages)
    return _run(session, conv_id, conv, history, turn, target, params, should_stop, progress, earlier)


def next_window(session: "Session", conv_id: str, messages: Messages, params: GenerationParams) -> WindowPlan | None:
    """The WindowPlan the next turn will need if it must slide (engine/context/policy.py), else None.

    `messages` end with the reply just written.
    """
    conv = session.caches.get(conv_id)
    if conv is None:
        return None
    limit = session.context_limit(params)
    room = reply_room(params.max_tokens, limit)
    # The cache holds the next prompt's start but for the template's few tokens after the reply:
    # skip rendering the chat while far from the limit.
    held = len(conv.token_ids) + TEMPLATE_SLACK
    if not needs_slide(held, expected_next_tokens(template_messages(messages), conv.history), limit, room):
        return None
    return plan_next_window(session.tokenizer, template_messages(messages), conv.history, limit, room, params.low_water)


def prepare_next_window(
    session: "Session", conv_id: str, messages: Messages, params: GenerationParams, should_stop: Callable[[], bool]
) -> BackgroundPrefill:
    """After a turn near the context limit: slide and re-prefill now, not on the user's clock.

    The cache gives up the history that the next turn would drop anyway and holds the
    window that turn will extend; the window's new start is committed, so the next turn
    keeps it.
    """
    if should_stop():  # the next turn is already here: it will fit the window itself
        return BackgroundPrefill(0, 0, 0, False, "preempted")
    try:
        plan = next_window(session, conv_id, messages, params)
    except ChinwagError as e:
        return BackgroundPrefill(0, 0, 0, False, str(e))
    if plan is None or not plan.prompt_ids:
        return BackgroundPrefill(0, 0, 0, True, "the next turn fits")
    conv = session.caches.get(conv_id)
    assert conv is not None  # next_window plans only from a cache it found
    conv.history.start = plan.start
    return _run(session, conv_id, conv, conv.history, None, plan.prompt_ids, params, should_stop)


def adopt(session: "Session", draft_id: str, conv_id: str) -> bool:
    """Give the cache read ahead under `draft_id` (a new chat's draft) to the chat created for it.
    The draft is over either way: one saved under another model (read ahead before a switch) is
    erased, or the chat's documents would outlive its deletion there."""
    cache = session.caches.get(draft_id)
    session.caches.forget(draft_id)
    if cache is None:
        return False
    session.caches.put(conv_id, cache)
    return True
