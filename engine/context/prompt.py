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
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

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
    messages = template_messages(messages)
    plain = len(encode_template(tokenizer, render(tokenizer, messages)))
    return len(encode_template(tokenizer, render(WithTools(tokenizer, tools), messages))) - plain if tools else 0


def encode_template(tokenizer: Any, text: str) -> list[int]:
    """The template's own text (no message content in it): its special-token strings are special tokens."""
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """`text` as plain text: a special token's string in it is the ordinary tokens of its characters.

    Text without such a string gets exactly the ids it always got.
    """
    specials = _specials(tokenizer)
    if not text or specials is None or not specials.pattern.search(text):
        return encode_template(tokenizer, text)
    return _plain(tokenizer, specials, text, after_special=False)


def encode_piece(tokenizer: Any, prefix: str, content: str, given: Sequence[tuple[int, int]] = ()) -> list[int]:
    """The ids of `prefix + content` as the model must read them: the prefix's special tokens are
    special, the content is plain text.

    The rule at the boundary: the piece is tokenized as one text, cut only where the tokenizer
    cuts it anyway (at the prefix's special tokens), so the prefix's text after its last special
    token and the content are tokenized together, as they always were (merges across the boundary
    and SentencePiece's word starts are unchanged). Content without a special token's string gets
    exactly the ids it always got. `given`: the (start, end) spans of special-token strings in the
    prefix that are not the template's either (the tool definitions' text), also plain text.
    """
    specials = _specials(tokenizer)
    if specials is None or not (given or specials.pattern.search(content)):
        return encode_template(tokenizer, prefix + content)
    at = len(prefix)
    spans = [*given, *((at + a, at + b) for a, b in specials.spans(content))]
    return _encode_spans(tokenizer, specials, prefix + content, spans)


def encode_many(tokenizer: Any, pieces: Sequence[tuple]) -> list:
    """Tokenize several (prefix, content[, given]) pieces (one place to batch them if a tokenizer offers a faster path)."""
    return [encode_piece(tokenizer, *piece) for piece in pieces]


# --- special-token strings in content -------------------------------------------


@dataclass(frozen=True)
class _Specials:
    """A tokenizer's special tokens: how to find their strings, and how it tokenizes around them."""

    pattern: re.Pattern  # those content must not hold: all but whitespace (a "\n" token is no turn marker)
    every: re.Pattern  # all: where the tokenizer cuts a text
    ids: dict  # string -> id
    id_set: frozenset
    lstrip: frozenset  # tokens that take the whitespace before them
    rstrip: frozenset  # tokens that take the whitespace after them
    # Whether a text is tokenized otherwise at the input's start than after a special token
    # (SentencePiece's "▁" prepended to the first word only: Metaspace's prepend_scheme "first").
    start_dependent: bool

    def spans(self, text: str, start: int = 0, end: int | None = None) -> list:
        """Where the tokenizer finds special tokens in text[start:end] (leftmost, the longest first)."""
        return [m.span() for m in self.pattern.finditer(text, start, len(text) if end is None else end)]

    def cuts(self, text: str, start: int, end: int) -> list:
        """Where the tokenizer cuts text[start:end]: at every special token, whitespace ones too."""
        return [m.span() for m in self.every.finditer(text, start, end)]

    def count(self, ids: Iterable[int]) -> int:
        return sum(1 for i in ids if i in self.id_set)


_SPECIALS: dict[int, tuple[Any, _Specials | None]] = {}
_SPECIALS_KEPT = 8


def _specials(tokenizer: Any) -> _Specials | None:
    """The tokenizer's special tokens (None if it names none), worked out once per tokenizer."""
    base = tokenizer._tokenizer if isinstance(tokenizer, WithTools) else tokenizer
    known = _SPECIALS.get(id(base))
    if known is not None and known[0] is base:
        return known[1]
    specials = _read_specials(base)
    if len(_SPECIALS) >= _SPECIALS_KEPT:
        del _SPECIALS[next(iter(_SPECIALS))]
    _SPECIALS[id(base)] = (base, specials)  # the tokenizer is held, so its id is not reused
    return specials


def _read_specials(tokenizer: Any) -> _Specials | None:
    try:
        added = tokenizer.added_tokens_decoder
    except (AttributeError, NotImplementedError):
        return None
    if not isinstance(added, dict):
        return None
    tokens = {int(i): t for i, t in added.items() if getattr(t, "special", False) and getattr(t, "content", "")}
    if all(t.content.isspace() for t in tokens.values()):
        return None
    ids = {t.content: i for i, t in tokens.items()}
    lstrip = frozenset(t.content for t in tokens.values() if getattr(t, "lstrip", False))
    rstrip = frozenset(t.content for t in tokens.values() if getattr(t, "rstrip", False))
    return _Specials(
        pattern=re.compile(_trie_pattern(s for s in ids if not s.isspace())),
        every=re.compile(_trie_pattern(ids)),
        ids=ids,
        id_set=frozenset(ids.values()),
        lstrip=lstrip,
        rstrip=rstrip,
        start_dependent=_starts_differ(tokenizer, ids, lstrip | rstrip),
    )


