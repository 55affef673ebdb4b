"""The context window policy: which messages a turn's prompt keeps, and room for the reply.

A chat that outgrows its limit drops its oldest turns in one step, down to a low-water
mark, and then grows again: the following turns extend the cache instead of re-prefilling
the whole window on every turn. Re-prefilling a fraction f of the window once every
(1 - f) window's worth of new tokens costs about 1 / (1 - f) times the new tokens per turn.
"""

from dataclasses import dataclass
from typing import Any

from engine.context.prompt import History, Prompt, build
from engine.errors import ContextOverflowError
from engine.types import DEFAULT_LOW_WATER  # the one source of the default (a GenerationParams field)

# The reply's room is max tokens, but never more than this share of the context.
REPLY_SHARE = 0.25


def reply_room(max_tokens: int, limit: int) -> int:
    """Tokens reserved for the reply before generating: max tokens, bounded by a share of the limit."""
    return max(1, min(max_tokens, int(limit * REPLY_SHARE)))


@dataclass
class WindowPlan:
    prompt_ids: list[int]
    start: int  # position of the first message kept after the leading system messages
    dropped: int  # messages left out of the window
    slid: bool  # this plan moved the window's start
    prompt: Prompt  # its pieces and tail (for recording the reply)


def history_ids(plan: WindowPlan, messages: list[dict[str, Any]]) -> int:
    """The ids of the messages before the last one: what a changed history makes a turn read again.

    0 when those are system messages only: a new chat's first read is no re-read.
    """
    earlier = plan.prompt.keep[:-1]
    if all(messages[i]["role"] == "system" for i in earlier):
        return 0
    return sum(plan.prompt.lengths[: len(earlier)])


def starts(messages: list[dict[str, Any]]) -> list[int]:
    """Where a window may start: 0 (everything), or at a user message (roles keep alternating)."""
    last = len(messages) - 1
    first = next((i for i, m in enumerate(messages) if m["role"] != "system"), last)
    return [0] + [i for i in range(first + 1, last + 1) if messages[i]["role"] == "user"]


def kept(messages: list[dict[str, Any]], start: int) -> list[int]:
    """Positions in the window starting at `start`: the system messages before it, then the rest."""
    return [i for i in range(start) if messages[i]["role"] == "system"] + list(range(start, len(messages)))


def plan_window(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    history: History,
    limit: int,
    room: int,
    low_water: float | None = None,
) -> WindowPlan:
    """The prompt ids for `messages` and the number dropped, given the window the cache holds.

    Contract: the window keeps starting at `history.start` while the prompt plus `room`
    fits in `limit` (so the prompt extends the cached ids); otherwise it slides forward,
    by whole turns, to the first start whose prompt is at most `low_water` of
    (limit - room), keeping system messages and the last message. If no start leaves the
    room, the latest start is used when the prompt alone fits (the reply gets what is
    left); else ContextOverflowError. Pure: the caller commits `plan.start` to
    `history.start` once it uses the plan. Each message is tokenized at most once
    (pieces are remembered in `history`) and only the window is rendered: linear time.
    """
    low_water = DEFAULT_LOW_WATER if low_water is None else low_water
    options = starts(messages)
    current = max(s for s in options if s <= history.start)
    budget = max(1, limit - room)
    # Every piece holds a token at least: a window of more messages than `budget` cannot fit, so a
    # chat far past its limit never renders or tokenizes the turns it would drop anyway.
    floor = next((s for s in options if len(messages) - s <= budget), options[-1])
    base = max(current, floor)
    prompt = build(tokenizer, messages, kept(messages, base), history)
    if current >= floor:
        if len(prompt.ids) + room <= limit:
            return _plan(messages, current, prompt, False)
        later = [s for s in options if s > current]
    else:
        later = [s for s in options if s >= floor]
    target = low_water * budget
    first = _first_to_try(messages, prompt, base, later, target)
    return _slide(tokenizer, messages, history, later[first:], (current, prompt), limit, room, target)


