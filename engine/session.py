"""The engine thread's state: the loaded model, its tokenizer and every conversation's cache.

Everything here runs on the engine thread; front ends reach it through engine/api.py.
"""

import json
from pathlib import Path
from typing import Any, Callable, Optional

from engine import loading, paths, registry
from engine.conversation import MIN_INITIAL_CAPACITY, ConversationCache, initial_capacity, supports_contiguous_cache
from engine.errors import ChinwagError
from engine.generation import TurnInput, prefill, run_turn
from engine.memory import ConversationCaches, default_budget_bytes
from engine.prompt import check_messages, fit
from engine.speculative import ModelDrafter, check_vocabularies
from engine.types import GenerationParams, LoadProgress, ModelInfo, TextDelta, TurnStats

DEFAULT_CONTEXT_LENGTH = 4096
_CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_ctx", "max_seq_len")


def context_length_of(model_path: Path) -> int:
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return DEFAULT_CONTEXT_LENGTH
    config = {**config.get("text_config", {}), **config}
    for key in _CONTEXT_KEYS:
        if isinstance(config.get(key), int) and config[key] > 0:
            return config[key]
    return DEFAULT_CONTEXT_LENGTH


class Session:
    def __init__(self, kv_initial_capacity: Optional[int] = None, memory_budget_bytes: Optional[int] = None):
        self.kv_initial_capacity = kv_initial_capacity
        self.caches = ConversationCaches(memory_budget_bytes or default_budget_bytes(), paths.kv_dir())
        self.model: Any = None
        self.tokenizer: Any = None
        self.info: Optional[ModelInfo] = None
        self.context_length = 0
        self._draft: Optional[tuple] = None  # (spec, model) of the draft model, checked against the main tokenizer
        self.draft_caches: dict = {}  # conv id -> the draft model's ConversationCache

    def warm_up(self) -> None:
        """Import the heavy modules here, on the engine thread (`import mlx_lm` takes seconds)."""
        import mlx.core  # noqa: F401
        import mlx_lm  # noqa: F401

    def load(self, spec: str, progress: Optional[Callable] = None) -> ModelInfo:
        report = progress or (lambda p: None)
        report(LoadProgress("finding model"))
        path, info = registry.resolve_model(spec, progress=progress)
        report(LoadProgress("loading weights", 0, 1))
        model, tokenizer = loading.load(path)
        # Only a model that loaded replaces the current one.
        self.model, self.tokenizer, self.info = model, tokenizer, info
        self._draft = None
        self.draft_caches.clear()
        self.context_length = info.context_length or context_length_of(path)
        self.caches.set_model(str(path))
        report(LoadProgress("ready", 1, 1))
        return info

    def chat(self, conv_id: str, messages, params: GenerationParams,
             should_stop: Callable[[], bool], emit: Callable[[TextDelta], None]) -> TurnStats:
        if self.model is None:
            raise ChinwagError("no model is loaded: load one before chatting")
        messages = check_messages(messages)
        params = params or GenerationParams()
        limit = self.context_length
        if params.context_cap:
            limit = max(2, min(limit, params.context_cap))
        conv = self.caches.get(conv_id)
        replies = conv.replies if conv else {}
        prompt_ids, dropped = fit(self.tokenizer, messages, replies, limit)
        if conv is None:
            capacity = self.kv_initial_capacity or initial_capacity(len(prompt_ids) + params.max_tokens, limit)
            conv = ConversationCache.create(self.model, capacity)
            self.caches.put(conv_id, conv)
        parts = []

        def collect(delta: TextDelta):
            parts.append(delta.text)
            emit(delta)

        drafter = None
        if params.draft_model and params.speculative is not False:
            drafter = self.drafter(conv_id, params.draft_model)
        stats = run_turn(self.model, self.tokenizer, conv, TurnInput(prompt_ids, limit, dropped),
                         params, should_stop, collect, drafter)
        reply = "".join(parts)
        conv.forget_replies_except([m["content"] for m in messages if m["role"] == "assistant"])
        conv.remember_reply(reply, stats.reply_ids)
        self.caches.enforce(keep=conv_id)
        return stats

    def forget(self, conv_id: str) -> None:
        self.caches.forget(conv_id)
        self.draft_caches.pop(conv_id, None)

    def draft_model(self, spec: str):
        """The draft model `spec` names, loaded once; refused unless it tokenizes as the main model."""
        if self._draft is not None and self._draft[0] == spec:
            return self._draft[1]
        try:
            path, info = registry.resolve_model(spec)
        except ChinwagError as e:
            raise ChinwagError(f"draft model: {e}") from None
        model, tokenizer = loading.load(path)
        check_vocabularies(self.tokenizer, tokenizer, self.info.name if self.info else "", info.name)
        if not supports_contiguous_cache(model):
            raise ChinwagError(f"draft model {info.name} cannot draft: its cache cannot be trimmed (sliding window)")
        self._draft = (spec, model)
        self.draft_caches.clear()
        return model

    def drafter(self, conv_id: str, spec: str) -> ModelDrafter:
        model = self.draft_model(spec)
        cache = self.draft_caches.get(conv_id)
        if cache is None:
            cache = self.draft_caches[conv_id] = ConversationCache.create(model, MIN_INITIAL_CAPACITY)
        return ModelDrafter(model, cache, prefill)

    def kv_bytes(self) -> int:
        return self.caches.total_bytes
