"""Messages -> prompt token ids, from the exact ids of each message as the model saw it.

The rendered chat template is cut into one piece per message (the template text before
its content, then the content) and a tail (the end of the last turn and the generation
prompt). Each piece is tokenized once and remembered by the message's position in the
conversation (`History`), never looked up by its text; a reply's piece holds the ids the
model generated. So a follow-up turn's prompt starts with exactly the ids the cache holds.

Only the template's own text parses special-token strings: message content (a user's text, a
document, a tool's result, an API client's messages) and the tool definitions' text the template
writes are tokenized as plain text, so a `<|im_end|>` written in them is the ordinary tokens of
its characters, never a turn boundary (`encode_piece`, `encode_tail`, `encode_text`).
"""

import dataclasses
import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from engine.context.specials import (
    Specials,
    WithTools,
    encode_run,
    encode_spans,
    encode_template,
    markers,
    specials_of,
    unmark,
)
from engine.errors import ChinwagError
from engine.types import ChatMessage, Role

# "tool": a tool's result. An assistant message that called tools carries the text the model
# generated (its tool-call markup included) as its content: its piece is the generated ids.
ROLES = ("system", "user", "assistant", "tool")
# Private-use characters stand in for each message's content to find where the template puts it.
_MARK = "\ue000{}\ue001"
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_messages(messages: Sequence[ChatMessage | dict[str, Any]]) -> list[ChatMessage]:
    """A chat's messages as ChatMessages, each given as one or in OpenAI's shape (tool fields kept);
    a wrong list is a ChinwagError in one line that names the message."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ChinwagError("the message list is empty: a chat needs at least one message")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, ChatMessage) and not _plain_shape(m):
            raise ChinwagError(
                f"message {i} must be {{'role': system|user|assistant|tool, 'content': str}}, got {m!r:.80}"
            )
        message = ChatMessage.from_openai(m, f"message {i}")
        # A lone surrogate (JSON "\\ud800", undecodable terminal bytes) cannot be tokenized.
        if _SURROGATE.search(message.content):
            message = dataclasses.replace(message, content=_SURROGATE.sub("\ufffd", message.content))
        clean.append(message)
    if all(m.role == Role.SYSTEM for m in clean):
        raise ChinwagError("the message list has no user message")
    return clean


def _plain_shape(m: object) -> bool:
    """A dict with a known role and text content (an assistant's may be null beside its tool calls)."""
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        return False
    content = m.get("content")
    return isinstance(content, str) or (content is None and m["role"] == "assistant" and bool(m.get("tool_calls")))


def template_messages(messages: Sequence[ChatMessage | dict[str, Any]]) -> list[dict[str, Any]]:
    """The checked messages as a local model's chat template is given them: role and content only,
    so the prompt's text (every History piece, exact cache reuse, speculation) is what it always
    was; an assistant message that called tools holds its calls' markup, as generated, in content."""
    return [{"role": str(m.role), "content": m.content} for m in check_messages(messages)]


def render(tokenizer: Any, messages: list[dict[str, Any]]) -> str:
    if getattr(tokenizer, "chat_template", None):
        from jinja2 import TemplateError  # installed with transformers, which mlx-lm needs

        try:
            return cast(str, tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        except (TemplateError, ValueError, TypeError) as e:  # roles out of order, no system prompt...
            raise ChinwagError(f"the model's chat template rejected the messages: {e}") from e
    # No template: a plain transcript the model can continue.
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
    return text + "assistant:"


def tools_off_reason(tokenizer: Any) -> str:
    """Why this model cannot call tools ("" if it can): its template must render them and mlx-lm must parse them."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or "tools" not in template:
        return "this model's chat template has no tool support: tools are off for it"
    if not getattr(tokenizer, "has_tool_calling", False):
        return "this model's tool-call format is not one Chinwag can read: tools are off for it"
    return ""


def tools_cost(
    tokenizer: Any, messages: Sequence[ChatMessage | dict[str, Any]], tools: Sequence[dict[str, Any]]
) -> int:
    """The tokens of context the tool definitions take in this chat's prompt."""
    rows = template_messages(messages)
    plain = len(encode_template(tokenizer, render(tokenizer, rows)))
    return len(encode_template(tokenizer, render(WithTools(tokenizer, tools), rows))) - plain if tools else 0


def encode_text(tokenizer: Any, text: str, outside: bool = True) -> list[int]:
    """`text` as plain text: a special token's string in it is the ordinary tokens of its characters
    (and, `outside`, another added token's: text not written by the model).

    Text without such a string gets exactly the ids it always got.
    """
    specials = specials_of(tokenizer)
    if not text or specials is None or not specials.finder(outside).search(text):
        return encode_template(tokenizer, text)
    whole = [(a, b) for a, b in specials.spans(text, outside=outside) if text[a:b] in specials.others]
    return encode_run(tokenizer, specials, text, (0, len(text)), whole, after_special=False)


def encode_piece(
    tokenizer: Any, prefix: str, content: str, given: Sequence[tuple[int, int]] = (), outside: bool = True
) -> list[int]:
    """The ids of `prefix + content` as the model must read them: the prefix's special tokens are
    special, the content is plain text.

    The rule at the boundary: the piece is tokenized as one text, cut only where the tokenizer
    cuts it anyway (at the prefix's special tokens), so the prefix's text after its last special
    token and the content are tokenized together, as they always were (merges across the boundary
    and SentencePiece's word starts are unchanged). Content without a special token's string gets
    exactly the ids it always got. `given`: the (start, end) spans of special-token strings in the
    prefix that are not the template's either (the tool definitions' text), also plain text.
    `outside`: content not written by the model (any but an assistant's): its other added tokens'
    strings are text too (`Specials`).
    """
    specials = specials_of(tokenizer)
    if specials is None or not (given or specials.finder(outside).search(content)):
        return encode_template(tokenizer, prefix + content)
    at = len(prefix)
    spans = [*given, *((at + a, at + b) for a, b in specials.spans(content, outside=outside))]
    return encode_spans(tokenizer, specials, prefix + content, spans)


def encode_many(tokenizer: Any, pieces: Sequence[tuple[Any, ...]]) -> list[list[int]]:
    """Tokenize several (prefix, content[, given[, outside]]) pieces (one place to batch them if a tokenizer offers a faster path)."""
    return [encode_piece(tokenizer, *piece) for piece in pieces]


def split_render(tokenizer: Any, messages: list[dict[str, Any]]) -> tuple[list[str], str]:
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


def encode_tail(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    prefixes: list[str],
    tail: str,
    given: Sequence[tuple[int, int]] = (),
) -> list[int]:
    """The ids of `split_render`'s tail: the template's text, with the content of the messages it
    could not be cut at (a template that trims or rewrites content) as plain text, and the
    special-token strings at the spans `given` (the tool definitions') too."""
    rest = messages[len(prefixes) :]
    specials = specials_of(tokenizer)
    if specials is None or not any(specials.finder(_outside(m)).search(m["content"]) for m in rest):
        return (
            encode_spans(tokenizer, specials, tail, given) if specials and given else encode_template(tokenizer, tail)
        )
    spans = _marked_content_spans(tokenizer, specials, messages, prefixes, tail)
    if spans is None:
        spans = _found_content_spans(specials, rest, tail)
    return encode_spans(tokenizer, specials, tail, sorted({*spans, *given}))


def _marked_content_spans(
    tokenizer: Any, specials: Specials, messages: list[dict[str, Any]], prefixes: list[str], tail: str
) -> list[tuple[int, int]] | None:
    """The spans in `tail` of the special-token strings from the uncut messages' content, found by
    rendering again with each such string between two markers (the tail's others are the
    template's); None if the template drops, moves or repeats the markers."""
    rest = messages[len(prefixes) :]
    head = "".join(p + m["content"] for p, m in zip(prefixes, messages))
    begin, end = markers(head + tail + "".join(m["content"] for m in rest))
    marked = [
        dict(m, content=specials.finder(_outside(m)).sub(lambda t: begin + t.group() + end, m["content"]))
        if j >= len(prefixes)
        else m
        for j, m in enumerate(messages)
    ]
    try:
        text = render(tokenizer, marked)
    except ChinwagError:
        text = ""
    if text.startswith(head):
        plain, spans = unmark(text[len(head) :], begin, end)
        wrapped = sum(len(specials.spans(m["content"], outside=_outside(m))) for m in rest)
        if plain == tail and len(spans) == wrapped and all(tail[a:b] in specials.ids for a, b in spans):
            return spans
    return None


def _found_content_spans(specials: Specials, rest: list[dict[str, Any]], tail: str) -> list[tuple[int, int]]:
    """Where the markers did not survive: the special-token strings inside any (trimmed) content's
    text in the tail are taken for content."""
    spans = []
    for m in rest:
        found = m["content"].strip()
        for at in (i.start() for i in re.finditer(re.escape(found), tail)) if found else ():
            spans += [(at + a, at + b) for a, b in specials.spans(found, outside=_outside(m))]
    return spans


def _outside(message: dict[str, Any]) -> bool:
    """Whether a message's content was not written by the model: its other added tokens' strings are text."""
    return bool(message["role"] != "assistant")


def _definition_spans(tokenizer: Any, messages: list[dict[str, Any]], text: str) -> list[tuple[int, int]]:
    """The (start, end) spans in `text`, the messages' render, of the special-token strings that the
    tool definitions (an MCP server's, an API client's) put there: no template's markers either."""
    specials = specials_of(tokenizer)
    tools = tokenizer.tools if isinstance(tokenizer, WithTools) else []
    strings = [t for t in _strings(tools) if specials is not None and specials.outside.search(t)]
    if specials is None or not strings:
        return []
    begin, end = markers(text + "".join(_strings(tools)))
    marked = _map_strings(tools, lambda t: specials.outside.sub(lambda m: begin + m.group() + end, t))
    try:
        plain, spans = unmark(render(WithTools(tokenizer._tokenizer, marked), messages), begin, end)
    except ChinwagError:
        plain, spans = "", []
    if plain == text and all(text[a:b] in specials.ids for a, b in spans):
        return spans
    return _found_definition_spans(specials, strings, text)


def _found_definition_spans(specials: Specials, strings: list[str], text: str) -> list[tuple[int, int]]:
    """Where a template changed the markers (escaped them): the special-token strings inside any
    such string's text in the render are taken for the definitions'."""
    found: set[tuple[int, int]] = set()
    for t in strings:
        for written in {t, json.dumps(t, ensure_ascii=False)[1:-1]}:
            for at in (i.start() for i in re.finditer(re.escape(written), text)):
                found.update((at + a, at + b) for a, b in specials.spans(written, outside=True))
    return sorted(found)


def _strings(obj: Any) -> list[str]:
    """Every string in a JSON-like value, dict keys too."""
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in [*_strings(k), *_strings(v)]]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in _strings(v)]
    return []


