"""Prompt-lookup speculative decoding: draft tokens from the conversation itself, verify them
in one forward pass, keep the longest prefix the model agrees with.

Drafts copy the tokens that followed an earlier occurrence of the conversation's last tokens
(engine/local/prompt_lookup.py); when that match is short, from the prompt's text aligned
whatever its spacing (engine/local/text_lookup.py), or from a draft model (ModelDrafter). Here:
how many tokens to draft, what a verification pass costs, and the verification itself.

Verification runs the pending token and the draft through the model at once; with greedy
sampling it accepts exactly the tokens plain decoding would produce, and with temperature > 0
it applies the speculative-sampling rule (Leviathan et al. 2023, Chen et al. 2023), so the
distribution of the reply is unchanged. `speculative_generate_step` yields the tokens plain decoding's
`generate_step` (engine/local/decoding.py) would, and trims the rejected positions from the cache.

Runs on the engine thread only.
"""

import time
from bisect import bisect_right
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

from engine.context import kinds
from engine.context.conversation import ConversationCache
from engine.errors import ChinwagError
from engine.local.decoding import TokenSampler, plain_step
from engine.local.prompt_lookup import PromptLookup
from engine.local.text_lookup import TextLookup
from engine.types import GenerationParams, speculative_default

MAX_DRAFT = 8  # a draft model's longest draft
MAX_COPY = 16  # a lookup's longest draft: a copy that keeps matching is cheap to verify
# A draft model's drafting pauses while its recent acceptance rate is below this.
MIN_ACCEPT_RATE = 0.3
RATE_DECAY = 0.7  # weight of the past in the acceptance-rate average
DRAFTER_PAUSE = 16  # plain steps before a failing draft model tries again
DRAFTER_MAX_PAUSE = 256
# A lookup drafts by how long the match it copies from is: the rates below are learned per
# match length during the turn, from these starting values (chosen on the tuning set,
# bench/figures/speculative_edits.py's TUNING_CASES; its CASES are held out).
MATCH_BUCKETS = (0, 1, 2, 3, 5, 9)  # the shortest match length of each bucket
FIRST_PRIOR = (0.05, 0.05, 0.35, 0.6, 0.75, 0.9)  # P(the first drafted token is accepted)
MORE_PRIOR = (0.5, 0.5, 0.5, 0.8, 0.85, 0.9)  # P(the next one is, given the one before was)
LEARN_RATE = 0.15  # weight of each new outcome in a bucket's rates
# What a verification pass costs beyond the plain step it replaces, in plain steps: per pass
# and per drafted token, for sizes the model's own passes have not timed yet. A CPU computes
# every fed token (~0.1 step each with OpenBLAS, ~1 with the reference BLAS); a GPU reads the
# weights once for all of them.
VERIFY_COST = {"cpu": (0.25, 0.08), "gpu": (0.05, 0.02)}
TIME_RATE = 0.3  # weight of each timed pass in the cost estimate
# A token lookup whose match is shorter than this asks the text lookup (engine/local/text_lookup.py),
# whose alignments of 6, 10 and 16 characters are rated as matches of these lengths (chosen on
# the tuning set: shorter ones, or rated higher, slowed free chat).
TEXT_BELOW = 3
TEXT_MATCH = {6: 1, 10: 2, 16: 5}


@dataclass
class Verdict:
    accepted: int  # draft tokens the model agreed with
    next_token: int  # the model's own token after them (pending: not yet in the cache)


class ModelDrafter:
    """Greedy drafts from a smaller model with the same tokenizer, on its own per-conversation
    cache; the cache follows the main one (common prefix kept, the rest recomputed)."""

    def __init__(self, model: Any, conv: ConversationCache, prefill: Callable[..., Any]) -> None:
        self.model, self.conv, self.prefill = model, conv, prefill

    def propose(self, ids: list[int], k: int) -> list[int]:
        # A greedy draft is a deterministic proposal: the acceptance rule stays exact.
        logits, _, _ = self.prefill(self.model, self.conv, ids)
        out: list[int] = []
        for i in range(k):
            tok = mx.argmax(logits, axis=-1)
            out.append(tok.item())
            if i + 1 < k:
                logits = self.model(tok[None], cache=self.conv.layers)[:, -1, :]
                self.conv.token_ids.append(out[-1])
        return out

    def follow(self, ids: list[int]) -> None:
        """Trim to what the main cache holds: the rejected part of the last draft leaves."""
        from engine.context.conversation import common_prefix

        self.conv.repair()  # after an error mid-draft: back to its own ids first
        self.conv.truncate(common_prefix(self.conv.token_ids, ids))


