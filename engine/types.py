"""The small dataclasses that cross from the engine thread to front ends.

Only ints, floats, strings and tuples live here: never an MLX array.
"""

import functools
import platform
import sys
import typing
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from engine.errors import ChinwagError

DEFAULT_MAX_TOKENS = 512
# After a slide the prompt holds at most this fraction of (limit - reply room). bench/longchat.py:
# 0.35 re-prefills ~1.7x a turn's new tokens on average past the limit, a half ~2.4x, exact fit ~40x.
DEFAULT_LOW_WATER = 0.35
# Speculative decoding is on by default where bench/speculative.py measured a gain, per MLX
# backend ("gpu" is Metal, not measured yet); GenerationParams.speculative=None means this default.
SPECULATIVE_BY_BACKEND = {"cpu": True, "gpu": False}


def speculative_default(backend: str | None = None) -> bool:
    """The default for `backend`; without one, the platform's (Apple Silicon macOS runs Metal)."""
    if backend is None:
        backend = "gpu" if sys.platform == "darwin" and platform.machine() == "arm64" else "cpu"
    return SPECULATIVE_BY_BACKEND.get(backend, False)


# The values are the strings stored in the database and written to JSON: never change them.
class FinishReason(StrEnum):
    """Why a turn ended (TurnStats.finish_reason)."""

    STOP = "stop"  # the model's end-of-sequence token
    LENGTH = "length"  # max_tokens
    CONTEXT = "context"  # the context limit
    CANCELLED = "cancelled"  # engine.stop
    ERROR = "error"  # TurnStats.error says what failed
    TOOL_CALLS = "tool_calls"  # the reply ended with tool calls (TurnStats.tool_calls)


class ModelStatus(StrEnum):
    """Whether a listed model can be loaded (ModelInfo.status)."""

    READY = "ready"
    NEEDS_IMPORT = "needs-import"  # a GGUF (or the starter) imported on first use
    UNUSABLE = "unusable"  # ModelInfo.reason says why


class ModelSource(StrEnum):
    """Where a listed model comes from (ModelInfo.source); the values are what `chinwag models --json` prints."""

    STARTER = "starter"  # the bundled starter model
    IMPORTED = "imported"  # a GGUF imported into the models folder
    HF_CACHE = "hf-cache"  # a model in the Hugging Face cache
    FOLDER = "folder"  # an MLX folder the user added
    SERVER = "server"  # a model on a saved OpenAI-compatible server


class EngineStatus(StrEnum):
    """What the engine is doing (EngineState.state)."""

    STARTING = "starting"  # the engine thread is starting (importing MLX)
    IDLE = "idle"  # no model loaded
    LOADING = "loading"
    READY = "ready"
    GENERATING = "generating"
    ERROR = "error"  # the engine could not start


def _param(default: float | None, help: str, lo: float, hi: float, tiny: float = 0.0) -> Any:
    """A sampling setting: its CLI flag, settings key and dialog field are all made from this.
    tiny: the smallest value above lo that is allowed (lo itself stays allowed)."""
    return field(default=default, metadata={"help": help, "range": (lo, hi), "tiny": tiny})


# More KV positions than this up front would reserve gigabytes before a word is read.
MAX_KV_INITIAL_CAPACITY = 1 << 20

# A quantized KV cache (--kv-bits, --kv-group-size): what mx.quantize accepts.
KV_BITS = (2, 3, 4, 5, 6, 8)
KV_GROUP_SIZES = (32, 64, 128)
DEFAULT_KV_GROUP_SIZE = 64


@dataclass(frozen=True)
class KVQuantization:
    """Plain attention layers' caches stored at `bits` per value, in groups of `group_size`."""

    bits: int
    group_size: int = DEFAULT_KV_GROUP_SIZE

    def __post_init__(self) -> None:
        from engine.errors import ChinwagError

        if type(self.bits) is not int or self.bits not in KV_BITS:
            raise ChinwagError(f"--kv-bits must be one of {', '.join(map(str, KV_BITS))}, got {self.bits!r}")
        if type(self.group_size) is not int or self.group_size not in KV_GROUP_SIZES:
            raise ChinwagError(
                f"--kv-group-size must be one of {', '.join(map(str, KV_GROUP_SIZES))}, got {self.group_size!r}"
            )

    @property
    def label(self) -> str:
        return f"{self.bits}-bit, groups of {self.group_size}"


