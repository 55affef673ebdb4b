"""Messages -> prompt token ids, from the exact ids of each message as the model saw it.

The rendered chat template is cut into one piece per message (the template text before
its content, then the content) and a tail (the end of the last turn and the generation
prompt). Each piece is tokenized once and remembered by the message's position in the
conversation (`History`), never looked up by its text; a reply's piece holds the ids the
model generated. So a follow-up turn's prompt starts with exactly the ids the cache holds.
"""

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.errors import ChinwagError

# "tool": a tool's result. An assistant message that called tools carries the text the model
# generated (its tool-call markup included) as its content: its piece is the generated ids.
ROLES = ("system", "user", "assistant", "tool")
# Private-use characters stand in for each message's content to find where the template puts it.
_MARK = "\ue000{}\ue001"
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_messages(messages: list[dict]) -> list[dict]:
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ChinwagError("the message list is empty: a chat needs at least one message")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ChinwagError(
                f"message {i} must be {{'role': system|user|assistant|tool, 'content': str}}, got {m!r:.80}"
            )
        # A lone surrogate (JSON "\\ud800", undecodable terminal bytes) cannot be tokenized.
        clean.append({"role": m["role"], "content": _SURROGATE.sub("\ufffd", m["content"])})
    if all(m["role"] == "system" for m in clean):
        raise ChinwagError("the message list has no user message")
    return clean


def render(tokenizer: Any, messages: list[dict]) -> str:
    if getattr(tokenizer, "chat_template", None):
        from jinja2 import TemplateError  # installed with transformers, which mlx-lm needs

        try:
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except (TemplateError, ValueError, TypeError) as e:  # roles out of order, no system prompt...
            raise ChinwagError(f"the model's chat template rejected the messages: {e}") from e
    # No template: a plain transcript the model can continue.
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
    return text + "assistant:"


class WithTools:
    """A tokenizer whose chat template is given `tools` (OpenAI function definitions) on every render."""

    def __init__(self, tokenizer: Any, tools: Sequence[dict]) -> None:
        self._tokenizer = tokenizer
        self.tools = [dict(t) for t in tools]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def apply_chat_template(self, messages: list[dict], **kwargs: Any) -> Any:
        return self._tokenizer.apply_chat_template(messages, tools=self.tools, **kwargs)


def tools_off_reason(tokenizer: Any) -> str:
    """Why this model cannot call tools ("" if it can): its template must render them and mlx-lm must parse them."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or "tools" not in template:
        return "this model's chat template has no tool support: tools are off for it"
    if not getattr(tokenizer, "has_tool_calling", False):
        return "this model's tool-call format is not one Chinwag can read: tools are off for it"
    return ""


def tools_cost(tokenizer: Any, messages: list[dict], tools: Sequence[dict]) -> int:
    """The tokens of context the tool definitions take in this chat's prompt."""
    messages = check_messages(messages)
    plain = len(encode_text(tokenizer, render(tokenizer, messages)))
    return len(encode_text(tokenizer, render(WithTools(tokenizer, tools), messages))) - plain if tools else 0


