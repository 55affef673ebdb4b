"""One chat turn on the engine thread: trim to the common prefix, prefill the rest, decode.

Decoding is a token generator (plain: engine/local/decoding.py, speculative:
engine/local/speculative.py) and one consumer here, `run_turn`, that emits each token's text
and ends the turn (end of sequence, Stop, max_tokens, the context limit).

Invariant: when a turn ends for any reason, the conversation's cache holds exactly its
`token_ids`: the prompt plus every token emitted.
"""

import time
from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import mlx.core as mx

from engine.context.conversation import ConversationCache, common_prefix
from engine.errors import ChinwagError
from engine.local.constrained import Constraint
from engine.local.decoding import REPETITION_CONTEXT, TokenSampler, generate_step
from engine.local.speculative import (
    ModelDrafter,
    Sampling,
    Speculator,
    VerifyCost,
    can_speculate,
    speculation_enabled,
    speculative_generate_step,
)
from engine.log import report_bug
from engine.types import FinishReason, GenerationParams, TextDelta, TurnStats

# Prefill chunks start small and double while a chunk takes under PREFILL_CHUNK_SECONDS:
# Stop is checked between chunks, and speed ranges from ~10 tokens/s (quantized on a CPU)
# to thousands (a GPU), where bigger chunks are faster.
PREFILL_FIRST_STEP = 32
PREFILL_MAX_STEP = 512
PREFILL_CHUNK_SECONDS = 0.25
SPECULATION_OFF = "speculative decoding is off for this model: its recurrent state cannot go back a rejected draft"
# Verification would need the mask at every drafted position: constrained replies decode one token a pass.
SPECULATION_OFF_CONSTRAINED = "speculative decoding is off while the reply is constrained to JSON or a tool call"


@dataclass
class TurnInput:
    prompt_ids: list[int]
    context_limit: int
    dropped_messages: int = 0
    progress: Callable[[int, int], None] | None = None  # (done, total) while reading the prompt
    # A continued reply: its last `written` prompt ids are its text so far (shown already).
    written: int = 0
    # Where each message's piece ends in the prompt: checkpoints are taken there (engine/context/checkpoints.py).
    marks: tuple[int, ...] = ()


def reuse_prefix(conv: ConversationCache, prompt_ids: list[int], keep: int) -> int:
    """Bring the cache back to its longest common prefix with the prompt, at most `keep` tokens
    (or to the checkpoint before it); returns the tokens reused."""
    return conv.truncate(min(common_prefix(conv.token_ids, prompt_ids), keep))


def extend(
    model: Any,
    conv: ConversationCache,
    ids: list[int],
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int], None] | None = None,
    check_first: bool = True,
    marks: tuple[int, ...] = (),
) -> int:
    """Compute `ids` into the cache in chunks, without logits; returns how many were computed.

    `should_stop` is asked before each chunk (not the first unless `check_first`), so
    work ends within one chunk; the cache always holds exactly `conv.token_ids`. A chunk ends
    at each of `marks` (positions in the conversation), where a checkpoint is taken.
    """
    start, step, base = 0, PREFILL_FIRST_STEP, len(conv.token_ids)
    ahead = sorted(m - base for m in marks if base < m <= base + len(ids))
    while start < len(ids):
        if (start or check_first) and should_stop():
            return start
        end = min([start + step] + [m for m in ahead if m > start])
        chunk = ids[start:end]
        began = time.perf_counter()
        model(mx.array(chunk)[None], cache=conv.layers)
        # Evaluate the cache alone: the output layer's logits at these positions are never used.
        conv.eval()
        conv.token_ids.extend(chunk)  # the ids follow only once computed
        start += len(chunk)
        if start in ahead:
            conv.checkpoint()
        if progress is not None:
            progress(start)
        if time.perf_counter() - began < PREFILL_CHUNK_SECONDS:
            step = min(2 * step, PREFILL_MAX_STEP)
    return start