class OutputKind(StrEnum):
    """What a constrained reply must be (ResponseFormat.kind); the values are OpenAI's `response_format` types."""

    JSON_SCHEMA = "json_schema"  # JSON valid against ResponseFormat.schema
    JSON_OBJECT = "json_object"  # any JSON object
    TOOL_CALL = "tool_call"  # one call, in the model's tool-call format, of ResponseFormat.tools' functions


@dataclass(frozen=True)
class ResponseFormat:
    """A reply constrained by a token mask (engine/constraint.py): it ends, with end of sequence,
    only once the JSON is complete. `schema` is the JSON Schema's text (JSON_SCHEMA); `tools` the
    names a TOOL_CALL may call (empty: any of GenerationParams.tools); `name` the client's label."""

    kind: OutputKind
    schema: str = ""
    name: str = ""
    tools: tuple[str, ...] = ()


# Below this, 1/temperature overflows float32 and sampling reads NaN: 0 (greedy) or at least this.
MIN_TEMPERATURE = 0.01


@dataclass(frozen=True)
class GenerationParams:
    """The sampling settings: the one place their defaults and valid ranges are written."""

    temperature: float = _param(
        0.7, "sampling temperature; 0 always picks the likeliest token", 0.0, 2.0, tiny=MIN_TEMPERATURE
    )
    top_p: float = _param(1.0, "keep the likeliest tokens up to this probability mass (1 = off)", 0.0, 1.0)
    top_k: int = _param(0, "keep only the k likeliest tokens (0 = off)", 0, 1000)
    min_p: float = _param(0.0, "drop tokens less likely than this fraction of the likeliest (0 = off)", 0.0, 1.0)
    repetition_penalty: float = _param(1.0, "penalise recently seen tokens (1 = off)", 0.5, 2.0)
    max_tokens: int = _param(DEFAULT_MAX_TOKENS, "the longest reply, in tokens", 1, 131072)
    # None samples from a fresh random state every turn.
    seed: int | None = _param(None, "a random seed, for repeatable sampling", 0, 2**31 - 1)
    # A cap below the model's own context length; None uses the model's.
    context_cap: int | None = _param(None, "a context limit below the model's own", 1, 1 << 20)
    # Past the limit the window drops old turns down to this fraction of it (engine/context/policy.py).
    low_water: float = _param(
        DEFAULT_LOW_WATER,
        "past the context limit, drop old turns down to this fraction of it (lower: fewer re-reads, less history kept)",
        0.05,
        1.0,
    )
    # Draft tokens from the conversation and verify them in one pass; None: the backend's default.
    speculative: bool | None = None
    # A smaller model with the same tokenizer that drafts instead (registry id, folder or GGUF).
    draft_model: str = ""
    # Tool definitions (OpenAI function format, dicts) given to the model's chat template; () = no tools.
    tools: tuple[dict[str, Any], ...] = ()
    # The messages end with a reply that was cut short (max tokens): write on from its end, in the
    # same message, rather than a new reply. A model on this computer only.
    continue_reply: bool = False
    # The reply is JSON (or a tool call) by constrained decoding: a token mask on the sampler.
    response_format: ResponseFormat | None = None
    # Extra mlx-lm logits processors, (tokens, logits) -> logits, run on the engine thread after the
    # repetition penalty (tests script a reply with one; never sent to a server).
    logits_processors: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        # Every front end (CLI flags, settings, the window, servers) builds these: one check for all.
        for spec in param_specs():
            value = getattr(self, spec.name)
            if value is not None or not spec.optional:
                spec.convert(value)


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class ParamSpec:
    """One GenerationParams field as front ends need it: a number in a range, or None if optional."""

    name: str
    kind: type  # int or float
    default: Any
    optional: bool
    lo: float
    hi: float
    help: str = ""
    tiny: float = 0.0  # values strictly between lo and lo + tiny are refused

    def describe(self) -> str:
        """The valid values, as a user reads them: "a number from 0 to 2"."""
        what = "an integer" if self.kind is int else "a number"
        if self.tiny:
            return f"{_number(self.lo)} or {what} from {_number(self.lo + self.tiny)} to {_number(self.hi)}"
        return f"{what} from {_number(self.lo)} to {_number(self.hi)}"

    def convert(self, value: Any) -> Any:
        """`value` (a number or its text) as this field's type; ChinwagError if it is not valid."""
        if value is None and self.optional:
            return None
        problem = ChinwagError(f"{self.name} must be {self.describe()}, got {value!r}"[:200])
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise problem
        try:
            number = float(value)
        except (ValueError, OverflowError):
            raise problem from None
        if not self.lo <= number <= self.hi or (self.kind is int and not number.is_integer()):
            raise problem
        if self.lo < number < self.lo + self.tiny:
            raise problem
        return int(number) if self.kind is int else number


