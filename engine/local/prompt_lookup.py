"""Where a lookup draft comes from: the tokens that followed an earlier occurrence of the
conversation's last tokens (llama.cpp's lookup decoding), from a copy position kept across the
model's substitutions (an edit changes a few tokens of the text it copies), otherwise from the
longest earlier match. engine/local/speculative.py decides how many to draft and verifies them.

Runs on the engine thread only.
"""

from bisect import bisect_left, bisect_right

MAX_NGRAM = 3
MAX_MATCH = 64  # tokens compared when measuring how long an earlier match is
MAX_CANDIDATES = 32  # earlier occurrences of the n-gram compared, the latest ones
MAX_MISSES = 12  # mismatched tokens in a row before the copy position is dropped
JUMP = 4  # tokens by which a match elsewhere must be longer than the copy's to move it
WINDOW_BACK, WINDOW_AHEAD = 32, 64  # "near the copy position", in tokens
MAX_SUBSTITUTION = 16  # the longest replacement remembered, in tokens
MAX_SUBSTITUTIONS = 32  # replacements remembered at once
SYNC = 2  # tokens back in step before a replacement is remembered: one alone is often chance


class PromptLookup:
    """Drafts copied from earlier in the conversation, with a copy position that survives edits.

    `cursor` is where the copy stands in `ids`: the position whose token is expected next. It
    moves on with every token, matched or not, so after the model substitutes a token (a rename)
    the draft continues from the source after the replaced one; after more than MAX_MISSES
    mismatches in a row it is dropped. A match of the conversation's last tokens near the cursor
    (an insertion or deletion of a few tokens) moves it there; elsewhere, the longest earlier
    match is taken (not the latest), and it must beat the cursor by JUMP tokens to move it.
    Once the copy is back in step for SYNC tokens, what replaced what is remembered, and later drafts apply it
    (a rename renames every occurrence) until the model declines it.
    """

    def __init__(self, ids: list[int]) -> None:
        self.ids: list[int] = []
        # n-gram -> the positions of the token that followed each occurrence, in order.
        self.follow: list[dict[tuple[int, ...], list[int]]] = [{} for _ in range(MAX_NGRAM + 1)]
        self.cursor: int | None = None
        self.misses = 0  # tokens since the last one that matched the copy
        self.length = 0  # how long the match of the last proposal was (0: a substitution's guess)
        self._diverged: tuple[int, int] = (0, 0)  # (source position, position in ids) of the first of those misses
        # (diverged, back in step, tokens in step since) of a replacement not yet confirmed
        self._resync: tuple[tuple[int, int], tuple[int, int], int] | None = None
        self.substitutions: dict[tuple[int, ...], tuple[int, ...]] = {}  # replaced source tokens -> what replaced them
        self._applied: list[tuple[int, int, tuple[int, ...]]] = []  # the last draft's (start, end, replaced)
        self.extend(ids)

    def extend(self, tokens: list[int]) -> None:
        ids = self.ids
        for tok in tokens:
            if self.cursor is not None:
                if self.cursor < len(ids) and ids[self.cursor] == tok:
                    if self.misses:
                        self._back_in_step(self._diverged, (self.cursor, len(ids)), 1)
                    elif self._resync is not None:
                        began, back, synced = self._resync
                        self._back_in_step(began, back, synced + 1)
                    self.misses = 0
                else:
                    if not self.misses:
                        # After a chance match, the replacement began where the copy first diverged.
                        self._diverged = self._resync[0] if self._resync else (self.cursor, len(ids))
                    self._resync = None
                    self.misses += 1  # a substitution: the copy skips the token it replaced
                self.cursor += 1
                if self.misses > MAX_MISSES or self.cursor > len(ids) + 1:
                    self.cursor, self._resync = None, None
            ids.append(tok)
            # The n-grams ending just before this token now have a follower (the last never does).
            end = len(ids) - 2
            for n in range(1, min(MAX_NGRAM, end + 1) + 1):
                self.follow[n].setdefault(tuple(ids[end + 1 - n : end + 1]), []).append(end + 1)

    def _back_in_step(self, start: tuple[int, int], end: tuple[int, int], synced: int) -> None:
        """The copy has matched `synced` tokens since ids[start[1]:end[1]] replaced ids[start[0]:end[0]]."""
        self._resync = (start, end, synced)
        if synced >= SYNC:
            self._remember(start, end)
            self._resync = None

    def _remember(self, start: tuple[int, int], end: tuple[int, int]) -> None:
        """ids[start[1]:end[1]] replaced the source's ids[start[0]:end[0]]."""
        old, new = tuple(self.ids[start[0] : end[0]]), tuple(self.ids[start[1] : end[1]])
        if 0 < len(old) <= MAX_SUBSTITUTION and 0 < len(new) <= MAX_SUBSTITUTION and old != new:
            self.substitutions.pop(old, None)
            self.substitutions[old] = new  # the latest last: the oldest goes first
            if len(self.substitutions) > MAX_SUBSTITUTIONS:
                del self.substitutions[next(iter(self.substitutions))]

    def _match(self, p: int) -> int:
        """How many tokens before p equal the conversation's last tokens."""
        ids, last, n = self.ids, len(self.ids) - 1, 0
        while n < MAX_MATCH and n < p and ids[p - 1 - n] == ids[last - n]:
            n += 1
        return n

    def _candidates(self, near: int | None) -> list[int]:
        """Follow positions of the longest n-gram that has some (within WINDOW of `near` if given)."""
        ids = self.ids
        for n in range(min(MAX_NGRAM, len(ids)), 0, -1):
            found = self.follow[n].get(tuple(ids[-n:]), [])
            if near is not None:
                lo, hi = bisect_left(found, near - WINDOW_BACK), bisect_right(found, near + WINDOW_AHEAD)
                found = found[lo:hi]
            if found:
                return found[-MAX_CANDIDATES:]
        return []

    def _choose(self) -> tuple[int | None, int]:
        """Where to copy from, and the length of the match there (0: the substitution's guess)."""
        c = self.cursor if self.cursor is not None and self.cursor < len(self.ids) else None
        choice, length = None, 0
        if c is not None:
            near = self._candidates(c)
            if near:
                # The longest match; then the nearest to the copy position.
                length, _, p = max((self._match(p), -abs(p - c), p) for p in near)
                # Right after a substitution, a one-token match elsewhere is weaker than the copy.
                if length >= (2 if self.misses == 1 else 1):
                    choice = p
            if choice is None:
                choice, length = c, 0
        anywhere = self._candidates(None)
        if anywhere:
            best, p = max((self._match(p), p) for p in anywhere)
            if choice is None or best >= length + JUMP:
                choice, length = p, best
        return choice, length

    def propose(self, k: int) -> list[int]:
        """Up to k tokens to copy from where the conversation's last tokens occurred earlier."""
        self._applied = []
        if k <= 0 or not self.ids:
            return []
        choice, self.length = self._choose()
        if choice is None:
            return []
        if self.length:
            if self.misses and choice >= self.length:  # back in step: what was replaced
                self._back_in_step(self._diverged, (choice - self.length, len(self.ids) - self.length), self.length)
            elif choice != self.cursor:
                self._resync = None  # the copy moved: what it was confirming is elsewhere
            self.cursor, self.misses = choice, 0
        return self._copy(choice, k)

    def _copy(self, q: int, k: int) -> list[int]:
        """k tokens from position q on, with the remembered substitutions applied."""
        ids, out = self.ids, list[int]()
        while len(out) < k and q < len(ids):
            for old, new in self.substitutions.items():
                if ids[q] == old[0] and tuple(ids[q : q + len(old)]) == old:
                    self._applied.append((len(out), len(out) + len(new), old))
                    out.extend(new)
                    q += len(old)
                    break
            else:
                out.append(ids[q])
                q += 1
        return out[:k]

    def judged(self, accepted: int) -> None:
        """The last draft's first `accepted` tokens were right: a substitution the model declined is forgotten."""
        for start, end, old in self._applied:
            if start <= accepted < end:
                self.substitutions.pop(old, None)
        self._applied = []