def encode_text(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def encode_many(tokenizer: Any, texts: list) -> list:
    """Tokenize several texts (one place to batch them if a tokenizer offers a faster path)."""
    return [encode_text(tokenizer, t) for t in texts]


def split_render(tokenizer: Any, messages: list[dict]) -> tuple[list[str], str]:
    """The rendered prompt cut at each message: (prefixes, tail).

    `prefixes[j] + messages[j]["content"]` is message j's piece, and the pieces followed by
    `tail` are exactly `render(messages)`. A template that rewrites, reorders or repeats
    content cannot be cut there: `prefixes` then stops at that message and `tail` holds
    the rest of the rendered text.
    """
    text = render(tokenizer, messages)
    try:
        marked = render(tokenizer, [dict(m, content=_MARK.format(i)) for i, m in enumerate(messages)])
    except ChinwagError:
        return [], text
    prefixes, at_marked, at_text = [], 0, 0
    for i, m in enumerate(messages):
        mark = _MARK.format(i)
        found = marked.find(mark, at_marked)
        prefix = marked[at_marked:found] if found >= 0 else ""
        if found < 0 or "\ue000" in prefix or not text.startswith(prefix + m["content"], at_text):
            break
        prefixes.append(prefix)
        at_marked, at_text = found + len(mark), at_text + len(prefix) + len(m["content"])
    return prefixes, text[at_text:]


@dataclass
class Span:
    """One message's piece as the model saw it: its template prefix, content and ids."""

    role: str
    content: str
    prefix: str
    ids: tuple
    # An assistant reply's generated ids (without its end-of-turn): its content's truth.
    reply: tuple | None = None


@dataclass
class History:
    """One conversation's pieces by message position, and where its context window starts.

    `start` is the index of the first message the window keeps (system messages before it
    are kept too); the cache holds that window's ids. One owner: the ConversationCache.
    """

    spans: list = field(default_factory=list)
    start: int = 0

    def knows(self, index: int, message: dict, prefix: str) -> bool:
        """Whether message `index` after `prefix` needs no tokenizing."""
        known = self.spans[index] if index < len(self.spans) else None
        return (
            known is not None
            and known.role == message["role"]
            and known.content == message["content"]
            and (known.prefix == prefix or known.reply is not None)
        )

    def piece(self, tokenizer: Any, index: int, message: dict, prefix: str, fresh: list[int] | None = None) -> tuple:
        """The ids of message `index` rendered after `prefix`; tokenized once (or given as `fresh`), then remembered."""
        if self.knows(index, message, prefix):
            known = self.spans[index]
            if known.prefix == prefix:
                return known.ids
            # A reply keeps its generated ids under another prefix.
            return tuple(encode_text(tokenizer, prefix)) + known.reply
        ids = tuple(fresh if fresh is not None else encode_text(tokenizer, prefix + message["content"]))
        self._put(index, Span(message["role"], message["content"], prefix, ids))
        return ids

    def record_reply(
        self, index: int, prefix: str, prefix_ids: list[int], text: str, reply_ids: Sequence[int], eos: Collection[int]
    ) -> None:
        """Remember the reply generated at position `index` after the prompt's tail `prefix`."""
        reply = list(reply_ids)
        while reply and reply[-1] in eos:  # the template writes the end-of-turn text itself
            reply.pop()
        self._put(index, Span("assistant", text, prefix, tuple(prefix_ids) + tuple(reply), tuple(reply)))
        del self.spans[index + 1 :]

    def truncate(self, n: int) -> None:
        del self.spans[n:]

    def _put(self, index: int, span: Span) -> None:
        if index >= len(self.spans):
            self.spans.extend([None] * (index + 1 - len(self.spans)))
        self.spans[index] = span

    # --- saving (plain JSON-able values) ------------------------------------

    def to_json(self) -> dict:
        spans = [
            None
            if s is None
            else [s.role, s.content, s.prefix, list(s.ids), None if s.reply is None else list(s.reply)]
            for s in self.spans
        ]
        return {"start": self.start, "spans": spans}

    @classmethod
    def from_json(cls, data: dict) -> "History":
        spans = [
            None if s is None else Span(s[0], s[1], s[2], tuple(s[3]), None if s[4] is None else tuple(s[4]))
            for s in data["spans"]
        ]
        return cls(spans=spans, start=int(data["start"]))


@dataclass
class Prompt:
    """The ids of some messages (by their positions `keep`), cut into pieces."""

    ids: list
    keep: list  # positions in the conversation of the messages rendered
    lengths: list  # ids per piece, for the first len(lengths) kept messages
    tail: str  # the text after the last piece: the generation prompt
    tail_ids: list

    @property
    def complete(self) -> bool:
        """Every message got its own piece (the template could be cut everywhere)."""
        return len(self.lengths) == len(self.keep)


def build(tokenizer: Any, messages: list[dict], keep: list, history: History) -> Prompt:
    """The prompt ids of the messages at positions `keep`, from their remembered pieces."""
    kept = [messages[i] for i in keep]
    prefixes, tail = split_render(tokenizer, kept)
    # Pieces never seen (a new chat, a restart without a saved cache) are tokenized in one batch.
    missing = [j for j, prefix in enumerate(prefixes) if not history.knows(keep[j], kept[j], prefix)]
    fresh = dict(zip(missing, encode_many(tokenizer, [prefixes[j] + kept[j]["content"] for j in missing])))
    ids: list = []
    lengths: list = []
    for j, prefix in enumerate(prefixes):
        piece = history.piece(tokenizer, keep[j], kept[j], prefix, fresh.get(j))
        ids.extend(piece)
        lengths.append(len(piece))
    tail_ids = encode_text(tokenizer, tail)
    return Prompt(ids + tail_ids, list(keep), lengths, tail, tail_ids)