@functools.cache
def param_specs() -> tuple[ParamSpec, ...]:
    """Every GenerationParams field, in order: what the CLI, the settings and the dialog offer."""
    hints = typing.get_type_hints(GenerationParams)
    specs = []
    for f in fields(GenerationParams):
        if "range" not in f.metadata:  # not a number: speculative, draft_model
            continue
        args = [a for a in typing.get_args(hints[f.name]) if a is not type(None)]
        lo, hi = f.metadata.get("range", (0, 1e9))
        specs.append(
            ParamSpec(
                f.name,
                args[0] if args else hints[f.name],
                f.default,
                bool(args),
                lo,
                hi,
                f.metadata.get("help", ""),
                f.metadata.get("tiny", 0.0),
            )
        )
    return tuple(specs)


@dataclass(frozen=True)
class TextDelta:
    """New text of the reply, and the token ids it came from."""

    text: str
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class PrefillProgress:
    """Reading the prompt: `done` of the `total` new tokens computed (`chat` yields these first).

    `prompt_tokens` and `context_limit` say how full the context will be once it is read.
    `history_tokens`: how many of `total` belong to the earlier messages (the chat re-read,
    after a changed system prompt, model or branch); they are read first.
    """

    done: int
    total: int
    prompt_tokens: int = 0
    context_limit: int = 0
    history_tokens: int = 0

    @property
    def rereading(self) -> bool:
        """Still reading the earlier messages, not the new one."""
        return self.done < self.history_tokens

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


@dataclass(frozen=True)
class TokenCount:
    """A text's size in the current model's tokens (engine.count_tokens), against its context."""

    tokens: int
    context_limit: int
    exact: bool = True  # False for a server's model: its tokenizer is not here, so this is an estimate

    @property
    def share(self) -> float:
        """The fraction of the context the text takes."""
        return self.tokens / self.context_limit if self.context_limit else 0.0


@dataclass(frozen=True)
class BackgroundPrefill:
    """What a background prefill (a draft, or the next window) computed before it ended."""

    prompt_tokens: int  # the prompt it worked towards
    reused_tokens: int  # already in the cache
    computed_tokens: int  # computed by this job
    finished: bool  # False: preempted by other work, cancelled, or skipped
    reason: str = ""  # why it did not finish, or why it had nothing to do


@dataclass(frozen=True)
class ForkedCache:
    """What a fork got of its parent's cache (engine.fork): the ids its next prompt begins with."""

    copied_tokens: int
    prompt_tokens: int  # the fork's prompt up to its last message (what reading ahead would compute)
    reason: str = ""  # why nothing (or less) was copied


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model made: `arguments` is the JSON text it wrote (parsed and re-encoded)."""

    id: str
    name: str
    arguments: str = "{}"

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class Role(StrEnum):
    """Who wrote a message: the values are OpenAI's role strings, stored in the database as they are."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True)