def _first_to_try(messages: list[dict[str, Any]], prompt: Prompt, base: int, later: list[int], target: float) -> int:
    """Which of the `later` starts to render first: the first whose window, estimated from the piece
    lengths of `prompt` (the window from `base`) with no render per candidate, is at most `target`;
    else the last. The first when `prompt`'s pieces are not known one by one."""
    if not prompt.complete:
        return 0
    size, previous = len(prompt.ids), base
    positions = {p: j for j, p in enumerate(prompt.keep)}
    for k, s in enumerate(later):
        size -= sum(prompt.lengths[positions[p]] for p in range(previous, s) if messages[p]["role"] != "system")
        previous = s
        if size <= target:
            return k
    return max(0, len(later) - 1)


def _slide(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    history: History,
    candidates: list[int],
    current: tuple[int, Prompt],
    limit: int,
    room: int,
    target: float,
) -> WindowPlan:
    """The first of the candidate starts whose window is at most `target`; else the first that leaves
    the reply its room, else the last one rendered (`current`, the window as it stands, when none
    was), if the prompt alone fits; else ContextOverflowError."""
    best: tuple[int, Prompt] | None = None
    fits: tuple[int, Prompt] | None = None
    for s in candidates:
        candidate = build(tokenizer, messages, kept(messages, s), history)
        best = (s, candidate)
        if len(candidate.ids) <= target:
            return _plan(messages, s, candidate, True)
        if fits is None and len(candidate.ids) + room <= limit:
            fits = best
    s, candidate = fits or best or current
    if len(candidate.ids) + 1 <= limit:
        return _plan(messages, s, candidate, s != current[0])
    raise ContextOverflowError(
        f"the prompt is {len(candidate.ids)} tokens but the context limit is {limit}: shorten the message"
        " or the system prompt, or raise the context cap"
    )


def _plan(messages: list[dict[str, Any]], start: int, prompt: Prompt, slid: bool) -> WindowPlan:
    dropped = sum(1 for i in range(start) if messages[i]["role"] != "system")
    return WindowPlan(prompt.ids, start, dropped, slid, prompt)


def needs_slide(held_tokens: int, next_tokens: int, limit: int, room: int) -> bool:
    """Would a next turn of about `next_tokens` new prompt tokens, after `held_tokens`, not fit?"""
    return held_tokens + next_tokens + room > limit


def expected_next_tokens(messages: list[dict[str, Any]], history: History, recent: int = 4) -> int:
    """A guess at the next user message's piece: the longest of the last few user pieces."""
    sizes = [len(s.ids) for s in history.spans[-2 * recent :] if s is not None and s.role == "user"]
    return max(sizes, default=0)


def plan_next_window(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    history: History,
    limit: int,
    room: int,
    low_water: float | None = None,
    next_tokens: int | None = None,
) -> WindowPlan | None:
    """For idle-time work after a turn: the window the next turn will need, or None if no slide.

    `messages` end with the reply just generated. Returns a plan whose `prompt_ids` are the
    ids to prefill ahead (the slid window up to where the next user message goes) and whose
    `start` the caller commits to `history.start`; the next `plan_window` then keeps it.
    """
    if next_tokens is None:
        next_tokens = expected_next_tokens(messages, history)
    held = len(
        build(tokenizer, messages, kept(messages, max(s for s in starts(messages) if s <= history.start)), history).ids
    )
    if not needs_slide(held, next_tokens, limit, room):
        return None
    draft = list(messages) + [{"role": "user", "content": "x" * max(1, next_tokens)}]
    plan = plan_window(tokenizer, draft, history, limit, room, low_water)
    if not plan.slid:
        return None
    ahead = plan.prompt.ids[: sum(plan.prompt.lengths[:-1])] if plan.prompt.complete else []
    return WindowPlan(ahead, plan.start, plan.dropped, True, plan.prompt)