def prefill(
    model: Any,
    conv: ConversationCache,
    prompt_ids: list[int],
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int, int], None] | None = None,
    marks: tuple[int, ...] = (),
) -> tuple[mx.array | None, int, int]:
    """Reuse the longest common prefix, compute the rest; returns (last logits, reused, prefilled).

    Logits are None if `should_stop` said so between chunks. `progress(done, total)` is
    called once the prompt is read (`total` being the tokens computed) and, when that takes
    more than one chunk, also before the first chunk and after each one. Checkpoints are taken
    at `marks` and before the last token (where a regenerate goes back to).
    """
    reused = reuse_prefix(conv, prompt_ids, len(prompt_ids) - 1)  # always compute at least one token
    rest = prompt_ids[reused:]
    body, last = rest[:-1], rest[-1:]
    report = (lambda done: progress(done, len(rest))) if progress is not None else None
    # A prompt read in one chunk reports once, when read: its size, and no progress to show.
    chunked = report if len(rest) > PREFILL_FIRST_STEP else None
    if chunked is not None:
        chunked(0)
    done = extend(model, conv, body, should_stop, chunked, check_first=False, marks=(*marks, len(prompt_ids) - 1))
    if done < len(body) or (body and should_stop()):
        return None, reused, done
    logits = model(mx.array(last)[None], cache=conv.layers)[:, -1, :]
    mx.eval(logits)
    conv.token_ids.extend(last)
    if report is not None:
        report(len(rest))
    return logits, reused, len(rest)


def prefill_ahead(
    model: Any,
    conv: ConversationCache,
    target_ids: list[int],
    should_stop: Callable[[], bool],
    progress: Callable[[int, int], None] | None = None,
    marks: tuple[int, ...] = (),
) -> tuple[int, int, bool]:
    """Background work: make the cache hold `target_ids`; returns (reused, computed, finished).

    `progress(done, total)` is called before the first chunk and after each one (`total`: the
    ids not reused, so the target's ids held are `len(target_ids) - total + done`). Checkpoints
    at `marks` and at the end let a draft that then changes go back only to where it differs.
    """
    if should_stop():
        return common_prefix(conv.token_ids, target_ids), 0, False
    reused = reuse_prefix(conv, target_ids, len(target_ids))
    rest = target_ids[reused:]
    report = (lambda done: progress(done, len(rest))) if progress is not None else None
    if report is not None:
        report(0)  # before the first chunk (also when all of it was held already: nothing left)
    try:
        done = extend(model, conv, rest, should_stop, report, marks=(*marks, len(target_ids)))
    except Exception:
        conv.repair()  # a failed chunk: the cache goes back to exactly its token_ids
        raise
    return reused, done, reused + done == len(target_ids)


class _Reply:
    """The consumer: takes tokens from a generator, emits their text, decides when the turn ends."""

    def __init__(
        self,
        tokenizer: Any,
        turn: TurnInput,
        params: GenerationParams,
        should_stop: Callable[[], bool],
        emit: Callable[[Any], None],
        started: float,
    ) -> None:
        self.eos = set(tokenizer.eos_token_ids)
        self.detok = tokenizer.detokenizer
        self.detok.reset()
        if turn.written:  # the text so far, read first: what follows decodes in its context
            for tok in turn.prompt_ids[-turn.written :]:  # (a leading space is not dropped, a character not split)
                self.detok.add_token(tok)
            _ = self.detok.last_segment
        self.should_stop, self.emit, self.started = should_stop, emit, started
        self.max_new = max(0, min(params.max_tokens, turn.context_limit - len(turn.prompt_ids)))
        self.whole = self.max_new == params.max_tokens  # False: the context limit cuts the reply
        self.emitted: list[int] = []
        self.first_at: float | None = None

    def take(self, tokens: Generator[int, None, None], leave: Callable[[], bool] | None = None) -> FinishReason | None:
        """Consume tokens until the turn ends, or (None) until `leave` says so after a token; the
        generator is closed then (it trims what was not taken)."""
        with closing(tokens):
            for tok in tokens:
                ended = self.push(tok)
                if ended:
                    return ended
                if leave is not None and leave():
                    return None
        return FinishReason.LENGTH  # not reached: the generators never end

    def push(self, tok: int) -> FinishReason | None:
        """Emit one token; returns why the turn ends, or None."""
        self.emitted.append(tok)
        if self.first_at is None:
            self.first_at = time.perf_counter()
        if tok in self.eos:
            return FinishReason.STOP
        self.detok.add_token(tok)
        # One event per token, text or not: a partial UTF-8 character has none yet.
        self.emit(TextDelta(self.detok.last_segment, (tok,)))
        if self.should_stop():
            return FinishReason.CANCELLED
        if len(self.emitted) >= self.max_new:
            return FinishReason.LENGTH if self.whole else FinishReason.CONTEXT
        return None

    def flush(self) -> None:
        """The text the detokenizer still holds."""
        self.detok.finalize()
        tail = self.detok.last_segment
        if tail:
            self.emit(TextDelta(tail, ()))

    @property
    def ttft(self) -> float:
        return self.first_at - self.started if self.first_at is not None else 0.0

    def decode_tps(self) -> float:
        decode_time = time.perf_counter() - self.first_at if self.first_at else 0.0
        return max(0, len(self.emitted) - 1) / decode_time if decode_time > 0 else 0.0


