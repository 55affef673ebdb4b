"""Special-token strings in text: where a tokenizer finds them, and text tokenized with some of
them special (the template's) and the others plain (content's, the tool definitions'), as
engine/context/prompt.py builds a prompt. Also the tokenizer whose template is given tools.
"""

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


class WithTools:
    """A tokenizer whose chat template is given `tools` (OpenAI function definitions) on every render."""

    def __init__(self, tokenizer: Any, tools: Sequence[dict[str, Any]]) -> None:
        self._tokenizer = tokenizer
        self.tools = [dict(t) for t in tools]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def apply_chat_template(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        return self._tokenizer.apply_chat_template(messages, tools=self.tools, **kwargs)


def encode_template(tokenizer: Any, text: str) -> list[int]:
    """The template's own text (no message content in it): its special-token strings are special tokens."""
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


@dataclass(frozen=True)
class Specials:
    """A tokenizer's special tokens (and its other added tokens): how to find their strings, and how
    it tokenizes around them.

    The other added tokens (`special: false`) that the chat template writes (Qwen's `<tool_call>`,
    `<tool_response>`, `<think>`) are read whole by the tokenizer as special tokens are, and
    `split_special_tokens` does not split them: content from outside (a user's, a document's, a
    tool's, the tool definitions') holds them as text too; an assistant's reply keeps them as the
    model wrote them (`outside=False`). Those the template does not write (Gemma's `<table>`) stay
    the vocabulary's, read whole everywhere.
    """

    pattern: re.Pattern[str]  # those content must not hold: all but whitespace (a "\n" token is no turn marker)
    every: re.Pattern[str]  # all: where the tokenizer cuts a text
    ids: dict[str, int]  # string -> id (the other added tokens' too)
    id_set: frozenset[int]
    lstrip: frozenset[str]  # tokens that take the whitespace before them
    rstrip: frozenset[str]  # tokens that take the whitespace after them
    # Whether a text is tokenized otherwise at the input's start than after a special token
    # (SentencePiece's "▁" prepended to the first word only: Metaspace's prepend_scheme "first").
    start_dependent: bool
    outside: re.Pattern[str] = re.compile("(?!)")  # special and other added tokens: content from outside's
    others: frozenset[str] = frozenset()  # the other added tokens' strings (not whitespace)
    other_ids: frozenset[int] = frozenset()

    def finder(self, outside: bool = False) -> re.Pattern[str]:
        return self.outside if outside else self.pattern

    def spans(self, text: str, start: int = 0, end: int | None = None, outside: bool = False) -> list[tuple[int, int]]:
        """Where the tokenizer finds special tokens in text[start:end] (leftmost, the longest first);
        `outside`: its other added tokens too."""
        return [m.span() for m in self.finder(outside).finditer(text, start, len(text) if end is None else end)]

    def cuts(self, text: str, start: int, end: int) -> list[tuple[int, int]]:
        """Where the tokenizer cuts text[start:end]: at every special token, whitespace ones too."""
        return [m.span() for m in self.every.finditer(text, start, end)]

    def count(self, ids: Iterable[int], outside: bool = False) -> int:
        return sum(1 for i in ids if i in self.id_set or (outside and i in self.other_ids))


_SPECIALS: dict[int, tuple[Any, Specials | None]] = {}
_SPECIALS_KEPT = 8


def specials_of(tokenizer: Any) -> Specials | None:
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


_SIDES = ("lstrip", "rstrip")


def _added_tokens(tokenizer: Any) -> dict[Any, Any] | None:
    try:
        added = tokenizer.added_tokens_decoder
    except (AttributeError, NotImplementedError):
        return None
    return added if isinstance(added, dict) else None


def _read_specials(tokenizer: Any) -> Specials | None:
    added = _added_tokens(tokenizer)
    if added is None:
        return None
    tokens = [(int(i), t) for i, t in added.items() if getattr(t, "special", False) and getattr(t, "content", "")]
    ids = {t.content: i for i, t in tokens}
    others = _markers(tokenizer, added, ids)
    if all(s.isspace() for s in ids) and not others:
        return None
    lstrip, rstrip = (frozenset(t.content for _, t in tokens if getattr(t, side, False)) for side in _SIDES)
    marked = [s for s in ids if not s.isspace()]
    return Specials(
        pattern=_compile(marked),
        every=_compile(ids),
        ids={**ids, **others},
        id_set=frozenset(ids.values()),
        lstrip=lstrip,
        rstrip=rstrip,
        start_dependent=_starts_differ(tokenizer, ids, lstrip | rstrip),
        outside=_compile([*marked, *others]),
        others=frozenset(others),
        other_ids=frozenset(others.values()),
    )


def _markers(tokenizer: Any, added: dict[Any, Any], specials: dict[str, int]) -> dict[str, int]:
    """The added tokens that are not special but that the chat template writes: string -> id."""
    text = _template_text(tokenizer)
    found = {}
    for i, t in added.items():
        content = getattr(t, "content", "")
        if isinstance(content, str) and content and not content.isspace() and content not in specials:
            if not getattr(t, "special", False) and content in text:
                found[content] = int(i)
    return found


def _template_text(tokenizer: Any) -> str:
    """The chat template's source and the tool-call markers mlx-lm reads: an added token they name
    is a marker of the chat's structure (Qwen's `<tool_call>`, `<tool_response>`, `<think>`), one they
    do not is the vocabulary's (Gemma's `<table>`, `<b>`: read whole in content, as trained)."""
    template = getattr(tokenizer, "chat_template", None)
    texts = list(template.values()) if isinstance(template, dict) else [template]
    for name in ("tool_call_start", "tool_call_end", "think_start", "think_end"):
        texts.append(getattr(tokenizer, name, ""))
    return "\n".join(t for t in texts if isinstance(t, str))


def _compile(strings: Iterable[str]) -> re.Pattern[str]:
    return re.compile(_trie_pattern(strings) or "(?!)")  # none: a pattern that never matches


def _trie_pattern(strings: Iterable[str]) -> str:
    """A regex finding any of `strings`, the longest at a place first (as the tokenizer's trie does),
    in one pass whatever their number (Gemma names thousands of special tokens)."""
    trie: dict[str, Any] = {}
    for text in strings:
        node = trie
        for c in text:
            node = node.setdefault(c, {})
        node[""] = {}

    def walk(node: dict[str, Any]) -> str:
        branches = [re.escape(c) + walk(child) for c, child in sorted(node.items()) if c]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return walk(trie)


def _starts_differ(tokenizer: Any, ids: dict[str, int], stripping: frozenset[str]) -> bool:
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


def encode_spans(tokenizer: Any, specials: Specials, text: str, plain: Sequence[tuple[int, int]]) -> list[int]:
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
    whole = [(a, b) for a, b in plain if text[a:b] in specials.others]  # split_special_tokens keeps these
    ids: list[int] = []
    at = 0
    for a, b in cuts:
        token = text[a:b]
        end = at + len(text[at:a].rstrip()) if token in specials.lstrip else a
        ids += encode_run(tokenizer, specials, text, (at, end), whole, after_special=at > 0)
        ids.append(specials.ids[token])
        at = b
        if token in specials.rstrip:
            at += len(text[b:]) - len(text[b:].lstrip())
    return ids + encode_run(tokenizer, specials, text, (at, len(text)), whole, after_special=bool(cuts))


def encode_run(
    tokenizer: Any,
    specials: Specials,
    text: str,
    run: tuple[int, int],
    whole: Sequence[tuple[int, int]],
    after_special: bool,
) -> list[int]:
    """text[start:end] as plain text, cut before and after the other added tokens' strings in it at
    the spans `whole`, each of those tokenized as its first character and the rest."""
    start, end = run
    inside = [(a, b) for a, b in whole if start <= a and b <= end]
    if not inside:
        return encode_plain(tokenizer, specials, text[start:end], after_special)
    ids: list[int] = []
    at = start
    for a, b in inside:
        ids += encode_plain(tokenizer, specials, text[at:a], after_special or at > start)
        ids += encode_plain(tokenizer, specials, text[a], after_special or a > start)
        ids += encode_plain(tokenizer, specials, text[a + 1 : b], True)
        at = b
    return ids + encode_plain(tokenizer, specials, text[at:end], True)


# Text put before a run and cut off again, so the run is not tokenized as the input's start.
_LEADS = ("\n", ".", "a")


def encode_plain(tokenizer: Any, specials: Specials, text: str, after_special: bool) -> list[int]:
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


def _split_encode(tokenizer: Any, specials: Specials, text: str) -> list[int]:
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


def markers(text: str) -> tuple[str, str]:
    """Two private-use characters that `text` does not hold."""
    free = (chr(c) for c in range(0xE002, 0xF900) if chr(c) not in text)
    return next(free), next(free)


def unmark(text: str, begin: str, end: str) -> tuple[str, list[tuple[int, int]]]:
    """`text` without the markers, and the (start, end) spans that were between a pair of them
    (a marker the template parted from its pair is dropped)."""
    either = re.escape(begin + end)
    out: list[str] = []
    spans: list[tuple[int, int]] = []
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