def _trie_pattern(strings: Iterable[str]) -> str:
    """A regex finding any of `strings`, the longest at a place first (as the tokenizer's trie does),
    in one pass whatever their number (Gemma names thousands of special tokens)."""
    trie: dict = {}
    for text in strings:
        node = trie
        for c in text:
            node = node.setdefault(c, {})
        node[""] = {}

    def walk(node: dict) -> str:
        branches = [re.escape(c) + walk(child) for c, child in sorted(node.items()) if c]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return walk(trie)


def _starts_differ(tokenizer: Any, ids: dict, stripping: frozenset) -> bool:
    """Whether a text after a special token is tokenized otherwise than the same text alone."""
    plain = [s for s in ids if s not in stripping and not s.isspace()]
    if not plain:
        return False
    token = min(plain, key=len)
    for probe in ("a", "Hello", "user\n"):
        after = encode_template(tokenizer, token + probe)
        if after[:1] != [ids[token]] or after[1:] != encode_template(tokenizer, probe):
            return True
    return False


def _encode_spans(tokenizer: Any, specials: _Specials, text: str, plain: Sequence[tuple[int, int]]) -> list[int]:
    """`text` tokenized with its special tokens special, except the special-token strings at the
    (start, end) spans in `plain` (those that came from message content), which are plain text.

    The text is cut where the tokenizer would cut it, at the other special tokens (with the
    whitespace that a token set to strip it takes), and each run between is plain text tokenized
    in its place.
    """
    cuts, start = [], 0
    for a, b in [*plain, (len(text), len(text))]:
        cuts += specials.cuts(text, start, a)
        start = b
    ids: list[int] = []
    at = 0
    for a, b in cuts:
        token = text[a:b]
        run = text[at:a]
        if token in specials.lstrip:
            run = run.rstrip()
        ids += _plain(tokenizer, specials, run, after_special=at > 0)
        ids.append(specials.ids[token])
        at = b
        if token in specials.rstrip:
            at += len(text[b:]) - len(text[b:].lstrip())
    return ids + _plain(tokenizer, specials, text[at:], after_special=bool(cuts))


# Text put before a run and cut off again, so the run is not tokenized as the input's start.
_LEADS = ("\n", ".", "a")


def _plain(tokenizer: Any, specials: _Specials, text: str, after_special: bool) -> list[int]:
    """`text` as plain text, tokenized as it would be at the input's start or after a special token."""
    if not text:
        return []
    if after_special and specials.start_dependent:
        for lead in _LEADS:
            lead_ids = _split_encode(tokenizer, specials, lead)
            both = _split_encode(tokenizer, specials, lead + text)
            if lead_ids and both[: len(lead_ids)] == lead_ids:
                return both[len(lead_ids) :]
    return _split_encode(tokenizer, specials, text)


def _split_encode(tokenizer: Any, specials: _Specials, text: str) -> list[int]:
    """`text` tokenized with no special token matched."""
    try:
        return list(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))
    except (TypeError, ValueError):  # a tokenizer without the option: each special string cut in two
        ids: list[int] = []
        at = 0
        for a, b in specials.spans(text):
            ids += encode_template(tokenizer, text[at:a]) + encode_template(tokenizer, text[a])
            ids += _split_encode(tokenizer, specials, text[a + 1 : b])
            at = b
        return ids + encode_template(tokenizer, text[at:])


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


def encode_tail(
    tokenizer: Any, messages: list[dict], prefixes: list[str], tail: str, given: Sequence[tuple[int, int]] = ()
) -> list[int]:
    """The ids of `split_render`'s tail: the template's text, with the content of the messages it
    could not be cut at (a template that trims or rewrites content) as plain text, and the
    special-token strings at the spans `given` (the tool definitions') too."""
    rest = messages[len(prefixes) :]
    specials = _specials(tokenizer)
    if specials is None or not any(specials.pattern.search(m["content"]) for m in rest):
        return (
            _encode_spans(tokenizer, specials, tail, given) if specials and given else encode_template(tokenizer, tail)
        )
    # Render again with each special-token string in that content between two markers: those in
    # the tail then came from content, the others are the template's.
    head = "".join(p + m["content"] for p, m in zip(prefixes, messages))
    begin, end = _markers(head + tail + "".join(m["content"] for m in rest))
    marked = [
        dict(m, content=specials.pattern.sub(lambda t: begin + t.group() + end, m["content"]))
        if j >= len(prefixes)
        else m
        for j, m in enumerate(messages)
    ]
    try:
        text = render(tokenizer, marked)
    except ChinwagError:
        text = ""
    if text.startswith(head):
        plain, spans = _unmark(text[len(head) :], begin, end)
        wrapped = sum(len(specials.spans(m["content"])) for m in rest)
        if plain == tail and len(spans) == wrapped and all(tail[a:b] in specials.ids for a, b in spans):
            return _encode_spans(tokenizer, specials, tail, sorted({*spans, *given}))
    # A template that drops, moves or repeats the markers: the special-token strings inside any
    # (trimmed) content's text in the tail are taken for content.
    spans = []
    for m in rest:
        found = m["content"].strip()
        for at in (i.start() for i in re.finditer(re.escape(found), tail)) if found else ():
            spans += [(at + a, at + b) for a, b in specials.spans(found)]
    return _encode_spans(tokenizer, specials, tail, sorted({*spans, *given}))


