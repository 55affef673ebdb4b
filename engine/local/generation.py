"""One chat turn on the engine thread: trim to the common prefix, prefill the rest, decode.

Invariant: when a turn ends for any reason, the conversation's cache holds exactly its
`token_ids`: the prompt plus every token emitted.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.sample_utils import make_logits_processors, make_sampler

from engine.context.conversation import ConversationCache, common_prefix
from engine.errors import ChinwagError
from engine.local.speculative import Sampling, Speculator, can_speculate, speculation_enabled
from engine.log import report_bug
from engine.types import FinishReason, GenerationParams, TextDelta, TurnStats

# Prefill chunks start small and double while a chunk takes under PREFILL_CHUNK_SECONDS:
# Stop is checked between chunks, and speed ranges from ~10 tokens/s (quantized on a CPU)
# to thousands (a GPU), where bigger chunks are faster.
PREFILL_FIRST_STEP = 32
PREFILL_MAX_STEP = 512
PREFILL_CHUNK_SECONDS = 0.25
REPETITION_CONTEXT = 64


@dataclass
class TurnInput:
    prompt_ids: list
    context_limit: int
    dropped_messages: int = 0
    progress: Callable[[int, int], None] | None = None  # (done, total) while reading the prompt


def _sampler(params: GenerationParams):
    return make_sampler(
        temp=params.temperature,
        top_p=params.top_p if params.top_p < 1 else 0.0,
        min_p=params.min_p,
        top_k=params.top_k,
    )


def _processors(params: GenerationParams):
    found = []
    if params.repetition_penalty and params.repetition_penalty != 1.0:
        found = make_logits_processors(
            repetition_penalty=params.repetition_penalty, repetition_context_size=REPETITION_CONTEXT
        )
    return [*found, *params.logits_processors]


def reuse_prefix(conv: ConversationCache, prompt_ids: list, keep: int) -> int:
    """Trim the cache to its longest common prefix with the prompt, at most `keep` tokens."""
    reused = min(common_prefix(conv.token_ids, prompt_ids), keep)
    if not conv.trimmable() and reused < len(conv.token_ids):
        conv.reset()
        reused = 0
    conv.truncate(reused)
    return reused


def extend(
    model, conv: ConversationCache, ids: list, should_stop=lambda: False, progress=None, check_first: bool = True
) -> int:
    """Compute `ids` into the cache in chunks, without logits; returns how many were computed.

    `should_stop` is asked before each chunk (not the first unless `check_first`), so
    work ends within one chunk; the cache always holds exactly `conv.token_ids`.
    """
    start, step = 0, PREFILL_FIRST_STEP
    while start < len(ids):
        if (start or check_first) and should_stop():
            return start
        chunk = ids[start : start + step]
        began = time.perf_counter()
        model(mx.array(chunk)[None], cache=conv.layers)
        # Evaluate the cache alone: the output layer's logits at these positions are never used.
        conv.eval()
        conv.token_ids.extend(chunk)  # the ids follow only once computed
        start += len(chunk)
        if progress is not None:
            progress(start)
        if time.perf_counter() - began < PREFILL_CHUNK_SECONDS:
            step = min(2 * step, PREFILL_MAX_STEP)
    return start


def prefill(model, conv: ConversationCache, prompt_ids: list, should_stop=lambda: False, progress=None):
    """Reuse the longest common prefix, compute the rest; returns (last logits, reused, prefilled).

    Logits are None if `should_stop` said so between chunks. `progress(done, total)` is
    called once the prompt is read (`total` being the tokens computed) and, when that takes
    more than one chunk, also before the first chunk and after each one.
    """
    reused = reuse_prefix(conv, prompt_ids, len(prompt_ids) - 1)  # always compute at least one token
    rest = prompt_ids[reused:]
    body, last = rest[:-1], rest[-1:]
    report = (lambda done: progress(done, len(rest))) if progress is not None else None
    # A prompt read in one chunk reports once, when read: its size, and no progress to show.
    chunked = report if len(rest) > PREFILL_FIRST_STEP else None
    if chunked is not None:
        chunked(0)
    done = extend(model, conv, body, should_stop, chunked, check_first=False)
    if done < len(body) or (body and should_stop()):
        return None, reused, done
    logits = model(mx.array(last)[None], cache=conv.layers)[:, -1, :]
    mx.eval(logits)
    conv.token_ids.extend(last)
    if report is not None:
        report(len(rest))
    return logits, reused, len(rest)


def prefill_ahead(model, conv: ConversationCache, target_ids: list, should_stop) -> tuple:
    """Background work: make the cache hold `target_ids`; returns (reused, computed, finished).

    Caches that cannot be trimmed are left alone: a draft that then changed would cost
    the turn a re-prefill of the whole chat instead of its new tokens.
    """
    if should_stop() or not conv.trimmable():
        return common_prefix(conv.token_ids, target_ids), 0, False
    reused = reuse_prefix(conv, target_ids, len(target_ids))
    try:
        done = extend(model, conv, target_ids[reused:], should_stop)
    except Exception:
        conv.repair()  # a failed chunk: the cache goes back to exactly its token_ids
        raise
    return reused, done, reused + done == len(target_ids)


def run_turn(
    model,
    tokenizer,
    conv: ConversationCache,
    turn: TurnInput,
    params: GenerationParams,
    should_stop: Callable[[], bool],
    emit: Callable[[TextDelta], None],
    drafter=None,
) -> TurnStats:
    """`drafter`: a ModelDrafter (a draft model's proposals) instead of lookups in the conversation."""
    started = time.perf_counter()
    prompt_ids = turn.prompt_ids
    if params.seed is not None:
        mx.random.seed(params.seed)
    sampler, processors = _sampler(params), _processors(params)
    eos = set(tokenizer.eos_token_ids)
    max_new = max(0, min(params.max_tokens, turn.context_limit - len(prompt_ids)))
    history = mx.array(prompt_ids[-REPETITION_CONTEXT:]) if processors else None

    def sample(logits):
        nonlocal history
        if processors:
            for p in processors:
                logits = p(history, logits)
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        return sampler(logprobs)

    detok = tokenizer.detokenizer
    detok.reset()
    emitted, finish, ttft, first_at, error = [], FinishReason.LENGTH, 0.0, None, ""
    reused = prefilled = 0
    prefill_done = started
    spec = None
    if speculation_enabled(params, drafter) and can_speculate(conv.layers):
        spec = Speculator(
            prompt_ids,
            Sampling(params.temperature, params.top_p, params.top_k, params.min_p, processors, REPETITION_CONTEXT),
            drafter=drafter,
        )

    def push(tok):
        """Emit one token; returns why the turn ends, or None."""
        nonlocal first_at, ttft
        emitted.append(tok)
        conv.token_ids.append(tok)
        if first_at is None:
            first_at = time.perf_counter()
            ttft = first_at - started
        if tok in eos:
            return FinishReason.STOP
        detok.add_token(tok)
        # One event per token, text or not: a partial UTF-8 character has none yet.
        emit(TextDelta(detok.last_segment, (tok,)))
        if should_stop():
            return FinishReason.CANCELLED
        if len(emitted) >= max_new:
            return FinishReason.LENGTH if max_new == params.max_tokens else FinishReason.CONTEXT
        return None

    try:
        logits, reused, prefilled = prefill(model, conv, prompt_ids, should_stop, turn.progress)
        prefill_done = time.perf_counter()
        if logits is None:
            finish = FinishReason.CANCELLED
        y = sample(logits) if max_new and logits is not None else None
        if y is not None:
            mx.async_eval(y)
        while y is not None:
            if spec is not None and spec.drafting:
                pending = y.item()
                # Never draft past what the turn may emit: the cache stays within the limit.
                draft = spec.draft(pending, max_new - len(emitted) - 1)
                if draft:
                    verdict = spec.verify(model, conv.layers, pending, draft, history)
                    out = [pending] + draft[: verdict.accepted]
                    if processors:
                        history = mx.concatenate([history, mx.array(out)])[-REPETITION_CONTEXT:]
                    ended = None
                    for tok in out:
                        ended = push(tok)
                        if ended:
                            break
                    # The rejected draft, and accepted tokens past a stop, leave the cache.
                    conv.repair()
                    if ended:
                        finish = ended
                        break
                    y = mx.array([verdict.next_token])
                    continue
            # Feed y before reading it, so the next step overlaps the hand-off (mlx-lm's pipelining).
            # The forward pass writes y's keys and values: every emitted token is in the cache.
            next_logits = model(y[None], cache=conv.layers)[:, -1, :]
            if processors:
                history = mx.concatenate([history, y])[-REPETITION_CONTEXT:]
            next_y = sample(next_logits)
            mx.async_eval(next_y)
            tok = y.item()
            if spec is not None:
                spec.observe(tok)
            ended = push(tok)
            if ended:
                finish = ended
                break
            y = next_y
        conv.eval()
    except Exception as e:  # the turn ends, the cache is repaired; a bug is logged with its traceback
        finish = FinishReason.ERROR
        error = str(e) if isinstance(e, ChinwagError) else report_bug(e, "a reply")
        conv.repair()
    if spec is not None:
        spec.finish(conv.token_ids)
    detok.finalize()
    tail = detok.last_segment
    if tail:
        emit(TextDelta(tail, ()))
    if finish == FinishReason.LENGTH and max_new == 0 and params.max_tokens:
        finish = FinishReason.CONTEXT
    now = time.perf_counter()
    decode_time = now - first_at if first_at else 0.0
    decoded = max(0, len(emitted) - 1)
    prefill_time = prefill_done - started
    return TurnStats(
        prompt_tokens=len(prompt_ids),
        reused_tokens=reused,
        prefilled_tokens=prefilled,
        generated_tokens=len(emitted),
        ttft_s=ttft,
        decode_tps=decoded / decode_time if decode_time > 0 else 0.0,
        prefill_tps=prefilled / prefill_time if prefill_time > 0 else 0.0,
        kv_capacity=conv.capacity,
        kv_offset=conv.offset,
        kv_bytes=conv.nbytes,
        context_limit=turn.context_limit,
        finish_reason=finish,
        dropped_messages=turn.dropped_messages,
        prompt_ids=tuple(prompt_ids),
        reply_ids=tuple(emitted),
        error=error,
        drafted_tokens=spec.drafted if spec else 0,
        accepted_tokens=spec.accepted if spec else 0,
    )
