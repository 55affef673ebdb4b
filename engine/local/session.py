"""The engine thread's state: the loaded model, its tokenizer and every conversation's cache.

Everything here runs on the engine thread; front ends reach it through engine/api.py.
"""

import dataclasses
import itertools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import paths
from engine.context import kinds
from engine.context.cache_file import layout_of
from engine.context.conversation import MIN_INITIAL_CAPACITY, ConversationCache, initial_capacity
from engine.context.memory import ConversationCaches, default_budget_bytes
from engine.context.policy import WindowPlan, history_ids, plan_window, reply_room
from engine.context.prompt import History, encode_text, template_messages, tools_cost, tools_off_reason
from engine.context.specials import WithTools
from engine.context.tool_calls import outside_calls, parse_tool_calls
from engine.errors import ChinwagError
from engine.local import loading
from engine.local.batch import batch_refusal, model_refusal
from engine.local.constrained import check_tool_format
from engine.local.generation import TurnInput, TurnRun, prefill
from engine.local.speculative import ModelDrafter, VerifyCost, can_speculate, check_vocabularies, device_kind
from engine.local.wired import WiredLimit
from engine.models import fit, registry
from engine.types import (
    LOADED_STAGE,
    FinishReason,
    GenerationParams,
    KVQuantization,
    LoadProgress,
    Messages,
    ModelInfo,
    OutputKind,
    PrefillProgress,
    TextDelta,
    TurnStats,
)

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_LENGTH = 4096
MIN_MEMORY_CONTEXT = fit.MINIMAL_CHAT_TOKENS  # a model loads only if its budget holds this much
_CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_ctx", "max_seq_len")


def prompt_messages(messages: list[dict[str, Any]], params: GenerationParams) -> list[dict[str, Any]]:
    """The messages whose pieces the prompt holds: all, or all but the reply being continued
    (its ids follow the prompt that wrote it)."""
    return messages[:-1] if params.continue_reply else messages


def context_length_of(model_path: Path) -> int:
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return DEFAULT_CONTEXT_LENGTH
    config = {**config.get("text_config", {}), **config}
    for key in _CONTEXT_KEYS:
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return DEFAULT_CONTEXT_LENGTH


@dataclass(frozen=True)
class TurnResult:
    """What a turn returns from the engine thread: its stats, and the reply's text (collected once, here)."""

    stats: TurnStats
    text: str


@dataclass
class OpenTurn:
    """A turn between Session.open_turn and Session.close_turn: what closing it needs."""

    conv_id: str
    messages: list[dict[str, Any]]
    params: GenerationParams
    plan: WindowPlan
    head: list[dict[str, Any]]
    parts: list[str]  # the reply's text, as emitted
    run: TurnRun


ONE_MESSAGE = {"role": "user", "content": "hi"}