def _speculator(
    params: GenerationParams,
    tokenizer: Any,
    drafter: ModelDrafter | None,
    conv: ConversationCache,
    prompt_ids: list[int],
    sampling: TokenSampler,
    cost: VerifyCost | None,
) -> Speculator | None:
    """One turn's Speculator, or None when speculation is off or the cache cannot trim back."""
    if not (speculation_enabled(params, drafter) and can_speculate(conv.layers)) or sampling.constraint:
        return None
    rule = Sampling(
        params.temperature, params.top_p, params.top_k, params.min_p, sampling.processors, REPETITION_CONTEXT
    )
    return Speculator(prompt_ids, rule, drafter=drafter, cost=cost, tokenizer=tokenizer)


def _after_reply(conv: ConversationCache) -> None:
    """The checkpoint after the turn; a failure here costs a later prefill, never the reply written."""
    try:
        conv.checkpoint()
    except Exception as e:  # noqa: BLE001 - the reply stands; the bug is logged with its traceback
        report_bug(e, "a checkpoint after a reply")
        conv.checkpoints.clear()


def _speculation_off(params: GenerationParams, drafter: ModelDrafter | None) -> str:
    """Why a turn that asked for speculation ran without it ("" if it did not ask)."""
    if not speculation_enabled(params, drafter):
        return ""
    return SPECULATION_OFF_CONSTRAINED if params.response_format else SPECULATION_OFF


