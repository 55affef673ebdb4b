"""Messages -> prompt token ids, reusing the ids the model generated for its own replies."""

import re

from engine.errors import ChinwagError, ContextOverflowError

ROLES = ("system", "user", "assistant")
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_messages(messages) -> list[dict]:
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ChinwagError("the message list is empty: a chat needs at least one message")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ChinwagError(f"message {i} must be {{'role': system|user|assistant, 'content': str}}, got {m!r:.80}")
        # A lone surrogate (JSON "\\ud800", undecodable terminal bytes) cannot be tokenized.
        clean.append({"role": m["role"], "content": _SURROGATE.sub("\ufffd", m["content"])})
    if all(m["role"] == "system" for m in clean):
        raise ChinwagError("the message list has no user message")
    return clean


def render(tokenizer, messages) -> str:
    if getattr(tokenizer, "chat_template", None):
        from jinja2 import TemplateError  # installed with transformers, which mlx-lm needs

        try:
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except (TemplateError, ValueError, TypeError) as e:  # roles out of order, no system prompt...
            raise ChinwagError(f"the model's chat template rejected the messages: {e}") from e
    # No template: a plain transcript the model can continue.
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
    return text + "assistant:"


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def encode(tokenizer, messages, replies: dict) -> list[int]:
    """Tokenize the rendered template; splice in remembered ids for known replies.

    Re-tokenizing a reply's text can give other ids than the ones generated, which
    would break the cache's prefix at every turn.
    """
    text = render(tokenizer, messages)
    eos = set(getattr(tokenizer, "eos_token_ids", ()) or ())
    ids, cursor = [], 0
    for m in messages:
        known = replies.get(m["content"]) if m["role"] == "assistant" else None
        if not known:
            continue
        pos = text.find(m["content"], cursor)
        if pos < 0:
            continue
        reply = list(known)
        while reply and reply[-1] in eos:  # the template writes the end-of-turn text itself
            reply.pop()
        ids += _encode(tokenizer, text[cursor:pos]) + reply
        cursor = pos + len(m["content"])
    return ids + _encode(tokenizer, text[cursor:])


def fit(tokenizer, messages, replies: dict, limit: int) -> tuple[list[int], int]:
    """Prompt ids with room for one new token; drops the oldest turns if needed.

    Returns (ids, number of messages dropped). Keeps system messages and the last message.
    """
    messages = list(messages)
    dropped = 0
    ids = encode(tokenizer, messages, replies)
    while len(ids) + 1 > limit:
        first = next((i for i, m in enumerate(messages[:-1]) if m["role"] != "system"), None)
        if first is None:
            raise ContextOverflowError(
                f"the prompt is {len(ids)} tokens but the context limit is {limit}: shorten the message"
                " or the system prompt, or raise the context cap"
            )
        # Drop a whole turn (user + the reply to it) so roles keep alternating.
        end = first + 1
        while end < len(messages) - 1 and messages[end]["role"] == "assistant":
            end += 1
        dropped += end - first
        del messages[first:end]
        ids = encode(tokenizer, messages, replies)
    return ids, dropped