def _map_strings(obj: Any, f: Any) -> Any:
    if isinstance(obj, str):
        return f(obj)
    if isinstance(obj, dict):
        return {_map_strings(k, f): _map_strings(v, f) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_map_strings(v, f) for v in obj]
    return obj


def _read_content_as_special(tokenizer: Any, span: "Span") -> bool:
    """Whether a remembered piece's ids read special-token strings in its content as special tokens."""
    specials = specials_of(tokenizer)
    outside = span.role != "assistant"
    if specials is None or not specials.finder(outside).search(span.content):
        return False
    return specials.count(span.ids, outside) > len(specials.spans(span.prefix, outside=outside))


@dataclass
class Span:
    """One message's piece as the model saw it: its template prefix, content and ids."""

    role: str
    content: str
    prefix: str
    ids: tuple[int, ...]
    # An assistant reply's generated ids (without its end-of-turn): its content's truth.
    reply: tuple[int, ...] | None = None


@dataclass
class History:
    """One conversation's pieces by message position, and where its context window starts.

    `start` is the index of the first message the window keeps (system messages before it
    are kept too); the cache holds that window's ids. One owner: the ConversationCache.
    """

    spans: list[Span | None] = field(default_factory=list)
    start: int = 0

    def knows(self, index: int, message: dict[str, Any], prefix: str, tokenizer: Any = None) -> bool:
        """Whether message `index` after `prefix` needs no tokenizing.

        Given the tokenizer, a piece saved before content was tokenized as plain text (its
        content's special-token strings read as special tokens) is not known: it is tokenized again.
        """
        known = self.spans[index] if index < len(self.spans) else None
        return (
            known is not None
            and known.role == message["role"]
            and known.content == message["content"]
            and (known.prefix == prefix or known.reply is not None)
            and (tokenizer is None or known.reply is not None or not _read_content_as_special(tokenizer, known))
        )

    def piece(
        self, tokenizer: Any, index: int, message: dict[str, Any], prefix: str, fresh: list[int] | None = None
    ) -> tuple[int, ...]:
        """The ids of message `index` rendered after `prefix`; tokenized once (or given as `fresh`), then remembered."""
        if self.knows(index, message, prefix, tokenizer):
            known = self.spans[index]
            assert known is not None  # as knows() found it
            if known.prefix == prefix or known.reply is None:  # (knows() found a reply if not the prefix)
                return known.ids
            # A reply keeps its generated ids under another prefix.
            return tuple(encode_template(tokenizer, prefix)) + known.reply
        ids = tuple(
            fresh if fresh is not None else encode_piece(tokenizer, prefix, message["content"], (), _outside(message))
        )
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

    def to_json(self) -> dict[str, Any]:
        spans = [
            None
            if s is None
            else [s.role, s.content, s.prefix, list(s.ids), None if s.reply is None else list(s.reply)]
            for s in self.spans
        ]
        return {"start": self.start, "spans": spans}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "History":
        spans = [
            None if s is None else Span(s[0], s[1], s[2], tuple(s[3]), None if s[4] is None else tuple(s[4]))
            for s in data["spans"]
        ]
        return cls(spans=spans, start=int(data["start"]))