def _definition_spans(tokenizer: Any, messages: list[dict], text: str) -> list:
    """The (start, end) spans in `text`, the messages' render, of the special-token strings that the
    tool definitions (an MCP server's, an API client's) put there: no template's markers either."""
    specials = _specials(tokenizer)
    tools = tokenizer.tools if isinstance(tokenizer, WithTools) else []
    strings = [t for t in _strings(tools) if specials is not None and specials.pattern.search(t)]
    if specials is None or not strings:
        return []
    begin, end = _markers(text + "".join(_strings(tools)))
    marked = _map_strings(tools, lambda t: specials.pattern.sub(lambda m: begin + m.group() + end, t))
    try:
        plain, spans = _unmark(render(WithTools(tokenizer._tokenizer, marked), messages), begin, end)
    except ChinwagError:
        plain, spans = "", []
    if plain == text and all(text[a:b] in specials.ids for a, b in spans):
        return spans
    # A template that changes the markers (escapes them): the special-token strings inside any
    # such string's text in the render are taken for the definitions'.
    found: set[tuple[int, int]] = set()
    for t in strings:
        for written in {t, json.dumps(t, ensure_ascii=False)[1:-1]}:
            for at in (i.start() for i in re.finditer(re.escape(written), text)):
                found.update((at + a, at + b) for a, b in specials.spans(written))
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


def _markers(text: str) -> tuple[str, str]:
    """Two private-use characters that `text` does not hold."""
    free = (chr(c) for c in range(0xE002, 0xF900) if chr(c) not in text)
    return next(free), next(free)


def _unmark(text: str, begin: str, end: str) -> tuple[str, list]:
    """`text` without the markers, and the (start, end) spans that were between a pair of them
    (a marker the template parted from its pair is dropped)."""
    either = re.escape(begin + end)
    out: list[str] = []
    spans = []
    at = length = 0
    for m in re.finditer(f"{re.escape(begin)}([^{either}]*){re.escape(end)}|[{either}]", text):
        before, inside = text[at : m.start()], m.group(1) or ""
        out += [before, inside]
        length += len(before)
        if inside:
            spans.append((length, length + len(inside)))
        length += len(inside)
        at = m.end()
    out.append(text[at:])
    return "".join(out), spans


def _read_content_as_special(tokenizer: Any, span: "Span") -> bool:
    """Whether a remembered piece's ids read special-token strings in its content as special tokens."""
    specials = _specials(tokenizer)
    if specials is None or not specials.pattern.search(span.content):
        return False
    return specials.count(span.ids) > len(specials.spans(span.prefix))


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

    def knows(self, index: int, message: dict, prefix: str, tokenizer: Any = None) -> bool:
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

    def piece(self, tokenizer: Any, index: int, message: dict, prefix: str, fresh: list[int] | None = None) -> tuple:
        """The ids of message `index` rendered after `prefix`; tokenized once (or given as `fresh`), then remembered."""
        if self.knows(index, message, prefix, tokenizer):
            known = self.spans[index]
            if known.prefix == prefix:
                return known.ids
            # A reply keeps its generated ids under another prefix.
            return tuple(encode_template(tokenizer, prefix)) + known.reply
        ids = tuple(fresh if fresh is not None else encode_piece(tokenizer, prefix, message["content"]))
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


def _definitions_given(tokenizer: Any, messages: list[dict], prefixes: list[str], tail: str) -> list[list]:
    """The spans of the tool definitions' special-token strings in each prefix, then in the tail."""
    given: list[list] = [[] for _ in range(len(prefixes) + 1)]
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


def build(tokenizer: Any, messages: list[dict], keep: list, history: History) -> Prompt:
    """The prompt ids of the messages at positions `keep`, from their remembered pieces."""
    kept = [messages[i] for i in keep]
    prefixes, tail = split_render(tokenizer, kept)
    given = _definitions_given(tokenizer, kept, prefixes, tail)
    # Pieces never seen (a new chat, a restart without a saved cache) are tokenized in one batch.
    missing = [j for j, prefix in enumerate(prefixes) if not history.knows(keep[j], kept[j], prefix, tokenizer)]
    pieces = [(prefixes[j], kept[j]["content"], given[j]) for j in missing]
    fresh = dict(zip(missing, encode_many(tokenizer, pieces)))
    ids: list = []
    lengths: list = []
    for j, prefix in enumerate(prefixes):
        piece = history.piece(tokenizer, keep[j], kept[j], prefix, fresh.get(j))
        ids.extend(piece)
        lengths.append(len(piece))
    tail_ids = encode_tail(tokenizer, kept, prefixes, tail, given[-1])
    return Prompt(ids + tail_ids, list(keep), lengths, tail, tail_ids)