class ChatMessage:
    """One message of a chat, as every layer passes it: the store, the front ends, the server's
    request parser and both backends. `tool_calls` only on an assistant message; `tool_call_id`
    and `name` (the tool's) only on a tool message."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    name: str = ""

    def to_openai(self) -> dict[str, Any]:
        """The message as OpenAI's chat API and Hugging Face chat templates take it."""
        out: dict[str, Any] = {"role": str(self.role), "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.role == Role.TOOL:
            out["tool_call_id"] = self.tool_call_id
            if self.name:
                out["name"] = self.name
        return out

    @classmethod
    def from_openai(cls, m: Any, where: str = "message") -> "ChatMessage":
        """A message in OpenAI's shape (or already a ChatMessage); a wrong one is a ChinwagError naming `where`."""
        if isinstance(m, ChatMessage):
            return m
        if not isinstance(m, dict):
            raise ChinwagError(f"{where} must be an object with 'role' and 'content', got {m!r:.80}")
        role = _role(m.get("role"), where)
        calls = tuple(_tool_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(m.get("tool_calls") or ()))
        if calls and role != Role.ASSISTANT:
            raise ChinwagError(f"{where}: only an assistant message has tool_calls")
        content = m.get("content")
        if content is None and calls:
            content = ""  # OpenAI clients send null content beside tool calls
        if not isinstance(content, str):
            raise ChinwagError(f"{where}.content must be a string, got {content!r:.80}")
        call_id, name = _tool_reply(m, where) if role == Role.TOOL else ("", "")
        return cls(role, content, calls, call_id, name)


def _role(value: Any, where: str) -> Role:
    try:
        return Role(str(value))
    except ValueError:
        raise ChinwagError(f"{where}.role must be one of system, user, assistant, tool, got {value!r:.40}") from None


def _tool_reply(m: dict[str, Any], where: str) -> tuple[str, str]:
    """A tool message's (tool_call_id, name): the call it answers and the tool's name."""
    call_id, name = m.get("tool_call_id") or "", m.get("name") or ""
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise ChinwagError(f"{where}.tool_call_id and .name must be strings")
    return call_id, name


# What the engine's chat, prefill, fork and count_prompt take: ChatMessages, or dicts in OpenAI's shape.
Messages = typing.Sequence[ChatMessage | dict[str, Any]]


def _tool_call(c: Any, where: str) -> ToolCall:
    """A tool call in OpenAI's nested shape ({"id", "function": {"name", "arguments"}}) or flat ({"id", "name", "arguments"})."""
    if isinstance(c, ToolCall):
        return c
    if not isinstance(c, dict):
        raise ChinwagError(f"{where} must be an object, got {c!r:.80}")
    fn: dict[str, Any] = c["function"] if isinstance(c.get("function"), dict) else c
    name, arguments = fn.get("name"), fn.get("arguments", "{}")
    if not isinstance(name, str) or not name:
        raise ChinwagError(f"{where} has no function name")
    if not isinstance(arguments, str):
        import json

        arguments = json.dumps(arguments, ensure_ascii=False)
    call_id = c.get("id") or ""
    if not isinstance(call_id, str):
        raise ChinwagError(f"{where}.id must be a string")
    return ToolCall(call_id, name, arguments)


@dataclass(frozen=True)
class TurnStats:
    """The final event of every chat turn."""

    prompt_tokens: int
    reused_tokens: int
    prefilled_tokens: int
    generated_tokens: int
    ttft_s: float
    decode_tps: float
    prefill_tps: float
    kv_capacity: int
    kv_offset: int
    kv_bytes: int
    context_limit: int
    finish_reason: FinishReason
    dropped_messages: int = 0
    prompt_ids: tuple[int, ...] = ()
    reply_ids: tuple[int, ...] = ()
    error: str = ""
    # Speculative decoding: tokens drafted, and how many of them the model accepted.
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    speculation_off: str = ""  # why speculation was off although asked for (this model's cache cannot go back)
    # The tool calls the reply ends with (finish_reason TOOL_CALLS), and why tools were off if they were.
    tool_calls: tuple[ToolCall, ...] = ()
    tool_text: str = ""  # the reply's text outside its tool-call blocks (what an API client shows as content)
    tools_off: str = ""
    tools_tokens: int = 0  # the context the tool definitions take in the prompt

    @property
    def note(self) -> str:
        if self.dropped_messages:
            n = self.dropped_messages
            return f"dropped {n} oldest {'message' if n == 1 else 'messages'} to fit the context"
        return ""


class TurnOrigin(StrEnum):
    """Which front end asked for a turn (Engine.chat's `origin`, in every TurnAnnounced)."""

    WINDOW = "window"
    TERMINAL = "terminal"  # chinwag chat, chinwag run
    SERVER = "server"  # the OpenAI/Anthropic API server (chinwag serve, the window's own server)
    SCRIPT = "script"  # a program using the engine directly: Engine.chat's default


@dataclass(frozen=True)
class TurnAnnounced:
    """A turn began (`ended` False) or ended (True: `stats` is its TurnStats, None if it failed or
    was refused before generating); every begun turn ends once (engine.turns, engine/turns.py)."""

    conversation_id: str
    origin: TurnOrigin
    ended: bool = False
    stats: TurnStats | None = None


# A load's last progress report: the model is in place (the window says so with its name).
LOADED_STAGE = "Ready"


@dataclass(frozen=True)
class LoadProgress:
    """Progress of a model load, import or download: done out of total (0 = unknown)."""

    stage: str
    done: float = 0
    total: float = 0


@dataclass(frozen=True)
class ModelInfo:
    id: str
    name: str
    path: str
    architecture: str = ""
    size_bytes: int = 0
    quantization: str = ""
    context_length: int = 0
    status: ModelStatus = ModelStatus.READY
    reason: str = ""
    source: str = ""  # a ModelSource ("" when not known)
    server: str = ""  # the saved server's name, for a model served elsewhere
    tools_off: str = ""  # a loaded local model that cannot call tools: why (engine/context/prompt.py tools_off_reason)
    # Once loaded: the tokens one chat's cache may hold under the memory budget, when fewer than
    # context_length (the context is capped there: "context 12K of 32K: memory"); 0: no such cap.
    memory_context: int = 0
    # Engine.list_models: why this local model would not fit the memory limit here ("": it fits, or unknown).
    fit_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


# How a server that cannot be used is down: the first word of its one entry's reason.
UNREACHABLE, UNUSABLE = "unreachable", "unusable"  # no answer or a bad URL; answered but refused or no model list


def down_state(info: ModelInfo) -> tuple[str, str]:
    """(UNREACHABLE or UNUSABLE, the reason in words) of a server's unusable entry."""
    state, _, reason = info.reason.partition(": ")
    return (state, reason) if state in (UNREACHABLE, UNUSABLE) and reason else (UNREACHABLE, info.reason)


@dataclass(frozen=True)
class MemoryReport:
    """What every conversation's KV cache holds, against the engine's memory budget."""

    budget_bytes: int
    kv_bytes: int
    conversations_in_memory: int
    tokens_held: int
    positions_reserved: int
    evictions: int
    restores: int
    save_seconds: float
    restore_seconds: float
    # A draft model's caches (speculative decoding), under the same budget: never saved.
    draft_bytes: int = 0
    draft_caches: int = 0


@dataclass(frozen=True)
class EngineState:
    """What the status bar shows."""

    state: EngineStatus
    model: ModelInfo | None = None
    kv_bytes_total: int = 0
    # A local model's memory: its weights as loaded, and the limit they and the caches must fit (0: none).
    weight_bytes: int = 0
    memory_limit_bytes: int = 0


@dataclass(frozen=True)
class HubModel:
    """One Hugging Face Hub search result (engine.models.download.search_models)."""

    repo: str
    downloads: int = 0
    likes: int = 0


@dataclass(frozen=True)
class ServerInfo:
    """A saved model server, as front ends see it (its API key never leaves engine/remote/servers.py)."""

    name: str
    url: str
    has_api_key: bool = False
    key_storage: str = ""  # where its API key is kept: the system keychain or the 0600 file ("" without one)