@dataclass
class Prompt:
    """The ids of some messages (by their positions `keep`), cut into pieces."""

    ids: list[int]
    keep: list[int]  # positions in the conversation of the messages rendered
    lengths: list[int]  # ids per piece, for the first len(lengths) kept messages
    tail: str  # the text after the last piece: the generation prompt
    tail_ids: list[int]

    @property
    def complete(self) -> bool:
        """Every message got its own piece (the template could be cut everywhere)."""
        return len(self.lengths) == len(self.keep)


def _definitions_given(
    tokenizer: Any, messages: list[dict[str, Any]], prefixes: list[str], tail: str
) -> list[list[tuple[int, int]]]:
    """The spans of the tool definitions' special-token strings in each prefix, then in the tail."""
    given: list[list[tuple[int, int]]] = [[] for _ in range(len(prefixes) + 1)]
    if not isinstance(tokenizer, WithTools):
        return given
    starts = [0]
    for p, m in zip(prefixes, messages):
        starts.append(starts[-1] + len(p) + len(m["content"]))
    text = "".join(p + m["content"] for p, m in zip(prefixes, messages)) + tail
    for a, b in _definition_spans(tokenizer, messages, text):
        j = next((j for j, p in enumerate(prefixes) if starts[j] <= a and b <= starts[j] + len(p)), None)
        if j is None and a >= starts[-1]:
            j = len(prefixes)
        if j is not None:  # (a definition's text inside a message's content is content already)
            given[j].append((a - starts[j], b - starts[j]))
    return given


def build(tokenizer: Any, messages: list[dict[str, Any]], keep: list[int], history: History) -> Prompt:
    """The prompt ids of the messages at positions `keep`, from their remembered pieces."""
    kept = [messages[i] for i in keep]
    prefixes, tail = split_render(tokenizer, kept)
    given = _definitions_given(tokenizer, kept, prefixes, tail)
    # Pieces never seen (a new chat, a restart without a saved cache) are tokenized in one batch.
    missing = [j for j, prefix in enumerate(prefixes) if not history.knows(keep[j], kept[j], prefix, tokenizer)]
    pieces = [(prefixes[j], kept[j]["content"], given[j], _outside(kept[j])) for j in missing]
    fresh = dict(zip(missing, encode_many(tokenizer, pieces)))
    ids: list[int] = []
    lengths: list[int] = []
    for j, prefix in enumerate(prefixes):
        piece = history.piece(tokenizer, keep[j], kept[j], prefix, fresh.get(j))
        ids.extend(piece)
        lengths.append(len(piece))
    tail_ids = encode_tail(tokenizer, kept, prefixes, tail, given[-1])
    return Prompt(ids + tail_ids, list(keep), lengths, tail, tail_ids)