class DraftLength:
    """A draft model's k, the number of tokens to draft, from its recent acceptance rate (0 pauses drafting)."""

    def __init__(self, max_draft: int = MAX_DRAFT) -> None:
        self.max_draft = max_draft
        self.rate = 0.5
        self.k = 2

    def record(self, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        self.rate = RATE_DECAY * self.rate + (1 - RATE_DECAY) * (accepted / drafted)
        if self.rate < MIN_ACCEPT_RATE:
            self.k = 0
        elif accepted == drafted:
            self.k = min(self.max_draft, max(2, self.k * 2))
        else:
            self.k = max(1, min(self.k, accepted + 1))


class VerifyCost:
    """What a verification pass costs beyond the plain step it replaces, in plain steps, learned
    from how long the model's passes take. One per loaded model, kept across turns: a draft that
    costs more than it saves stops being made.

    Each pass size is timed on its own (`timed`): a CPU's matrix kernels are not linear in the
    rows fed (here 16 rows cost less than 9). A size not timed yet is estimated from a line,
    `per_pass` + `per_token` per drafted token, that every timed pass teaches.
    """

    def __init__(self, device: str = "cpu") -> None:
        self.per_pass, self.per_token = VERIFY_COST[device]
        self.step: float | None = None  # seconds of a plain step, one token's whole cycle
        self.timed: dict[int, float] = {}  # drafted tokens -> the pass's extra cost

    def plain(self, seconds: float) -> None:
        self.step = seconds if self.step is None else self.step + TIME_RATE * (seconds - self.step)

    def extra(self, drafted: int) -> float:
        """The expected cost of verifying `drafted` tokens, beyond the plain step it replaces."""
        known = self.timed.get(drafted)
        return known if known is not None else self.per_pass + self.per_token * drafted

    def verified(self, drafted: int, seconds: float) -> None:
        """A pass that fed the pending token and `drafted` more added `seconds` to its turn."""
        if self.step is None or self.step <= 0 or drafted < 1:
            return
        extra = max(0.0, seconds / self.step - 1)
        known = self.timed.get(drafted)
        self.timed[drafted] = extra if known is None else known + TIME_RATE * (extra - known)
        if drafted >= 2:
            per_token = max(0.0, (extra - self.per_pass) / drafted)
            self.per_token += TIME_RATE * (per_token - self.per_token)


class PassTimer:
    """Times a turn's plain steps and passes for its VerifyCost, from the moment each returns.

    Plain steps are pipelined: each returns once the step before it has computed, so a plain
    step's cycle is one step. A pass first waits for the plain step before it, and the step right
    after a pass has nothing to overlap with, so the one after that waits for it. What a pass
    adds to the turn is therefore its span from the event before it to the second plain step
    after it, less the plain steps' computing in that span.
    """

    def __init__(self, cost: VerifyCost) -> None:
        self.cost = cost
        self.last: float | None = None  # when the last step or pass returned (None: none yet)
        self.after_plain = False  # the last was a plain step: its own compute is still running
        self.open: list[Any] | None = None  # the last pass: [drafted, seconds, plain computes, steps after it]

    def stepped(self) -> None:
        self._event(0)

    def passed(self, drafted: int) -> None:
        self._event(drafted)

    def _event(self, drafted: int) -> None:
        now = time.perf_counter()
        cycle = None if self.last is None else now - self.last
        self.last, after_plain, self.after_plain = now, self.after_plain, not drafted
        if cycle is None:  # the turn's first: what it waited for is not known
            return
        if self.open is not None and not drafted:
            self.open[1] += cycle
            self.open[3] += 1
            if self.open[3] == 2:  # it waited for the first step's compute: the pipeline is back
                self.open[2] += 1
                self._close()
            return
        if self.open is not None:
            self._close()
        if drafted:
            self.open = [drafted, cycle, int(after_plain), 0]
        elif after_plain:
            self.cost.plain(cycle)

    def _close(self) -> None:
        drafted, seconds, computes, _ = self.open or (0, 0.0, 0, 0)
        self.open = None
        if self.cost.step:
            self.cost.verified(drafted, seconds - computes * self.cost.step)


class CopyLength:
    """How many tokens a lookup drafts, from how long the match it copies from is.

    Per bucket of match lengths, two rates learned during the turn: the first drafted token's
    acceptance, and each later one's given the one before it was. A draft of k tokens is worth
    its verification when the tokens it is expected to add outweigh the pass's extra cost; k is
    the size that gains most (0: a plain step). Free guesses on plain steps teach the first rate.
    """

    def __init__(self, cost: VerifyCost, max_draft: int = MAX_COPY) -> None:
        self.max_draft = max_draft
        self.cost = cost
        self.first, self.more = list(FIRST_PRIOR), list(MORE_PRIOR)

    @staticmethod
    def bucket(match: int) -> int:
        return bisect_right(MATCH_BUCKETS, match) - 1

    def size(self, match: int, room: int = MAX_COPY) -> int:
        b = self.bucket(match)
        p, expected, best, best_k = self.first[b], 0.0, 0.0, 0
        for k in range(1, min(self.max_draft, room) + 1):
            expected += p  # the k-th token: accepted with probability p
            gain = expected - self.cost.extra(k)
            if gain > best:
                best, best_k = gain, k
            p *= self.more[b]
        return best_k

    def _learn(self, rates: list[float], b: int, outcome: bool) -> None:
        rates[b] += LEARN_RATE * (outcome - rates[b])

    def record(self, match: int, drafted: int, accepted: int) -> None:
        """A draft of `drafted` tokens from a match of `match` had its first `accepted` right."""
        b = self.bucket(match)
        self._learn(self.first, b, accepted > 0)
        for j in range(1, min(accepted + 1, drafted)):  # token j+1 was judged: token j was right
            self._learn(self.more, b, j < accepted)

    def guessed(self, match: int, hit: bool) -> None:
        """A free guess (not verified, checked against the token that came) from a match of `match`."""
        self._learn(self.first, self.bucket(match), hit)


class Speculator:
    """One turn's drafting and verification state.

    The lookup's guess of the next token is always at hand: made when the last token joined the
    index, scored when the next one arrives (as the pending token of a draft, or from a plain
    step). Whether to draft is decided from the match that guess came from, so a plain step
    that stays plain never waits for its token before the next one is queued.
    """

    def __init__(
        self,
        prompt_ids: list[int],
        sampling: "Sampling",
        max_draft: int = MAX_DRAFT,
        drafter: "ModelDrafter | None" = None,
        cost: VerifyCost | None = None,
        tokenizer: Any = None,
    ) -> None:
        self.index = PromptLookup(prompt_ids)
        self.length = DraftLength(max_draft)
        self.cost = cost or VerifyCost(device_kind())
        self.copy = CopyLength(self.cost)
        # Drafts from the prompt's text whatever its spacing, with acceptance rates of their own.
        self.text = TextLookup(tokenizer, prompt_ids) if tokenizer is not None and drafter is None else None
        self.text_copy = CopyLength(self.cost)
        self._from_text = False  # the last draft (or guess) came from the text lookup
        self.sampling = sampling
        self.drafter = drafter
        # A paused draft model has no free guesses to score: it retries after a pause that
        # doubles each time it fails again.
        self._pause, self._paused_for = DRAFTER_PAUSE, 0
        self.drafted = self.accepted = 0
        self._ahead = False  # the pending token is in the index already (draft() put it there)
        self._guess: int | None = None  # the lookup's guess of the next token to arrive
        self._guess_match = 0  # the length of the match the guess came from
        self._match = 0  # the same for the last draft
        self._want = True  # the next step should look at its pending token and maybe draft

    @property
    def drafting(self) -> bool:
        if self.drafter is not None:
            return self.length.k > 0
        return self._want

    def _index(self, tokens: list[int]) -> None:
        self.index.extend(tokens)
        if self.text is not None:
            self.text.extend(tokens)

    def _rates(self) -> CopyLength:
        """The rates of the lookup the last draft or guess came from."""
        return self.text_copy if self._from_text else self.copy

    def _arrived(self, tok: int) -> None:
        """tok is the next token: score the guess made for it, and index it."""
        if self._guess is not None:
            self._rates().guessed(self._guess_match, self._guess == tok)
        self._index([tok])

    def _propose(self, k: int) -> tuple[list[int], int]:
        """The better draft of up to k tokens, and its match: the token lookup's, or the text lookup's
        when the token lookup's match is short and the text's rates promise more."""
        proposal, match = self.index.propose(k), self.index.length
        self._from_text = False
        if self.text is None or (proposal and match >= TEXT_BELOW):
            return proposal, match
        text = self.text.propose(k)
        text_match = TEXT_MATCH.get(self.text.length, 0)
        if text and (not proposal or self.text_copy.size(text_match, k) > self.copy.size(match, k)):
            self._from_text = True
            return text, text_match
        return proposal, match

    def _guess_next(self) -> None:
        guess, self._guess_match = self._propose(1)
        self._guess = guess[0] if guess else None
        self._decide()

    def _decide(self) -> None:
        """Draft at the next step if it would pay once the guess proves right (its match one token longer)."""
        self._want = self._guess is not None and self._rates().size(self._guess_match + 1) > 0

    def observe(self, tok: int) -> None:
        """A token emitted by a plain step."""
        if self.drafter is not None:
            if not self.drafting:
                self._paused_for += 1
                if self._paused_for >= self._pause:
                    self._paused_for, self._pause = 0, min(2 * self._pause, DRAFTER_MAX_PAUSE)
                    self.length.k, self.length.rate = 1, MIN_ACCEPT_RATE
            if not self._ahead:
                self._index([tok])
            self._ahead = False
            return
        if self._ahead:
            self._ahead = False  # draft() indexed tok, and made the guess of the token after it
            self._decide()
            return
        self._arrived(tok)
        self._guess_next()

    def draft(self, pending: int, room: int) -> list[int]:
        """Tokens to verify after `pending` (the sampled token not yet in the cache)."""
        self._ahead = True
        if self.drafter is not None:
            self._index([pending])
            k = min(self.length.k, room)
            return self.drafter.propose(list(self.index.ids), k) if k > 0 else []
        self._arrived(pending)
        proposal, self._match = self._propose(min(room, self.copy.max_draft))
        k = self._rates().size(self._match, room) if proposal else 0
        if k == 0:  # a plain step follows: its guess is this proposal's first token
            self._guess, self._guess_match = (proposal[0] if proposal else None), self._match
        else:
            self._guess = None
        return proposal[:k]

    def finish(self, ids: list[int]) -> None:
        """The turn is over: the draft model's cache holds what the main one holds."""
        if self.drafter is not None:
            self.drafter.follow(ids)

    def verify(self, model: Any, layers: list[Any], pending: int, draft: list[int], history: mx.array) -> Verdict:
        """Run pending + draft through the model (writing k+1 positions); judge the draft."""
        logits = model(mx.array([pending] + draft)[None], cache=layers)[0]
        rows = self.sampling.process(logits, history, [pending] + draft)
        verdict = self.sampling.judge(rows, draft)
        self.judged(draft, verdict)
        return verdict

    def judged(self, draft: list[int], verdict: Verdict) -> None:
        """The model judged `draft`: learn from it, and index its accepted tokens."""
        self.drafted += len(draft)
        self.accepted += verdict.accepted
        if self.drafter is not None:
            self.length.record(len(draft), verdict.accepted)
        else:
            self._rates().record(self._match, len(draft), verdict.accepted)
        if not self._from_text:
            self.index.judged(verdict.accepted)
        self._index(draft[: verdict.accepted])
        # The model's own next token comes as the next pending one: look at it.
        self._ahead, self._guess, self._want = False, None, True


class Sampling:
    """The distribution plain decoding samples from, row by row, and the acceptance rule."""

    def __init__(
        self, temperature: float, top_p: float, top_k: int, min_p: float, processors: list[Any], context: int
    ) -> None:
        self.temperature = temperature
        self.filters: list[Callable[[mx.array], mx.array]] = []
        # The order and arguments of mlx-lm's make_sampler, which plain decoding uses.
        if 0 < top_p < 1.0:
            self.filters.append(lambda x: apply_top_p(x, top_p))
        if min_p != 0.0:
            self.filters.append(lambda x: apply_min_p(x, min_p, 1))
        if top_k > 0:
            # As plain decoding: a top_k the vocabulary does not exceed keeps every token.
            self.filters.append(lambda x: x if top_k >= x.shape[-1] else apply_top_k(x, top_k))
        self.processors = processors
        self.context = context

    def process(self, logits: mx.array, history: mx.array, fed: list[int]) -> mx.array:
        """Log-probabilities of each row, processed as plain decoding would at that position; for
        greedy decoding the processed logits, whose argmax is the same (normalising a pass's rows
        cost ~0.7 ms each on the CPU, ~0.01 of a plain step per drafted token)."""
        if self.processors:
            rows: list[mx.array] = []
            for i in range(logits.shape[0]):
                # Row i follows the fed tokens 0..i: each is in the history by then.
                seen = mx.concatenate([history, mx.array(fed[: i + 1])])[-self.context :]
                row = logits[i : i + 1]
                for p in self.processors:
                    row = p(seen, row)
                rows.append(row)
            logits = mx.concatenate(rows, axis=0)
        return logits if self.temperature == 0 else logits - mx.logsumexp(logits, axis=-1, keepdims=True)

    def judge(self, logprobs: mx.array, draft: list[int]) -> Verdict:
        if self.temperature == 0:
            best = mx.argmax(logprobs, axis=-1).tolist()
            n = 0
            while n < len(draft) and best[n] == draft[n]:
                n += 1
            return Verdict(n, best[n])
        for f in self.filters:
            logprobs = f(logprobs)
        probs = mx.softmax(logprobs * (1.0 / self.temperature), axis=-1)
        k = len(draft)
        # The draft is deterministic (q = one-hot), so draft token i is accepted with
        # probability p_i(d_i); on rejection, sample from p_i with d_i removed.
        p_draft = probs[mx.arange(k), mx.array(draft)]
        coins = mx.random.uniform(shape=(k,))
        keep = (coins < p_draft).tolist()
        n = 0
        while n < k and keep[n]:
            n += 1
        row = probs[n]
        if n < k:
            row = row.at[draft[n]].multiply(0.0)  # the residual max(0, p - q)
        token = mx.random.categorical(mx.log(row)).item()
        return Verdict(n, token)


def speculative_generate_step(
    model: Any, conv: ConversationCache, y: mx.array, sampling: TokenSampler, spec: Speculator, room: int
) -> Generator[int, None, None]:
    """The tokens of plain decoding from y, several per pass while drafts are accepted, forever.

    `room`: how many tokens the consumer may take; a draft never passes it, so the cache stays
    within the turn's limit. Drafting pauses and resumes with its acceptance rate (plain steps
    meanwhile). Each yielded token is in the cache and `conv.token_ids`; the rejected draft, and
    accepted tokens the consumer did not take (closing this generator), leave the cache.
    """
    yielded, timer = 0, PassTimer(spec.cost)
    while True:
        draft: list[int] = []
        # The first token is the prompt's own: shown at once, not after a pass that checks a draft behind it.
        if spec.drafting and yielded:
            pending = y.item()
            draft = spec.draft(pending, room - yielded - 1)
        if not draft:
            tok, y = plain_step(model, conv, y, sampling)
            timer.stepped()
            spec.observe(tok)
            yielded += 1
            yield tok
            continue
        verdict = spec.verify(model, conv.layers, pending, draft, sampling.history)
        timer.passed(len(draft))
        out = [pending] + draft[: verdict.accepted]
        sampling.saw(mx.array(out))
        try:
            for tok in out:
                conv.token_ids.append(tok)
                yielded += 1
                yield tok
        finally:
            conv.repair()  # the rejected draft, and accepted tokens past a stop, leave the cache
        y = mx.array([verdict.next_token])


def speculation_enabled(params: GenerationParams, draft_model: Any | None = None) -> bool:
    """The params' switch; else on with a draft model, or the default of this thread's backend."""
    if params.speculative is not None:
        return bool(params.speculative)
    if draft_model is not None:
        return True
    return speculative_default(device_kind())


def device_kind() -> str:
    """ "cpu" or "gpu": what this thread's MLX computes on."""
    return "cpu" if mx.default_device().type == mx.cpu else "gpu"


def check_vocabularies(
    tokenizer: Any, draft_vocab: dict[str, int], name: str, draft_name: str, where: str = ""
) -> None:
    """A draft model must tokenize exactly as the main model does (`draft_vocab`: its token -> id)."""
    a, b = tokenizer.get_vocab(), draft_vocab
    if a != b:
        detail = f"{len(b)} tokens against {len(a)}" if len(a) != len(b) else "same size, different tokens"
        raise ChinwagError(
            f"draft model {draft_name} cannot draft for {name}: their vocabularies differ ({detail}){where}"
        )


def can_speculate(layers: list[Any]) -> bool:
    """Attention caches trim a rejected draft back exactly (a window within its reserve, which
    outlasts any draft); recurrent state cannot go back a token."""
    return all(kinds.trims_exactly(c) for c in kinds.leaves(layers))