class TurnRun:
    """One turn in three steps: `start` (prefill, the first token sampled), decoding (`decode`
    alone, or rows of a batch: engine/local/batch.py), `end` (the stats). The cache's invariant
    holds after each step; a failure ends the turn with FinishReason.ERROR and a repaired cache.

    `drafter`: a ModelDrafter (a draft model's proposals) instead of lookups in the conversation.
    `verify_cost`: the loaded model's VerifyCost, which lookups learn across turns (else one for this turn).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        conv: ConversationCache,
        turn: TurnInput,
        params: GenerationParams,
        should_stop: Callable[[], bool],
        emit: Callable[[TextDelta], None],
        drafter: ModelDrafter | None = None,
        verify_cost: VerifyCost | None = None,
    ) -> None:
        self.model, self.tokenizer, self.conv, self.turn, self.params = model, tokenizer, conv, turn, params
        self.drafter, self.verify_cost = drafter, verify_cost
        self.started = time.perf_counter()
        self.reply = _Reply(tokenizer, turn, params, should_stop, emit, self.started)
        self.finish, self.error, self.reused, self.prefilled = FinishReason.LENGTH, "", 0, 0
        self.prefill_done = self.started
        self.spec: Speculator | None = None
        self.sampling: TokenSampler | None = None
        self.y: mx.array | None = None  # the token sampled next, not yet in the cache
        self.replay = False  # `y` was emitted already (see rejoin)

    def start(self) -> bool:
        """Prefill and sample the first token; True if decoding follows (from `self.y`)."""
        params, conv, turn = self.params, self.conv, self.turn
        if params.seed is not None:
            mx.random.seed(params.seed)
        try:
            constraint = Constraint(self.tokenizer, params) if params.response_format else None
            sampling = self.sampling = TokenSampler(params, turn.prompt_ids, constraint)
            self.spec = _speculator(
                params, self.tokenizer, self.drafter, conv, turn.prompt_ids, sampling, self.verify_cost
            )
            should_stop = self.reply.should_stop
            logits, self.reused, self.prefilled = prefill(
                self.model, conv, turn.prompt_ids, should_stop, turn.progress, turn.marks
            )
            self.prefill_done = time.perf_counter()
            if logits is None:
                self.finish = FinishReason.CANCELLED
            elif self.reply.max_new:
                self.y = sampling.sample(logits)
                mx.async_eval(self.y)
                return True
            conv.eval()
        except Exception as e:  # noqa: BLE001 - the turn ends, the cache is repaired
            self.fail(e)
        return False

    def decode(self, join: Callable[[], bool] | None = None) -> bool:
        """Decode alone (plain or speculative) until the turn ends; or, once `join` says so after a
        token, stop and return True: the turn goes on as a row of a batch (engine/local/batcher.py)."""
        assert self.y is not None and self.sampling is not None, "decode before start"
        leave = join if join is not None and not self.sampling.processors else None  # (their history: see rejoin)
        try:
            if self.spec is None:
                tokens = generate_step(self.model, self.conv, self.y, self.sampling)
            else:
                tokens = speculative_generate_step(
                    self.model, self.conv, self.y, self.sampling, self.spec, self.reply.max_new
                )
            finish = self.reply.take(tokens, leave)
            if finish is None:
                self.rejoin()
                return True
            self.finish = finish
            self.conv.eval()
        except Exception as e:  # noqa: BLE001 - the turn ends, the cache is repaired
            self.fail(e)
        return False

    def rejoin(self) -> None:
        """After decoding alone: the last token emitted leaves the cache and becomes `y` again, fed
        by the batch's next step (which emits it no second time, `replay`), so a row starts as after
        `start`. The sampler's history would hold it twice: turns with logits processors never rejoin."""
        last = self.conv.token_ids[-1]
        self.conv.truncate(len(self.conv.token_ids) - 1)
        self.y = mx.array([last])
        self.replay = True

    def ended(self, finish: FinishReason) -> None:
        """A row of a batch ends (engine/local/batcher.py): its cache is computed."""
        self.finish = finish
        try:
            self.conv.eval()
        except Exception as e:  # noqa: BLE001 - the turn ends, the cache is repaired
            self.fail(e)

    def fail(self, e: Exception, error: str | None = None) -> None:
        """End the turn on `e` (its `error` if given); a bug is logged with its traceback."""
        self.finish = FinishReason.ERROR
        if error is None:  # a batch logs its step's failure once, for every row
            error = str(e) if isinstance(e, ChinwagError) else report_bug(e, "a reply")
        self.error = error
        self.conv.repair()

    def end(self) -> TurnStats:
        """The checkpoint after the reply, the text still held, the stats."""
        conv, reply, spec, params = self.conv, self.reply, self.spec, self.params
        _after_reply(conv)
        if spec is not None:
            spec.finish(conv.token_ids)
        reply.flush()
        finish = self.finish
        if finish == FinishReason.LENGTH and reply.max_new == 0 and params.max_tokens:
            finish = FinishReason.CONTEXT
        prefill_time = self.prefill_done - self.started
        return TurnStats(
            prompt_tokens=len(self.turn.prompt_ids),
            reused_tokens=self.reused,
            prefilled_tokens=self.prefilled,
            generated_tokens=len(reply.emitted),
            ttft_s=reply.ttft,
            decode_tps=reply.decode_tps(),
            prefill_tps=self.prefilled / prefill_time if prefill_time > 0 else 0.0,
            kv_capacity=conv.capacity,
            kv_offset=conv.offset,
            kv_bytes=conv.nbytes,
            context_limit=self.turn.context_limit,
            finish_reason=finish,
            dropped_messages=self.turn.dropped_messages,
            prompt_ids=tuple(self.turn.prompt_ids),
            reply_ids=tuple(reply.emitted),
            error=self.error,
            drafted_tokens=spec.drafted if spec else 0,
            accepted_tokens=spec.accepted if spec else 0,
            speculation_off=_speculation_off(params, self.drafter) if spec is None else "",
        )


def run_turn(
    model: Any,
    tokenizer: Any,
    conv: ConversationCache,
    turn: TurnInput,
    params: GenerationParams,
    should_stop: Callable[[], bool],
    emit: Callable[[TextDelta], None],
    drafter: ModelDrafter | None = None,
    verify_cost: VerifyCost | None = None,
) -> TurnStats:
    """Prefill, then consume plain or speculative decoding's tokens until the turn ends (see TurnRun)."""
    run = TurnRun(model, tokenizer, conv, turn, params, should_stop, emit, drafter, verify_cost)
    if run.start():
        run.decode()
    return run.end()
