"""One chat turn on the engine thread: trim to the common prefix, prefill the rest, decode.

Invariant: when a turn ends for any reason, the conversation's cache holds exactly its
`token_ids`: the prompt plus every token emitted.
"""

import time
from dataclasses import dataclass
from typing import Callable

import mlx.core as mx
from mlx_lm.sample_utils import make_logits_processors, make_sampler

from engine.conversation import ConversationCache, common_prefix
from engine.errors import ChinwagError
from engine.log import report_bug
from engine.speculative import Sampling, Speculator, can_speculate, speculation_enabled, trim_to
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


def _sampler(params: GenerationParams):
    return make_sampler(
        temp=params.temperature, top_p=params.top_p if params.top_p < 1 else 0.0,
        min_p=params.min_p, top_k=params.top_k,
    )


def _processors(params: GenerationParams):
    if params.repetition_penalty and params.repetition_penalty != 1.0:
        return make_logits_processors(
            repetition_penalty=params.repetition_penalty, repetition_context_size=REPETITION_CONTEXT
        )
    return []


def prefill(model, conv: ConversationCache, prompt_ids: list, should_stop=lambda: False):
    """Reuse the longest common prefix, compute the rest; returns (last logits, reused, prefilled).

    Logits are None if `should_stop` said so between chunks.
    """
    reused = common_prefix(conv.token_ids, prompt_ids)
    reused = min(reused, len(prompt_ids) - 1)  # always compute at least one token
    if not conv.trimmable() and reused < len(conv.token_ids):
        conv.reset()
        reused = 0
    conv.truncate(reused)
    rest = prompt_ids[reused:]
    body, last = rest[:-1], rest[-1:]
    start, step = 0, PREFILL_FIRST_STEP
    while start < len(body):
        if start and should_stop():
            return None, reused, start
        chunk = body[start : start + step]
        began = time.perf_counter()
        model(mx.array(chunk)[None], cache=conv.layers)
        # Evaluate the cache alone: the output layer's logits at these positions are never used.
        conv.eval()
        conv.token_ids.extend(chunk)  # the ids follow only once computed
        start += len(chunk)
        if time.perf_counter() - began < PREFILL_CHUNK_SECONDS:
            step = min(2 * step, PREFILL_MAX_STEP)
    if body and should_stop():
        return None, reused, len(body)
    logits = model(mx.array(last)[None], cache=conv.layers)[:, -1, :]
    mx.eval(logits)
    conv.token_ids.extend(last)
    return logits, reused, len(rest)


def run_turn(
    model, tokenizer, conv: ConversationCache, turn: TurnInput, params: GenerationParams,
    should_stop: Callable[[], bool], emit: Callable[[TextDelta], None], drafter=None,
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
        spec = Speculator(prompt_ids, Sampling(params.temperature, params.top_p, params.top_k, params.min_p,
                                                processors, REPETITION_CONTEXT), drafter=drafter)

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
        logits, reused, prefilled = prefill(model, conv, prompt_ids, should_stop)
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
                    trim_to(conv.layers, len(conv.token_ids))
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
