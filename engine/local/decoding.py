"""Plain decoding: the sampler plain decoding uses, its one step, and its token generator.

`generate_step` (like mlx-lm's) yields one token per forward pass; the speculative generator
(engine/local/speculative.py) yields the same tokens faster, and `run_turn`
(engine/local/generation.py) consumes either. A generator keeps the cache's invariant: each
token it yields is in the cache and in `conv.token_ids`, nothing else is. Engine thread only.
"""

from collections.abc import Generator
from typing import Any

import mlx.core as mx
from mlx_lm.sample_utils import make_logits_processors, make_sampler

from engine.context.conversation import ConversationCache
from engine.types import GenerationParams

REPETITION_CONTEXT = 64


def _sampler(params: GenerationParams) -> Any:
    def build(top_k: int) -> Any:
        return make_sampler(
            temp=params.temperature, top_p=params.top_p if params.top_p < 1 else 0.0, min_p=params.min_p, top_k=top_k
        )

    sample = build(params.top_k)
    if params.top_k <= 0:
        return sample
    every = build(0)
    # A top_k the vocabulary does not exceed keeps every token: mlx-lm refuses it (top_k must be below it).
    return lambda logits: every(logits) if params.top_k >= logits.shape[-1] else sample(logits)


def _processors(params: GenerationParams) -> list[Any]:
    found: list[Any] = []
    if params.repetition_penalty and params.repetition_penalty != 1.0:
        found = make_logits_processors(
            repetition_penalty=params.repetition_penalty, repetition_context_size=REPETITION_CONTEXT
        )
    return [*found, *params.logits_processors]


class TokenSampler:
    """What plain decoding samples from: the params' sampler, after logits processors that see
    the last REPETITION_CONTEXT tokens (`history`, kept only when there are processors), and the
    constraint's mask last (a constrained reply: engine/local/constrained.py)."""

    def __init__(self, params: GenerationParams, prompt_ids: list[int], constraint: Any = None) -> None:
        self.sampler, self.processors = _sampler(params), _processors(params)
        self.constraint = constraint
        self.greedy = params.temperature == 0
        self.history = mx.array(prompt_ids[-REPETITION_CONTEXT:]) if self.processors else None

    def sample(self, logits: mx.array) -> mx.array:
        for p in self.processors:
            logits = p(self.history, logits)
        if self.constraint is not None:
            logits = self.constraint.mask(logits)
        if not self.greedy:  # greedy's argmax is the same on the logits: normalising them is skipped
            logits = logits - mx.logsumexp(logits, keepdims=True)
        return self.sampler(logits)

    def saw(self, tokens: list[int]) -> None:
        """`tokens` (an mx.array) follow in the history."""
        if self.constraint is not None:  # the next mask needs them: this waits for the sample
            for tok in tokens.tolist():  # type: ignore[attr-defined]
                self.constraint.consume(tok)
        if self.processors:
            self.history = mx.concatenate([self.history, tokens])[-REPETITION_CONTEXT:]


def plain_step(model: Any, conv: ConversationCache, y: mx.array, sampling: TokenSampler) -> tuple[int, object]:
    """Feed y (sampled, not yet in the cache) and sample the token after it: (y's id, the next y).

    y is fed before it is read, so the next step overlaps the hand-off (mlx-lm's pipelining);
    the forward pass writes y's keys and values, so y joins `conv.token_ids`.
    """
    logits = model(y[None], cache=conv.layers)[:, -1, :]
    sampling.saw(y)
    next_y = sampling.sample(logits)
    mx.async_eval(next_y)
    tok = y.item()
    conv.token_ids.append(tok)
    return tok, next_y


def generate_step(
    model: Any, conv: ConversationCache, y: mx.array, sampling: TokenSampler
) -> Generator[int, None, None]:
    """Plain decoding from y (the first sampled token, not yet in the cache): one token per pass, forever."""
    while True:
        tok, y = plain_step(model, conv, y, sampling)
        yield tok
