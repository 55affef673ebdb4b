"""Drafts copied from the prompt's text whatever its spacing: for edits that change only whitespace.

A reformat keeps every character of the source but its spacing (`result=[]` comes back as
`result = []`), so its tokens never match the source's and a token lookup
(engine/local/prompt_lookup.py's PromptLookup) loses its place at every operator. This lookup
aligns the reply with the prompt on their non-space characters alone, and copies the prompt on
from there as text, spaced as the model spaced the same character pairs so far (and indented at
the ratio it re-indented by); the tokenizer turns that text into the draft. Verification keeps
only what the model agrees with, so a wrong guess costs a pass, never a token.

Runs on the engine thread only.
"""

import re
from typing import Any

from engine.context.prompt import encode_text

SOURCE_TOKENS = 32_768  # the prompt's end that is searched: a long chat's start is not being edited
TAIL_TOKENS = 32  # the reply's last tokens decoded to align it (an O(1) step, not the whole reply)
MATCHES = (16, 10, 6)  # non-space characters aligned, longest first; fewer is a coincidence
DRAFT_CHARS_PER_TOKEN = 6  # text built per drafted token: enough for any token the draft needs
NEAR = 200  # characters before the last alignment a new one may be and still count as "near"
MAX_LEARNED = 512  # spacings remembered per turn


def _kind(c: str) -> str:
    """A character's class for spacing learned on one pair to apply to its like."""
    if c.isalnum() or c == "_":
        return "w"
    if c in "=<>!+-*/%&|^":
        return "o"
    if c in ",;:":
        return "p"
    if c in "()[]{}":
        return "b"
    return c


def _key(a: str, b: str, space: str) -> tuple[str | int, ...]:
    """The exact key of the spacing between a and b (a line break's by its indentation)."""
    if "\n" in space:
        return ("\n", space.count("\n"), len(space.rsplit("\n", 1)[1]))
    return ("w" if _kind(a) == "w" else a, "w" if _kind(b) == "w" else b, space)


class TextLookup:
    """Copies the prompt's text on from where the reply's non-space characters align with it."""

    def __init__(self, tokenizer: Any, prompt_ids: list[int]) -> None:
        self.tokenizer = tokenizer
        text = self._decode(prompt_ids[-SOURCE_TOKENS:])
        self.text = text
        self.where = [i for i, c in enumerate(text) if not c.isspace()]  # skeleton index -> text index
        self.skeleton = "".join(text[i] for i in self.where)
        self.reply: list[int] = []
        self.spacing: dict[tuple[str | int, ...], str] = {}  # how the model spaced a pair the source spaced so
        self.indent_ratio: float | None = None  # the model's indentation over the source's
        self.at: int | None = None  # the text index of the last alignment
        self.length = 0  # non-space characters the last proposal aligned (0: none)

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def extend(self, tokens: list[int]) -> None:
        self.reply.extend(tokens)

    def propose(self, k: int) -> list[int]:
        """Up to k tokens of the prompt's text after where the reply's last characters align."""
        self.length = 0
        if k <= 0 or not self.skeleton:
            return []
        tail = self._decode(self.reply[-TAIL_TOKENS:])
        tail_where = [i for i, c in enumerate(tail) if not c.isspace()]
        found = self._align("".join(tail[i] for i in tail_where))
        if found is None:
            return []
        end, n = found
        self._learn(tail, tail_where, end, n)
        self.at, self.length = self.where[end], n
        text = self._continue(end, k * DRAFT_CHARS_PER_TOKEN)
        written = tail[tail_where[-1] + 1 :]  # the reply's spacing after its last character
        if not text.startswith(written):
            return []
        text = text[len(written) :]
        if not text:
            return []
        return encode_text(self.tokenizer, text)[:k]  # the prompt's text: a special token's string is text

    def _align(self, tail: str) -> tuple[int, int] | None:
        """(the skeleton index the tail's last character aligns with, characters aligned), or None."""
        for n in MATCHES:
            if len(tail) < n:
                continue
            hits = [m.start() + n - 1 for m in re.finditer(re.escape(tail[-n:]), self.skeleton)]
            if not hits:
                continue
            if self.at is not None:
                near = [h for h in hits if self.where[h] >= self.at - NEAR]
                if near:
                    return min(near, key=lambda h: abs(self.where[h] - self.at)), n  # type: ignore[operator]
            return hits[-1], n
        return None

    def _learn(self, tail: str, tail_where: list[int], end: int, n: int) -> None:
        """The spacing between each aligned pair: the reply's, for the source's."""
        text, where = self.text, self.where
        for t in range(1, n):
            g = tail[tail_where[-n + t - 1] + 1 : tail_where[-n + t]]
            s0 = end - n + t
            s = text[where[s0] + 1 : where[s0 + 1]]
            a, b = text[where[s0]], text[where[s0 + 1]]
            self._remember(_key(a, b, s), g)
            if "\n" in s:
                source_indent, reply_indent = s.rsplit("\n", 1)[1], g.rsplit("\n", 1)[-1]
                if "\n" in g and source_indent and not reply_indent.strip(" ") and not source_indent.strip(" "):
                    self.indent_ratio = len(reply_indent) / len(source_indent)
            else:
                self._remember(("~", _kind(a), _kind(b), s), g)

    def _remember(self, key: tuple[str | int, ...], space: str) -> None:
        self.spacing.pop(key, None)
        self.spacing[key] = space
        if len(self.spacing) > MAX_LEARNED:
            del self.spacing[next(iter(self.spacing))]

    def _space(self, a: str, b: str, space: str) -> str:
        """How the model will likely space a and b, which the source spaced by `space`."""
        known = self.spacing.get(_key(a, b, space))
        if known is not None:
            return known
        if "\n" in space:
            head, indent = space.rsplit("\n", 1)
            if self.indent_ratio is not None and not indent.strip(" "):
                return head + "\n" + " " * round(len(indent) * self.indent_ratio)
            return space
        return self.spacing.get(("~", _kind(a), _kind(b), space), space)

    def _continue(self, end: int, chars: int) -> str:
        """The source's text after skeleton index `end`, about `chars` long, respaced."""
        text, where, out, size = self.text, self.where, list[str](), 0
        j = end
        while j + 1 < len(where) and size < chars:
            a, b = text[where[j]], text[where[j + 1]]
            piece = self._space(a, b, text[where[j] + 1 : where[j + 1]]) + b
            out.append(piece)
            size += len(piece)
            j += 1
        return "".join(out)
