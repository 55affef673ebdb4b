"""Batched decoding: several conversations' turns decode together, one forward pass per step.

Each conversation keeps its own contiguous cache (engine/context/kv_cache.py). A step feeds
every row's pending token in one (rows, 1) input; each attention layer sees a `RowsView` over
the rows' caches for that layer: it writes each row's new key and value into the row's own
cache, and returns the rows' keys and values left-padded to the longest, with a mask that
hides the padding and per-row RoPE offsets, as mlx-lm's BatchKVCache does. Each row samples
from its own logits with its own sampler, so a row's tokens are the ones it would get alone
(at temperature 0: the same argmax, up to float rounding of a batched matmul).

What batches: plain attention models (every layer a ContiguousAttentionKVCache) whose
attention takes array offsets. What does not, and decodes alone as before: sliding windows,
recurrent state, latent attention (MLA), quantized caches, a JSON-schema or forced tool-call
constraint, a seed, speculation asked for or a draft model (`batch_refusal` says why).
The scheduling (which turns join, how many) is engine/local/batcher.py. Engine thread only.
"""

from typing import Any

import mlx.core as mx
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.cache import KVCache, make_prompt_cache

from engine.context import kinds
from engine.context.conversation import ConversationCache
from engine.context.kv_cache import ContiguousAttentionKVCache
from engine.local.generation import TurnRun
from engine.types import GenerationParams, KVQuantization


class RowsView:
    """One attention layer of a batch step: each row writes its own cache; reads are left-padded."""

    def __init__(self, rows: list[ContiguousAttentionKVCache]) -> None:
        self.rows = rows
        held = [row.offset for row in rows]
        width = max(held) + 1  # after this step's token
        self.padding = [width - 1 - h for h in held]
        self.offset = mx.array(held)  # each row's RoPE position
        self.left_padding = mx.array(self.padding)
        self.width = width

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        out_k, out_v = [], []
        for i, (row, pad) in enumerate(zip(self.rows, self.padding, strict=True)):
            row.write_token(keys[i : i + 1], values[i : i + 1])
            k, v = row.get_kv()
            if pad:
                k = mx.pad(k, [(0, 0), (0, 0), (pad, 0), (0, 0)])
                v = mx.pad(v, [(0, 0), (0, 0), (pad, 0), (0, 0)])
            out_k.append(k)
            out_v.append(v)
        return mx.concatenate(out_k), mx.concatenate(out_v)

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> mx.array:
        return create_causal_mask(N, offset=self.width - N, left_padding=self.left_padding)


def model_refusal(model: Any, quant: KVQuantization | None) -> str:
    """Why this model's turns cannot batch ("" if they can); checked once, when it loads."""
    family = kinds.family_of(model)
    if family in kinds.LATENT_FAMILIES:
        return f"{family} models use latent attention"
    if quant is not None:
        return "the KV cache is quantized"
    caches = make_prompt_cache(model)
    if not all(type(c) is KVCache for c in caches):
        return f"{family} models keep sliding-window or recurrent caches"
    try:  # a two-row step's graph, not computed: attention that needs an int offset fails here
        views = [RowsView([ContiguousAttentionKVCache(max_seq_len=1) for _ in range(2)]) for _ in caches]
        model(mx.array([[0], [0]], dtype=mx.int32), cache=views)
    except Exception as e:  # noqa: BLE001 - any failure means this family's attention cannot batch
        return f"{family} attention cannot take a batch's offsets ({type(e).__name__})"
    return ""


def batch_refusal(model_off: str, conv: ConversationCache | None, params: GenerationParams) -> str:
    """Why a turn cannot decode as a row of a batch ("" if it can)."""
    if model_off:
        return model_off
    if params.response_format:
        return "the reply is constrained"  # the mask waits for each token (engine/local/constrained.py)
    if params.seed is not None:
        return "a seed asks for samples that do not depend on other requests"
    if params.speculative or (params.draft_model and params.speculative is not False):
        return "speculative decoding was asked for"
    if conv is not None and not all(type(c) is ContiguousAttentionKVCache for c in conv.layers):
        return "the conversation's cache is not plain attention"
    return ""


def step(model: Any, runs: list[TurnRun]) -> list[int]:
    """Feed each run's pending token in one forward pass and sample each one's next (left
    pending, computing while the caller reads); returns the ids fed, now in their caches.

    As engine/local/decoding.py's `plain_step`, row by row; one row uses its cache directly.
    """
    ys = []
    for run in runs:
        assert run.y is not None and run.sampling is not None, "a row before its start"
        ys.append(run.y)
    if len(runs) == 1:
        layers: list[Any] = runs[0].conv.layers
    else:
        layers = [RowsView([run.conv.layers[i] for run in runs]) for i in range(len(runs[0].conv.layers))]
    logits = model(mx.concatenate(ys)[:, None], cache=layers)[:, -1, :]
    nexts = []
    for i, run in enumerate(runs):
        assert run.sampling is not None and run.y is not None
        run.sampling.saw(run.y)
        nexts.append(run.sampling.sample(logits[i : i + 1]))
    mx.async_eval(nexts)
    fed = []
    for run, y in zip(runs, nexts, strict=True):
        assert run.y is not None
        tok = int(run.y.item())
        run.conv.token_ids.append(tok)
        run.y = y
        fed.append(tok)
    return fed