class Session:
    def __init__(
        self,
        kv_initial_capacity: int | None = None,
        memory_budget_bytes: int | None = None,
        kv_quantization: KVQuantization | None = None,
        memory_limit_bytes: int | None = None,
    ) -> None:
        self.kv_initial_capacity = kv_initial_capacity
        self.memory_limit_bytes = memory_limit_bytes  # what a model may take (None: what is available)
        self.weight_bytes = 0  # the loaded model's weights, as engine/models/fit.py sizes them
        self.limit_bytes = 0  # the limit the loaded model was planned against
        self.memory_context = 0  # the tokens one chat's cache may hold under the budget (0: no cap)
        self.pending: tuple[KVQuantization | None, int | None] | None = None  # configure()'s, for the next load
        self.kv_quantization = kv_quantization  # plain attention caches stored quantized, or None
        self.budget_given = memory_budget_bytes is not None  # else sized to the limit once a model loads
        self.caches = ConversationCaches(memory_budget_bytes or default_budget_bytes(), paths.kv_dir())
        # mlx-lm's model and tokenizer (untyped); None until a model loads.
        self.model: Any = None
        self.tokenizer: Any = None
        self.info: ModelInfo | None = None
        self.batch_off = ""
        self.context_length = 0
        # (spec, model) of the draft model, checked against the main tokenizer; its caches are in self.caches.
        self._draft: tuple[str, Any] | None = None
        self.verify_cost: VerifyCost | None = None
        self.wired = WiredLimit()  # Metal: the weights and caches kept resident while a model is loaded

    def warm_up(self) -> None:
        """Import the heavy modules here, on the engine thread (`import mlx_lm` takes seconds)."""
        import mlx.core  # noqa: F401
        import mlx_lm  # noqa: F401

    def load(self, spec: str, progress: Callable[[LoadProgress], None] | None = None) -> ModelInfo:
        report = progress or (lambda p: None)
        report(LoadProgress("Finding the model"))

        def importing(p: LoadProgress) -> None:  # a GGUF (the starter's, on the first run) becomes an MLX folder
            stage = p.stage[:1].lower() + p.stage[1:]
            report(LoadProgress(f"Importing the model (first time only): {stage}", p.done, p.total))

        path, info = registry.resolve_model(spec, progress=importing if progress else None)
        # Before a byte of weights is read: a model that cannot hold a short chat here is refused.
        kv, given = self.pending or (self.kv_quantization, self.memory_limit_bytes)
        limit = fit.default_limit(self.weight_bytes if self.model is not None else 0) if given is None else given
        plan = fit.plan(path, limit, kv, info.name or info.id)
        plan.check(kv)
        if plan.leaner:  # held leaner than usual here, where the usual form would not fit the limit
            log.warning("loading %s %s: as usual here it would not fit in %d bytes", path, plan.form.text(), plan.limit)
        model, tokenizer = loading.load(
            path,
            lambda stage, done, total: report(LoadProgress(stage, done, total)),
            plan.form if plan.leaner else None,
        )
        kinds.check_model(model, kv)  # a cache Chinwag cannot keep: refused here, not mid-turn
        info = dataclasses.replace(info, tools_off=tools_off_reason(tokenizer))  # said from the load on
        batch_off = model_refusal(model, kv)  # why its turns cannot batch (engine/local/batch.py)
        context_length = info.context_length or context_length_of(path)
        layout = layout_of(model, context_length, kv)
        # Only a model that loaded replaces the current one (and only then do its options apply), and
        # with the caches: set_model drops the old ones even if saving them fails, so the new weights
        # never run on them, and a failure above leaves the old model on its own.
        try:
            self.caches.set_model(str(path), layout)
        finally:
            self.model, self.tokenizer, self.info = model, tokenizer, info
            self.batch_off, self.context_length = batch_off, context_length
            self.kv_quantization, self.memory_limit_bytes, self.pending = kv, given, None
            self.weight_bytes = plan.weights
            self.verify_cost = VerifyCost(device_kind())  # learned from this model's own passes
            self._draft = None
        if not self.budget_given:  # what the limit leaves the caches; without one, the share of RAM
            self.caches.budget_bytes = plan.cache_budget if given is not None else default_budget_bytes()
        self.wired.raise_to(plan.weights + self.caches.budget_bytes)
        self.limit_bytes, self.memory_context = plan.limit, self.memory_cap(plan)
        if self.memory_context:
            info = dataclasses.replace(info, memory_context=self.memory_context)
            self.info = info
        report(LoadProgress(LOADED_STAGE, 1, 1))
        return info

    def memory_cap(self, plan: fit.Plan) -> int:
        """The tokens one chat's cache may hold under the budget the limit leaves, when fewer than the
        model's context; 0 otherwise (and with an explicit budget, whose caller sized it)."""
        if self.budget_given or not plan.per_token:
            return 0
        tokens = int((self.caches.budget_bytes - plan.fixed) // plan.per_token)
        return max(MIN_MEMORY_CONTEXT, tokens) if tokens < self.context_length else 0

    def configure(self, kv: KVQuantization | None, limit: int | None) -> None:
        """The KV quantization and memory limit of the next load; they apply once a model has loaded
        with them (a refused load keeps the loaded model's)."""
        self.pending = (kv, limit)

    def count_tokens(self, text: str) -> int:
        if self.tokenizer is None:
            raise ChinwagError("no model is loaded: load one to count tokens")
        return len(encode_text(self.tokenizer, text))  # content: its special-token strings are text

    def count_prompt(self, messages: Messages, params: GenerationParams) -> int:
        """A turn's prompt tokens for `messages`, built as a turn builds it but with no message dropped."""
        if self.model is None:
            raise ChinwagError("no model is loaded: load one to count tokens")
        rows = template_messages(messages)
        head = prompt_messages(rows, params)
        plan = plan_window(self.prompt_tokenizer(params), head, History(), 1 << 40, 0, params.low_water)
        written = self.written(rows, History()) if params.continue_reply else []
        return len(plan.prompt_ids) + len(written)

    def context_limit(self, params: GenerationParams) -> int:
        limit = min(self.context_length, self.memory_context or self.context_length)
        if params.context_cap:
            limit = max(2, min(limit, params.context_cap))
        return limit

    def turn_input(
        self, conv_id: str, messages: Messages, params: GenerationParams
    ) -> tuple[ConversationCache | None, History, WindowPlan, TurnInput]:
        """(cache or None if new, its History, WindowPlan, TurnInput): the one place a turn's prompt is built.

        Turns and background work (engine/local/background.py) both call it, so a prefill done
        ahead of time matches the prompt the turn will compute. Pure: the caller commits
        `plan.start` to `history.start` once it uses the plan.
        """
        if self.model is None:
            raise ChinwagError("no model is loaded: load one before chatting")
        conv = self.caches.get(conv_id)
        history = conv.history if conv else History()
        plan, turn = self.plan(messages, params, history)
        return conv, history, plan, turn

    def plan(self, messages: Messages, params: GenerationParams, history: History) -> tuple[WindowPlan, TurnInput]:
        """(WindowPlan, TurnInput) of `messages` given the pieces `history` remembers (it learns the new ones)."""
        if self.model is None:
            raise ChinwagError("no model is loaded: load one before chatting")
        rows = template_messages(messages)
        limit = self.context_limit(params)
        head = prompt_messages(rows, params)
        written = self.written(rows, history) if params.continue_reply else []
        plan = plan_window(
            self.prompt_tokenizer(params),
            head,
            history,
            limit,
            reply_room(params.max_tokens, limit) + len(written),
            params.low_water,
        )
        if written:  # the prompt that wrote the reply, then what it wrote: the ids the cache holds
            plan = dataclasses.replace(plan, prompt_ids=plan.prompt_ids + written)
        marks = tuple(itertools.accumulate(plan.prompt.lengths))  # where each message's piece ends
        return plan, TurnInput(plan.prompt_ids, limit, plan.dropped, written=len(written), marks=marks)

    def written(self, messages: list[dict[str, Any]], history: History) -> list[int]:
        """The ids of the reply that ends `messages`, to continue: as generated when the history
        remembers them, else its text tokenized (after a restart without its saved cache)."""
        last, index = messages[-1], len(messages) - 1
        if last["role"] != "assistant" or not last["content"]:
            raise ChinwagError("there is no reply to continue: the messages must end with the reply")
        known = history.spans[index] if index < len(history.spans) else None
        if known is not None and known.reply is not None and known.content == last["content"]:
            return list(known.reply)
        return encode_text(self.tokenizer, last["content"], outside=False)  # the model's own text

    def prompt_tokenizer(self, params: GenerationParams) -> Any:
        """The tokenizer whose chat template renders the prompt: given the tools if the model can call them."""
        if params.tools and not tools_off_reason(self.tokenizer):
            return WithTools(self.tokenizer, params.tools)
        return self.tokenizer

    def new_cache(
        self, conv_id: str, history: History, turn: TurnInput, params: GenerationParams, ids: list[int] | None = None
    ) -> ConversationCache:
        """A new conversation's cache: a copy of the longest prefix of `ids` (the prompt but its last
        token, which the turn computes) that any cache holds, in memory or saved, else empty."""
        capacity = self.kv_initial_capacity or initial_capacity(
            len(turn.prompt_ids) + params.max_tokens, turn.context_limit
        )
        ids = turn.prompt_ids[:-1] if ids is None else ids
        shared = self.caches.shared(conv_id, ids, history, capacity)
        conv = shared or ConversationCache.create(self.model, capacity, self.kv_quantization)
        conv.history = history
        self.caches.put(conv_id, conv)
        if shared is not None:
            self.caches.enforce(keep=conv_id)  # the copy counts in the budget from now on
        return conv

    def chat(
        self,
        conv_id: str,
        messages: Messages,
        params: GenerationParams,
        should_stop: Callable[[], bool],
        emit: Callable[[TextDelta | PrefillProgress], None],
    ) -> TurnResult:
        """Run one turn alone; `emit` gets its events. The history records the reply's text, which is also returned."""
        turn = self.open_turn(conv_id, messages, params, should_stop, emit)
        if turn.run.start():
            turn.run.decode()
        return self.close_turn(turn)

    def open_turn(
        self,
        conv_id: str,
        messages: Messages,
        params: GenerationParams,
        should_stop: Callable[[], bool],
        emit: Callable[[TextDelta | PrefillProgress], None],
        batched: bool = False,
    ) -> "OpenTurn":
        """A turn ready to start (its prompt planned, its cache found or made); `batched`: its
        decoding runs as a row of a batch (engine/local/batch.py), without speculation."""
        params = params or GenerationParams()
        rows = template_messages(messages)
        conv, history, plan, turn = self.turn_input(conv_id, rows, params)
        fmt = params.response_format
        if fmt is not None and fmt.kind == OutputKind.TOOL_CALL:  # refused before the turn, not as its error
            check_tool_format(self.tokenizer)
        if conv is None:
            conv = self.new_cache(conv_id, history, turn, params)
        history.start = plan.start
        parts: list[str] = []

        def collect(delta: TextDelta) -> None:
            parts.append(delta.text)
            emit(delta)

        n_prompt, limit = len(turn.prompt_ids), turn.context_limit
        head = prompt_messages(rows, params)
        earlier = history_ids(plan, head)

        def reading(done: int, total: int) -> None:  # the earlier messages' ids among those not reused are read first
            emit(PrefillProgress(done, total, n_prompt, limit, max(0, earlier - (n_prompt - total))))

        turn.progress = reading
        drafter = None
        if params.draft_model and params.speculative is not False and not batched:
            drafter = self.drafter(conv_id, params.draft_model)
        run_params = dataclasses.replace(params, speculative=False) if batched else params
        run = TurnRun(
            self.model, self.tokenizer, conv, turn, run_params, should_stop, collect, drafter, self.verify_cost
        )
        return OpenTurn(conv_id, rows, params, plan, head, parts, run)

    def close_turn(self, turn: "OpenTurn") -> TurnResult:
        """End a started turn: its history records the reply, the budget is enforced, tool calls parsed."""
        stats = turn.run.end()
        messages, params, plan, history = turn.messages, turn.params, turn.plan, turn.run.conv.history
        reply = "".join(turn.parts)
        if plan.prompt.complete:
            before = plan.prompt_ids[len(plan.prompt.ids) :]  # a continued reply's ids so far
            history.record_reply(
                len(turn.head),
                plan.prompt.tail,
                plan.prompt.tail_ids,
                (messages[-1]["content"] if params.continue_reply else "") + reply,
                before + list(stats.reply_ids),
                set(self.tokenizer.eos_token_ids),
            )
        else:
            history.truncate(len(turn.head))
        self.caches.enforce(keep=turn.conv_id)
        if params.tools:
            stats = self.with_tool_calls(stats, reply, params)
        return TurnResult(stats, reply)

    def batch_refusal(self, conv_id: str, params: GenerationParams) -> str:
        """Why a turn on `conv_id` cannot decode as a row of a batch ("" if it can): see engine/local/batch.py."""
        if self.model is None:
            return "no model is loaded"
        return batch_refusal(self.batch_off, self.caches.get(conv_id), params)

    def with_tool_calls(self, stats: TurnStats, reply: str, params: GenerationParams) -> TurnStats:
        off = tools_off_reason(self.tokenizer)
        if off:
            return dataclasses.replace(stats, tools_off=off)
        # What the definitions cost, measured on a one-message chat: cheap, and the same in every chat.
        stats = dataclasses.replace(stats, tools_tokens=tools_cost(self.tokenizer, [ONE_MESSAGE], params.tools))
        calls = parse_tool_calls(self.tokenizer, reply, params.tools)
        if not calls or stats.finish_reason not in (FinishReason.STOP, FinishReason.LENGTH):
            return stats
        return dataclasses.replace(
            stats,
            tool_calls=calls,
            tool_text=outside_calls(self.tokenizer, reply),
            finish_reason=FinishReason.TOOL_CALLS,
        )

    def close(self, seconds: float | None = None) -> int:
        """Save the most recently used conversations' caches for the next start; how many were saved.
        The wired memory limit goes back to what it was."""
        try:
            return self.caches.save_all() if seconds is None else self.caches.save_all(seconds)
        finally:
            self.wired.restore()

    def forget(self, conv_id: str) -> None:
        self.caches.forget(conv_id)

    def draft_model(self, spec: str) -> Any:
        """The draft model `spec` names, loaded once; refused unless it tokenizes as the main model."""
        if self._draft is not None and self._draft[0] == spec:
            return self._draft[1]
        name = self.info.name if self.info else ""
        try:
            gguf = registry.gguf_vocabulary(spec)
        except ChinwagError as e:
            raise ChinwagError(f"draft model: {e}") from None
        if gguf is not None:  # a GGUF's vocabulary is in its header: refused before it is imported
            check_vocabularies(self.tokenizer, gguf[1], name, gguf[0], "; read from its header, nothing imported")
        try:
            path, info = registry.resolve_model(spec)
        except ChinwagError as e:
            raise ChinwagError(f"draft model: {e}") from None
        model, tokenizer = loading.load(path)
        check_vocabularies(self.tokenizer, tokenizer.get_vocab(), name, info.name)
        if not can_speculate(kinds.make_layers(model, 1)):
            raise ChinwagError(f"draft model {info.name} cannot draft: its recurrent state cannot be trimmed")
        self._draft = (spec, model)
        self.caches.drop_drafts()
        return model

    def drafter(self, conv_id: str, spec: str) -> ModelDrafter:
        model = self.draft_model(spec)
        cache = self.caches.draft(conv_id)
        if cache is None:
            cache = ConversationCache.create(model, MIN_INITIAL_CAPACITY)
            self.caches.put_draft(conv_id, cache)
        return ModelDrafter(model, cache, prefill)

    def kv_bytes(self) -> int:
        return self.caches.total_bytes
